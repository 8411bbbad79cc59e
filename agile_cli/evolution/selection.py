"""Selection strategies: which members survive into the next generation."""

from __future__ import annotations

import abc
from dataclasses import dataclass

import numpy as np

from agile_cli.runtime.agent import Algorithm


@dataclass
class Selection:
    """The outcome of one selection.

    :param elite: an untouched copy of the best member (what gets saved as the elite).
    :param population: the next generation.
    :param to_mutate: positions in ``population`` to mutate; ``None`` means every member.
    """

    elite: Algorithm
    population: list[Algorithm]
    to_mutate: list[int] | None = None


def last_fitness(member: Algorithm) -> float:
    """The member's most recent fitness (minus infinity before its first evaluation)."""
    return member.record.fitness[-1] if member.record.fitness else float("-inf")


class SelectionStrategy(abc.ABC):
    """A way to build the next generation from an evaluated population."""

    def __init__(self) -> None:
        self._next_index = 0

    @abc.abstractmethod
    def select(self, population: list[Algorithm], rng: np.random.Generator) -> Selection:
        """Build the next generation; draw randomness only from ``rng``."""

    def new_index(self, population: list[Algorithm]) -> int:
        """A member index never used before in this run."""
        self._next_index = max(self._next_index, *(m.index + 1 for m in population))
        index = self._next_index
        self._next_index += 1
        return index


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

    def select(self, population: list[Algorithm], rng: np.random.Generator) -> Selection:
        fitness = np.array([last_fitness(member) for member in population])
        # Distinct ranks; among equal fitness the later member ranks higher.
        ranks = np.argsort(np.argsort(fitness, kind="stable"), kind="stable")
        best = population[int(np.argmax(ranks))]
        elite = best.clone(best.index)
        chosen: list[Algorithm] = [elite.clone(elite.index)] if self.elitism else []
        while len(chosen) < len(population):
            contestants = rng.integers(0, len(population), size=self.tournament_size)
            winner = population[int(contestants[np.argmax(ranks[contestants])])]
            child = winner.clone(self.new_index(population))
            child.record.parent = winner.index
            chosen.append(child)
        return Selection(elite=elite, population=chosen)
