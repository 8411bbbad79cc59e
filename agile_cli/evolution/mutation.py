"""Mutations: which kind each member gets, and RL-hyperparameter changes.

Hyperparameter mutation uses the :class:`~agile_cli.Member` contract. The other kinds
(``architecture``, ``parameters``, ``activation``) change networks: a member that has networks
to change implements ``mutate_network(kind, spec, rng) -> str``, returning a label of what it
did (:class:`~agile_rl.Algorithm` does); for any other member they do not apply."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agile_cli.member import Member
from agile_cli.models.algorithm import AlgorithmSpec
from agile_cli.models.base import numeric_type
from agile_cli.models.mutation import MutationSpec


@dataclass(frozen=True)
class HyperparameterRange:
    """Where a mutable hyperparameter may go, and how fast."""

    low: float
    high: float
    grow: float
    shrink: float
    integer: bool


def hyperparameter_ranges(
    mutation: MutationSpec, algorithm: AlgorithmSpec
) -> dict[str, HyperparameterRange]:
    """The ranges of ``rl_hp_selection``, or defaults around the algorithm's own values."""
    if mutation.rl_hp_selection:
        return {
            name: HyperparameterRange(
                bounds.min,
                bounds.max,
                bounds.grow_factor,
                bounds.shrink_factor,
                numeric_type(type(algorithm).model_fields[name].annotation) is int,
            )
            for name, bounds in mutation.rl_hp_selection.items()
        }
    ranges = {}
    for name in algorithm.default_mutable:
        value = getattr(algorithm, name)
        if isinstance(value, int):
            ranges[name] = HyperparameterRange(max(1, value // 4), value * 4, 1.5, 0.75, True)
        else:
            ranges[name] = HyperparameterRange(value / 10, value * 10, 1.2, 0.8, False)
    return ranges


class Mutator:
    """Applies one randomly drawn mutation to each member, with the weights of the manifest.

    All randomness comes from ``rng`` (seeded from ``mutation.rand_seed``).
    """

    def __init__(
        self, spec: MutationSpec, algorithm: AlgorithmSpec, rng: np.random.Generator
    ) -> None:
        self.spec = spec
        self.rng = rng
        self.ranges = hyperparameter_ranges(spec, algorithm)
        applicable = {"none", *algorithm.mutation_kinds}
        weights = {
            kind: weight if kind in applicable else 0.0
            for kind, weight in spec.probabilities.weights().items()
        }
        self.kinds, self.weights = _normalised(weights)
        pre = {**weights, "none": 0.0}
        self.pre_kinds, self.pre_weights = _normalised(pre)

    def mutate(
        self,
        population: list[Member],
        *,
        pre_training: bool = False,
        only: list[int] | None = None,
    ) -> None:
        """Mutate members in place; each records what happened in ``record.mutation``.

        :param only: positions in ``population`` to mutate (the others are left as they are);
            None: every member.
        """
        kinds, weights = (
            (self.pre_kinds, self.pre_weights) if pre_training else (self.kinds, self.weights)
        )
        chosen = population if only is None else [population[i] for i in only]
        draws = self.rng.choice(len(kinds), size=len(chosen), p=weights)
        for member, draw in zip(chosen, draws, strict=True):
            member.record.mutation = self.apply(member, kinds[int(draw)])

    def apply(self, member: Member, kind: str) -> str:
        """Apply one mutation of ``kind``; return a label describing it."""
        if kind == "rl_hp":
            return self._hyperparameter(member)
        if kind == "none":
            return "none"
        mutate = getattr(member, "mutate_network", None)  # the other kinds change networks
        if mutate is None:
            return f"none ({kind} mutation does not apply)"
        return str(mutate(kind, self.spec, self.rng))

    def _hyperparameter(self, member: Member) -> str:
        if not self.ranges:
            return "none"
        names = sorted(self.ranges)
        name = names[int(self.rng.integers(len(names)))]
        bounds = self.ranges[name]
        factor = bounds.shrink if self.rng.random() < 0.5 else bounds.grow
        value = min(max(member.hyperparameters()[name] * factor, bounds.low), bounds.high)
        value = int(value) if bounds.integer else float(value)
        member.set_hyperparameter(name, value)
        return f"{name}={value:.4g}"


def _normalised(weights: dict[str, float]) -> tuple[list[str], np.ndarray]:
    kinds = [kind for kind, weight in weights.items() if weight > 0]
    if not kinds:
        return ["none"], np.ones(1)
    values = np.array([weights[kind] for kind in kinds], dtype=float)
    return kinds, values / values.sum()
