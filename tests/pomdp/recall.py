"""A memory task: only the first observation is informative (kept apart from tests/envs,
which the Arena tests upload as a source holding one environment class)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class RecallFirst(gym.Env):
    """The first observation shows a bit (+1 or -1), every later one is 0; at the last step
    the action that names the bit earns 1. Episodes last ``length`` steps, or a random number
    of steps in ``[2, length]`` with ``random_length``."""

    def __init__(self, length: int = 4, random_length: bool = False) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.length = length
        self.random_length = random_length

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        self.bit = int(self.np_random.integers(2))
        self.steps = (
            int(self.np_random.integers(2, self.length + 1)) if self.random_length else self.length
        )
        return np.array([2.0 * self.bit - 1.0], np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        done = self.t >= self.steps
        reward = float(done and int(action) == self.bit)
        return np.zeros(1, np.float32), reward, done, False, {}


def make_recall(length: int = 4, random_length: bool = False) -> gym.Env:
    return RecallFirst(length, random_length)
