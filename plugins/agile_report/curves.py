"""The series a report draws, computed from the runs (numpy only, so tests check them against
``metrics.jsonl`` without drawing anything)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from agile_report.runs import Group, Member, Run

Axis = Literal["steps", "seconds"]

# Student's t at 97.5% for 1..30 degrees of freedom: a 95% confidence band for few seeds.
_T975 = (12.71, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip
#: Values one step of :func:`bootstrap_band` resamples at most (8 bytes each).
_BOOTSTRAP_VALUES = 4_000_000


@dataclass
class Curve:
    """One group's learning curve: best and mean fitness of the population against ``x``.

    With several seeds, ``best`` and ``mean`` are averages over them on a grid of the ``x``
    where every seed has data (up to the shortest seed's end: an average of fewer seeds
    would jump where one stops), and ``low``/``high`` bound the 95% confidence interval
    of the best fitness's average, clipped to the seeds' own best fitnesses (a t-interval
    of a few seeds reaches past what any of them scored). ``runs`` holds each seed's own
    ``(x, best)`` series, to its end.
    """

    label: str
    x: np.ndarray
    best: np.ndarray
    mean: np.ndarray
    low: np.ndarray | None
    high: np.ndarray | None
    seeds: int
    runs: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)


def run_series(run: Run, axis: Axis) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``x`` (global env steps or wall seconds), best and mean fitness, per generation."""
    gens = run.generations
    x = [g.global_steps if axis == "steps" else g.wall_seconds for g in gens]
    return np.array(x, float), np.array([g.best for g in gens]), np.array([g.mean for g in gens])


def group_curve(group: Group, axis: Axis) -> Curve:
    """The group's curve; several seeds are interpolated onto the ``x`` values they share
    (between the latest first point and the earliest last point)."""
    series = [run_series(run, axis) for run in group.runs]
    runs = [(x, best) for x, best, _ in series]
    if len(series) == 1:
        x, best, mean = series[0]
        return Curve(group.label, x, best, mean, None, None, seeds=1, runs=runs)
    grid, bests, means = shared_grid(series)
    centre, low, high = seeds_interval(bests)
    return Curve(group.label, grid, centre, means.mean(axis=0), low, high,
                 seeds=len(series), runs=runs)  # fmt: skip


