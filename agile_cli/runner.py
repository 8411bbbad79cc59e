"""The runner contract: what a paradigm's runner does for the evolution loop.

A paradigm (:class:`~agile_cli.Paradigm`) builds one :class:`Runner` for a run; the loop asks it
to train the population for a generation (:meth:`Runner.train_population`) and to score it
(:meth:`Runner.evaluate_population`), passing a :data:`Progress` callback for the live display
and reading back one :class:`GenerationStats` per member.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from agile_cli.member import Member

A = TypeVar("A", bound=Member)

#: What a runner calls as it trains: ``progress(n)`` each time ``n`` more steps are done. The
#: loop's callback is also an :class:`EpisodeProgress`, which hears of finished episodes (a
#: runner tells it through :meth:`GenerationStats.add_episodes`); a runner that only calls
#: ``progress(n)`` still works, and the live display then shows no episode returns.
Progress = Callable[[int], None]


@runtime_checkable
class EpisodeProgress(Protocol):
    """A :data:`Progress` callback that also hears of episodes as they finish, so that the
    live display shows recent episode returns between evaluations.

    The evolution loop hands runners one; another caller of ``Runner.train_population`` may
    hand a plain ``progress(n)`` function instead. Runners need not check which:
    :meth:`GenerationStats.add_episodes` tells the callback only when it is one of these.
    """

    def __call__(self, steps: int, /) -> None:
        """``steps`` more steps are done."""

    def episodes(self, returns: Sequence[float], /) -> None:
        """Episodes just finished with these returns (any member's, in the order they
        finished)."""


@dataclass
class GenerationStats:
    """What one member did in one generation.

    :param exhausted: the member has nothing left to train on (e.g. a dataset read as many
        times as the manifest allows); once every member says so, the run ends after this
        generation, before its step budget is spent.
    """

    steps: int = 0
    episode_returns: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    exhausted: bool = False

    def add_episodes(self, returns: Sequence[float], progress: Progress | None = None) -> None:
        """Record episodes that just finished with ``returns``, and tell ``progress`` of them
        when it listens for episodes (an :class:`EpisodeProgress`)."""
        if not len(returns):
            return
        values = [float(value) for value in returns]
        self.episode_returns += values
        if isinstance(progress, EpisodeProgress):
            progress.episodes(values)


#: What an environment reset starts, as a word of its seed.
_PURPOSES = {"train": 0, "score": 1}


def reset_seed(members: Sequence[Member], purpose: str, round_: int = 0) -> int:
    """The seed of the ``env.reset`` that starts training (``purpose`` "train") or scoring
    ("score") ``members``: drawn from the run's seed and how far the members have trained,
    so that a run resumed from a checkpoint resets its environments exactly as the
    uninterrupted run did. Training seeds also depend on which members train; every member
    of a generation is scored on the same seeds (round ``round_`` of ``training.eval_loop``),
    so that their fitnesses compare like with like.
    """
    import numpy as np

    first = members[0]
    words = [first.context.seed, _PURPOSES[purpose], first.record.steps, round_]
    if purpose == "train":
        words += [member.index for member in members]
    return int(np.random.SeedSequence(words).generate_state(1)[0])


class Runner(abc.ABC, Generic[A]):
    """What a paradigm's ``runner`` returns: it trains a population for one generation and
    scores it, all its members at once. A runner whose members can share one computation
    groups them; a member that cannot is a group of one.

    :param env: what the members act in: the environment the paradigm built for as many
        members as the runner trains at once (see :meth:`~agile_cli.Paradigm.environment`).
    """

    #: Whether members that can share one computation do (``--per-member`` clears it, for
    #: debugging: every member is then a group of one).
    stack: bool = True

    #: Whether members' shared computations are compiled where the runner can: "auto", "on"
    #: or "off" (``--compile``).
    compile: str = "auto"

    def __init__(self, env: Any) -> None:
        self.env = env

    @abc.abstractmethod
    def train_population(
        self, members: list[A], steps: int, progress: Progress
    ) -> list[GenerationStats]:
        """Train every member for about ``steps`` steps, calling ``progress(n)`` as ``n`` more
        are done (all members' together) and adding each member's to its
        ``record.steps``; episodes that finish go to its stats with
        :meth:`GenerationStats.add_episodes` (``progress`` included, for the display). A
        runner whose members stay where it trained them may replace ``members``' items by
        stand-ins that follow the :class:`~agile_cli.Member` contract (the ``ray`` backend's
        do)."""

    @abc.abstractmethod
    def evaluate_population(
        self, members: list[A], rounds: int, max_steps: int | None
    ) -> list[float]:
        """Every member's fitness, over ``rounds`` rounds of at most ``max_steps`` steps (for
        an RL runner, the mean return of each sub-environment's first greedy episode)."""

    def episode_returns(
        self, member: A, episodes: int, max_steps: int | None, seed: int
    ) -> list[float] | None:
        """For ``agile evaluate``: the return of each of ``episodes`` episodes the member plays
        without exploring (at most ``max_steps`` steps, environments reset from ``seed``), or
        None (the default) where members are scored only by :meth:`evaluate_population`."""
        return None

    def state_dicts(self, members: list[A]) -> list[dict[str, Any]]:
        """The members' states for the run's checkpoint: each one's ``state_dict()`` (a runner
        whose members live elsewhere gathers them at once)."""
        return [member.state_dict() for member in members]

    def checkpoint_due(self, generation: int) -> bool:
        """Whether the loop writes the run's checkpoint after ``generation`` (it always does
        after the last one, and for ``--checkpoint-steps`` snapshots): every generation by
        default; a runner whose members' states are costly to gather may say less often."""
        return True

    def generation_metrics(self) -> dict[str, Any]:
        """What to add to the generation's line of ``metrics.jsonl`` about how the last
        :meth:`train_population` ran (e.g. a remote backend's transfer costs); none by
        default."""
        return {}

    def notes(self) -> list[str]:
        """Lines for the run's output about the last :meth:`train_population`, each said once
        (e.g. why some members trained one by one); none by default. The loop prints them
        after each generation's training."""
        return []

    def details(self, member: A) -> list[str]:
        """Lines ``agile evaluate`` prints under the score :meth:`evaluate_population` just
        gave ``member`` (override to show more, e.g. sample outputs); none by default."""
        return []


@dataclass
class SlotRound:
    """One slot's round, as an :class:`AsynchronousRunner` reports it: its positions in the
    population, the members trained there (stand-ins or whole), what each did and its fitness."""

    slot: int
    positions: list[int]
    members: list[Any]
    stats: list[GenerationStats]
    fitnesses: list[float]


class AsynchronousRunner(abc.ABC):
    """What a runner offers for asynchronous evolution (``agile train --async``): its slots,
    fixed groups of positions in the population, train independently of each other, and the
    loop evolves a slot's members as soon as its round ends, against the others' latest
    fitnesses, without waiting for the other slots (see
    :mod:`agile_cli.training.asynchronous`)."""

    #: The bound on staleness: a member whose slot has finished this many rounds fewer than
    #: the selecting slot takes no part in its selection.
    max_staleness: int = 2

    @abc.abstractmethod
    def slots(self) -> list[list[int]]:
        """The positions of the population each slot trains, fixed for the run."""

    @abc.abstractmethod
    def start(self, slot: int, members: list[Any], steps: int) -> None:
        """Start training ``slot``'s ``members`` (in its positions' order) for one round of
        about ``steps`` steps each, and scoring them; returns at once."""

    @abc.abstractmethod
    def finished(self, progress: Progress) -> SlotRound:
        """Wait until a started slot's round ends, calling ``progress(n)`` as the slots train,
        and return it."""

    @abc.abstractmethod
    def running(self) -> list[int]:
        """The slots started and not yet returned by :meth:`finished`."""

    @abc.abstractmethod
    def settle(self) -> None:
        """Wait for every running slot's round to end, and forget them (the run stops, or
        goes back to its checkpoint): their members stay as they were before the round."""

    def async_metrics(self) -> dict[str, Any]:
        """Plain data for the ``async`` entry of the generation's line of ``metrics.jsonl``
        (e.g. each slot's time so far); none by default."""
        return {}
