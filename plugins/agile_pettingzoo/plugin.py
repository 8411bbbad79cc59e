"""Registers the PettingZoo environment builder (light: no pettingzoo import here)."""

from __future__ import annotations

from agile_cli import Family, RegisterEnvironment, hookimpl
from agile_pettingzoo.spec import PettingZooEnvSpec


@hookimpl
def agile_register_environments(register: RegisterEnvironment) -> None:
    register(
        name="pettingzoo",
        spec=PettingZooEnvSpec,
        families=[Family.MULTI_AGENT_OFF_POLICY, Family.MULTI_AGENT_ON_POLICY],
        implementation="agile_pettingzoo.builder:PettingZooBuilder",
    )
