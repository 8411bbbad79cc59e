"""MF-PBT's selection: per subpopulation, brackets by fitness, clones of winners over losers,
and asymmetric migration into the open slots.

Planning works on positions and fitness values only (:func:`plan_subpopulation`), so that it
can be checked on hand-set numbers; :class:`MultiFrequencySelection` carries a plan out on the
members.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from agile_cli import Member, Selection, SelectionStrategy, TrainingError
from agile_cli.helpers import last_fitness
from agile_mfpbt.spec import Layout, MultiFrequencySpec


@dataclass(frozen=True)
class Clone:
    """A loser's slot taken by a clone of a winner of its subpopulation (then mutated)."""

    position: int
    source: int


@dataclass(frozen=True)
class Migration:
    """An open slot taken by a clone of a better member of another subpopulation.

    :param weights_only: the migrant comes from a subpopulation that evolves more often: it
        brings its networks, and takes the hyperparameters of the destination's best member
        (a fast subpopulation's hyperparameters are tuned for the short run).
    """

    position: int
    source: int
    weights_only: bool


class Plan(NamedTuple):
    """What evolving one subpopulation does: its clones and migrations, and its best member
    before them (whose hyperparameters a weights-only migrant takes)."""

    clones: list[Clone]
    migrations: list[Migration]
    leader: int


def ranked(positions: Sequence[int], fitness: Sequence[float]) -> list[int]:
    """``positions`` best first; of equal fitness, the earlier position first."""
    return sorted(positions, key=lambda position: -fitness[position])


def brackets(layout: Layout, subpopulation: int, fitness: Sequence[float]) -> list[list[int]]:
    """Winners, survivors, open for migration and losers of one subpopulation (positions)."""
    order = ranked(layout.positions(subpopulation), fitness)
    cut = np.cumsum(layout.brackets)
    return [order[start:end] for start, end in zip([0, *cut[:-1]], cut, strict=True)]


def plan_subpopulation(
    layout: Layout, subpopulation: int, fitness: Sequence[float], rng: np.random.Generator
) -> Plan:
    """What evolving one subpopulation does, from the fitness of the whole population.

    Each loser gets a clone of a winner drawn uniformly. Then the open slots, best first, meet
    the members of the other subpopulations, best first: a slot whose member is not better
    than the candidate's is skipped (the candidate waits for the next slot); otherwise the
    candidate migrates into it and the next candidate comes up.
    """
    winners, _survivors, open_slots, losers = brackets(layout, subpopulation, fitness)
    clones = [Clone(loser, winners[int(rng.integers(len(winners)))]) for loser in losers]
    outside = [p for p in range(len(fitness)) if layout.subpopulation_of(p) != subpopulation]
    candidates = ranked(outside, fitness)
    migrations: list[Migration] = []
    for slot in open_slots:
        if len(migrations) == len(candidates):
            break
        source = candidates[len(migrations)]
        if fitness[slot] >= fitness[source]:
            continue
        faster = layout.ratios[layout.subpopulation_of(source)] < layout.ratios[subpopulation]
        migrations.append(Migration(slot, source, weights_only=faster))
    return Plan(clones, migrations, leader=winners[0])


class MultiFrequencySelection(SelectionStrategy):
    """Evolves each subpopulation every ``ratios[k]`` selections, counting from the start.

    The best member overall is the elite; members that are not replaced are kept as they are
    (their ``record.mutation`` says ``none``), and only the clones of winners are mutated.
    """

    def __init__(self, layout: Layout) -> None:
        super().__init__()
        self.layout = layout
        self.counters = [0] * layout.subpopulations
        self.last: dict[str, list[Any]] = {"evolved": [], "clones": [], "migrations": []}

    def _due(self) -> list[int]:
        """Advance every counter; the subpopulations whose turn it is."""
        due = []
        for subpopulation, ratio in enumerate(self.layout.ratios):
            self.counters[subpopulation] += 1
            if self.counters[subpopulation] >= ratio:
                self.counters[subpopulation] = 0
                due.append(subpopulation)
        return due

    def select(self, population: list[Member], rng: np.random.Generator) -> Selection:
        expected = self.layout.subpopulations * self.layout.size
        if len(population) != expected:
            raise TrainingError(f"MF-PBT expects {expected} members, got {len(population)}")
        fitness = [last_fitness(member) for member in population]
        best = population[ranked(range(len(population)), fitness)[0]]
        following = list(population)
        self.last = {"evolved": self._due(), "clones": [], "migrations": []}
        to_mutate: list[int] = []
        for subpopulation in self.last["evolved"]:
            plan = plan_subpopulation(self.layout, subpopulation, fitness, rng)
            for clone in plan.clones:
                following[clone.position] = self._copy(population, clone.source, "clones")
                to_mutate.append(clone.position)
            leader = population[plan.leader]
            for migration in plan.migrations:
                following[migration.position] = self._migrant(population, migration, leader)
        for position, member in enumerate(following):
            if member is population[position]:
                member.record.mutation = "none"
        return Selection(best.clone(best.index), following, sorted(to_mutate))

    def _copy(self, population: list[Member], source: int, kind: str) -> Member:
        parent = population[source]
        child = parent.clone(self.new_index(population))
        child.record.parent = parent.index
        self.last[kind].append([child.index, parent.index])
        return child

    def _migrant(self, population: list[Member], migration: Migration, leader: Member) -> Member:
        child = self._copy(population, migration.source, "migrations")
        if migration.weights_only:
            own = child.hyperparameters()
            for name, value in leader.hyperparameters().items():
                if own.get(name) != value:
                    child.set_hyperparameter(name, value)
        kind = "weights" if migration.weights_only else "full"
        self.last["migrations"][-1].append(kind)
        child.record.mutation = f"migrant of {child.record.parent} ({kind})"
        return child

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "counters": list(self.counters), "last": self.last}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.last = state["last"]
        counters = [int(count) for count in state["counters"]]
        if len(counters) != self.layout.subpopulations:
            raise TrainingError(
                f"the checkpoint has {len(counters)} MF-PBT subpopulations, the manifest "
                f"{self.layout.subpopulations}",
                "resume with the manifest the run started with",
            )
        self.counters = counters

    def metrics(self, population: list[Member]) -> dict[str, Any]:
        """The subpopulations (member indices by position), each one's counter, and what the
        selection that made this population did (``[new index, parent index]`` pairs)."""
        layout = self.layout
        return {
            "subpopulations": [
                [population[p].index for p in layout.positions(k)]
                for k in range(layout.subpopulations)
            ],
            "counters": list(self.counters),
            **self.last,
        }


def multi_frequency_selection(spec: MultiFrequencySpec, pop_size: int) -> MultiFrequencySelection:
    """The strategy the plugin registers: ``factory(spec, pop_size)``."""
    return MultiFrequencySelection(spec.layout(pop_size))
