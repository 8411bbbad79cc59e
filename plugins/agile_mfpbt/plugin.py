"""Registers the ``multi_frequency`` selection strategy (light: no torch)."""

from __future__ import annotations

from agile_cli import RegisterSelection, hookimpl
from agile_mfpbt.spec import MultiFrequencySpec


@hookimpl
def agile_register_selection_strategies(register: RegisterSelection) -> None:
    register(
        name="multi_frequency",
        spec=MultiFrequencySpec,
        implementation="agile_mfpbt.selection:multi_frequency_selection",
    )
