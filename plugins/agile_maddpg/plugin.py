"""Registers MADDPG (light: the implementation is imported only to train)."""

from __future__ import annotations

from agile_cli import Family, RegisterAlgorithm, hookimpl
from agile_maddpg.spec import MADDPGSpec


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="MADDPG",
        spec=MADDPGSpec,
        family=Family.MULTI_AGENT_OFF_POLICY,
        implementation="agile_maddpg.algorithm:MADDPG",
    )
