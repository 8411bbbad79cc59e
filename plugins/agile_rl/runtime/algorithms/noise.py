"""Exploration noise of deterministic policies, drawn from an explicit random generator."""

from __future__ import annotations

import numpy as np


def ornstein_uhlenbeck_step(
    state: np.ndarray,
    rng: np.random.Generator,
    *,
    theta: float,
    mean: float,
    sigma: float,
    dt: float,
) -> np.ndarray:
    """The next state of Ornstein-Uhlenbeck processes, one per row of ``state``:
    ``x + theta * (mean - x) * dt + sigma * sqrt(dt) * N(0, 1)``.

    :param state: the processes' current values (zeros where an episode starts).
    :param rng: the member's generator, the only source of randomness.
    """
    drift = theta * (mean - state) * dt
    diffusion = sigma * np.sqrt(dt) * rng.standard_normal(state.shape)
    return state + drift + diffusion


def restart_ou_noise(state: np.ndarray, envs: np.ndarray | None) -> np.ndarray:
    """``state`` with the processes of starting episodes back at zero: those where ``envs`` is
    true, or all of them when ``envs`` is None or does not match the number of rows."""
    if envs is None or len(envs) != state.shape[0]:
        return np.zeros_like(state)
    state[np.asarray(envs, dtype=bool)] = 0.0
    return state
