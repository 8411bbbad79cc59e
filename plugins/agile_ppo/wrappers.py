"""Environment wrappers for recurrent PPO's benchmarks. They need gymnasium only."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class MaskVelocity(gym.ObservationWrapper):
    """CartPole without its velocities: only the cart position and the pole angle are seen.

    The classic partially observable CartPole (as in SB3-contrib's recurrent PPO benchmarks):
    a policy must infer the velocities from consecutive observations, so a memoryless one
    cannot balance the pole for long. Use it from a manifest as
    ``wrappers: [agile_ppo.wrappers.MaskVelocity]``.
    """

    #: Indices of the velocity entries of CartPole's observation that are zeroed out.
    VELOCITIES = (1, 3)

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or space.shape != (4,):
            raise ValueError(f"MaskVelocity expects CartPole's 4-vector observations, not {space}")
        self._mask = np.ones(4, dtype=space.dtype)
        self._mask[list(self.VELOCITIES)] = 0
        low = np.where(self._mask, space.low, 0).astype(space.dtype)
        high = np.where(self._mask, space.high, 0).astype(space.dtype)
        self.observation_space = gym.spaces.Box(low, high, dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation * self._mask
