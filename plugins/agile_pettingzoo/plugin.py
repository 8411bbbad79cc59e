"""Registers the PettingZoo environment builder (light: no pettingzoo import here, and its
spec is named by reference, imported when a manifest needs it)."""

from __future__ import annotations

from agile_cli import RegisterEnvironment, hookimpl


@hookimpl
def agile_register_environments(register: RegisterEnvironment) -> None:
    register(
        name="pettingzoo",
        spec="agile_pettingzoo.spec:PettingZooEnvSpec",
        families=["multi_agent_off_policy", "multi_agent_on_policy"],
        implementation="agile_pettingzoo.builder:PettingZooBuilder",
    )
