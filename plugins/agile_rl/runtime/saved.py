"""A saved member's architecture, checked against what its file holds before anything is built.

A checkpoint names each member's architecture (``arch``) beside its networks' weights, and
restoring it rebuilds the networks for that architecture before loading the weights into them.
An edited or crafted file could name layers a million wide over a few kilobytes of weights:
building them would take terabytes before the weights failed to fit. The networks an
architecture makes have at least as many parameters as :func:`parameter_floor` counts, so a
file whose weights hold fewer cannot be the member it claims, and is refused while the check
costs nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from agile_cli import Spec, TrainingError
from agile_rl.models.network import NetworkSpec
from agile_rl.nn.arch import NetworkArch, check_within
from agile_rl.nn.modules import EvolvableNetwork

_CHANGED = "use a checkpoint as agile wrote it, or train the run again"


def parameter_floor(arch: NetworkArch, networks: Iterable[Any]) -> int:
    """The fewest parameters the largest of ``networks`` (a member's, by its spaces) has once
    rebuilt for ``arch``: its encoder and a head of one output (a network whose encoder is
    borrowed from another counts none)."""
    from agile_rl.training.budget import network_parameters

    floors = [
        network_parameters(arch, network.observation_space, 1)
        for network in networks
        if isinstance(network, EvolvableNetwork) and _owns_encoder(network)
    ]
    return max(floors, default=0)


def held_parameters(saved: Any) -> int:
    """How many numbers the saved networks' weights hold (``state["networks"]``).

    :raises ValueError: it is not a mapping of network names to state dicts.
    """
    if not isinstance(saved, Mapping) or not all(isinstance(v, Mapping) for v in saved.values()):
        raise ValueError("its networks are not saved as state dicts")
    tensors = (value for state in saved.values() for value in state.values())
    return sum(tensor.numel() for tensor in tensors if isinstance(tensor, torch.Tensor))


def check_saved_arch(
    arch: NetworkArch, networks: Iterable[Any], saved: Any, network: Spec | None = None
) -> None:
    """Refuse ``arch`` unless it lies within the ``network`` section's bounds (where given) and
    the weights ``saved`` with it can fill ``networks`` rebuilt for it: nothing is built.

    :raises TrainingError: naming what is out of bounds, or the parameters the architecture
        needs and those held.
    :raises ValueError: ``saved`` is not a mapping of state dicts.
    """
    if isinstance(network, NetworkSpec):
        try:
            check_within(arch, network)
        except ValueError as exc:
            raise TrainingError(
                f"a saved member's architecture is not one its run could have grown: {exc}",
                _CHANGED,
            ) from None
    floor, held = parameter_floor(arch, networks), held_parameters(saved)
    if floor > held:
        raise TrainingError(
            f"a saved member's architecture {arch.describe()} makes networks of at least "
            f"{floor:,} parameters, and its saved weights hold {held:,}: the checkpoint was "
            "changed after agile wrote it, and nothing of it was built",
            _CHANGED,
        )


def _owns_encoder(network: EvolvableNetwork) -> bool:
    return any(True for _ in network.encoder.parameters())
