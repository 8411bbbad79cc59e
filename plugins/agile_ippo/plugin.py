"""Registers IPPO (light: the implementation is imported only to train)."""

from __future__ import annotations

from agile_cli import Family, RegisterAlgorithm, hookimpl
from agile_ippo.spec import IPPOSpec


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="IPPO",
        spec=IPPOSpec,
        family=Family.MULTI_AGENT_ON_POLICY,
        implementation="agile_ippo.algorithm:IPPO",
    )
