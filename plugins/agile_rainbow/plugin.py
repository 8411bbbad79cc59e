"""Registers RainbowDQN (light: its spec is named by reference, imported when a manifest names
RainbowDQN; the implementation is imported only to train)."""

from __future__ import annotations

from agile_cli import RegisterAlgorithm, hookimpl


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="RainbowDQN",
        spec="agile_rainbow.spec:RainbowDQNSpec",
        family="off_policy",
        implementation="agile_rainbow.algorithm:RainbowDQN",
        aliases={"Rainbow DQN": {}},  # the reference's name for it outside manifests
    )
