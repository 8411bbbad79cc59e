"""Registers SAC (light: the implementation is imported only to train)."""

from __future__ import annotations

from agile_cli import Family, RegisterAlgorithm, hookimpl
from agile_sac.spec import SACSpec


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="SAC",
        spec=SACSpec,
        family=Family.OFF_POLICY,
        implementation="agile_sac.algorithm:SAC",
    )