def shared_grid(
    series: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``x`` values every seed's ``(x, best, mean)`` series reaches, and each seed's best
    and mean interpolated onto them (one row per seed): ``(grid, bests, means)``."""
    start = max(s[0][0] for s in series)
    stop = min(s[0][-1] for s in series)
    grid = np.unique(np.concatenate([s[0] for s in series]))
    grid = grid[(grid >= start) & (grid <= stop)]
    if grid.size == 0:  # the runs do not overlap: the shortest one's points
        grid = min((s[0] for s in series), key=len)
    bests = np.array([np.interp(grid, x, best) for x, best, _ in series])
    means = np.array([np.interp(grid, x, mean) for x, _, mean in series])
    return grid, bests, means


def seeds_interval(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The mean over axis 0 (the seeds) and its 95% confidence interval, clipped to the
    range the samples span: ``(mean, low, high)``."""
    centre = samples.mean(axis=0)
    spread = confidence(samples)
    low = np.maximum(centre - spread, samples.min(axis=0))
    return centre, low, np.minimum(centre + spread, samples.max(axis=0))


def confidence(samples: np.ndarray) -> np.ndarray:
    """Half the width of the 95% confidence interval of the mean over axis 0."""
    count = samples.shape[0]
    if count < 2:
        return np.zeros(samples.shape[1:])
    t = _T975[count - 2] if count - 1 <= len(_T975) else 1.96
    return t * samples.std(axis=0, ddof=1) / np.sqrt(count)


def iqm(samples: np.ndarray) -> float:
    """The interquartile mean of ``samples`` (1-D): the mean of what is left after a quarter
    of them (rounded down) is cut from each end, as rliable's IQM (Agarwal et al., 2021)."""
    return float(_iqms(np.asarray(samples, dtype=float), axis=0))


def _iqms(samples: np.ndarray, axis: int) -> np.ndarray:
    """:func:`iqm` of every slice of ``samples`` along ``axis``."""
    ordered = np.sort(samples, axis=axis)
    count = ordered.shape[axis]
    cut = int(0.25 * count)
    return np.take(ordered, np.arange(cut, count - cut), axis=axis).mean(axis=axis)


def bootstrap_interval(
    samples: np.ndarray, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """The 95% percentile-bootstrap confidence interval of :func:`iqm` over ``samples`` (one
    per seed), resampling the seeds with replacement; the same figures every time (fixed
    ``seed``)."""
    low, high = bootstrap_band(np.asarray(samples, dtype=float)[:, None], resamples, seed)
    return float(low[0]), float(high[0])


def bootstrap_band(
    samples: np.ndarray, resamples: int = 2000, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`bootstrap_interval` of each column of ``samples`` (one row per seed, one column
    per point of a curve), every column resampled by the same draws of seeds:
    ``(low, high)``."""
    count, points = samples.shape
    draws = np.random.default_rng(seed).integers(count, size=(resamples, count))
    step = max(1, _BOOTSTRAP_VALUES // (resamples * count))
    lows, highs = [], []
    for start in range(0, points, step):  # a few columns at a time: bounded memory
        statistics = _iqms(samples[draws, start : start + step], axis=1)
        low, high = np.percentile(statistics, [2.5, 97.5], axis=0)
        lows.append(low)
        highs.append(high)
    return np.concatenate(lows), np.concatenate(highs)


@dataclass
class IqmCurve:
    """One group's interquartile mean of the seeds' best fitness against ``x``, on the grid
    of :func:`shared_grid`, with its 95% percentile-bootstrap interval (``low``/``high``;
    None for a single seed, whose curve is its own best fitness)."""

    label: str
    x: np.ndarray
    centre: np.ndarray
    low: np.ndarray | None
    high: np.ndarray | None
    seeds: int


def iqm_curve(group: Group, axis: Axis) -> IqmCurve:
    """The group's :func:`iqm` of the best fitness at each ``x`` every seed reaches, with
    :func:`bootstrap_band`."""
    series = [run_series(run, axis) for run in group.runs]
    if len(series) == 1:
        x, best, _ = series[0]
        return IqmCurve(group.label, x, best, None, None, seeds=1)
    grid, bests, _ = shared_grid(series)
    low, high = bootstrap_band(bests)
    return IqmCurve(group.label, grid, _iqms(bests, axis=0), low, high, seeds=len(series))


@dataclass
class Trajectory:
    """One hyperparameter (or the network size) of one run: every member's value in every
    generation, and the best member's."""

    name: str
    steps: np.ndarray  # per (generation, member) point
    values: np.ndarray
    best_steps: np.ndarray  # per generation
    best_values: np.ndarray


def trajectories(run: Run, names: list[str] | None = None) -> list[Trajectory]:
    """Each evolving hyperparameter's trajectory, then the network size's (where known).

    :param names: the hyperparameters to trace (default: all the run has).
    """
    chosen = run.hyperparameter_names() if names is None else names
    found = [_trajectory(run, name) for name in chosen]
    found.append(_trajectory(run, None))
    return [t for t in found if t.values.size]


def _trajectory(run: Run, name: str | None) -> Trajectory:
    def value(member: Member) -> float | None:
        if name is None:
            return float(member.parameters) if member.parameters is not None else None
        return member.hyperparameters.get(name)

    points = [(g.global_steps, value(m)) for g in run.generations for m in g.members]
    best = [(g.global_steps, value(g.best_member)) for g in run.generations]
    label = name if name is not None else "network size (weights)"
    return Trajectory(label, *_columns(points), *_columns(best))


def _columns(pairs: list[tuple[int, float | None]]) -> tuple[np.ndarray, np.ndarray]:
    kept = [(x, y) for x, y in pairs if y is not None]
    return np.array([x for x, _ in kept], float), np.array([y for _, y in kept], float)
