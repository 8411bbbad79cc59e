"""Carry weights and optimizer state from a network to a resized copy of it.

Tensors are matched by name; where shapes differ, the overlapping corner (the first
``min(a, b)`` entries along each dimension) is copied and the rest keeps what the target had:
fresh initialisation for weights, zeros for optimizer moments.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch


def copy_overlap(source: torch.Tensor, target: torch.Tensor) -> None:
    """Copy the overlapping slice of ``source`` into ``target`` in place.

    Tensors with a different number of dimensions share nothing and are left alone.

    :param source: tensor to read.
    :param target: tensor to write.
    """
    if source.dim() != target.dim():
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
                copy_overlap(tensors[name], tensor)


def _moved_state(value: Any, old: torch.Tensor, new: torch.Tensor) -> Any:
    """One optimizer state entry of parameter ``old``, fitted to parameter ``new``."""
    if not isinstance(value, torch.Tensor):
        return copy.deepcopy(value)
    if value.dim() == 0 or value.shape == new.shape or value.shape != old.shape:
        # Scalars such as Adam's ``step``, unchanged shapes, and state not shaped like the
        # parameter (nothing to fit it to) are copied as they are.
        return value.detach().clone()
    resized = value.new_zeros(new.shape)
    copy_overlap(value.detach(), resized)
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
            if state:
                new.state[new_param] = {
                    key: _moved_state(value, old_param, new_param) for key, value in state.items()
                }
