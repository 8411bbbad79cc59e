"""Registers IPPO (light: its spec is named by reference, imported when a manifest names
IPPO; the implementation is imported only to train)."""

from __future__ import annotations

from agile_cli import RegisterAlgorithm, hookimpl


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="IPPO",
        spec="agile_ippo.spec:IPPOSpec",
        family="multi_agent_on_policy",
        implementation="agile_ippo.algorithm:IPPO",
    )
