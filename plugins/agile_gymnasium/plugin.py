"""Registers the Gymnasium environment builder (light: no gymnasium import here)."""

from __future__ import annotations

from agile_cli import Family, RegisterEnvironment, hookimpl
from agile_gymnasium.spec import GymEnvSpec


@hookimpl
def agile_register_environments(register: RegisterEnvironment) -> None:
    register(
        name="gymnasium",
        spec=GymEnvSpec,
        families=[Family.OFF_POLICY, Family.ON_POLICY],
        implementation="agile_gymnasium.builder:GymBuilder",
    )
