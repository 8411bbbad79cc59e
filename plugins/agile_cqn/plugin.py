"""Registers CQN (light: the implementation is imported only to train)."""

from __future__ import annotations

from agile_cli import Family, RegisterAlgorithm, hookimpl
from agile_cqn.spec import CQNSpec


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="CQN",
        spec=CQNSpec,
        family=Family.OFFLINE,
        implementation="agile_cqn.algorithm:CQN",
    )
