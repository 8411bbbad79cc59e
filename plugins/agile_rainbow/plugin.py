"""Registers RainbowDQN (light: the implementation is imported only to train)."""

from __future__ import annotations

from agile_cli import Family, RegisterAlgorithm, hookimpl
from agile_rainbow.spec import RainbowDQNSpec


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="RainbowDQN",
        spec=RainbowDQNSpec,
        family=Family.OFF_POLICY,
        implementation="agile_rainbow.algorithm:RainbowDQN",
        aliases={"Rainbow DQN": {}},  # the reference's name for it outside manifests
    )
