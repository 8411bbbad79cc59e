"""Neuron-level operators of the network mutations: keeping a network's function when an
architecture mutation adds capacity, and re-initialising dormant neurons (ReGraMa).

Both work on the *units* of a network (:func:`network_units`): the output neurons of one
layer, the layer that produces them, the norm and activation they pass through, and the
layers that read them. An MLP's hidden layers, and every encoder's latent (read by each
head's first layer, after the head's extra input), are units; convolutions, LSTM gates and
SimBa's residual blocks are not (a unit there is not one row in and one column out).

**Keeping the function.** A node added to a layer gets the random incoming weights its
rebuild gave it and zero outgoing weights: the layers after it compute what they did, and
the new node learns through its outgoing weights, which get gradients at once. A layer
added to a head is the identity (with ReLU, or no activation, ``relu(I x) = x`` for the
non-negative ``x`` it reads). A norm between a layer and its activation pools all of the
layer's units, so a new unit changes every other unit's output: such additions, and layers
whose activation is not ReLU or the identity, keep their random initialisation, as the
reference does.

**Dormant neurons** (Xu et al., 2025, "ReGraMa"): while a member trains, the mean absolute
gradient of the loss with respect to each unit's pre-activation is summed over its gradient
steps (:class:`GradientSums`). A unit whose mean, relative to its layer's mean, is at most
the manifest's ``dormant_threshold`` (a layer with no gradient at all: every unit) is
re-initialised before a parameter mutation (:func:`reset_dormant`): Xavier-uniform incoming
weights, zero bias, a neutral norm entry, and outgoing weights in a random direction whose
norm is 2% of the median outgoing norm of the layer's live units.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from agile_rl.nn.modules import MLP, EvolvableNetwork
from agile_rl.nn.noisy import NoisyLinear

#: Outgoing norm of a re-initialised unit, relative to the live units' median.
REVIVED_SCALE = 0.02

#: Activations for which an identity layer computes nothing new on their own output.
_IDEMPOTENT = (nn.ReLU, nn.Identity)

#: Activations that mix units, so that a new unit changes the others' outputs.
_MIXING = (nn.Softmax, nn.LogSoftmax, nn.Softmin)

#: Parameter entries an operator rewrote: ``(parameter, index)``.
Touched = list[tuple[torch.Tensor, tuple[slice | list[int], ...]]]


@dataclass(frozen=True)
class Units:
    """The output neurons of one layer of a network.

    :param producer: the layer computing them (a module path, e.g. ``encoder.layers.0``).
    :param norm: the affine layer norm applied to them, or None.
    :param pooled: whether a norm pools them before their activation.
    :param activation: the activation applied to them.
    :param consumers: each layer reading them, with the column where they start.
    """

    producer: str
    norm: str | None
    pooled: bool
    activation: nn.Module
    consumers: tuple[tuple[str, int], ...]


def _first_layer(prefix: str, mlp: MLP) -> str:
    return f"{prefix}.layers.0" if len(mlp.layers) else f"{prefix}.out"


def _mlp_units(prefix: str, mlp: MLP) -> list[Units]:
    units = []
    for index, (norm, act) in enumerate(zip(mlp.norms, mlp.acts, strict=True)):
        after = index + 1
        consumer = f"{prefix}.layers.{after}" if after < len(mlp.layers) else f"{prefix}.out"
        pooled = isinstance(norm, nn.LayerNorm)
        norm_path = f"{prefix}.norms.{index}" if pooled else None
        units.append(Units(f"{prefix}.layers.{index}", norm_path, pooled, act, ((consumer, 0),)))
    return units


def network_units(network: EvolvableNetwork) -> list[Units]:
    """The units of ``network`` (see the module), encoder first, then each head."""
    encoder = network.encoder
    units = _mlp_units("encoder", encoder) if isinstance(encoder, MLP) else []
    out = getattr(encoder, "out", None)
    if isinstance(out, nn.Linear | NoisyLinear) and hasattr(encoder, "out_act"):
        readers = tuple(
            (_first_layer(f"heads.{name}", head), network.head_extra)
            for name, head in network.heads.items()
            if isinstance(head, MLP)
        )
        pooled = isinstance(getattr(encoder, "out_norm", None), nn.LayerNorm)
        activation = encoder.get_submodule("out_act")
        units.append(Units("encoder.out", None, pooled, activation, readers))
    for name, head in network.heads.items():
        if isinstance(head, MLP):
            units += _mlp_units(f"heads.{name}", head)
    return units


def _tensor(module: nn.Module, name: str) -> torch.Tensor:
    tensor = getattr(module, name)
    assert isinstance(tensor, torch.Tensor), f"{name} of {type(module).__name__} is no tensor"
    return tensor


def _weight(layer: nn.Module) -> torch.Tensor:
    return _tensor(layer, "weight_mu" if isinstance(layer, NoisyLinear) else "weight")


def _bias(layer: nn.Module) -> torch.Tensor:
    return _tensor(layer, "bias_mu" if isinstance(layer, NoisyLinear) else "bias")


def _width(network: nn.Module, path: str) -> int | None:
    try:
        return _weight(network.get_submodule(path)).shape[0]
    except AttributeError:
        return None


# -- keeping the function ----------------------------------------------------------------------


def keep_function(old: EvolvableNetwork, new: EvolvableNetwork) -> str | None:
    """Make the nodes and layers ``new`` (``old`` rebuilt to a mutated architecture, see
    :meth:`~agile_rl.nn.modules.EvolvableNetwork.rebuilt`) has beyond ``old`` leave its
    function as it was, where the layers around them allow it (see the module).

    :returns: None when nothing was added; ``"same function"`` when every addition keeps it;
        else why one could not (it then keeps its random initialisation).
    """
    outcomes = []
    for units in network_units(new):
        before, after = _width(old, units.producer), _width(new, units.producer)
        if before is None:
            outcomes.append(_identity_layer(new, units))
        elif after is not None and after > before:
            outcomes.append(_silence(new, units, before, after))
    if not outcomes:
        return None
    refused = [outcome for outcome in outcomes if outcome is not None]
    return refused[0] if refused else "same function"


def keep_functions(old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """:func:`keep_function` for every network of a member (``old``'s by name, ``new`` the
    rebuilt ones); what the first network with additions says (they all change alike)."""
    outcomes = [
        keep_function(network, new[name])
        for name, network in old.items()
        if isinstance(network, EvolvableNetwork)
    ]
    return next((outcome for outcome in outcomes if outcome is not None), None)


def _silence(network: nn.Module, units: Units, before: int, after: int) -> str | None:
    """Zero the weights through which units ``before..after`` reach their readers."""
    if units.pooled:
        return "random: a layer norm pools the new nodes with the old"
    if isinstance(units.activation, _MIXING):
        return f"random: {type(units.activation).__name__} mixes the new nodes with the old"
    with torch.no_grad():
        for path, start in units.consumers:
            layer = network.get_submodule(path)
            columns = slice(start + before, start + after)
            _weight(layer)[:, columns] = 0.0
            if isinstance(layer, NoisyLinear):
                layer.weight_sigma[:, columns] = 0.0
    return None


def _identity_layer(network: nn.Module, units: Units) -> str | None:
    """Make the added layer producing ``units`` the identity."""
    layer = network.get_submodule(units.producer)
    weight = _weight(layer)
    if units.pooled:
        return "random: a layer norm follows the new layer"
    if not isinstance(units.activation, _IDEMPOTENT):
        return f"random: {type(units.activation).__name__} is not ReLU or the identity"
    if weight.shape[0] != weight.shape[1]:
        return "random: the new layer is not square"
    with torch.no_grad():
        weight.copy_(torch.eye(*weight.shape))
        _bias(layer).zero_()
        if isinstance(layer, NoisyLinear):
            layer.weight_sigma.zero_()
            layer.bias_sigma.zero_()
    return None


# -- dormant neurons ---------------------------------------------------------------------------


class GradientSums:
    """Each unit's mean absolute pre-activation gradient, summed over gradient steps, for
    ``k`` members at once (row ``i`` is the ``i``-th member of a group, or the only one).

    :meth:`hook` gives what a pre-activation tensor ``[k, ..., W]`` registers
    (``tensor.register_hook``); rows that :attr:`active` marks False (members that did not
    learn in the step) are not counted.
    """

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, torch.Tensor] = {}
        #: ``[k]`` booleans: the rows the next gradients count for; None: every row.
        self.active: torch.Tensor | None = None

    def hook(self, producer: str) -> Callable[[torch.Tensor], None]:
        """What records the gradient of the pre-activations of ``producer``'s units."""

        def record(grad: torch.Tensor) -> None:
            self.add(producer, grad)

        return record

    def add(self, producer: str, grad: torch.Tensor) -> None:
        """Count one gradient ``[k, ..., W]`` of ``producer``'s units' pre-activations."""
        magnitude = grad.detach().abs()
        per_unit = magnitude.reshape(magnitude.shape[0], -1, magnitude.shape[-1]).mean(1)
        rows = torch.ones(per_unit.shape[0], dtype=torch.bool, device=per_unit.device)
        if self.active is not None:
            rows = self.active.to(device=per_unit.device, dtype=torch.bool)
        if producer not in self.sums:
            self.sums[producer] = torch.zeros_like(per_unit)
            self.counts[producer] = torch.zeros(per_unit.shape[0], device=per_unit.device)
        self.sums[producer] += per_unit * rows.unsqueeze(1)
        self.counts[producer] += rows

    def scores(self, row: int, widths: dict[str, int] | None = None) -> dict[str, torch.Tensor]:
        """Member ``row``'s mean score of each unit, by producer, for the layers it learned
        through (cut to ``widths[producer]`` units where given: a padded group's member)."""
        scores = {}
        for producer, sums in self.sums.items():
            count = float(self.counts[producer][row])
            if count > 0:
                width = sums.shape[1] if widths is None else widths.get(producer, sums.shape[1])
                scores[producer] = (sums[row, :width] / count).cpu()
        return scores


