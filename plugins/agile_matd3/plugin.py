"""Registers MATD3 (light: the implementation is imported only to train)."""

from __future__ import annotations

from agile_cli import Family, RegisterAlgorithm, hookimpl
from agile_matd3.spec import MATD3Spec


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="MATD3",
        spec=MATD3Spec,
        family=Family.MULTI_AGENT_OFF_POLICY,
        implementation="agile_matd3.algorithm:MATD3",
    )
