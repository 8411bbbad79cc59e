"""The ``environment`` section for single-agent (Gymnasium) algorithms."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from agile_cli import EnvironmentSpec
from agile_cli.models.algorithm import check_entrypoint, check_wrappers


class GymEnvSpec(EnvironmentSpec):
    """A vector of Gymnasium environments: a registered id or your own callable."""

    name: str = Field(
        min_length=1,
        description="Registered Gymnasium id (e.g. CartPole-v1), or a label with entrypoint.",
    )
    num_envs: int = Field(16, ge=1, description="Environments stepped side by side.")
    entrypoint: str | None = Field(
        None,
        description="'module:Callable' or 'file.py:Callable' returning an environment.",
    )
    path: str | None = Field(
        None, description="Directory that entrypoint and wrapper modules are resolved from."
    )
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="Keyword arguments for the entrypoint, or for gymnasium.make.",
    )
    wrappers: list[str | tuple[str, dict[str, Any]]] = Field(
        default_factory=list,
        description=(
            "Wrappers applied in order: 'module:Wrapper', 'package.module.Wrapper', or "
            "[wrapper, {kwargs}]."
        ),
    )
    sync: bool = Field(
        False, description="Step the environments in this process instead of subprocesses."
    )

    _entrypoint_shape = field_validator("entrypoint")(check_entrypoint)
    _wrapper_shape = field_validator("wrappers")(check_wrappers)
