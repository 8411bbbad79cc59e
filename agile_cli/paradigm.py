"""The paradigm contract: how the members of a family of algorithms train.

A plugin registers a paradigm with ``agile_register_paradigms`` (its name, its ``training``
section's spec, the fields its algorithms must have...) and names a :class:`Paradigm`
subclass as its ``implementation``, imported only to train. The core asks it for what a run
needs, one method per thing, each taking the manifest first: the environment the members
step (:meth:`Paradigm.environment`), what the population shares (:meth:`Paradigm.buffer`),
the runner that trains members for a generation (:meth:`Paradigm.runner`) and, for a
paradigm whose members are built together, the population itself
(:meth:`Paradigm.population`).
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from agile_cli.manifest import TrainingManifest
    from agile_cli.runtime.agent import AgentContext
    from agile_cli.runtime.member import Member
    from agile_cli.training.runners import Runner


class Paradigm(abc.ABC):
    """What a paradigm builds for a run (see the module). Only :meth:`runner` is required."""

    def environment(self, manifest: TrainingManifest, env: Any) -> Any:
        """The environment the members step: ``env`` as the builder made it, or wrapped
        (e.g. a team of agents as one). By default ``env`` itself."""
        return env

    def buffer(self, manifest: TrainingManifest, env: Any, device: torch.device) -> Any:
        """The store of experience the whole population shares (a replay buffer), or None
        (the default). Register the paradigm with ``replay_buffer=True`` when it keeps one:
        the manifest's ``replay_buffer`` section applies then."""
        return None

    @abc.abstractmethod
    def runner(self, manifest: TrainingManifest, env: Any, buffer: Any) -> Runner[Any]:
        """The :class:`~agile_cli.Runner` whose ``train(member, steps, progress)`` trains one
        member for one generation in ``env`` (and, optionally, ``evaluate(member, rounds,
        max_steps)`` scores it); ``buffer`` is what :meth:`buffer` built, or None where
        nothing is shared (scoring)."""

    def population(
        self,
        manifest: TrainingManifest,
        cls: type[Member],
        env: Any,
        context: AgentContext,
        size: int,
    ) -> list[Member]:
        """``size`` members of the algorithm class ``cls`` with indices 0, 1, ..., built
        together (e.g. adapters sharing one model), for a paradigm registered with
        ``builds_population=True``, which then also sizes its own memory. Others never
        receive this call: the core builds each member alone from the network section."""
        raise NotImplementedError(f"{type(self).__name__} does not build its population")
