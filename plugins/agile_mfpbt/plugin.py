"""Registers the ``multi_frequency`` selection strategy (light: no torch, and its spec is
named by reference, imported when a manifest needs it)."""

from __future__ import annotations

from agile_cli import RegisterSelection, hookimpl


@hookimpl
def agile_register_selection_strategies(register: RegisterSelection) -> None:
    register(
        name="multi_frequency",
        spec="agile_mfpbt.spec:MultiFrequencySpec",
        implementation="agile_mfpbt.selection:multi_frequency_selection",
    )
