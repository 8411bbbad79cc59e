"""The paradigm contract: how the members of a family of algorithms train.

A plugin registers a paradigm with ``agile_register_paradigms`` (its name, its ``training``
section's spec, the fields its algorithms must have...) and names a :class:`Paradigm`
subclass as its ``implementation``, imported only to train. The core asks it for what a run
needs, one method per thing, each taking the manifest first: the environment the members
step (:meth:`Paradigm.environment`), the members (:meth:`Paradigm.population`), what they
share (:meth:`Paradigm.buffer`), the runner that trains them for a generation
(:meth:`Paradigm.runner`) and the memory all that takes (:meth:`Paradigm.memory_needs`).
There is one way to train: the runner trains the whole population at once, in the
environment built for it.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from agile_cli.manifest import TrainingManifest
    from agile_cli.member import AgentContext, Member
    from agile_cli.memory import Need
    from agile_cli.models.base import Spec
    from agile_cli.runner import Runner


class Build(Protocol):
    """How a paradigm has its environments built: ``build()`` is what the manifest's
    environment builder makes of :attr:`spec`, the section in question, and
    ``build(num_envs=32)`` the same with fields changed."""

    spec: Spec

    def __call__(self, **changes: Any) -> Any: ...


class Paradigm(abc.ABC):
    """What a paradigm builds for a run (see the module). :meth:`population` and
    :meth:`runner` are required; the rest have defaults. agile makes one instance of a
    paradigm class and asks it for everything every run needs: keep no state on it."""

    def environment(self, manifest: TrainingManifest, build: Build, members: int) -> Any:
        """The environment ``members`` members train or are scored in at once, made with
        ``build``. By default ``build()``: the members take turns in it. A paradigm whose
        members step side by side builds room for them all (agile_rl's give each member the
        section's ``num_envs`` sub-environments), and may wrap what it built (e.g. a team of
        agents as one)."""
        return build()

    @abc.abstractmethod
    def population(
        self,
        manifest: TrainingManifest,
        cls: type[Member],
        env: Any,
        context: AgentContext,
        size: int,
    ) -> list[Member]:
        """``size`` fresh members of the algorithm class ``cls`` with indices 0, 1, ...,
        ``size - 1``, for ``env``'s spaces: every run starts from these, and resuming,
        ``agile evaluate`` and the remote backends load saved states into them."""

    def buffer(self, manifest: TrainingManifest, env: Any, device: torch.device) -> Any:
        """The store of experience the whole population shares (a replay buffer), or None
        (the default). Register the paradigm with a ``replay_buffer`` spec when it keeps one:
        the manifest's ``replay_buffer`` section applies then."""
        return None

    @abc.abstractmethod
    def runner(self, manifest: TrainingManifest, env: Any, buffer: Any) -> Runner[Any]:
        """The :class:`~agile_cli.Runner` that trains members for one generation in ``env``
        and scores them; ``buffer`` is what :meth:`buffer` built, or None where nothing is
        shared (scoring)."""

    def torch_threads(self, manifest: TrainingManifest) -> int | None:
        """How many threads torch computes with for this run when ``--threads`` does not
        say; None (the default): torch's own choice."""
        return None

    def memory_needs(self, manifest: TrainingManifest, env: Any, members: int) -> list[Need]:
        """What the run will hold in memory, as far as it can be told before it is built:
        networks, buffers, rollouts (``members`` of them train at once). The core adds the
        dataset the environment declared and refuses a run that cannot fit. None by
        default (a paradigm that sizes its own memory checks it while building)."""
        return []
