"""The interface environment builders implement."""

from __future__ import annotations

import abc
from typing import Any

from agile_cli.models.algorithm import EnvironmentSpec


class EnvironmentBuilder(abc.ABC):
    """Turns a validated environment spec into a vector environment.

    The object :meth:`build` returns follows gymnasium's ``VectorEnv`` API: ``num_envs``,
    ``single_observation_space``, ``single_action_space``, ``reset(seed=)``, ``step(actions)``
    with next-step autoreset, and ``close()``.
    """

    @abc.abstractmethod
    def build(self, spec: EnvironmentSpec, *, seed: int | None = None) -> Any:
        """A vector of environments as ``spec`` describes, reset with ``seed``."""

    def check(self, spec: EnvironmentSpec) -> None:
        """Resolve the environment without training (``agile validate --check-env``).

        Raise :class:`~agile_cli.errors.EnvironmentNotFoundError` with an install hint when
        something is missing. The default builds one vector and closes it.
        """
        self.build(spec, seed=0).close()


class MultiAgentVectorEnv(abc.ABC):
    """What a builder for the multi-agent families returns: ``num_envs`` copies of a
    PettingZoo-style parallel environment stepped together, every array batched over copies.

    - ``agents``: every agent that can appear, in a fixed order; ``single_observation_spaces``
      and ``single_action_spaces`` map each to its space in one copy.
    - ``reset(seed=)`` returns ``(observations, infos)``; ``step(actions)`` returns
      ``(observations, rewards, terminated, truncated, infos)``. Each of the first four is a
      dict with every agent: observations ``(num_envs, *shape)``, rewards ``(num_envs,)`` floats,
      terminated / truncated ``(num_envs,)`` bools. ``actions`` maps every agent to an array of
      ``num_envs`` actions.
    - A copy's episode ends when all its agents are done. The next ``step`` then resets that
      copy instead (next-step autoreset): its actions are ignored, and it returns the first
      observations with zero rewards and nothing done.
    - An agent absent from a copy (it left early, or has not appeared) reports terminated,
      zero reward and its last observation (zeros before its first).
    """

    num_envs: int
    agents: list[str]
    single_observation_spaces: dict[str, Any]
    single_action_spaces: dict[str, Any]

    @abc.abstractmethod
    def reset(self, *, seed: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """Reset every copy (copy ``i`` seeded with ``seed + i`` when a seed is given)."""

    @abc.abstractmethod
    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        """One step of every copy."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the copies (and their worker processes)."""
