"""What happened to each member between generations (cloned from another, mutated), and each
member's fitness curve through the generations, read from a run's metrics (numpy only)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agile_cli.helpers import printable
from agile_report.runs import Member, Run

Kind = Literal["cloned", "mutated"]


@dataclass(frozen=True)
class Event:
    """A member cloned or mutated before a generation was trained.

    :param position: the generation, as an index into the run's generations.
    :param generation: its number in the metrics.
    :param member: the member's index.
    :param fitness: the member's fitness in that generation (where its curve is marked).
    :param kind: ``cloned`` or ``mutated``.
    :param what: ``cloned from 3``, or the mutation's label.
    """

    position: int
    generation: int
    member: int
    fitness: float
    kind: Kind
    what: str


def member_events(run: Run, position: int, member: Member) -> list[Event]:
    """The events of ``member`` in generation ``position``: its cloning, then its mutation."""
    number = run.generations[position].number
    found = []
    if member.cloned_from is not None:
        found.append(Event(position, number, member.index, member.fitness, "cloned",
                           f"cloned from {member.cloned_from}"))  # fmt: skip
    if member.mutated:
        label = printable(member.mutation)
        found.append(Event(position, number, member.index, member.fitness, "mutated", label))
    return found


def run_events(run: Run) -> list[Event]:
    """Every member's events, generation by generation."""
    return [
        event
        for position, generation in enumerate(run.generations)
        for member in generation.members
        for event in member_events(run, position, member)
    ]


def lineage_events(run: Run) -> list[Event]:
    """The events along the final best member's ancestry, oldest first."""
    return [
        event
        for position, slot in run.ancestry()
        for event in member_events(run, position, run.generations[position].members[slot])
    ]


def member_curves(run: Run) -> list[tuple[list[float], list[float]]]:
    """Each member's fitness against the generation (numbered from 1, in order), one curve
    per member index; a member that continues or was cloned from one in the generation
    before starts at that one's fitness there, so a clone's curve leaves its parent's."""
    curves: dict[int, tuple[list[float], list[float]]] = {}
    for position, generation in enumerate(run.generations):
        links = run.lineage(position)
        for slot, member in enumerate(generation.members):
            if member.index not in curves:
                xs, ys = curves.setdefault(member.index, ([], []))
                source = links[slot]
                if source is not None:
                    xs.append(position)
                    ys.append(run.generations[position - 1].members[source].fitness)
            xs, ys = curves[member.index]
            xs.append(position + 1)
            ys.append(member.fitness)
    return list(curves.values())
