"""The network mutations of RL members: a new layer or nodes (``architecture``), noise on
the weights (``parameters``) and another activation (``activation``). The core's mutator draws
the kind and calls :meth:`~agile_rl.Algorithm.mutate_network`, which lands here.

As in the reference (agilerl 2.58), added nodes and layers keep the network's function where
they can (``mutation.preserve_function``), and a parameter mutation first re-initialises the
member's dormant neurons (``mutation.dormant_threshold``): see :mod:`agile_rl.nn.neurons`."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Protocol

import numpy as np
import torch

from agile_cli import MutationSpec
from agile_rl.nn.neurons import keep_functions

#: The activations an ``activation`` mutation chooses among.
ACTIVATIONS = ("ReLU", "ELU", "GELU")


class Mutable(Protocol):
    """What the network mutations use of a member (:class:`~agile_rl.Algorithm` has it)."""

    arch: Any
    networks: dict[str, Any]
    supports_activation_mutation: ClassVar[bool]

    @property
    def policies(self) -> Sequence[torch.nn.Module]:
        """The networks whose weights ``parameters`` perturbs."""
        ...

    def set_architecture(self, arch: Any) -> None:
        """Rebuild the networks to ``arch``, keeping what can be kept."""
        ...

    def after_parameter_mutation(self) -> None:
        """Bring what depends on the weights up to date after they were perturbed."""
        ...

    def reset_dormant(self, threshold: float, rng: np.random.Generator) -> int:
        """Re-initialise the dormant units at ``threshold``; how many were reset."""
        ...


def mutate_network(member: Mutable, kind: str, spec: MutationSpec, rng: np.random.Generator) -> str:
    """Apply the network mutation ``kind`` to ``member``, drawing from ``rng``; a label of what
    it did (``none`` for a kind it does not know)."""
    mutation = _KINDS.get(kind)
    return mutation(member, spec, rng) if mutation is not None else "none"


def _architecture(member: Mutable, spec: MutationSpec, rng: np.random.Generator) -> str:
    methods = member.arch.mutation_methods()
    if not methods:
        return "none"
    layer = [m for m in methods if m.kind == "layer"]
    node = [m for m in methods if m.kind == "node"]
    share = spec.probabilities.new_layer
    if layer and node:
        p = [share / len(layer)] * len(layer) + [(1 - share) / len(node)] * len(node)
        methods = layer + node
    else:
        p = [1 / len(methods)] * len(methods)
    method = methods[int(rng.choice(len(methods), p=np.array(p) / sum(p)))]
    before = member.arch
    arch, args = before.apply(method.name, rng)
    old_networks = dict(member.networks)
    member.set_architecture(arch)
    name = _performed(method.name, before, arch)
    described = ",".join(f"{k}={v}" for k, v in args.items())
    label = f"{name}({described})" if described else name
    if spec.preserve_function and (kept := keep_functions(old_networks, member.networks)):
        label = f"{label}, {kept}"
    return label


def _parameters(member: Mutable, spec: MutationSpec, rng: np.random.Generator) -> str:
    reset = 0
    if spec.dormant_threshold is not None:
        reset = member.reset_dormant(spec.dormant_threshold, rng)
    for network in member.policies:
        perturb_weights(network, spec.mutation_sd, rng)
    member.after_parameter_mutation()
    if not reset:
        return "parameters"
    return f"parameters, {reset} dormant neuron{'s' if reset > 1 else ''} reset"


def _activation(member: Mutable, spec: MutationSpec, rng: np.random.Generator) -> str:
    if not member.supports_activation_mutation:
        return "none (activation mutation does not apply)"
    current = member.arch.head.activation
    choices = [a for a in ACTIVATIONS if a != current]
    activation = choices[int(rng.integers(len(choices)))]
    member.set_architecture(member.arch.with_activation(activation))
    return f"activation={activation}"


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


_KINDS: dict[str, Callable[[Any, MutationSpec, np.random.Generator], str]] = {
    "architecture": _architecture,
    "parameters": _parameters,
    "activation": _activation,
}
