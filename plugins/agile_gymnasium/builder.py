"""Building Gymnasium environments from a validated :class:`GymEnvSpec`."""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym

from agile_cli import EnvironmentBuilder
from agile_gymnasium.spec import GymEnvSpec
from agile_rl import gym_env_factory, gym_vector_env


class GymBuilder(EnvironmentBuilder[GymEnvSpec]):
    """Resolves and builds single-agent environments (with :func:`agile_rl.gym_vector_env`)."""

    def check(self, spec: GymEnvSpec) -> None:
        """Resolve the environment and build one copy (an Atari game with preprocessing, or
        any task with ``engine: envpool``: a vector of one, as ale-py and EnvPool make them)."""
        if spec.atari is not None or spec.engine == "envpool":
            gym_vector_env(spec.model_copy(update={"num_envs": 1})).close()
        else:
            self.make_factory(spec)

    def build(self, spec: GymEnvSpec, *, seed: int | None = None) -> gym.vector.VectorEnv:
        """A vector of ``spec.num_envs`` environments.

        A registered id with a native vector implementation (CartPole, for one) and no
        wrappers uses it: one array program stepping every copy, the fastest option. Otherwise
        copies run in subprocesses, or in this process when ``sync`` is set; with ``engine:
        envpool``, in EnvPool's threads.
        """
        return gym_vector_env(spec, seed=seed)

    @staticmethod
    def make_factory(spec: GymEnvSpec) -> Callable[[], gym.Env]:
        """A picklable-enough callable making one wrapped environment; resolves eagerly."""
        return gym_env_factory(spec)
