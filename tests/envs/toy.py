"""Small environments that exercise image and Dict observations and Box actions."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class DictReach(gym.Env):
    """Dict observations (a vector and a tiny image); reward for matching a target bit."""

    def __init__(self, length: int = 8) -> None:
        self.observation_space = gym.spaces.Dict(
            {
                "vector": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                "image": gym.spaces.Box(0, 255, (8, 8, 1), np.uint8),
            }
        )
        self.action_space = gym.spaces.Discrete(2)
        self.length = length

    def _obs(self) -> dict[str, np.ndarray]:
        image = np.zeros((8, 8, 1), np.uint8)
        image[:, : 4 * (self.target + 1)] = 255
        return {"vector": np.array([self.target, 0.0], np.float32), "image": image}

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        self.target = int(self.np_random.integers(2))
        return self._obs(), {}

    def step(self, action: int) -> tuple[Any, float, bool, bool, dict]:
        reward = float(action == self.target)
        self.t += 1
        self.target = int(self.np_random.integers(2))
        return self._obs(), reward, False, self.t >= self.length, {}


def make_dict_reach(length: int = 8) -> gym.Env:
    return DictReach(length)


class ScaleReward(gym.RewardWrapper):
    """Multiplies rewards (to check that wrappers and their kwargs are applied)."""

    def __init__(self, env: gym.Env, factor: float = 1.0) -> None:
        super().__init__(env)
        self.factor = factor

    def reward(self, reward: float) -> float:
        return reward * self.factor


def needs_missing_package() -> gym.Env:
    raise gym.error.DependencyNotInstalled(
        "Box2D is not installed, you can install it by run `pip install swig` followed by "
        '`pip install "gymnasium[box2d]"`'
    )


class FadingRender(gym.Wrapper):
    """Draws its first ``frames`` frames, then nothing (a renderer that gives up)."""

    def __init__(self, env: gym.Env, frames: int) -> None:
        super().__init__(env)
        self.left = frames

    def render(self) -> Any:
        self.left -= 1
        return self.env.render() if self.left >= 0 else None


def make_fading(render_mode: str | None = None, frames: int = 3) -> gym.Env:
    """CartPole whose render() stops drawing after ``frames`` frames."""
    return FadingRender(gym.make("CartPole-v1", render_mode=render_mode), frames)
