"""agile's reinforcement-learning library: the algorithm base classes, evolvable and stacked
networks, replay buffers and rollouts, the runners that train a population side by side (members
that stack as one computation), and the RL paradigms (off-policy, on-policy and their
multi-agent teams).

It is a first-party plugin of agile (registered through the ``agile`` entry point group like
any other) and the public API that RL algorithm plugins build on, first- and third-party:
everything not in ``__all__`` is private and may move. It builds on the core's contract
(:mod:`agile_cli`: members, paradigms, runners, specs), never the other way round. Importing it
is cheap: the names that need torch or gymnasium, and the specs, load on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from agile_rl import experience
from agile_rl.architectures import check_architecture

# Public names whose modules import torch or gymnasium, or build pydantic models: loaded on
# first access.
_LAZY = {
    "CentralisedActorCriticSpec": "agile_rl.models.actor_critic:CentralisedActorCriticSpec",
    "DeterministicActorCriticSpec": "agile_rl.models.actor_critic:DeterministicActorCriticSpec",
    "ExplorationNoiseSpec": "agile_rl.models.actor_critic:ExplorationNoiseSpec",
    "ClippedObjectiveSpec": "agile_rl.models.clipped_objective:ClippedObjectiveSpec",
    "GymnasiumEnvSpec": "agile_rl.models.gymnasium:GymnasiumEnvSpec",
    "Algorithm": "agile_rl.runtime.agent:Algorithm",
    "OffPolicyAlgorithm": "agile_rl.runtime.agent:OffPolicyAlgorithm",
    "OnPolicyAlgorithm": "agile_rl.runtime.agent:OnPolicyAlgorithm",
    "LearnResult": "agile_rl.runtime.agent:LearnResult",
    "MultiAgentAlgorithm": "agile_rl.runtime.multi_agent:MultiAgentAlgorithm",
    "MultiAgentOffPolicyAlgorithm": "agile_rl.runtime.multi_agent:MultiAgentOffPolicyAlgorithm",
    "MultiAgentOnPolicyAlgorithm": "agile_rl.runtime.multi_agent:MultiAgentOnPolicyAlgorithm",
    "MultiAgentReplayBuffer": "agile_rl.runtime.buffers:MultiAgentReplayBuffer",
    "EvolvableNetwork": "agile_rl.nn.modules:EvolvableNetwork",
    "NetworkArch": "agile_rl.nn.arch:NetworkArch",
    "preprocess": "agile_rl.nn.modules:preprocess",
    "ReplayBuffer": "agile_rl.runtime.buffers:ReplayBuffer",
    "PrioritizedReplayBuffer": "agile_rl.runtime.buffers:PrioritizedReplayBuffer",
    "NStepAccumulator": "agile_rl.runtime.buffers:NStepAccumulator",
    "Transitions": "agile_rl.runtime.buffers:Transitions",
    "PolicyRecord": "agile_rl.runtime.rollout:PolicyRecord",
    "Rollout": "agile_rl.runtime.rollout:Rollout",
    "RolloutBatch": "agile_rl.runtime.rollout:RolloutBatch",
    "SequenceBatch": "agile_rl.runtime.rollout:SequenceBatch",
    "compute_gae": "agile_rl.runtime.rollout:compute_gae",
    "RecurrentState": "agile_rl.runtime.rollout:RecurrentState",
    "TeamRollout": "agile_rl.training.multi_agent_on_policy:TeamRollout",
    "LogStd": "agile_rl.nn.modules:LogStd",
    "reset_noise": "agile_rl.nn.noisy:reset_noise",
    "mean_weights": "agile_rl.nn.noisy:mean_weights",
    "scale_sigmas": "agile_rl.nn.noisy:scale_sigmas",
    "gumbel_argmax": "agile_rl.nn.sampling:gumbel_argmax",
    "normal_draws": "agile_rl.nn.sampling:standard_normal",
    "uniform_draws": "agile_rl.nn.sampling:uniform",
    "BoxActionScaler": "agile_rl.runtime.algorithms.actions:BoxActionScaler",
    "box_action_space": "agile_rl.runtime.algorithms.actions:box_action_space",
    "ornstein_uhlenbeck_step": "agile_rl.runtime.algorithms.noise:ornstein_uhlenbeck_step",
    "restart_ou_noise": "agile_rl.runtime.algorithms.noise:restart_ou_noise",
    "DeterministicActorCritic": (
        "agile_rl.runtime.algorithms.deterministic:DeterministicActorCritic"
    ),
    "CriticGroup": "agile_rl.runtime.algorithms.deterministic:CriticGroup",
    "DeterministicActorCriticGroup": (
        "agile_rl.runtime.algorithms.deterministic:DeterministicActorCriticGroup"
    ),
    "CentralisedActorCritic": "agile_rl.runtime.algorithms.centralised:CentralisedActorCritic",
    "CentralisedActorCriticGroup": (
        "agile_rl.runtime.algorithms.centralised:CentralisedActorCriticGroup"
    ),
    "QLearning": "agile_rl.runtime.algorithms.q_learning:QLearning",
    "QLearningGroup": "agile_rl.runtime.algorithms.q_learning:QLearningGroup",
    "ExportedPolicy": "agile_rl.runtime.exported:ExportedPolicy",
    "GreedyPolicy": "agile_rl.runtime.exported:GreedyPolicy",
    "NetworkHead": "agile_rl.runtime.exported:NetworkHead",
    "TeamPolicy": "agile_rl.runtime.exported:TeamPolicy",
    "greedy_action": "agile_rl.runtime.exported:greedy_action",
    "GroupLearner": "agile_rl.runtime.group:GroupLearner",
    "MemberGroup": "agile_rl.runtime.group:MemberGroup",
    "masked_mean": "agile_rl.runtime.group:masked_mean",
    "OnPolicyGroupLearner": "agile_rl.runtime.on_policy_group:OnPolicyGroupLearner",
    "TeamOnPolicyGroupLearner": "agile_rl.runtime.on_policy_group:TeamOnPolicyGroupLearner",
    "clipped_surrogate": "agile_rl.runtime.on_policy_group:clipped_surrogate",
    "normalised_advantages": "agile_rl.runtime.on_policy_group:normalised_advantages",
    "Minibatches": "agile_rl.runtime.on_policy_group:Minibatches",
    "row_minibatches": "agile_rl.runtime.on_policy_group:row_minibatches",
    "run_epochs": "agile_rl.runtime.on_policy_group:run_epochs",
    "stack_batches": "agile_rl.runtime.on_policy_group:stack_batches",
    "stacked_observations": "agile_rl.runtime.stacked:stacked_observations",
    "flat_rows": "agile_rl.runtime.stacked:flat_rows",
    "gym_env_factory": "agile_rl.runtime.gym_vector:gym_env_factory",
    "gym_vector_env": "agile_rl.runtime.gym_vector:gym_vector_env",
    "OffPolicyRunner": "agile_rl.training.runners:OffPolicyRunner",
    "learning_groups": "agile_rl.training.groups:learning_groups",
    "learn_stacked": "agile_rl.training.groups:learn_stacked",
    "gradient_step": "agile_rl.training.groups:gradient_step",
    "write_back": "agile_rl.training.groups:write_back",
    "OnPolicyRunner": "agile_rl.training.on_policy:OnPolicyRunner",
    "MultiAgentOffPolicyRunner": "agile_rl.training.runners:MultiAgentOffPolicyRunner",
    "MultiAgentOnPolicyRunner": "agile_rl.training.multi_agent_on_policy:MultiAgentOnPolicyRunner",
    "PopulationRunner": "agile_rl.training.runners:PopulationRunner",
    "RLParadigm": "agile_rl.paradigms:RLParadigm",
    "NetworkSpec": "agile_rl.models.network:NetworkSpec",
    "StochasticNetworkSpec": "agile_rl.models.network:StochasticNetworkSpec",
    "CNNEncoderConfig": "agile_rl.models.network:CNNEncoderConfig",
    "CnnLstmEncoderConfig": "agile_rl.models.network:CnnLstmEncoderConfig",
    "LSTMEncoderConfig": "agile_rl.models.network:LSTMEncoderConfig",
    "MLPConfig": "agile_rl.models.network:MLPConfig",
    "MLPEncoderConfig": "agile_rl.models.network:MLPEncoderConfig",
    "MultiInputEncoderConfig": "agile_rl.models.network:MultiInputEncoderConfig",
    "SimBaEncoderConfig": "agile_rl.models.network:SimBaEncoderConfig",
    "ReplayBufferSpec": "agile_rl.models.replay_buffer:ReplayBufferSpec",
    "NStepBufferArgs": "agile_rl.models.replay_buffer:NStepBufferArgs",
    "PERBufferArgs": "agile_rl.models.replay_buffer:PERBufferArgs",
    "EpsilonGreedyTraining": "agile_rl.spec:EpsilonGreedyTraining",
    "RLAlgorithmSpec": "agile_rl.spec:RLAlgorithmSpec",
    "RLOptions": "agile_rl.spec:RLOptions",
    "evolvable_network": "agile_rl.models.network:evolvable_network",
    "SideBySide": "agile_rl.paradigms:SideBySide",
    "Alone": "agile_rl.training.groups:Alone",
    "Slot": "agile_rl.training.groups:Slot",
    "learned_loss": "agile_rl.training.runners:learned_loss",
    "member_needs": "agile_rl.training.budget:needs",
}

if TYPE_CHECKING:
    from agile_rl.models.actor_critic import (
        CentralisedActorCriticSpec,
        DeterministicActorCriticSpec,
        ExplorationNoiseSpec,
    )
    from agile_rl.models.clipped_objective import ClippedObjectiveSpec
    from agile_rl.models.gymnasium import GymnasiumEnvSpec
    from agile_rl.models.network import (
        CNNEncoderConfig,
        CnnLstmEncoderConfig,
        LSTMEncoderConfig,
        MLPConfig,
        MLPEncoderConfig,
        MultiInputEncoderConfig,
        NetworkSpec,
        SimBaEncoderConfig,
        StochasticNetworkSpec,
        evolvable_network,
    )
    from agile_rl.models.replay_buffer import NStepBufferArgs, PERBufferArgs, ReplayBufferSpec
    from agile_rl.nn.arch import NetworkArch
    from agile_rl.nn.modules import EvolvableNetwork, LogStd, preprocess
    from agile_rl.nn.noisy import mean_weights, reset_noise, scale_sigmas
    from agile_rl.nn.sampling import gumbel_argmax
    from agile_rl.nn.sampling import standard_normal as normal_draws
    from agile_rl.nn.sampling import uniform as uniform_draws
    from agile_rl.paradigms import RLParadigm, SideBySide
    from agile_rl.runtime.agent import Algorithm, LearnResult, OffPolicyAlgorithm, OnPolicyAlgorithm
    from agile_rl.runtime.algorithms.actions import BoxActionScaler, box_action_space
    from agile_rl.runtime.algorithms.centralised import (
        CentralisedActorCritic,
        CentralisedActorCriticGroup,
    )
    from agile_rl.runtime.algorithms.deterministic import (
        CriticGroup,
        DeterministicActorCritic,
        DeterministicActorCriticGroup,
    )
    from agile_rl.runtime.algorithms.noise import ornstein_uhlenbeck_step, restart_ou_noise
    from agile_rl.runtime.algorithms.q_learning import QLearning, QLearningGroup
    from agile_rl.runtime.buffers import (
        MultiAgentReplayBuffer,
        NStepAccumulator,
        PrioritizedReplayBuffer,
        ReplayBuffer,
        Transitions,
    )
    from agile_rl.runtime.exported import (
        ExportedPolicy,
        GreedyPolicy,
        NetworkHead,
        TeamPolicy,
        greedy_action,
    )
    from agile_rl.runtime.group import GroupLearner, MemberGroup, masked_mean
    from agile_rl.runtime.gym_vector import gym_env_factory, gym_vector_env
    from agile_rl.runtime.multi_agent import (
        MultiAgentAlgorithm,
        MultiAgentOffPolicyAlgorithm,
        MultiAgentOnPolicyAlgorithm,
    )
    from agile_rl.runtime.on_policy_group import (
        Minibatches,
        OnPolicyGroupLearner,
        TeamOnPolicyGroupLearner,
        clipped_surrogate,
        normalised_advantages,
        row_minibatches,
        run_epochs,
        stack_batches,
    )
    from agile_rl.runtime.rollout import (
        PolicyRecord,
        RecurrentState,
        Rollout,
        RolloutBatch,
        SequenceBatch,
        compute_gae,
    )
    from agile_rl.runtime.stacked import flat_rows, stacked_observations
    from agile_rl.spec import EpsilonGreedyTraining, RLAlgorithmSpec, RLOptions
    from agile_rl.training.budget import needs as member_needs
    from agile_rl.training.groups import (
        Alone,
        Slot,
        gradient_step,
        learn_stacked,
        learning_groups,
        write_back,
    )
    from agile_rl.training.multi_agent_on_policy import MultiAgentOnPolicyRunner, TeamRollout
    from agile_rl.training.on_policy import OnPolicyRunner
    from agile_rl.training.runners import (
        MultiAgentOffPolicyRunner,
        OffPolicyRunner,
        PopulationRunner,
        learned_loss,
    )

__all__ = [
    "Algorithm",
    "Alone",
    "BoxActionScaler",
    "CNNEncoderConfig",
    "CentralisedActorCritic",
    "CentralisedActorCriticGroup",
    "CentralisedActorCriticSpec",
    "ClippedObjectiveSpec",
    "CnnLstmEncoderConfig",
    "CriticGroup",
    "DeterministicActorCritic",
    "DeterministicActorCriticGroup",
    "DeterministicActorCriticSpec",
    "EpsilonGreedyTraining",
    "EvolvableNetwork",
    "ExplorationNoiseSpec",
    "ExportedPolicy",
    "GreedyPolicy",
    "GroupLearner",
    "GymnasiumEnvSpec",
    "LSTMEncoderConfig",
    "LearnResult",
    "LogStd",
    "MLPConfig",
    "MLPEncoderConfig",
    "MemberGroup",
    "Minibatches",
    "MultiAgentAlgorithm",
    "MultiAgentOffPolicyAlgorithm",
    "MultiAgentOffPolicyRunner",
    "MultiAgentOnPolicyAlgorithm",
    "MultiAgentOnPolicyRunner",
    "MultiAgentReplayBuffer",
    "MultiInputEncoderConfig",
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
    "PERBufferArgs",
    "PolicyRecord",
    "PopulationRunner",
    "PrioritizedReplayBuffer",
    "QLearning",
    "QLearningGroup",
    "RLAlgorithmSpec",
    "RLOptions",
    "RLParadigm",
    "RecurrentState",
    "ReplayBuffer",
    "ReplayBufferSpec",
    "Rollout",
    "RolloutBatch",
    "SequenceBatch",
    "SideBySide",
    "SimBaEncoderConfig",
    "Slot",
    "StochasticNetworkSpec",
    "TeamOnPolicyGroupLearner",
    "TeamPolicy",
    "TeamRollout",
    "Transitions",
    "box_action_space",
    "check_architecture",
    "clipped_surrogate",
    "compute_gae",
    "evolvable_network",
    "experience",
    "flat_rows",
    "gradient_step",
    "greedy_action",
    "gumbel_argmax",
    "gym_env_factory",
    "gym_vector_env",
    "learn_stacked",
    "learned_loss",
    "learning_groups",
    "masked_mean",
    "mean_weights",
    "member_needs",
    "normal_draws",
    "normalised_advantages",
    "ornstein_uhlenbeck_step",
    "preprocess",
    "reset_noise",
    "restart_ou_noise",
    "row_minibatches",
    "run_epochs",
    "scale_sigmas",
    "stack_batches",
    "stacked_observations",
    "uniform_draws",
    "write_back",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module_name, attribute = _LAZY[name].split(":")
        return getattr(import_module(module_name), attribute)
    raise AttributeError(f"module 'agile_rl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
