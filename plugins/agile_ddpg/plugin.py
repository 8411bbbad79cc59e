"""Registers DDPG (light: the implementation is imported only to train)."""

from __future__ import annotations

from agile_cli import Family, RegisterAlgorithm, hookimpl
from agile_ddpg.spec import DDPGSpec


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="DDPG",
        spec=DDPGSpec,
        family=Family.OFF_POLICY,
        implementation="agile_ddpg.algorithm:DDPG",
    )
