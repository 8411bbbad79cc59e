"""Registers the Gymnasium environment builder (light: no gymnasium import here, and its spec
is named by reference, imported when a manifest needs it)."""

from __future__ import annotations

from agile_cli import RegisterEnvironment, hookimpl


@hookimpl
def agile_register_environments(register: RegisterEnvironment) -> None:
    register(
        name="gymnasium",
        spec="agile_gymnasium.spec:GymEnvSpec",
        families=["off_policy", "on_policy"],
        implementation="agile_gymnasium.builder:GymBuilder",
    )
