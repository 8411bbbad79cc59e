"""The ``environment`` section for single-agent (Gymnasium) algorithms."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from agile_cli import EnvironmentSpec

_REFERENCE = re.compile(r"^[^:\s]+:[A-Za-z_][\w.]*$")
_DOTTED = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)+$")


def _check_reference(value: str, what: str) -> str:
    if not _REFERENCE.match(value):
        raise ValueError(f"{what} must look like 'module:Callable' or 'file.py:Callable'")
    return value


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

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint_shape(cls, value: str | None) -> str | None:
        return None if value is None else _check_reference(value, "entrypoint")

    @field_validator("wrappers")
    @classmethod
    def _wrapper_shape(cls, value: list[Any]) -> list[Any]:
        for item in value:
            target = item[0] if isinstance(item, tuple) else item
            if not (_REFERENCE.match(target) or _DOTTED.match(target)):
                raise ValueError(
                    f"wrapper {target!r} must look like 'module:Wrapper' or "
                    "'package.module.Wrapper'"
                )
        return value
