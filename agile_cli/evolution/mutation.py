"""Mutations: architecture, parameter noise, activation and RL-hyperparameter changes.

Hyperparameter mutation uses the :class:`~agile_cli.Member` contract; the other three change
networks, and apply to :class:`~agile_cli.Algorithm` members only."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agile_cli.models.algorithm import AlgorithmSpec
from agile_cli.models.mutation import MutationSpec
from agile_cli.runtime.agent import Algorithm
from agile_cli.runtime.member import Member

ACTIVATIONS = ("ReLU", "ELU", "GELU")


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
                type(algorithm).model_fields[name].annotation is int,
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
        if not isinstance(member, Algorithm):  # the other kinds change networks
            return f"none ({kind} mutation does not apply)"
        if kind == "architecture":
            return self._architecture(member)
        if kind == "parameters":
            return self._parameters(member)
        if kind == "activation":
            return self._activation(member)
        return "none"

    def _architecture(self, member: Algorithm) -> str:
        methods = member.arch.mutation_methods()
        if not methods:
            return "none"
        layer = [m for m in methods if m.kind == "layer"]
        node = [m for m in methods if m.kind == "node"]
        share = self.spec.probabilities.new_layer
        if layer and node:
            p = [share / len(layer)] * len(layer) + [(1 - share) / len(node)] * len(node)
            methods = layer + node
        else:
            p = [1 / len(methods)] * len(methods)
        method = methods[int(self.rng.choice(len(methods), p=np.array(p) / sum(p)))]
        before = member.arch
        arch, args = before.apply(method.name, self.rng)
        member.set_architecture(arch)
        name = _performed(method.name, before, arch)
        described = ",".join(f"{k}={v}" for k, v in args.items())
        return f"{name}({described})" if described else name

    def _parameters(self, member: Algorithm) -> str:
        for network in member.policies:
            perturb_weights(network, self.spec.mutation_sd, self.rng)
        member.after_parameter_mutation()
        return "parameters"

    def _activation(self, member: Algorithm) -> str:
        if not member.supports_activation_mutation:
            return "none (activation mutation does not apply)"
        current = member.arch.head.activation
        choices = [a for a in ACTIVATIONS if a != current]
        activation = choices[int(self.rng.integers(len(choices)))]
        member.set_architecture(member.arch.with_activation(activation))
        return f"activation={activation}"

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


def perturb_weights(network: torch.nn.Module, sd: float, rng: np.random.Generator) -> None:
    """Gaussian noise on a random tenth of the entries of some weight matrices.

    Of the perturbed entries, 5% get a large jump (sd 10x their size), 5% are reset to N(0, 1),
    the rest get noise of ``sd`` times their size.
    """
    candidates = [
        parameter
        for name, parameter in network.named_parameters()
        if parameter.dim() == 2 and "norm" not in name and "lstm" not in name
    ]
    if not candidates:
        return
    count = int(rng.integers(1, len(candidates) + 1))
    with torch.no_grad():
        for position in rng.choice(len(candidates), size=count, replace=False):
            weights = candidates[int(position)]
            flat = weights.view(-1)
            picks = rng.integers(0, flat.numel(), size=math.ceil(0.1 * flat.numel()))
            current = flat[picks].detach().cpu().numpy()
            roll = rng.random(picks.size)
            noise = rng.normal(size=picks.size)
            scale = np.where(roll < 0.05, 10.0, sd) * np.abs(current)
            updated = np.where((roll >= 0.05) & (roll < 0.10), noise, current + noise * scale)
            values = torch.as_tensor(np.clip(updated, -1e6, 1e6), dtype=flat.dtype)
            flat[torch.as_tensor(picks)] = values.to(flat.device)


def _performed(method: str, before: Any, after: Any) -> str:
    """The mutation ``method`` really made: a layer mutation of a network already at its
    most (or fewest) layers adds nodes instead, and is labelled so."""
    part, _, operation = method.partition(".")
    depths = [getattr(getattr(arch, part, None), "depth", None) for arch in (before, after)]
    if (
        operation in ("add_layer", "remove_layer")
        and depths[0] is not None
        and depths[0] == depths[1]
    ):
        return f"{part}.add_node"
    return method
