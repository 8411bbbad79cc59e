"""Registers MATD3 (light: its spec is named by reference, imported when a manifest names
MATD3; the implementation is imported only to train)."""

from __future__ import annotations

from agile_cli import RegisterAlgorithm, hookimpl


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="MATD3",
        spec="agile_matd3.spec:MATD3Spec",
        family="multi_agent_off_policy",
        implementation="agile_matd3.algorithm:MATD3",
    )
