"""agile: evolutionary training of reinforcement-learning populations from one manifest.

This module is the public API for users and plugin authors; everything not in ``__all__`` is
private and may move. First-party plugins use nothing else. Importing it is cheap: the names
that need torch, gymnasium or numpy (the algorithm base classes and the pieces of their
updates, networks, buffers, rollouts, ``LocalTrainer``, the training entry points) and the
CLI's ``plugin_host`` load on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from agile_cli import experience
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
from agile_cli.models import (
    AlgorithmSpec,
    EnvironmentSpec,
    Family,
    NetworkSpec,
    Spec,
    StochasticNetworkSpec,
    limits,
)
from agile_cli.models.actor_critic import (
    CentralisedActorCriticSpec,
    DeterministicActorCriticSpec,
    ExplorationNoiseSpec,
)
from agile_cli.models.algorithm import VectorEnvironmentSpec, check_entrypoint
from agile_cli.models.base import located_error
from agile_cli.models.clipped_objective import ClippedObjectiveSpec
from agile_cli.models.gymnasium import GymnasiumEnvSpec
from agile_cli.models.replay_buffer import NStepBufferArgs, ReplayBufferSpec
from agile_cli.models.run_options import LocalRunOptions
from agile_cli.models.selection import SelectionSpec
from agile_cli.models.training import EpsilonGreedyTraining, TrainingSpec
from agile_cli.paradigm import Paradigm
from agile_cli.runtime.member import Member, MemberBasics
from agile_cli.signals import interrupt_held

__version__ = "0.1.0"

# Public names whose modules import torch, gymnasium or numpy (or, for plugin_host, the CLI):
# loaded on first access.
_LAZY = {
    "LocalTrainer": "agile_cli.training.trainer:LocalTrainer",
    "Algorithm": "agile_cli.runtime.agent:Algorithm",
    "OffPolicyAlgorithm": "agile_cli.runtime.agent:OffPolicyAlgorithm",
    "OnPolicyAlgorithm": "agile_cli.runtime.agent:OnPolicyAlgorithm",
    "AgentContext": "agile_cli.runtime.agent:AgentContext",
    "LearnResult": "agile_cli.runtime.agent:LearnResult",
    "MemberRecord": "agile_cli.runtime.agent:MemberRecord",
    "MultiAgentAlgorithm": "agile_cli.runtime.multi_agent:MultiAgentAlgorithm",
    "MultiAgentOffPolicyAlgorithm": "agile_cli.runtime.multi_agent:MultiAgentOffPolicyAlgorithm",
    "MultiAgentOnPolicyAlgorithm": "agile_cli.runtime.multi_agent:MultiAgentOnPolicyAlgorithm",
    "MultiAgentReplayBuffer": "agile_cli.runtime.buffers:MultiAgentReplayBuffer",
    "EvolvableNetwork": "agile_cli.nn.modules:EvolvableNetwork",
    "NetworkArch": "agile_cli.nn.arch:NetworkArch",
    "preprocess": "agile_cli.nn.modules:preprocess",
    "ReplayBuffer": "agile_cli.runtime.buffers:ReplayBuffer",
    "PrioritizedReplayBuffer": "agile_cli.runtime.buffers:PrioritizedReplayBuffer",
    "NStepAccumulator": "agile_cli.runtime.buffers:NStepAccumulator",
    "Transitions": "agile_cli.runtime.buffers:Transitions",
    "PolicyRecord": "agile_cli.runtime.rollout:PolicyRecord",
    "Rollout": "agile_cli.runtime.rollout:Rollout",
    "RolloutBatch": "agile_cli.runtime.rollout:RolloutBatch",
    "SequenceBatch": "agile_cli.runtime.rollout:SequenceBatch",
    "compute_gae": "agile_cli.runtime.rollout:compute_gae",
    "RecurrentState": "agile_cli.runtime.rollout:RecurrentState",
    "TeamRollout": "agile_cli.training.multi_agent_on_policy:TeamRollout",
    "LogStd": "agile_cli.nn.modules:LogStd",
    "reset_noise": "agile_cli.nn.noisy:reset_noise",
    "mean_weights": "agile_cli.nn.noisy:mean_weights",
    "scale_sigmas": "agile_cli.nn.noisy:scale_sigmas",
    "gumbel_argmax": "agile_cli.nn.sampling:gumbel_argmax",
    "normal_draws": "agile_cli.nn.sampling:standard_normal",
    "uniform_draws": "agile_cli.nn.sampling:uniform",
    "BoxActionScaler": "agile_cli.runtime.algorithms.actions:BoxActionScaler",
    "box_action_space": "agile_cli.runtime.algorithms.actions:box_action_space",
    "ornstein_uhlenbeck_step": "agile_cli.runtime.algorithms.noise:ornstein_uhlenbeck_step",
    "restart_ou_noise": "agile_cli.runtime.algorithms.noise:restart_ou_noise",
    "DeterministicActorCritic": (
        "agile_cli.runtime.algorithms.deterministic:DeterministicActorCritic"
    ),
    "CriticGroup": "agile_cli.runtime.algorithms.deterministic:CriticGroup",
    "DeterministicActorCriticGroup": (
        "agile_cli.runtime.algorithms.deterministic:DeterministicActorCriticGroup"
    ),
    "CentralisedActorCritic": "agile_cli.runtime.algorithms.centralised:CentralisedActorCritic",
    "QLearning": "agile_cli.runtime.algorithms.q_learning:QLearning",
    "QLearningGroup": "agile_cli.runtime.algorithms.q_learning:QLearningGroup",
    "ExportedPolicy": "agile_cli.runtime.exported:ExportedPolicy",
    "GreedyPolicy": "agile_cli.runtime.exported:GreedyPolicy",
    "NetworkHead": "agile_cli.runtime.exported:NetworkHead",
    "TeamPolicy": "agile_cli.runtime.exported:TeamPolicy",
    "greedy_action": "agile_cli.runtime.exported:greedy_action",
    "GroupLearner": "agile_cli.runtime.group:GroupLearner",
    "MemberGroup": "agile_cli.runtime.group:MemberGroup",
    "masked_mean": "agile_cli.runtime.group:masked_mean",
    "OnPolicyGroupLearner": "agile_cli.runtime.on_policy_group:OnPolicyGroupLearner",
    "epoch_minibatches": "agile_cli.runtime.on_policy_group:epoch_minibatches",
    "gather_rows": "agile_cli.runtime.on_policy_group:gather_rows",
    "stack_batches": "agile_cli.runtime.on_policy_group:stack_batches",
    "stacked_observations": "agile_cli.runtime.stacked:stacked_observations",
    "flat_rows": "agile_cli.runtime.stacked:flat_rows",
    "gym_env_factory": "agile_cli.runtime.gym_vector:gym_env_factory",
    "gym_vector_env": "agile_cli.runtime.gym_vector:gym_vector_env",
    "Selection": "agile_cli.evolution.selection:Selection",
    "SelectionStrategy": "agile_cli.evolution.selection:SelectionStrategy",
    "last_fitness": "agile_cli.evolution.selection:last_fitness",
    "OffPolicyRunner": "agile_cli.training.runners:OffPolicyRunner",
    "OnPolicyRunner": "agile_cli.training.runners:OnPolicyRunner",
    "MultiAgentOffPolicyRunner": "agile_cli.training.runners:MultiAgentOffPolicyRunner",
    "MultiAgentOnPolicyRunner": "agile_cli.training.multi_agent_on_policy:MultiAgentOnPolicyRunner",
    "GenerationStats": "agile_cli.training.runners:GenerationStats",
    "MemberTrainer": "agile_cli.training.members:MemberTrainer",
    "MemberOutcome": "agile_cli.training.members:MemberOutcome",
    "RunnerFactory": "agile_cli.training.members:RunnerFactory",
    "slot_sizes": "agile_cli.training.members:slot_sizes",
    "Progress": "agile_cli.training.runners:Progress",
    "Runner": "agile_cli.training.runners:Runner",
    "EpisodeProgress": "agile_cli.training.runners:EpisodeProgress",
    "reset_seed": "agile_cli.training.runners:reset_seed",
    "run_local": "agile_cli.training.trainer:run_local",
    "resume_local": "agile_cli.training.trainer:resume_local",
    "load_agent": "agile_cli.training.evaluation:load_agent",
    "build_environment_from": "agile_cli.training.setup:build_environment_from",
    "available_memory": "agile_cli.training.budget:available_memory",
    "format_bytes": "agile_cli.training.budget:format_bytes",
    "plugin_host": "agile_cli.cli:plugin_host",
}

if TYPE_CHECKING:
    from agile_cli.cli import plugin_host
    from agile_cli.evolution.selection import Selection, SelectionStrategy, last_fitness
    from agile_cli.nn.arch import NetworkArch
    from agile_cli.nn.modules import EvolvableNetwork, LogStd, preprocess
    from agile_cli.nn.noisy import mean_weights, reset_noise, scale_sigmas
    from agile_cli.nn.sampling import gumbel_argmax
    from agile_cli.nn.sampling import standard_normal as normal_draws
    from agile_cli.nn.sampling import uniform as uniform_draws
    from agile_cli.runtime.agent import (
        AgentContext,
        Algorithm,
        LearnResult,
        MemberRecord,
        OffPolicyAlgorithm,
        OnPolicyAlgorithm,
    )
    from agile_cli.runtime.algorithms.actions import BoxActionScaler, box_action_space
    from agile_cli.runtime.algorithms.centralised import CentralisedActorCritic
    from agile_cli.runtime.algorithms.deterministic import (
        CriticGroup,
        DeterministicActorCritic,
        DeterministicActorCriticGroup,
    )
    from agile_cli.runtime.algorithms.noise import ornstein_uhlenbeck_step, restart_ou_noise
    from agile_cli.runtime.algorithms.q_learning import QLearning, QLearningGroup
    from agile_cli.runtime.buffers import (
        MultiAgentReplayBuffer,
        NStepAccumulator,
        PrioritizedReplayBuffer,
        ReplayBuffer,
        Transitions,
    )
    from agile_cli.runtime.exported import (
        ExportedPolicy,
        GreedyPolicy,
        NetworkHead,
        TeamPolicy,
        greedy_action,
    )
    from agile_cli.runtime.group import GroupLearner, MemberGroup, masked_mean
    from agile_cli.runtime.gym_vector import gym_env_factory, gym_vector_env
    from agile_cli.runtime.multi_agent import (
        MultiAgentAlgorithm,
        MultiAgentOffPolicyAlgorithm,
        MultiAgentOnPolicyAlgorithm,
    )
    from agile_cli.runtime.on_policy_group import (
        OnPolicyGroupLearner,
        epoch_minibatches,
        gather_rows,
        stack_batches,
    )
    from agile_cli.runtime.rollout import (
        PolicyRecord,
        RecurrentState,
        Rollout,
        RolloutBatch,
        SequenceBatch,
        compute_gae,
    )
    from agile_cli.runtime.stacked import flat_rows, stacked_observations
    from agile_cli.training.budget import available_memory, format_bytes
    from agile_cli.training.evaluation import load_agent
    from agile_cli.training.members import MemberOutcome, MemberTrainer, RunnerFactory, slot_sizes
    from agile_cli.training.multi_agent_on_policy import MultiAgentOnPolicyRunner, TeamRollout
    from agile_cli.training.runners import (
        EpisodeProgress,
        GenerationStats,
        MultiAgentOffPolicyRunner,
        OffPolicyRunner,
        OnPolicyRunner,
        Progress,
        Runner,
        reset_seed,
    )
    from agile_cli.training.setup import build_environment_from
    from agile_cli.training.trainer import LocalTrainer, resume_local, run_local

__all__ = [
    "EXIT_RUNTIME",
    "AgentContext",
    "AgileError",
    "Algorithm",
    "AlgorithmSpec",
    "Backend",
    "BackendTrainer",
    "BoxActionScaler",
    "CentralisedActorCritic",
    "CentralisedActorCriticSpec",
    "ClippedObjectiveSpec",
    "CriticGroup",
    "DeterministicActorCritic",
    "DeterministicActorCriticGroup",
    "DeterministicActorCriticSpec",
    "EnvironmentBuilder",
    "EnvironmentNotFoundError",
    "EnvironmentSpec",
    "EpisodeProgress",
    "EpsilonGreedyTraining",
    "EvolvableNetwork",
    "ExplorationNoiseSpec",
    "ExportedPolicy",
    "Family",
    "FieldError",
    "GenerationStats",
    "GreedyPolicy",
    "GroupLearner",
    "GymnasiumEnvSpec",
    "LearnResult",
    "LocalRunOptions",
    "LocalTrainer",
    "LogStd",
    "ManifestError",
    "Member",
    "MemberBasics",
    "MemberGroup",
    "MemberOutcome",
    "MemberRecord",
    "MemberTrainer",
    "MultiAgentAlgorithm",
    "MultiAgentOffPolicyAlgorithm",
    "MultiAgentOffPolicyRunner",
    "MultiAgentOnPolicyAlgorithm",
    "MultiAgentOnPolicyRunner",
    "MultiAgentReplayBuffer",
    "MultiAgentVectorEnv",
    "NStepAccumulator",
    "NStepBufferArgs",
    "NetworkArch",
    "NetworkHead",
    "NetworkSpec",
    "OffPolicyAlgorithm",
    "OffPolicyRunner",
    "OnPolicyAlgorithm",
    "OnPolicyGroupLearner",
    "OnPolicyRunner",
    "Paradigm",
    "ParadigmEntry",
    "PluginError",
    "PolicyRecord",
    "PrioritizedReplayBuffer",
    "Progress",
    "QLearning",
    "QLearningGroup",
    "RecurrentState",
    "RegisterAlgorithm",
    "RegisterBackend",
    "RegisterCommand",
    "RegisterEnvironment",
    "RegisterParadigm",
    "RegisterSelection",
    "Registry",
    "ReplayBuffer",
    "ReplayBufferSpec",
    "Rollout",
    "RolloutBatch",
    "RunResult",
    "Runner",
    "RunnerFactory",
    "Selection",
    "SelectionSpec",
    "SelectionStrategy",
    "SequenceBatch",
    "Spec",
    "StochasticNetworkSpec",
    "TeamPolicy",
    "TeamRollout",
    "TrainingError",
    "TrainingManifest",
    "TrainingSpec",
    "Transitions",
    "UsageError",
    "VectorEnvironmentSpec",
    "__version__",
    "available_memory",
    "box_action_space",
    "build_environment_from",
    "can_fork",
    "check_entrypoint",
    "compute_gae",
    "epoch_minibatches",
    "experience",
    "flat_rows",
    "format_bytes",
    "gather_rows",
    "greedy_action",
    "gumbel_argmax",
    "gym_env_factory",
    "gym_vector_env",
    "hookimpl",
    "installed_registry",
    "interrupt_held",
    "last_fitness",
    "limits",
    "load_agent",
    "located_error",
    "masked_mean",
    "mean_weights",
    "normal_draws",
    "not_an_environment",
    "ornstein_uhlenbeck_step",
    "plugin_host",
    "preprocess",
    "printable",
    "reset_noise",
    "reset_seed",
    "resolve_reference",
    "resolve_wrapper",
    "restart_ou_noise",
    "resume_local",
    "run_local",
    "scale_sigmas",
    "slot_sizes",
    "stack_batches",
    "stacked_observations",
    "uniform_draws",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module_name, attribute = _LAZY[name].split(":")
        # Not cached here: the name stays its module's attribute, even where that is replaced.
        return getattr(import_module(module_name), attribute)
    raise AttributeError(f"module 'agile_cli' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
