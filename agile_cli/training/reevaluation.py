"""A robust elite: the best few members of a run scored again, on evaluation seeds that
training never used, each with a confidence interval.

During training a member's fitness is the mean of ``training.eval_loop`` episodes on the
generation's shared scoring seeds, and the best of a population of noisy scores is biased
upwards: the winner is often a lucky draw. At the end of a run (and on demand, ``agile
evaluate RUN --top K``) the ``K`` best members by their latest training fitness play
``episodes`` fresh greedy episodes each; the one with the best mean becomes the run's elite.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from agile_cli.evolution.selection import last_fitness

if TYPE_CHECKING:
    from agile_cli.host.registry import Registry
    from agile_cli.manifest import TrainingManifest
    from agile_cli.member import Member

#: Bootstrap resamples of an interval, drawn from a fixed seed: the same figures every time.
RESAMPLES = 2000
#: A word of the evaluation seed's SeedSequence that no training or scoring reset uses
#: (those use 0 and 1, see :func:`agile_cli.runner.reset_seed`).
_REEVALUATION = 2


@dataclass(frozen=True)
class Reevaluated:
    """One member scored again.

    :param training_rank: its place by latest training fitness (1 is the best).
    :param score: the mean of ``returns``, each fresh episode's return.
    :param low: the 95% bootstrap interval of that mean (None for a single episode).
    """

    member: int
    training_rank: int
    training_fitness: float
    score: float
    low: float | None
    high: float | None
    returns: list[float]

    def to_dict(self) -> dict[str, Any]:
        """The record ``summary.json`` keeps (returns left out: they can be many)."""
        record = asdict(self)
        record["episodes"] = len(record.pop("returns"))
        return record


def evaluation_seed(run_seed: int) -> int:
    """The seed of the fresh evaluation episodes of the run of seed ``run_seed``: drawn from
    its members' seed (:attr:`~agile_cli.member.AgentContext.seed`) with a word of its own."""
    from agile_cli.training.setup import seeds

    member_seed = seeds(run_seed)["members"]
    return int(np.random.SeedSequence([member_seed, _REEVALUATION]).generate_state(1)[0])


def top_members(population: Sequence[Member], count: int) -> list[tuple[int, Member]]:
    """The ``count`` members with the best latest training fitness, best first, with their
    rank (1-based); members not yet evaluated are left out."""
    ranked = sorted(
        (member for member in population if member.record.fitness),
        key=lambda member: (-last_fitness(member), member.index),
    )
    return list(enumerate(ranked[:count], start=1))


def mean_interval(values: Sequence[float], seed: int = 0) -> tuple[float, float] | None:
    """The 95% percentile-bootstrap interval of the mean of ``values`` (None for fewer
    than two: one episode says nothing of its spread)."""
    samples = np.asarray(values, dtype=float)
    if samples.size < 2:
        return None
    rng = np.random.default_rng(seed)
    means = samples[rng.integers(samples.size, size=(RESAMPLES, samples.size))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def reevaluate(
    ranked: Sequence[tuple[int, Member]],
    manifest: TrainingManifest,
    registry: Registry,
    episodes: int,
    seed: int,
) -> list[Reevaluated]:
    """Score each ranked member on ``episodes`` fresh episodes from ``seed`` (every member on
    the same ones); best mean first, ties to the better training rank. Empty for a paradigm
    that plays no episodes (it scores its own way, e.g. on a language model's held-out rows,
    which fresh seeds do not change)."""
    from agile_cli.training.evaluation import episode_returns

    members = [member for _, member in ranked]
    played = episode_returns(members, manifest, registry, episodes, seed)
    if played is None:
        return []
    results = []
    for (rank, member), returns in zip(ranked, played, strict=True):
        interval = mean_interval(returns)
        results.append(
            Reevaluated(
                member=member.index,
                training_rank=rank,
                training_fitness=last_fitness(member),
                score=float(np.mean(returns)),
                low=interval[0] if interval else None,
                high=interval[1] if interval else None,
                returns=returns,
            )
        )
    return sorted(results, key=lambda r: (-r.score, r.training_rank))


def ordinal(number: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ``11th``, ``21st``: a training rank in words."""
    teens = 10 <= number % 100 <= 20
    suffix = "th" if teens else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"
