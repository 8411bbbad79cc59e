"""Registers TD3 (light: its spec is named by reference, imported when a manifest names
TD3; the implementation is imported only to train)."""

from __future__ import annotations

from agile_cli import RegisterAlgorithm, hookimpl


@hookimpl
def agile_register_algorithms(register: RegisterAlgorithm) -> None:
    register(
        name="TD3",
        spec="agile_td3.spec:TD3Spec",
        family="off_policy",
        implementation="agile_td3.algorithm:TD3",
    )
