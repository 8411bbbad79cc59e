"""Teams of agents: the base classes of multi-agent algorithms and how agents form groups.

One population member is a whole team. Its networks are named per agent (``actor.speaker_0``)
or per group of homogeneous agents (``actor.agent``, shared by ``agent_0``, ``agent_1``, ...),
and they all share one architecture, so every mutation changes every sub-network alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from agile_cli import AlgorithmSpec
from agile_rl.nn.arch import NetworkArch
from agile_rl.nn.modules import EvolvableNetwork, preprocess
from agile_rl.runtime.agent import (
    AgentContext,
    Algorithm,
    OffPolicyAlgorithm,
    OnPolicyAlgorithm,
    as_networks_read,
)


def group_of(agent: str) -> str:
    """The group an agent belongs to: its id without the last ``_suffix`` (``speaker_0`` ->
    ``speaker``); agents of one group are expected to be alike."""
    head, sep, _ = agent.rpartition("_")
    return head if sep and head else agent


def groups_of(agents: list[str]) -> dict[str, list[str]]:
    """Agents by group, both in the order given."""
    groups: dict[str, list[str]] = {}
    for agent in agents:
        groups.setdefault(group_of(agent), []).append(agent)
    return groups


def flat_size(space: gym.Space) -> int:
    """Width of a space's preprocessed, flattened observation or one-hot / vector action."""
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    if isinstance(space, spaces.Box | spaces.MultiBinary):
        return int(np.prod(space.shape))
    raise NotImplementedError(
        f"multi-agent algorithms read Box, Discrete, MultiDiscrete or MultiBinary spaces, "
        f"not {type(space).__name__}; flatten it with a PettingZoo wrapper"
    )


class MultiAgentAlgorithm(Algorithm):
    """A team of agents acting together in a multi-agent environment.

    ``observation_space`` / ``action_space`` are Dict spaces keyed by agent (in the
    environment's order, also :attr:`agents`); :attr:`observation_spaces` and
    :attr:`action_spaces` are the same as plain dicts. :meth:`act` takes and returns dicts of
    batched arrays keyed by agent. Build networks with :meth:`add_network` and its
    ``observation_space`` argument (one agent's space, or :meth:`joint_observation_space`).
    """

    policy_role: ClassVar[str] = "actor"
    """Each agent's (or group's) policy is the network named ``<policy_role>.<agent or
    group>``: those are what parameter mutation perturbs (:attr:`policies`)."""

    def __init__(
        self,
        spec: AlgorithmSpec,
        *,
        observation_spaces: Mapping[str, gym.Space],
        action_spaces: Mapping[str, gym.Space],
        arch: NetworkArch,
        context: AgentContext,
        index: int = 0,
    ) -> None:
        self.agents = list(observation_spaces)
        self.observation_spaces = {
            agent: as_networks_read(spec, space) for agent, space in observation_spaces.items()
        }
        self.action_spaces = {agent: action_spaces[agent] for agent in self.agents}
        self.groups = groups_of(self.agents)
        super().__init__(
            spec,
            observation_space=spaces.Dict(self.observation_spaces),
            action_space=spaces.Dict(self.action_spaces),
            arch=arch,
            context=context,
            index=index,
        )

    def agent_obs(self, obs: Mapping[str, Any], agent: str) -> torch.Tensor:
        """One agent's batched observations as the networks take them."""
        tensor = preprocess(self.observation_spaces[agent], obs[agent], self.device)
        assert isinstance(tensor, torch.Tensor)
        return tensor.reshape(tensor.shape[0], -1)

    def joint_observation_space(self) -> spaces.Box:
        """Every agent's flattened observation side by side (a centralised critic's input)."""
        width = sum(flat_size(space) for space in self.observation_spaces.values())
        return spaces.Box(-np.inf, np.inf, (width,), np.float32)

    def joint_obs(self, obs: Mapping[str, Any]) -> torch.Tensor:
        """The joint observations of :meth:`joint_observation_space`, ``[N, width]``."""
        return torch.cat([self.agent_obs(obs, agent) for agent in self.agents], dim=1)

    @property
    def policies(self) -> list[EvolvableNetwork]:
        """Each agent's (or group's) policy: the networks named ``<policy_role>.*`` (the
        :attr:`policy` alone if there are none)."""
        prefix = f"{self.policy_role}."
        actors = [net for name, net in self.networks.items() if name.startswith(prefix)]
        return actors or [self.policy]


class MultiAgentOffPolicyAlgorithm(MultiAgentAlgorithm, OffPolicyAlgorithm):
    """A team that learns from a shared :class:`~agile_rl.runtime.buffers.MultiAgentReplayBuffer`;
    :meth:`learn` receives its batches, whose fields are dicts keyed by agent."""


class MultiAgentOnPolicyAlgorithm(MultiAgentAlgorithm, OnPolicyAlgorithm):
    """A team that learns from the rollouts it just collected (see the multi-agent
    on-policy runner for their layout)."""
