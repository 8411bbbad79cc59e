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
