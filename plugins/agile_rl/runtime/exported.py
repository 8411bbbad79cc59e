"""Greedy policies as plain torch modules, which ``agile export`` writes as TorchScript or ONNX.

An exported policy maps raw observation batches (what the environment gives, batch dimension
first) to the actions :meth:`~agile_rl.Algorithm.act` takes without exploration. A
:class:`GreedyPolicy` applies what :func:`~agile_rl.preprocess` does to one observation
space, then a copy of the acting network (in evaluation mode: noisy layers use their mean
weights), then a greedy action (:func:`greedy_action`); a :class:`TeamPolicy` holds one per
agent, their inputs and outputs in the team's agent order.

Inputs are float32 tensors for Box observations (uint8 for uint8 images) and int64 for
Discrete, MultiDiscrete and MultiBinary ones (:func:`input_dtype`).
"""

from __future__ import annotations

import copy
import re

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agile_rl.nn.modules import scales_pixels


def input_dtype(space: gym.Space) -> torch.dtype:
    """The dtype an exported policy takes observations of ``space`` in."""
    if isinstance(space, spaces.Box):
        return torch.uint8 if space.dtype == np.uint8 else torch.float32
    return torch.int64


def sample_observations(space: gym.Space, batch: int, seed: int = 0) -> torch.Tensor:
    """``batch`` observations drawn from ``space`` (seeded, leaving ``space`` untouched), as
    an exported policy takes them."""
    space = copy.deepcopy(space)
    space.seed(seed)
    rows = np.stack([np.asarray(space.sample()) for _ in range(batch)])
    return torch.as_tensor(rows).to(input_dtype(space))


class ObservationInput(nn.Module):
    """Raw observations of one space as the networks take them (see :func:`preprocess`):
    one-hot for Discrete and MultiDiscrete, uint8 divided by 255 (unless
    :func:`~agile_rl.nn.modules.scales_pixels` says not), float32 otherwise.

    :param space: the observation space of one agent or member.
    :param flatten: flatten each observation, as a multi-agent algorithm's agents read them.
    :raises NotImplementedError: for Dict, Tuple and other composite spaces.
    """

    columns: torch.Tensor
    values: torch.Tensor

    def __init__(self, space: gym.Space, flatten: bool = False) -> None:
        super().__init__()
        if not isinstance(space, spaces.Box | spaces.Discrete | spaces.MultiDiscrete
                          | spaces.MultiBinary):  # fmt: skip
            raise NotImplementedError(
                f"its {type(space).__name__} observations would need one input per entry"
            )
        self.kind = type(space).__name__
        self.scale = scales_pixels(space)
        self.flatten = flatten
        columns, values = _one_hot_columns(space)
        self.register_buffer("columns", columns)
        self.register_buffer("values", values)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.kind == "Discrete":
            obs = torch.eq(obs.reshape(-1, 1).long(), self.values)
        elif self.kind == "MultiDiscrete":
            entries = obs.reshape(obs.shape[0], -1).long().index_select(1, self.columns)
            obs = torch.eq(entries, self.values)
        x = obs.to(torch.float32)
        if self.scale:
            x = x / 255.0
        return x.reshape(x.shape[0], -1) if self.flatten else x


def _one_hot_columns(space: gym.Space) -> tuple[torch.Tensor, torch.Tensor]:
    """For each one-hot column of a Discrete or MultiDiscrete observation: the entry it reads
    and the value it stands for (empty for other spaces)."""
    if isinstance(space, spaces.Discrete):
        values = torch.arange(int(space.n)) + int(space.start)
        return torch.zeros(int(space.n), dtype=torch.int64), values
    if isinstance(space, spaces.MultiDiscrete):
        sizes, starts = space.nvec.reshape(-1), space.start.reshape(-1)
        entries = [torch.full((int(n),), i) for i, n in enumerate(sizes)]
        ranges = [torch.arange(int(n)) + int(start) for n, start in zip(sizes, starts, strict=True)]
        return torch.cat(entries), torch.cat(ranges)
    return torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)


class NetworkHead(nn.Module):
    """One head's output of a network (an :class:`~agile_rl.EvolvableNetwork`)."""

    def __init__(self, network: nn.Module, head: str) -> None:
        super().__init__()
        self.network = network
        self.head = head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(x)[self.head]


class DiscreteAction(nn.Module):
    """Discrete actions: the argmax of the logits or Q-values, plus the space's start."""

    def __init__(self, space: spaces.Discrete) -> None:
        super().__init__()
        self.start = int(space.start)

    def forward(self, out: torch.Tensor) -> torch.Tensor:
        return out.argmax(dim=-1) + self.start


class MultiDiscreteAction(nn.Module):
    """MultiDiscrete actions: one argmax per entry over its logits, side by side."""

    starts: torch.Tensor

    def __init__(self, space: spaces.MultiDiscrete) -> None:
        super().__init__()
        self.sizes = [int(n) for n in space.nvec.reshape(-1)]
        self.shape = tuple(space.shape)
        self.register_buffer("starts", torch.as_tensor(space.start.reshape(-1), dtype=torch.int64))

    def forward(self, out: torch.Tensor) -> torch.Tensor:
        greedy = torch.stack([part.argmax(dim=-1) for part in out.split(self.sizes, dim=-1)], -1)
        return (greedy + self.starts).reshape(-1, *self.shape)


