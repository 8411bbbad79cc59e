"""Box actions in [-1, 1] units: what tanh-squashed deterministic actors output and critics
read, mapped to and from the environment's bounds."""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces


class BoxActionScaler:
    """Maps actions between [-1, 1] units and a Box's finite bounds, linearly.

    :param space: the action space; its bounds must be finite.
    :param device: where :meth:`to_unit` receives stored actions.
    :raises NotImplementedError: for infinite bounds.
    """

    def __init__(self, space: spaces.Box, device: torch.device) -> None:
        if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            raise NotImplementedError(
                "Box actions are rescaled into their bounds, which must be finite"
            )
        self.space = space
        self.low = space.low.reshape(-1).astype(np.float32)
        self.high = space.high.reshape(-1).astype(np.float32)
        span = np.where(self.high > self.low, self.high - self.low, 1.0).astype(np.float32)
        self._low = torch.as_tensor(self.low, device=device)
        self._span = torch.as_tensor(span, device=device)

    def to_env(self, unit: np.ndarray) -> np.ndarray:
        """Actions in [-1, 1] as actions of the Box, ``[N, *shape]``, clipped to its bounds."""
        scaled = self.low + (unit + 1.0) * 0.5 * (self.high - self.low)
        scaled = np.clip(scaled, self.low, self.high)
        return scaled.reshape(-1, *self.space.shape).astype(self.space.dtype)

    def to_unit(self, actions: torch.Tensor) -> torch.Tensor:
        """Actions of the Box back in [-1, 1], ``[N, action_dim]``."""
        flat = actions.reshape(actions.shape[0], -1).to(torch.float32)
        return (flat - self._low) / self._span * 2.0 - 1.0


def box_action_space(space: spaces.Space, name: str) -> spaces.Box:
    """``space``, if it is a Box with finite bounds; otherwise a refusal naming algorithm ``name``.

    :raises NotImplementedError: for any other space, saying what to use instead.
    """
    if not isinstance(space, spaces.Box):
        raise NotImplementedError(
            f"{name} needs a Box (continuous) action space, but the environment's is "
            f"{type(space).__name__}; use DQN or PPO for discrete actions"
        )
    if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
        raise NotImplementedError(
            f"{name} rescales actions into the Box bounds, which must be finite; wrap the "
            "environment in gymnasium.wrappers.RescaleAction"
        )
    return space
