"""Registers MADDPG (light: its spec is named by reference, imported when a manifest names
MADDPG; the implementation is imported only to train)."""

from __future__ import annotations

from agile_cli import RegisterAlgorithm, hookimpl


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="MADDPG",
        spec="agile_maddpg.spec:MADDPGSpec",
        family="multi_agent_off_policy",
        implementation="agile_maddpg.algorithm:MADDPG",
    )
