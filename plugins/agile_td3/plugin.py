"""Registers TD3 (light: the implementation is imported only to train)."""

from __future__ import annotations

from agile_cli import Family, RegisterAlgorithm, hookimpl
from agile_td3.spec import TD3Spec


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="TD3",
        spec=TD3Spec,
        family=Family.OFF_POLICY,
        implementation="agile_td3.algorithm:TD3",
    )
