"""A replay run against the lineage it retrains: a run folder made by retraining one member of
another run on its recipe (``agile recipe``, then ``agile train``) has the recipe in its
``manifest.yaml``, with the lineage's steps and fitness in the original run generation by
generation (see :mod:`agile_cli.models.recipe`).

The section is data written by another command and perhaps edited by hand: what cannot be read
becomes a note for the user, never an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np

from agile_cli.helpers import Fields, RunFileError, printable

#: The longest source name shown (a path, as the recipe wrote it).
MAX_SOURCE = 80
#: The manifest's sections that hold a replay's schedule: ``recipe``, as ``agile recipe``
#: writes it (see :mod:`agile_cli.models.recipe`).
SECTIONS = ("recipe",)


@dataclass(frozen=True)
class Step:
    """One generation of the original lineage, as the recipe's schedule gives it: the steps
    per member trained by its end, and the lineage's fitness (None: the recipe gives none)."""

    generation: int
    steps_per_member: int
    fitness: float | None


@dataclass
class Replay:
    """The recipe in a run's manifest: which member of which run it retrains, and
    its lineage's generations in that run (those that could be read, in order)."""

    source: str
    member: int | None
    schedule: list[Step]

    @property
    def scored(self) -> list[tuple[Step, float]]:
        """The schedule's entries that give a fitness, each with it."""
        return [(step, step.fitness) for step in self.schedule if step.fitness is not None]

    @property
    def name(self) -> str:
        """``member 5 of runs/dqn_cartpole_3``, as far as the section says."""
        member = f"member {self.member}" if self.member is not None else "a member"
        return f"{member} of {self.source}"


def read_replay(manifest: dict[str, Any]) -> tuple[Replay | None, str | None]:
    """The manifest's recipe (a section of :data:`SECTIONS`), and a note on what of it could
    not be read (None when all could). No such section: ``(None, None)``."""
    name = next((name for name in SECTIONS if manifest.get(name) is not None), None)
    if name is None:
        return None, None
    section = manifest[name]
    if not isinstance(section, dict):
        return None, f"the manifest's {name} section is not a mapping: the replay is not compared"
    schedule = section.get("schedule")
    if not isinstance(schedule, list) or not schedule:
        return None, f"{name}.schedule is not a list of generations: the replay is not compared"
    steps = [step for entry in schedule if (step := _step(entry)) is not None]
    if not any(step.fitness is not None for step in steps):
        return None, (
            f"no entry of {name}.schedule has a generation, steps_per_member and fitness: "
            "the replay is not compared"
        )
    source, member = section.get("source"), section.get("member")
    replay = Replay(
        source=_text(source) if isinstance(source, str) and source else "an unnamed run",
        member=member if _is_integer(member) else None,
        schedule=sorted(steps, key=lambda step: step.generation),
    )
    left_out = len(schedule) - len(steps)
    note = f"{left_out} unreadable entries of {name}.schedule left out" if left_out else None
    return replay, note


def _step(entry: Any) -> Step | None:
    """A schedule entry, or None when it lacks a whole generation and step count, or gives a
    fitness that is not a finite number (:class:`~agile_cli.helpers.Fields` checks each)."""
    if not isinstance(entry, dict):
        return None
    fields = Fields(entry, "recipe.schedule")
    try:
        fitness = fields.number("fitness") if fields.has("fitness") else None
        return Step(fields.integer("generation"), fields.count("steps_per_member"), fitness)
    except RunFileError:
        return None


def _is_integer(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _text(value: str) -> str:
    shown = printable(value)
    return shown if len(shown) <= MAX_SOURCE else shown[: MAX_SOURCE - 3] + "..."


def original_series(replay: Replay) -> tuple[np.ndarray, np.ndarray]:
    """The original lineage's steps per member and fitness, per generation of the schedule
    that gives a fitness."""
    scored = replay.scored
    return (np.array([step.steps_per_member for step, _ in scored], float),
            np.array([fitness for _, fitness in scored]))  # fmt: skip
