"""agile: evolutionary training of populations from one manifest.

This module is the core's public API, for users and plugin authors alike: the plugin contract
(hooks, registrations, the specs a plugin's sections derive from, :class:`Member`,
:class:`Paradigm`, :class:`Runner`), the errors a plugin raises, and the ways to train from
Python. Everything not in ``__all__`` is private and may move. Reinforcement learning lives in
the first-party plugin :mod:`agile_rl`, whose own public API RL algorithms build on.

Importing it is cheap: the names that need torch (``LocalTrainer``, the training entry points)
and the CLI's ``plugin_host`` load on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from agile_cli.backend import Backend, BackendTrainer, RunResult
from agile_cli.environment import (
    EnvironmentBuilder,
    MultiAgentVectorEnv,
    can_fork,
    not_an_environment,
    resolve_reference,
    resolve_wrapper,
)
from agile_cli.errors import (
    EXIT_RUNTIME,
    AgileError,
    EnvironmentNotFoundError,
    FieldError,
    ManifestError,
    PluginError,
    TrainingError,
    UsageError,
    printable,
)
from agile_cli.host.hookspecs import hookimpl
from agile_cli.host.plugins import installed_registry
from agile_cli.host.registry import (
    ParadigmEntry,
    RegisterAlgorithm,
    RegisterBackend,
    RegisterCommand,
    RegisterEnvironment,
    RegisterParadigm,
    RegisterSelection,
    Registry,
)
from agile_cli.manifest import TrainingManifest
from agile_cli.member import AgentContext, Member, MemberBasics, MemberRecord, PolicyModule
from agile_cli.memory import Estimate, Need
from agile_cli.models import (
    AlgorithmSpec,
    EnvironmentSpec,
    Family,
    MutationSpec,
    NetworkSpec,
    Spec,
    StochasticNetworkSpec,
    limits,
)
from agile_cli.models.algorithm import VectorEnvironmentSpec, check_entrypoint
from agile_cli.models.base import StarterValue, located_error
from agile_cli.models.network import (
    CNNEncoderConfig,
    LSTMEncoderConfig,
    MLPConfig,
    MultiInputEncoderConfig,
    SimBaEncoderConfig,
)
from agile_cli.models.replay_buffer import NStepBufferArgs, ReplayBufferSpec
from agile_cli.models.run_options import LocalRunOptions
from agile_cli.models.selection import SelectionSpec
from agile_cli.models.training import EpsilonGreedyTraining, TrainingSpec
from agile_cli.paradigm import Paradigm
from agile_cli.runner import EpisodeProgress, GenerationStats, Progress, Runner, reset_seed
from agile_cli.signals import interrupt_held

__version__ = "0.1.0"

# Public names whose modules import torch or numpy (or, for plugin_host, the CLI): loaded on
# first use.
_LAZY = {
    "LocalTrainer": "agile_cli.training.trainer:LocalTrainer",
    "run_local": "agile_cli.training.trainer:run_local",
    "resume_local": "agile_cli.training.trainer:resume_local",
    "load_agent": "agile_cli.training.evaluation:load_agent",
    "build_environment_from": "agile_cli.training.setup:build_environment_from",
    "member_spaces": "agile_cli.training.setup:member_spaces",
    "MemberTrainer": "agile_cli.training.members:MemberTrainer",
    "MemberOutcome": "agile_cli.training.members:MemberOutcome",
    "RunnerFactory": "agile_cli.training.members:RunnerFactory",
    "slot_sizes": "agile_cli.training.members:slot_sizes",
    "plugin_host": "agile_cli.cli:plugin_host",
    "Selection": "agile_cli.evolution.selection:Selection",
    "SelectionStrategy": "agile_cli.evolution.selection:SelectionStrategy",
    "last_fitness": "agile_cli.evolution.selection:last_fitness",
    # Looked up at each use, so that a test can stand in for the machine's memory.
    "available_memory": "agile_cli.memory:available_memory",
    "format_bytes": "agile_cli.memory:format_bytes",
}

if TYPE_CHECKING:
    from agile_cli.cli import plugin_host
    from agile_cli.evolution.selection import Selection, SelectionStrategy, last_fitness
    from agile_cli.memory import available_memory, format_bytes
    from agile_cli.training.evaluation import load_agent
    from agile_cli.training.members import MemberOutcome, MemberTrainer, RunnerFactory, slot_sizes
    from agile_cli.training.setup import build_environment_from, member_spaces
    from agile_cli.training.trainer import LocalTrainer, resume_local, run_local

__all__ = [
    "EXIT_RUNTIME",
    "AgentContext",
    "AgileError",
    "AlgorithmSpec",
    "Backend",
    "BackendTrainer",
    "CNNEncoderConfig",
    "EnvironmentBuilder",
    "EnvironmentNotFoundError",
    "EnvironmentSpec",
    "EpisodeProgress",
    "EpsilonGreedyTraining",
    "Estimate",
    "Family",
    "FieldError",
    "GenerationStats",
    "LSTMEncoderConfig",
    "LocalRunOptions",
    "LocalTrainer",
    "MLPConfig",
    "ManifestError",
    "Member",
    "MemberBasics",
    "MemberOutcome",
    "MemberRecord",
    "MemberTrainer",
    "MultiAgentVectorEnv",
    "MultiInputEncoderConfig",
    "MutationSpec",
    "NStepBufferArgs",
    "Need",
    "NetworkSpec",
    "Paradigm",
    "ParadigmEntry",
    "PluginError",
    "PolicyModule",
    "Progress",
    "RegisterAlgorithm",
    "RegisterBackend",
    "RegisterCommand",
    "RegisterEnvironment",
    "RegisterParadigm",
    "RegisterSelection",
    "Registry",
    "ReplayBufferSpec",
    "RunResult",
    "Runner",
    "RunnerFactory",
    "Selection",
    "SelectionSpec",
    "SelectionStrategy",
    "SimBaEncoderConfig",
    "Spec",
    "StarterValue",
    "StochasticNetworkSpec",
    "TrainingError",
    "TrainingManifest",
    "TrainingSpec",
    "UsageError",
    "VectorEnvironmentSpec",
    "__version__",
    "available_memory",
    "build_environment_from",
    "can_fork",
    "check_entrypoint",
    "format_bytes",
    "hookimpl",
    "installed_registry",
    "interrupt_held",
    "last_fitness",
    "limits",
    "load_agent",
    "located_error",
    "member_spaces",
    "not_an_environment",
    "plugin_host",
    "printable",
    "reset_seed",
    "resolve_reference",
    "resolve_wrapper",
    "resume_local",
    "run_local",
    "slot_sizes",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module_name, attribute = _LAZY[name].split(":")
        # Not cached here: the name stays its module's attribute, even where that is replaced.
        return getattr(import_module(module_name), attribute)
    raise AttributeError(
        f"module 'agile_cli' has no attribute {name!r} (the RL library's names, Algorithm, "
        "ReplayBuffer, OffPolicyRunner and the like, are agile_rl's)"
    )


def __dir__() -> list[str]:
    return sorted(__all__)
