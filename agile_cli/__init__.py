"""agile: evolutionary training of reinforcement-learning populations from one manifest.

This module is the public API for users and plugin authors; everything not in ``__all__`` is
private and may move. Importing it is cheap: torch and gymnasium are imported only by the
training classes, on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from agile_cli.errors import (
    AgileError,
    EnvironmentNotFoundError,
    FieldError,
    ManifestError,
    PluginError,
    TrainingError,
    UsageError,
)
from agile_cli.hookspecs import hookimpl
from agile_cli.manifest import TrainingManifest
from agile_cli.models import AlgorithmSpec, EnvironmentSpec, Family, Spec
from agile_cli.registry import (
    RegisterAlgorithm,
    RegisterBackend,
    RegisterCommand,
    RegisterEnvironment,
)

__version__ = "0.1.0"

# Public names whose modules import torch: loaded on first access.
_LAZY = {}

if TYPE_CHECKING:
    pass

__all__ = [
    "AgileError",
    "AlgorithmSpec",
    "EnvironmentNotFoundError",
    "EnvironmentSpec",
    "Family",
    "FieldError",
    "ManifestError",
    "PluginError",
    "RegisterAlgorithm",
    "RegisterBackend",
    "RegisterCommand",
    "RegisterEnvironment",
    "Spec",
    "TrainingError",
    "TrainingManifest",
    "UsageError",
    "__version__",
    "hookimpl",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module_name, attribute = _LAZY[name].split(":")
        value = getattr(import_module(module_name), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'agile_cli' has no attribute {name!r}")
