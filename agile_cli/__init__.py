"""agile: evolutionary training of reinforcement-learning populations from one manifest.

This module is the public API for users and plugin authors; everything not in ``__all__`` is
private and may move. Importing it is cheap: torch and gymnasium are imported only by the
training classes, on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from agile_cli.backend import Backend, RunResult
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
_LAZY = {
    "LocalTrainer": "agile_cli.training.trainer:LocalTrainer",
    "Algorithm": "agile_cli.agent:Algorithm",
    "OffPolicyAlgorithm": "agile_cli.agent:OffPolicyAlgorithm",
    "OnPolicyAlgorithm": "agile_cli.agent:OnPolicyAlgorithm",
    "AgentContext": "agile_cli.agent:AgentContext",
    "LearnResult": "agile_cli.agent:LearnResult",
}

if TYPE_CHECKING:
    from agile_cli.agent import (
        AgentContext,
        Algorithm,
        LearnResult,
        OffPolicyAlgorithm,
        OnPolicyAlgorithm,
    )
    from agile_cli.training.trainer import LocalTrainer

__all__ = [
    "AgentContext",
    "AgileError",
    "Algorithm",
    "AlgorithmSpec",
    "Backend",
    "EnvironmentNotFoundError",
    "EnvironmentSpec",
    "Family",
    "FieldError",
    "LearnResult",
    "LocalTrainer",
    "ManifestError",
    "OffPolicyAlgorithm",
    "OnPolicyAlgorithm",
    "PluginError",
    "RegisterAlgorithm",
    "RegisterBackend",
    "RegisterCommand",
    "RegisterEnvironment",
    "RunResult",
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
