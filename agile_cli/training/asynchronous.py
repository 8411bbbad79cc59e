"""Asynchronous evolution (``agile train --async``): slots that do not wait for each other.

The runner (an :class:`~agile_cli.AsynchronousRunner`) trains fixed *slots* of the population
independently. When a slot's round ends, its members are scored, and at once selected and
mutated against the latest fitnesses of every member (those of slots still training are a
round or more old), then the slot trains its next round: a slow slot holds nobody up.

Selection is the manifest's tournament, one position at a time: each of the slot's positions
is filled by a copy of the fittest of ``tournament_size`` members drawn from the population's
latest trained members; with elitism, the best of them keeps its index where it lives. The
copies are then mutated as the manifest says. Staleness is bounded: a member whose slot has
finished more than ``max_staleness`` rounds fewer than the selecting slot takes no part, so
that a selection never compares members whose training differs by more than that; each
generation's line of ``metrics.jsonl`` records the staleness of the fitnesses compared.

A *generation* of an asynchronous run is as many ended rounds as there are slots (each slot's
once when they train at one pace; a fast slot's more often): after it, the loop reports,
saves the elite and checkpoints, as a synchronous run does after each generation. A checkpoint
holds every member as it starts its current round (with how many rounds each position has
trained), so that ``--resume`` continues each slot where it was.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from agile_cli.errors import UsageError
from agile_cli.evolution.mutation import Mutator
from agile_cli.evolution.selection import SelectionStrategy, TournamentSelection, last_fitness
from agile_cli.manifest import TrainingManifest
from agile_cli.member import Member
from agile_cli.runner import AsynchronousRunner, Runner, SlotRound
from agile_cli.signals import interrupt_held
from agile_cli.training.progress import Reporter, RunnerProgress
from agile_cli.training.run_folder import RunFolder


class Loop(Protocol):
    """What this module uses of the evolutionary loop
    (:class:`~agile_cli.training.loop.EvolutionLoop`)."""

    manifest: TrainingManifest
    state: Any  # LoopState
    population: list[Member]
    reporter: Reporter
    runner: Runner[Any]
    selection: SelectionStrategy | None
    mutator: Mutator | None
    selection_rng: np.random.Generator
    folder: RunFolder
    elite: Member | None
    went_back: int

    def report(self, speed: float, members: list[Member] | None = None) -> None: ...
    def target_met(self, members: list[Member] | None = None) -> bool: ...
    def lineage_entry(self, member: Member) -> dict[str, Any]: ...
    def save_member(self, member: Member, path: Path) -> None: ...
    def snapshot_due(self) -> bool: ...
    def save_checkpoint(self) -> None: ...


class AsynchronousEvolution:
    """The loop's generations when its runner trains slots asynchronously."""

    def __init__(self, loop: Loop, runner: AsynchronousRunner) -> None:
        manifest = loop.manifest
        if manifest.recipe is not None:
            raise UsageError(
                "--async: a recipe replays a synchronous run's generations",
                "drop --async to replay the recipe",
            )
        if loop.selection is not None and not isinstance(loop.selection, TournamentSelection):
            spec = manifest.tournament_selection
            assert spec is not None, "a selection is built from its section"
            raise UsageError(
                f"--async: selection strategy '{spec.strategy}' "
                "selects whole generations; asynchronous evolution uses the tournament",
                "use tournament_selection.strategy: tournament, or drop --async",
            )
        self.loop = loop
        self.runner = runner
        self.slots = runner.slots()
        size = manifest.training.pop_size
        #: Per position, the member as it ended its last round (None before its first).
        self.latest: list[Member | None] = [None] * size
        self.staleness: list[int] = []  # of each fitness compared since the last generation
        self.left_out = 0  # members too stale to compare since the last generation

    # -- budget ----------------------------------------------------------------------------------

    @property
    def rounds(self) -> list[int]:
        """Rounds each position has trained (kept in the loop's state, so in checkpoints)."""
        state = self.loop.state
        if len(state.rounds) != len(self.latest):  # a fresh run, or a synchronous run's
            state.rounds = [state.generation] * len(self.latest)
        rounds: list[int] = state.rounds
        return rounds

    def _round_steps(self, slot: int) -> int:
        """The steps of ``slot``'s next round: 0 once its budget is spent."""
        manifest = self.loop.manifest
        trained = min(self._steps(self.rounds[p]) for p in self.slots[slot])
        return max(0, min(manifest.generation_steps, manifest.training.max_steps - trained))

    def _steps(self, rounds: int) -> int:
        """Steps per member after ``rounds`` rounds."""
        manifest = self.loop.manifest
        return min(rounds * manifest.generation_steps, manifest.training.max_steps)

    def _start(self, slot: int) -> None:
        steps = self._round_steps(slot)
        if steps > 0:
            members = [self.loop.population[p] for p in self.slots[slot]]
            self.runner.start(slot, members, steps)

    # -- a generation ----------------------------------------------------------------------------

    def generation(self) -> bool:
        """As many slots' rounds as there are slots (fewer at the end of the budget); then
        the report, the elite and the checkpoint. Returns True when the run stops early."""
        loop = self.loop
        started = time.perf_counter()
        running = set(self.runner.running())
        for slot in range(len(self.slots)):
            if slot not in running:
                self._start(slot)
        loop.reporter.phase(f"generation {loop.state.generation + 1}: training (asynchronous)")
        progress = RunnerProgress(loop.reporter)
        trained = ended = 0
        while self.runner.running() and ended < len(self.slots):
            done = self.runner.finished(progress)
            trained += self._take(done)
            ended += 1
            if self._round_steps(done.slot) > 0:
                self._select(done.positions)
                self._start(done.slot)
        stop = loop.target_met([m for m in self.latest if m is not None])
        while stop and self.runner.running():  # the slots still training end their round
            trained += self._take(self.runner.finished(progress))
        with interrupt_held():
            return self._end_generation(trained, time.perf_counter() - started, stop)

    def _end_generation(self, trained: int, elapsed: float, stop: bool) -> bool:
        """The loop's counters, report, elite and checkpoint after a generation."""
        loop = self.loop
        members = [m for m in self.latest if m is not None]
        loop.state = dataclasses.replace(
            loop.state,
            generation=loop.state.generation + 1,
            global_steps=loop.state.global_steps + trained,
            steps_per_member=self._steps(min(self.rounds)),
            wall_seconds=loop.state.wall_seconds + elapsed,
        )
        loop.report(trained / max(elapsed, 1e-9), members)
        loop.state.stopped_early = stop
        last = stop or not self.runner.running()
        best = members[int(np.argmax([last_fitness(m) for m in members]))]
        loop.elite = best.clone(best.index)
        if not last:
            loop.save_member(loop.elite, loop.folder.elite)
        if last or loop.snapshot_due() or loop.runner.checkpoint_due(loop.state.generation):
            loop.save_checkpoint()
        loop.went_back = 0
        return stop

    def _take(self, done: SlotRound) -> int:
        """Record a slot's ended round in its members and the loop's state; the steps it
        trained."""
        loop = self.loop
        for position, member, stats, fitness in zip(
            done.positions, done.members, done.stats, done.fitnesses, strict=True
        ):
            record = member.record
            record.episode_returns = (record.episode_returns + stats.episode_returns)[-100:]
            record.fitness.append(float(fitness))
            self.rounds[position] += 1
            entry = loop.lineage_entry(member)
            entry.update(generation=self.rounds[position], steps=self._steps(self.rounds[position]))
            record.lineage.append(entry)
            loop.population[position] = member
            self.latest[position] = member
        return sum(stats.steps for stats in done.stats)

    # -- selection -------------------------------------------------------------------------------

    def _select(self, positions: list[int]) -> None:
        """Fill ``positions`` (a slot whose round just ended) with copies of tournament
        winners among the fresh enough members, and mutate them."""
        loop = self.loop
        selection, mutator = loop.selection, loop.mutator
        if not isinstance(selection, TournamentSelection) or mutator is None:
            return
        own = self.rounds[positions[0]]
        bound = self.runner.max_staleness
        pool = [
            p for p, m in enumerate(self.latest) if m is not None and self.rounds[p] >= own - bound
        ]
        self.left_out += sum(m is not None for m in self.latest) - len(pool)
        self.staleness += [max(0, own - self.rounds[p]) for p in pool]
        fitness = np.array([last_fitness(m) for p in pool if (m := self.latest[p]) is not None])
        ranks = np.argsort(np.argsort(fitness, kind="stable"), kind="stable")
        best = pool[int(np.argmax(ranks))]
        known = [m for m in [*loop.population, *self.latest] if m is not None]
        children = []
        for position in positions:
            if selection.elitism and position == best:
                child = self._latest(best).clone(best)  # the best goes on where it is
            else:
                contestants = loop.selection_rng.integers(0, len(pool), selection.tournament_size)
                winner = self._latest(pool[int(contestants[np.argmax(ranks[contestants])])])
                child = winner.clone(selection.new_index(known))
                child.record.parent = winner.index
                known.append(child)
            children.append(child)
        mutator.mutate(children)
        for position, child in zip(positions, children, strict=True):
            loop.population[position] = child

    def _latest(self, position: int) -> Member:
        member = self.latest[position]
        assert member is not None, "only trained members take part in selection"
        return member

    # -- the rest --------------------------------------------------------------------------------

    def metrics(self) -> dict[str, Any]:
        """The ``async`` entry of the generation's metrics line: rounds per position, the
        staleness (in rounds) of the fitnesses compared since the last line, how many members
        were left out as too stale, and the runner's own account; then starts counting again."""
        compared = self.staleness
        record = {
            "rounds": list(self.rounds),
            "max_staleness": self.runner.max_staleness,
            "staleness_max": max(compared, default=0),
            "staleness_mean": round(float(np.mean(compared)), 3) if compared else 0.0,
            "left_out": self.left_out,
            **self.runner.async_metrics(),
        }
        self.staleness, self.left_out = [], 0
        return record

    def forget(self) -> None:
        """Before going back to a checkpoint: the running slots end, and their rounds are
        forgotten (the checkpoint's members start them again)."""
        self.runner.settle()
        self.latest = [None] * len(self.latest)
