"""A small image environment for the stacked-CNN tests (its own folder: the Arena tests upload
``tests/envs`` and expect one environment class there)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class BrightSide(gym.Env):
    """Small images, one half of them lit (by a noisy amount); reward for naming the lit half.
    ``channels_first``: float ``(2, 10, 12)`` images in [0, 1], else uint8 ``(10, 12, 3)``."""

    def __init__(self, channels_first: bool = False, length: int = 16) -> None:
        self.channels_first, self.length = channels_first, length
        shape = (2, 10, 12) if channels_first else (10, 12, 3)
        high, dtype = (1.0, np.float32) if channels_first else (255, np.uint8)
        self.observation_space = gym.spaces.Box(0, high, shape, dtype)
        self.action_space = gym.spaces.Discrete(2)
        self.side, self.steps = 0, 0

    def _obs(self) -> np.ndarray:
        image = self.np_random.uniform(0.0, 0.2, (10, 12, 3))
        image[:, 6 * self.side : 6 * self.side + 6] += self.np_random.uniform(0.5, 0.8)
        if self.channels_first:
            return image.transpose(2, 0, 1)[:2].astype(np.float32)
        return (image * 255).astype(np.uint8)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.side, self.steps = int(self.np_random.integers(2)), 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[Any, float, bool, bool, dict]:
        reward = float(action == self.side)
        self.side, self.steps = int(self.np_random.integers(2)), self.steps + 1
        return self._obs(), reward, False, self.steps >= self.length, {}


def make_bright_side(channels_first: bool = False, length: int = 16) -> gym.Env:
    return BrightSide(channels_first, length)
