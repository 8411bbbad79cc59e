"""agile: evolutionary training of reinforcement-learning populations from one manifest.

This module is the public API for users and plugin authors; everything not in ``__all__`` is
private and may move. Importing it is cheap: the names that need torch or gymnasium (the
algorithm base classes, networks, buffers, rollouts, ``LocalTrainer``) load on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from agile_cli.backend import Backend, RunResult
from agile_cli.environment import EnvironmentBuilder, MultiAgentVectorEnv
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
from agile_cli.models import AlgorithmSpec, EnvironmentSpec, Family, NetworkSpec, Spec
from agile_cli.registry import (
    RegisterAlgorithm,
    RegisterBackend,
    RegisterCommand,
    RegisterEnvironment,
)
from agile_cli.trainers import ArenaTrainer, BackendTrainer

__version__ = "0.1.0"

# Public names whose modules import torch or gymnasium: loaded on first access.
_LAZY = {
    "LocalTrainer": "agile_cli.training.trainer:LocalTrainer",
    "Algorithm": "agile_cli.agent:Algorithm",
    "OffPolicyAlgorithm": "agile_cli.agent:OffPolicyAlgorithm",
    "OnPolicyAlgorithm": "agile_cli.agent:OnPolicyAlgorithm",
    "AgentContext": "agile_cli.agent:AgentContext",
    "LearnResult": "agile_cli.agent:LearnResult",
    "MultiAgentAlgorithm": "agile_cli.multi_agent:MultiAgentAlgorithm",
    "MultiAgentOffPolicyAlgorithm": "agile_cli.multi_agent:MultiAgentOffPolicyAlgorithm",
    "MultiAgentOnPolicyAlgorithm": "agile_cli.multi_agent:MultiAgentOnPolicyAlgorithm",
    "MultiAgentReplayBuffer": "agile_cli.buffers:MultiAgentReplayBuffer",
    "EvolvableNetwork": "agile_cli.nn.modules:EvolvableNetwork",
    "NetworkArch": "agile_cli.nn.arch:NetworkArch",
    "preprocess": "agile_cli.nn.modules:preprocess",
    "ReplayBuffer": "agile_cli.buffers:ReplayBuffer",
    "PrioritizedReplayBuffer": "agile_cli.buffers:PrioritizedReplayBuffer",
    "NStepAccumulator": "agile_cli.buffers:NStepAccumulator",
    "Transitions": "agile_cli.buffers:Transitions",
    "PolicyRecord": "agile_cli.rollout:PolicyRecord",
    "Rollout": "agile_cli.rollout:Rollout",
    "RolloutBatch": "agile_cli.rollout:RolloutBatch",
    "SequenceBatch": "agile_cli.rollout:SequenceBatch",
    "compute_gae": "agile_cli.rollout:compute_gae",
}

if TYPE_CHECKING:
    from agile_cli.agent import (
        AgentContext,
        Algorithm,
        LearnResult,
        OffPolicyAlgorithm,
        OnPolicyAlgorithm,
    )
    from agile_cli.buffers import (
        MultiAgentReplayBuffer,
        NStepAccumulator,
        PrioritizedReplayBuffer,
        ReplayBuffer,
        Transitions,
    )
    from agile_cli.multi_agent import (
        MultiAgentAlgorithm,
        MultiAgentOffPolicyAlgorithm,
        MultiAgentOnPolicyAlgorithm,
    )
    from agile_cli.nn.arch import NetworkArch
    from agile_cli.nn.modules import EvolvableNetwork, preprocess
    from agile_cli.rollout import (
        PolicyRecord,
        Rollout,
        RolloutBatch,
        SequenceBatch,
        compute_gae,
    )
    from agile_cli.training.trainer import LocalTrainer

__all__ = [
    "AgentContext",
    "AgileError",
    "Algorithm",
    "AlgorithmSpec",
    "ArenaTrainer",
    "Backend",
    "BackendTrainer",
    "EnvironmentBuilder",
    "EnvironmentNotFoundError",
    "EnvironmentSpec",
    "EvolvableNetwork",
    "Family",
    "FieldError",
    "LearnResult",
    "LocalTrainer",
    "ManifestError",
    "MultiAgentAlgorithm",
    "MultiAgentOffPolicyAlgorithm",
    "MultiAgentOnPolicyAlgorithm",
    "MultiAgentReplayBuffer",
    "MultiAgentVectorEnv",
    "NStepAccumulator",
    "NetworkArch",
    "NetworkSpec",
    "OffPolicyAlgorithm",
    "OnPolicyAlgorithm",
    "PluginError",
    "PolicyRecord",
    "PrioritizedReplayBuffer",
    "RegisterAlgorithm",
    "RegisterBackend",
    "RegisterCommand",
    "RegisterEnvironment",
    "ReplayBuffer",
    "Rollout",
    "RolloutBatch",
    "RunResult",
    "SequenceBatch",
    "Spec",
    "TrainingError",
    "TrainingManifest",
    "Transitions",
    "UsageError",
    "__version__",
    "compute_gae",
    "hookimpl",
    "preprocess",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module_name, attribute = _LAZY[name].split(":")
        value = getattr(import_module(module_name), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'agile_cli' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
