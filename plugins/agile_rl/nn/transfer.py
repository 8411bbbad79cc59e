"""Carry weights and optimizer state from a network to a resized copy of it.

Tensors are matched by name; where shapes differ, the overlapping corner (the first
``min(a, b)`` entries along each dimension) is copied and the rest keeps what the target had:
fresh initialisation for weights, zeros for optimizer moments. Tensors that stack blocks
along their first dimension (an LSTM's four gates, see :func:`gate_blocks`) are fitted block
by block, so each gate keeps its own weights.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

import torch

#: ``nn.LSTM`` tensors of a module named ``lstm``: rows stack the input, forget, cell and
#: output gates (``[4 * hidden, ...]``).
_LSTM_GATED = re.compile(r"(^|\.)lstm\.(weight|bias)_(ih|hh)_l\d+$")


def gate_blocks(name: str) -> int:
    """How many blocks the tensor called ``name`` stacks along its first dimension: 4 for
    the gate-blocked tensors of an LSTM encoder (:mod:`agile_rl.nn.recurrent`), else 1."""
    return 4 if _LSTM_GATED.search(name) else 1


def copy_overlap(source: torch.Tensor, target: torch.Tensor, blocks: int = 1) -> None:
    """Copy the overlapping slice of ``source`` into ``target`` in place.

    Tensors with a different number of dimensions share nothing and are left alone.

    :param source: tensor to read.
    :param target: tensor to write.
    :param blocks: both tensors stack this many equal blocks along their first dimension;
        each block's overlap is copied into the same block of ``target``.
    """
    if source.dim() != target.dim():
        return
    if blocks > 1:
        for source_block, target_block in zip(
            source.chunk(blocks), target.chunk(blocks), strict=True
        ):
            copy_overlap(source_block, target_block)
        return
    region = tuple(slice(0, min(a, b)) for a, b in zip(source.shape, target.shape, strict=True))
    target[region].copy_(source[region])


def _named_tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {**dict(module.named_parameters()), **dict(module.named_buffers())}


def transfer_weights(source: torch.nn.Module, target: torch.nn.Module) -> None:
    """Copy every parameter and buffer of ``source`` into the one of the same name in ``target``.

    Names only one of them has are left as they are.

    :param source: the network to read.
    :param target: the network to write, in place.
    """
    tensors = _named_tensors(source)
    with torch.no_grad():
        for name, tensor in _named_tensors(target).items():
            if name in tensors:
                copy_overlap(tensors[name], tensor, gate_blocks(name))


def _moved_state(value: Any, old: torch.Tensor, new: torch.Tensor, blocks: int) -> Any:
    """One optimizer state entry of parameter ``old``, fitted to parameter ``new`` (which
    stacks ``blocks`` blocks, see :func:`copy_overlap`)."""
    if not isinstance(value, torch.Tensor):
        return copy.deepcopy(value)
    if value.dim() == 0 or value.shape == new.shape or value.shape != old.shape:
        # Scalars such as Adam's ``step``, unchanged shapes, and state not shaped like the
        # parameter (nothing to fit it to) are copied as they are.
        return value.detach().clone()
    resized = value.new_zeros(new.shape)
    copy_overlap(value.detach(), resized, blocks)
    return resized


def transfer_optimizer_state(
    old: torch.optim.Optimizer,
    old_params: Mapping[str, torch.nn.Parameter],
    new: torch.optim.Optimizer,
    new_params: Mapping[str, torch.nn.Parameter],
) -> None:
    """Give ``new`` the per-parameter state ``old`` holds, parameter by parameter name.

    State shaped like a resized parameter (Adam's ``exp_avg``, ``exp_avg_sq``) keeps its
    overlapping slice and is zero elsewhere; scalars (``step``) are copied. Parameters that
    ``old`` has no state for get none: the optimizer initialises it on its next step.

    :param old: the optimizer of the old network.
    :param old_params: the old network's parameters by name (``dict(named_parameters())``).
    :param new: the optimizer of the new network, in place.
    :param new_params: the new network's parameters by name.
    """
    with torch.no_grad():
        for name, new_param in new_params.items():
            old_param = old_params.get(name)
            state = old.state.get(old_param) if old_param is not None else None
            if state and old_param is not None:  # state implies old_param
                blocks = gate_blocks(name)
                new.state[new_param] = {
                    key: _moved_state(value, old_param, new_param, blocks)
                    for key, value in state.items()
                }
