"""Registers DDPG (light: its spec is named by reference, imported when a manifest names
DDPG; the implementation is imported only to train)."""

from __future__ import annotations

from agile_cli import RegisterAlgorithm, hookimpl


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="DDPG",
        spec="agile_ddpg.spec:DDPGSpec",
        family="off_policy",
        implementation="agile_ddpg.algorithm:DDPG",
    )
