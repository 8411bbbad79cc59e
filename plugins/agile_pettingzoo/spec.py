"""The ``environment`` section for multi-agent (PettingZoo) algorithms."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from agile_cli import EnvironmentSpec
from agile_cli.models.algorithm import check_entrypoint, check_wrappers


class PettingZooEnvSpec(EnvironmentSpec):
    """A vector of PettingZoo parallel environments: a module exposing ``parallel_env``, or
    your own callable."""

    name: str = Field(
        min_length=1,
        description=(
            "Module exposing parallel_env (e.g. mpe2.simple_spread_v3), or a label with entrypoint."
        ),
    )
    num_envs: int = Field(16, ge=1, description="Environments stepped side by side.")
    entrypoint: str | None = Field(
        None,
        description="'module:Callable' or 'file.py:Callable' returning a PettingZoo ParallelEnv.",
    )
    path: str | None = Field(
        None, description="Directory that entrypoint and wrapper modules are resolved from."
    )
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="Keyword arguments for the entrypoint, or for the module's parallel_env.",
    )
    wrappers: list[str | tuple[str, dict[str, Any]]] = Field(
        default_factory=list,
        description=(
            "PettingZoo parallel-env wrappers applied in order: 'module:Wrapper', "
            "'package.module.Wrapper', or [wrapper, {kwargs}]."
        ),
    )
    sync: bool = Field(
        False,
        description=(
            "Step the environments in this process instead of subprocesses (an agile "
            "extension: the reference format always uses subprocesses)."
        ),
    )

    _entrypoint_shape = field_validator("entrypoint")(check_entrypoint)
    _wrapper_shape = field_validator("wrappers")(check_wrappers)
