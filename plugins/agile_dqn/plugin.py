"""Registers DQN (light: its spec is named by reference, imported when a manifest names
DQN; the implementation is imported only to train)."""

from __future__ import annotations

from agile_cli import RegisterAlgorithm, hookimpl


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="DQN",
        spec="agile_dqn.spec:DQNSpec",
        family="off_policy",
        implementation="agile_dqn.algorithm:DQN",
    )