def dormant_units(score: torch.Tensor, threshold: float) -> list[int]:
    """The units whose ``score`` relative to the layer's mean is at most ``threshold`` (all of
    them when the mean is zero: nothing reached the layer); non-finite scores count as 0."""
    score = torch.nan_to_num(score.float(), nan=0.0, posinf=0.0, neginf=0.0)
    mean = float(score.mean())
    if mean <= 0.0:
        return list(range(score.numel()))
    return torch.nonzero(score / mean <= threshold).flatten().tolist()


def reset_dormant(
    network: EvolvableNetwork,
    scores: dict[str, torch.Tensor],
    threshold: float,
    rng: np.random.Generator,
) -> tuple[int, Touched]:
    """Re-initialise the dormant units of ``network`` (see the module) from ``scores`` (by
    producer, as :meth:`GradientSums.scores` gives them), drawing from ``rng``.

    :returns: how many units were reset, and every parameter entry rewritten, so that a
        caller can clear their optimizer state.
    """
    count, touched = 0, []
    for units in network_units(network):
        score = scores.get(units.producer)
        if score is None or score.numel() != _width(network, units.producer):
            continue
        dormant = dormant_units(score, threshold)
        if dormant:
            touched += _revive(network, units, dormant, rng)
            count += len(dormant)
    return count, touched


