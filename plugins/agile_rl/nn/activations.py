"""The activations a network accepts, by the names a manifest uses."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

ACTIVATIONS = (
    "Tanh", "GELU", "ReLU", "ELU", "LeakyReLU", "Sigmoid", "Softplus", "Softmax",
    "GumbelSoftmax", "PReLU", "Identity",
)  # fmt: skip
"""Activation names a network accepts (the ``Activation`` literal of the manifest)."""


def check_activation(name: str) -> None:
    """:raises ValueError: ``name`` is not one of :data:`ACTIVATIONS`."""
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; choose one of {', '.join(ACTIVATIONS)}")


def make_activation(name: str | None) -> nn.Module:
    """The activation layer called ``name``; ``None`` is the identity.

    :param name: one of :data:`ACTIVATIONS`.
    """
    from torch import nn

    if name is None:
        return nn.Identity()
    check_activation(name)
    layers = {
        "Softmax": partial(nn.Softmax, dim=-1),
        # Gumbel noise belongs to the policy's sampling; as a layer it is a plain softmax.
        "GumbelSoftmax": partial(nn.Softmax, dim=-1),
    }
    return layers.get(name, getattr(nn, name))()
