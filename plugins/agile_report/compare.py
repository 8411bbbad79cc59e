"""A run trained from a recipe against the lineage it replays: how close it came, and the
series the report draws of it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agile_report.runs import Run


@dataclass
class Closeness:
    """How close a replay came to the original lineage.

    :param original: the lineage's fitness in the original run at its last generation.
    :param replay: the replay's fitness at its last generation.
    :param gap: the mean absolute difference of the two fitnesses over the generations both
        have (None: they share none).
    :param shared: how many generations that is.
    """

    original: float
    replay: float
    gap: float | None
    shared: int


def closeness(run: Run) -> Closeness | None:
    """The replay's fitness against the original lineage's (None: the run is no replay).

    Generations are matched by number; the replay's fitness in one is its best member's
    (a replay trains one)."""
    if run.replay is None:
        return None
    scored = run.replay.scored
    original = {step.generation: fitness for step, fitness in scored}
    replayed = {generation.number: generation.best for generation in run.generations}
    shared = sorted(original.keys() & replayed.keys())
    gaps = [abs(replayed[number] - original[number]) for number in shared]
    return Closeness(
        original=scored[-1][1],  # read_replay keeps a recipe with a fitness only
        replay=run.generations[-1].best,
        gap=float(np.mean(gaps)) if gaps else None,
        shared=len(shared),
    )


def closeness_text(run: Run) -> str | None:
    """One sentence comparing the replay with the original lineage (None: no replay)."""
    close = closeness(run)
    if run.replay is None or close is None:
        return None
    if close.gap is None:
        gap = "no generation numbered alike in both"
    else:
        generations = "one generation" if close.shared == 1 else f"{close.shared} generations"
        gap = f"mean absolute gap {close.gap:.4g} over the {generations} both have"
    return (f"replay of {run.replay.name}: final fitness {close.replay:.4g} "
            f"(original lineage {close.original:.4g}); {gap}")  # fmt: skip


def replay_series(run: Run) -> tuple[np.ndarray, np.ndarray]:
    """The replay's steps per member (its global steps where the metrics lack them) and its
    fitness, per generation."""
    gens = run.generations
    x = [g.steps_per_member if g.steps_per_member is not None else g.global_steps for g in gens]
    return np.array(x, float), np.array([g.best for g in gens])