def _revive(
    network: nn.Module, units: Units, dormant: list[int], rng: np.random.Generator
) -> Touched:
    """Re-initialise the ``dormant`` units of ``units`` in ``network``: their incoming weights,
    bias and norm entry, and their outgoing weights in every reader."""
    producer = network.get_submodule(units.producer)
    weight = _weight(producer)
    keep = [unit for unit in range(weight.shape[0]) if unit not in set(dormant)]
    bound = math.sqrt(6.0 / (weight.shape[0] + weight.shape[1]))
    rows: tuple[slice | list[int], ...] = (dormant,)
    with torch.no_grad():
        drawn = rng.uniform(-bound, bound, size=(len(dormant), weight.shape[1]))
        weight[dormant] = torch.as_tensor(drawn, dtype=weight.dtype, device=weight.device)
        bias = _bias(producer)
        bias[dormant] = 0.0
        touched: Touched = [(weight, rows), (bias, rows)]
        if isinstance(producer, NoisyLinear) and keep:
            for sigma in (producer.weight_sigma, producer.bias_sigma):
                sigma[dormant] = sigma[keep].median()
                touched.append((sigma, rows))
        if units.norm is not None:
            norm = network.get_submodule(units.norm)
            scale, shift = _tensor(norm, "weight"), _tensor(norm, "bias")
            scale[dormant], shift[dormant] = 1.0, 0.0
            touched += [(scale, rows), (shift, rows)]
        for path, start in units.consumers:
            touched += _revive_outgoing(network.get_submodule(path), start, dormant, keep, rng)
    return touched


def _revive_outgoing(
    reader: nn.Module, start: int, dormant: list[int], keep: list[int], rng: np.random.Generator
) -> Touched:
    """New outgoing weights of the ``dormant`` units, read from column ``start`` on: each a
    random direction of norm :data:`REVIVED_SCALE` times the live units' median norm."""
    weight = _weight(reader)
    live = weight[:, [start + unit for unit in keep]].norm(dim=0)
    live = live[live.isfinite() & (live > 0)]
    if live.numel():
        norm = REVIVED_SCALE * float(live.median())
    else:  # nothing alive to measure: Xavier's expected column norm
        norm = REVIVED_SCALE * math.sqrt(2.0 * weight.shape[0] / sum(weight.shape))
    drawn = torch.as_tensor(
        rng.standard_normal((weight.shape[0], len(dormant))), dtype=weight.dtype
    ).to(weight.device)
    columns = [start + unit for unit in dormant]
    weight[:, columns] = drawn * (norm / drawn.norm(dim=0).clamp_min(1e-12))
    touched: Touched = [(weight, (slice(None), columns))]
    if isinstance(reader, NoisyLinear):
        reader.weight_sigma[:, columns] = norm / math.sqrt(weight.shape[0])
        touched.append((reader.weight_sigma, (slice(None), columns)))
    return touched


def unit_widths(network: EvolvableNetwork) -> dict[str, int]:
    """How many units each producer of ``network`` has."""
    return {units.producer: _weight(network.get_submodule(units.producer)).shape[0]
            for units in network_units(network)}  # fmt: skip


def watch_units(network: EvolvableNetwork, sums: GradientSums) -> list[RemovableHandle]:
    """Have ``network``'s own forward passes record its units' gradients into ``sums`` (one
    row); the handles remove the hooks."""
    handles = []
    for units in network_units(network):

        def pre_activation(
            _module: nn.Module, inputs: tuple[torch.Tensor, ...], _output: object, *,
            producer: str = units.producer,
        ) -> None:  # fmt: skip
            if inputs[0].requires_grad:
                inputs[0].register_hook(lambda grad: sums.add(producer, grad.unsqueeze(0)))

        handles.append(units.activation.register_forward_hook(pre_activation))
    return handles