class BinaryAction(nn.Module):
    """MultiBinary actions: 1 where the logit is positive."""

    def __init__(self, space: spaces.MultiBinary) -> None:
        super().__init__()
        self.shape = tuple(space.shape)

    def forward(self, out: torch.Tensor) -> torch.Tensor:
        return (out > 0).to(torch.int8).reshape(-1, *self.shape)


class BoxAction(nn.Module):
    """Box actions from a deterministic output (a Gaussian policy's mean): clipped into the
    bounds, or with ``squash`` passed through tanh and rescaled into them (then clipped)."""

    low: torch.Tensor
    high: torch.Tensor

    def __init__(self, space: spaces.Box, squash: bool = False) -> None:
        super().__init__()
        self.squash = squash
        self.shape = tuple(space.shape)
        self.dtype = torch.float64 if space.dtype == np.float64 else torch.float32
        self.register_buffer("low", torch.as_tensor(space.low.reshape(-1), dtype=torch.float32))
        self.register_buffer("high", torch.as_tensor(space.high.reshape(-1), dtype=torch.float32))

    def forward(self, out: torch.Tensor) -> torch.Tensor:
        x = out.reshape(out.shape[0], -1)
        if self.squash:
            x = self.low + (torch.tanh(x) + 1.0) * 0.5 * (self.high - self.low)
        x = torch.maximum(torch.minimum(x, self.high), self.low)
        return x.reshape(-1, *self.shape).to(self.dtype)


def greedy_action(space: gym.Space, *, squash: bool = False) -> nn.Module:
    """The module turning a policy head's output into greedy actions of ``space``.

    :param squash: Box actions go through tanh into the bounds instead of being clipped.
    :raises NotImplementedError: for other action spaces.
    """
    if isinstance(space, spaces.Discrete):
        return DiscreteAction(space)
    if isinstance(space, spaces.MultiDiscrete):
        return MultiDiscreteAction(space)
    if isinstance(space, spaces.MultiBinary):
        return BinaryAction(space)
    if isinstance(space, spaces.Box):
        return BoxAction(space, squash)
    raise NotImplementedError(f"its {type(space).__name__} actions have no greedy form here")


class ExportedPolicy(nn.Module):
    """What :meth:`~agile_rl.Algorithm.export_policy` returns: ``forward`` takes one
    observation batch per entry of :attr:`observation_spaces` and returns one action batch per
    output (a tensor, or a tuple for several)."""

    input_names: list[str]
    output_names: list[str]
    observation_spaces: list[gym.Space]

    def example_inputs(self, batch: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
        """``batch`` observations for each input, sampled from its space."""
        return tuple(
            sample_observations(space, batch, seed + i)
            for i, space in enumerate(self.observation_spaces)
        )


class GreedyPolicy(ExportedPolicy):
    """Observations of one space, through ``body`` (copied), to greedy actions.

    :param observation_space: what the policy reads.
    :param body: observations as the networks take them to the head's output, e.g.
        ``NetworkHead(network, "policy")``; deep-copied, in evaluation mode, without gradients.
    :param action: that output to actions, e.g. :func:`greedy_action`.
    :param flatten: flatten observations first (multi-agent algorithms' agents).
    """

    def __init__(
        self, observation_space: gym.Space, body: nn.Module, action: nn.Module,
        *, flatten: bool = False,
    ) -> None:  # fmt: skip
        super().__init__()
        self.observations = ObservationInput(observation_space, flatten)
        self.body = copy.deepcopy(body).cpu().eval().requires_grad_(False)
        self.action = action
        self.input_names, self.output_names = ["obs"], ["action"]
        self.observation_spaces = [observation_space]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.action(self.body(self.observations(obs)))


class TeamPolicy(ExportedPolicy):
    """One :class:`GreedyPolicy` per agent: ``forward(obs_a, obs_b, ...)`` returns
    ``(action_a, action_b, ...)`` in the order of ``policies``; inputs are named
    ``obs_<agent>`` and outputs ``action_<agent>`` (the agent id with every character other
    than a letter, digit or underscore made an underscore).

    :param policies: each agent's policy, by agent id, in the team's order.
    """

    def __init__(self, policies: dict[str, GreedyPolicy]) -> None:
        super().__init__()
        self.agents = list(policies)
        self.policies = nn.ModuleList(policies.values())
        names = [re.sub(r"\W", "_", agent) for agent in self.agents]
        self.input_names = [f"obs_{name}" for name in names]
        self.output_names = [f"action_{name}" for name in names]
        self.observation_spaces = [p.observation_spaces[0] for p in policies.values()]

    def forward(self, *obs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(policy(x) for policy, x in zip(self.policies, obs, strict=True))
