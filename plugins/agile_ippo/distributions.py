"""The action distributions of IPPO's policies, one kind per action space.

A policy head outputs ``[B, width]`` values per row; an :class:`ActionHead` samples actions from
them (with the member's own generator), scores actions, picks the most likely ones and turns
actions into what the environment takes. Written on plain tensor operations rather than
``torch.distributions`` objects, whose construction costs more than a small policy's forward
pass at every step.
"""

from __future__ import annotations

import abc
import math
from typing import cast

import numpy as np
import torch
from gymnasium import spaces
from torch.nn import functional

from agile_rl import gumbel_argmax, normal_draws, uniform_draws

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _shape(space: spaces.Space) -> tuple[int, ...]:
    """The shape of a space :func:`action_head` accepts (all four have one; gymnasium types
    ``Space.shape`` as optional for spaces without)."""
    return cast("tuple[int, ...]", space.shape)


class ActionHead(abc.ABC):
    """How one action space reads a policy head's output. Box heads take the log standard
    deviation as ``log_std``; the others ignore it.

    :param space: the action space of one agent.
    """

    def __init__(self, space: spaces.Space) -> None:
        self.space = space
        self.width = int(np.prod(_shape(space)))

    @abc.abstractmethod
    def sample(
        self, out: torch.Tensor, log_std: torch.Tensor | None, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sampled actions and their log-probabilities."""

    @abc.abstractmethod
    def evaluate(
        self, out: torch.Tensor, log_std: torch.Tensor | None, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities of ``actions`` and the entropy of each row's distribution; rows
        may carry leading dimensions (``[k, S, width]`` for a group, with ``log_std``
        ``[k, 1, width]``)."""

    @abc.abstractmethod
    def greedy(self, out: torch.Tensor) -> torch.Tensor:
        """The most likely action of each row."""

    def to_env(self, actions: torch.Tensor) -> np.ndarray:
        """Actions as the environment takes them, one row each."""
        array = actions.cpu().numpy()
        return array.reshape(array.shape[0], *_shape(self.space))


class CategoricalHead(ActionHead):
    """Discrete actions: a softmax over ``n`` logits."""

    space: spaces.Discrete

    def __init__(self, space: spaces.Discrete) -> None:
        super().__init__(space)
        self.width = int(space.n)

    def sample(
        self, out: torch.Tensor, log_std: torch.Tensor | None, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        actions = gumbel_argmax(out, generator)
        log_probs = out.log_softmax(-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        return actions, log_probs

    def evaluate(
        self, out: torch.Tensor, log_std: torch.Tensor | None, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        log_p = out.log_softmax(-1)
        entropy = -(log_p.exp() * log_p).sum(-1)
        return log_p.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1), entropy

    def greedy(self, out: torch.Tensor) -> torch.Tensor:
        return out.argmax(dim=-1)

    def to_env(self, actions: torch.Tensor) -> np.ndarray:
        return actions.cpu().numpy() + int(self.space.start)


class MultiCategoricalHead(ActionHead):
    """MultiDiscrete actions: one independent softmax per entry, logits side by side."""

    space: spaces.MultiDiscrete

    def __init__(self, space: spaces.MultiDiscrete) -> None:
        super().__init__(space)
        self.sizes = [int(n) for n in space.nvec.reshape(-1)]
        self.width = sum(self.sizes)

    def sample(
        self, out: torch.Tensor, log_std: torch.Tensor | None, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        parts = out.split(self.sizes, dim=-1)
        actions = torch.stack([gumbel_argmax(logits, generator) for logits in parts], dim=-1)
        return actions, self.evaluate(out, log_std, actions)[0]

    def evaluate(
        self, out: torch.Tensor, log_std: torch.Tensor | None, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        log_probs = out.new_zeros(out.shape[:-1])
        entropy = out.new_zeros(out.shape[:-1])
        for i, logits in enumerate(out.split(self.sizes, dim=-1)):
            log_p = logits.log_softmax(-1)
            log_probs += log_p.gather(-1, actions[..., i : i + 1].long()).squeeze(-1)
            entropy -= (log_p.exp() * log_p).sum(-1)
        return log_probs, entropy

    def greedy(self, out: torch.Tensor) -> torch.Tensor:
        return torch.stack([part.argmax(-1) for part in out.split(self.sizes, dim=-1)], dim=-1)

    def to_env(self, actions: torch.Tensor) -> np.ndarray:
        return super().to_env(actions) + self.space.start


class BernoulliHead(ActionHead):
    """MultiBinary actions: one independent coin per entry, from its logit."""

    def sample(
        self, out: torch.Tensor, log_std: torch.Tensor | None, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        actions = (uniform_draws(out.shape, generator, out.device) < out.sigmoid()).to(out.dtype)
        return actions, self.evaluate(out, log_std, actions)[0]

    def evaluate(
        self, out: torch.Tensor, log_std: torch.Tensor | None, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        log_probs = -functional.binary_cross_entropy_with_logits(out, actions, reduction="none")
        entropy = functional.binary_cross_entropy_with_logits(out, out.sigmoid(), reduction="none")
        return log_probs.sum(-1), entropy.sum(-1)

    def greedy(self, out: torch.Tensor) -> torch.Tensor:
        return (out > 0).to(out.dtype)

    def to_env(self, actions: torch.Tensor) -> np.ndarray:
        return super().to_env(actions).astype(self.space.dtype)


class GaussianHead(ActionHead):
    """Box actions: a diagonal Gaussian around the head's output with a state-independent
    log standard deviation. The rollout keeps the raw samples; the environment gets them
    clipped into the bounds, or with ``squash`` passed through tanh and rescaled into them.
    """

    space: spaces.Box

    def __init__(self, space: spaces.Box, squash: bool = False) -> None:
        super().__init__(space)
        self.squash = squash

    def sample(
        self, out: torch.Tensor, log_std: torch.Tensor | None, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        assert log_std is not None
        noise = normal_draws(out.shape, generator, out.device)
        actions = out + log_std.exp() * noise
        log_probs = (-0.5 * noise.pow(2) - log_std - _LOG_SQRT_2PI).sum(-1)
        return actions, log_probs

    def evaluate(
        self, out: torch.Tensor, log_std: torch.Tensor | None, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        assert log_std is not None
        z = (actions - out) * (-log_std).exp()
        log_probs = (-0.5 * z.pow(2) - log_std - _LOG_SQRT_2PI).sum(-1)
        entropy = (0.5 + _LOG_SQRT_2PI + log_std).sum(-1).expand(out.shape[:-1])
        return log_probs, entropy

    def greedy(self, out: torch.Tensor) -> torch.Tensor:
        return out

    def to_env(self, actions: torch.Tensor) -> np.ndarray:
        array = super().to_env(actions)
        low, high = self.space.low, self.space.high
        if self.squash:
            return (low + (np.tanh(array) + 1.0) * 0.5 * (high - low)).astype(self.space.dtype)
        return np.clip(array, low, high).astype(self.space.dtype)


def action_head(space: spaces.Space, *, squash: bool = False) -> ActionHead:
    """The head for one agent's action space.

    :param squash: Box actions go through tanh into the bounds instead of being clipped.
    :raises NotImplementedError: the space is none of Discrete, MultiDiscrete, MultiBinary, Box.
    """
    if isinstance(space, spaces.Discrete):
        return CategoricalHead(space)
    if isinstance(space, spaces.MultiDiscrete):
        return MultiCategoricalHead(space)
    if isinstance(space, spaces.MultiBinary):
        return BernoulliHead(space)
    if isinstance(space, spaces.Box):
        return GaussianHead(space, squash)
    raise NotImplementedError(
        f"IPPO acts in Discrete, MultiDiscrete, MultiBinary or Box spaces, not {space}"
    )
