"""Several vector environments stepped as one, for builders that cannot make one vector
environment of a given size (their section has no ``num_envs``): each member of a population
gets its own copy, and the runner sees one environment whose rows are the copies' rows in
order.

Seeding follows gymnasium's vector environments: ``reset(seed=s)`` seeds row ``j`` with
``s + j``, so copy ``i`` is reset from ``s`` plus the rows before it. Infos are not merged
(single-agent runners read none).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


class SideBySideEnv:
    """``envs`` (vector environments of the same spaces) as one vector environment.

    :param envs: the copies, in row order.
    """

    def __init__(self, envs: Sequence[Any]) -> None:
        self.envs = list(envs)
        self.sizes = [int(env.num_envs) for env in self.envs]
        self.num_envs = sum(self.sizes)
        first = self.envs[0]
        self.single_observation_space = first.single_observation_space
        self.single_action_space = first.single_action_space
        self.metadata = getattr(first, "metadata", {})

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        starts = np.cumsum([0, *self.sizes[:-1]])
        parts = [
            env.reset(seed=None if seed is None else seed + int(start), options=options)[0]
            for env, start in zip(self.envs, starts, strict=True)
        ]
        return _joined(parts), {}

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        bounds = np.cumsum([0, *self.sizes])
        results = [env.step(actions[bounds[i] : bounds[i + 1]]) for i, env in enumerate(self.envs)]
        obs, rewards, terminated, truncated = ([result[k] for result in results] for k in range(4))
        return (
            _joined(obs),
            np.concatenate(rewards),
            np.concatenate(terminated),
            np.concatenate(truncated),
            {},
        )

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _joined(parts: list[Any]) -> Any:
    """The copies' observations as one batch (each array of a dict of them)."""
    if isinstance(parts[0], dict):
        return {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}
    return np.concatenate(parts)
