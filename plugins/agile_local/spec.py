"""Run options of the local backend."""

from __future__ import annotations

from agile_cli import LocalRunOptions


class LocalOptions(LocalRunOptions):
    """How ``agile train --backend local`` runs."""
