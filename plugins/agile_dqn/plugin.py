"""Registers DQN (light: the implementation is imported only to train)."""

from __future__ import annotations

from agile_cli import Family, RegisterAlgorithm, hookimpl
from agile_dqn.spec import DQNSpec


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="DQN",
        spec=DQNSpec,
        family=Family.OFF_POLICY,
        implementation="agile_dqn.algorithm:DQN",
    )
