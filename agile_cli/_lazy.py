"""Loading a public name on first use, for the core's public modules whose names would
otherwise import torch or numpy when the package is imported."""

from __future__ import annotations

from importlib import import_module
from typing import Any


def load(reference: str) -> Any:
    """The attribute ``reference`` names (``"module:attribute"``), imported now. Not cached:
    the name stays its module's attribute, even where a test replaces it there."""
    module_name, attribute = reference.split(":")
    return getattr(import_module(module_name), attribute)
