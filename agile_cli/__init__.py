"""agile: evolutionary training of populations from one manifest.

This module is the core's public API, for users and plugin authors alike: the plugin contract
(hooks, registrations, the specs a plugin's sections derive from, :class:`Member`,
:class:`Paradigm`, :class:`Runner`), the errors a plugin raises, and the ways to train from
Python. One public submodule serves a narrower audience: :mod:`agile_cli.helpers` (what
backends and environment builders use). Everything else is private and may move.
Reinforcement learning, its ``network`` and ``replay_buffer`` sections included, lives in the
first-party plugin :mod:`agile_rl`, whose own public API RL algorithms build on.

Importing it is cheap: the names that need torch (``LocalTrainer``, ``load_agent``) load on
first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agile_cli._lazy import load
from agile_cli.backend import Backend, BackendTrainer, RunResult
from agile_cli.environment import EnvironmentBuilder, MultiAgentVectorEnv
from agile_cli.errors import (
    AgileError,
    EnvironmentNotFoundError,
    FieldError,
    ManifestError,
    MembersLost,
    PluginError,
    TrainingError,
    UsageError,
)
from agile_cli.host.hookspecs import hookimpl
from agile_cli.host.registry import (
    RegisterAlgorithm,
    RegisterBackend,
    RegisterCommand,
    RegisterEnvironment,
    RegisterParadigm,
    RegisterSelection,
)
from agile_cli.manifest import TrainingManifest
from agile_cli.member import (
    AgentContext,
    ExportsElite,
    Member,
    MemberBasics,
    MemberRecord,
    PolicyModule,
    Rebuildable,
)
from agile_cli.memory import Need
from agile_cli.models import AlgorithmSpec, EnvironmentSpec, MutationSpec, Spec, limits
from agile_cli.models.algorithm import VectorEnvironmentSpec
from agile_cli.models.base import StarterValue
from agile_cli.models.run_options import LocalRunOptions
from agile_cli.models.selection import SelectionSpec
from agile_cli.models.training import TrainingSpec
from agile_cli.paradigm import Build, Paradigm
from agile_cli.runner import (
    AsynchronousRunner,
    EpisodeProgress,
    GenerationStats,
    Progress,
    Runner,
    SlotRound,
)

__version__ = "0.1.0"

# Public names whose modules import torch or numpy: loaded on first use.
_LAZY = {
    "LocalTrainer": "agile_cli.training.trainer:LocalTrainer",
    "load_agent": "agile_cli.training.evaluation:load_agent",
    "Selection": "agile_cli.evolution.selection:Selection",
    "SelectionStrategy": "agile_cli.evolution.selection:SelectionStrategy",
}

#: The public submodules, where names that the package itself once offered went.
_SUBMODULES = ("agile_cli.helpers",)

if TYPE_CHECKING:
    from agile_cli.evolution.selection import Selection, SelectionStrategy
    from agile_cli.training.evaluation import load_agent
    from agile_cli.training.trainer import LocalTrainer

__all__ = [
    "AgentContext",
    "AgileError",
    "AlgorithmSpec",
    "AsynchronousRunner",
    "Backend",
    "BackendTrainer",
    "Build",
    "EnvironmentBuilder",
    "EnvironmentNotFoundError",
    "EnvironmentSpec",
    "EpisodeProgress",
    "ExportsElite",
    "FieldError",
    "GenerationStats",
    "LocalRunOptions",
    "LocalTrainer",
    "ManifestError",
    "Member",
    "MemberBasics",
    "MemberRecord",
    "MembersLost",
    "MultiAgentVectorEnv",
    "MutationSpec",
    "Need",
    "Paradigm",
    "PluginError",
    "PolicyModule",
    "Progress",
    "Rebuildable",
    "RegisterAlgorithm",
    "RegisterBackend",
    "RegisterCommand",
    "RegisterEnvironment",
    "RegisterParadigm",
    "RegisterSelection",
    "RunResult",
    "Runner",
    "Selection",
    "SelectionSpec",
    "SelectionStrategy",
    "SlotRound",
    "Spec",
    "StarterValue",
    "TrainingError",
    "TrainingManifest",
    "TrainingSpec",
    "UsageError",
    "VectorEnvironmentSpec",
    "__version__",
    "hookimpl",
    "limits",
    "load_agent",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return load(_LAZY[name])
    for module in _SUBMODULES:
        if name in load(f"{module}:__all__"):
            raise AttributeError(f"agile_cli.{name} is {module}.{name}: import it from there")
    if name == "Family":
        raise AttributeError(
            "agile_cli.Family is gone: name a paradigm by its string, e.g. family='off_policy'"
        )
    raise AttributeError(
        f"module 'agile_cli' has no attribute {name!r} (the RL library's names, Algorithm, "
        "NetworkSpec, ReplayBuffer, OffPolicyRunner and the like, are agile_rl's)"
    )


def __dir__() -> list[str]:
    return sorted(__all__)
