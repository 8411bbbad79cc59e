"""Selection strategies: which members survive into the next generation."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

import numpy as np

from agile_cli.member import Member
from agile_cli.models.selection import TournamentSelectionSpec


@dataclass
class Selection:
    """The outcome of one selection.

    :param elite: an untouched copy of the best member (what gets saved as the elite).
    :param population: the next generation.
    :param to_mutate: positions in ``population`` to mutate; ``None`` means every member. The
        strategy labels the others' ``record.mutation`` itself (e.g. ``"none"``).
    """

    elite: Member
    population: list[Member]
    to_mutate: list[int] | None = None


def last_fitness(member: Member) -> float:
    """The member's most recent fitness (minus infinity before its first evaluation)."""
    return member.record.fitness[-1] if member.record.fitness else float("-inf")


class SelectionStrategy(abc.ABC):
    """A way to build the next generation from an evaluated population.

    Plugins subclass it for their own strategies (``agile_register_selection_strategies``).
    What a strategy remembers between generations goes through checkpoints by
    :meth:`state_dict` and :meth:`load_state_dict`; a subclass that remembers more extends both.
    """

    def __init__(self) -> None:
        self._next_index = 0

    @abc.abstractmethod
    def select(self, population: list[Member], rng: np.random.Generator) -> Selection:
        """Build the next generation; draw randomness only from ``rng``."""

    def new_index(self, population: list[Member]) -> int:
        """A member index never used before in this run."""
        self._next_index = max(self._next_index, *(m.index + 1 for m in population))
        index = self._next_index
        self._next_index += 1
        return index

    def state_dict(self) -> dict[str, Any]:
        """What this strategy remembers, as plain data (saved with every checkpoint)."""
        return {"next_index": self._next_index}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`'s data."""
        self._next_index = int(state["next_index"])

    def metrics(self, population: list[Member]) -> dict[str, Any]:
        """Plain data about ``population`` and the last selection, recorded under
        ``selection`` in the generation's line of ``metrics.jsonl``; empty: nothing."""
        return {}


def tournament_selection(spec: TournamentSelectionSpec, pop_size: int) -> TournamentSelection:
    """The core's ``tournament`` strategy, as the selection registry builds it."""
    return TournamentSelection(spec.tournament_size, spec.elitism)


class TournamentSelection(SelectionStrategy):
    """Tournament selection with optional elitism.

    Each free slot is filled by a copy of the fittest of ``tournament_size`` members drawn with
    replacement. With elitism, slot 0 holds a copy of the best member (it may still be mutated;
    the separately returned elite is not).
    """

    def __init__(self, tournament_size: int, elitism: bool) -> None:
        super().__init__()
        self.tournament_size = tournament_size
        self.elitism = elitism

    def select(self, population: list[Member], rng: np.random.Generator) -> Selection:
        fitness = np.array([last_fitness(member) for member in population])
        # Distinct ranks; among equal fitness the later member ranks higher.
        ranks = np.argsort(np.argsort(fitness, kind="stable"), kind="stable")
        best = population[int(np.argmax(ranks))]
        elite = best.clone(best.index)
        chosen: list[Member] = [elite.clone(elite.index)] if self.elitism else []
        while len(chosen) < len(population):
            contestants = rng.integers(0, len(population), size=self.tournament_size)
            winner = population[int(contestants[np.argmax(ranks[contestants])])]
            child = winner.clone(self.new_index(population))
            child.record.parent = winner.index
            chosen.append(child)
        return Selection(elite=elite, population=chosen)
