"""Registers CQN (light: its spec is named by reference, imported when a manifest names
CQN; the implementation is imported only to train)."""

from __future__ import annotations

from agile_cli import RegisterAlgorithm, hookimpl


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="CQN",
        spec="agile_cqn.spec:CQNSpec",
        family="offline",
        implementation="agile_cqn.algorithm:CQN",
    )
