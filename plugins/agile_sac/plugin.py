"""Registers SAC (light: its spec is named by reference, imported when a manifest names
SAC; the implementation is imported only to train)."""

from __future__ import annotations

from agile_cli import RegisterAlgorithm, hookimpl


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="SAC",
        spec="agile_sac.spec:SACSpec",
        family="off_policy",
        implementation="agile_sac.algorithm:SAC",
    )
