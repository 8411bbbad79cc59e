"""The architecture of a recurrent (LSTM) encoder, and its mutations as pure functions.

Torch-free, like :mod:`agile_rl.nn.arch`, which offers it as one of its encoders; the torch
module built from it is :class:`agile_rl.nn.recurrent.LSTMEncoder`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

from agile_rl.nn.activations import check_activation

if TYPE_CHECKING:
    import numpy as np

_NODE_STEPS = (16, 32, 64)


def _moved(value: int, step: int, low: int, high: int) -> int:
    """``value + step`` when that stays within ``[low, high]``, else ``value``."""
    return value + step if low <= value + step <= high else value


@dataclass(frozen=True)
class LSTMArch:
    """A stack of LSTM layers read step by step, then a linear layer to the latent.

    Evolution resizes the hidden state (``add_node``/``remove_node``) and nothing else, as the
    manifest reference lists for LSTMs; ``add_layer``/``remove_layer`` are there for code that
    changes the depth on purpose (like SimBa's blocks, :class:`~agile_rl.nn.arch.NetworkArch`
    does not offer them).

    :param hidden_state_size: width of each layer's hidden and cell state.
    :param num_layers: stacked LSTM layers.
    :param dropout: dropout between stacked layers (training mode only).
    :param activation: activation of the latent (None: linear); activation mutation changes it.
    """

    kind: ClassVar[str] = "lstm"
    node_methods: ClassVar[tuple[str, ...]] = ("add_node", "remove_node")
    layer_methods: ClassVar[tuple[str, ...]] = ("add_layer", "remove_layer")

    hidden_state_size: int
    num_layers: int = 1
    min_hidden_state_size: int = 8
    max_hidden_state_size: int = 512
    min_layers: int = 1
    max_layers: int = 3
    dropout: float = 0.0
    activation: str | None = "ReLU"

    def add_node(self, rng: np.random.Generator) -> tuple[LSTMArch, dict[str, int]]:
        """Widen the hidden state by 16, 32 or 64, unless that passes the maximum."""
        return self._resize(True, rng)

    def remove_node(self, rng: np.random.Generator) -> tuple[LSTMArch, dict[str, int]]:
        """Narrow the hidden state by 16, 32 or 64, unless that passes the minimum."""
        return self._resize(False, rng)

    def _resize(self, grow: bool, rng: np.random.Generator) -> tuple[LSTMArch, dict[str, int]]:
        amount = int(rng.choice(_NODE_STEPS))
        bounds = (self.min_hidden_state_size, self.max_hidden_state_size)
        hidden = _moved(self.hidden_state_size, amount if grow else -amount, *bounds)
        return replace(self, hidden_state_size=hidden), {"nodes": amount}

    @property
    def depth(self) -> int:
        """How many stacked LSTM layers: what the layer mutations change."""
        return self.num_layers

    def add_layer(self, rng: np.random.Generator) -> tuple[LSTMArch, dict[str, int]]:
        """Stack one more LSTM layer; at the most layers allowed, add nodes instead."""
        if self.num_layers >= self.max_layers:
            return self.add_node(rng)
        return replace(self, num_layers=self.num_layers + 1), {"layer": self.num_layers}

    def remove_layer(self, rng: np.random.Generator) -> tuple[LSTMArch, dict[str, int]]:
        """Drop the top LSTM layer; at the fewest layers allowed, add nodes instead."""
        if self.num_layers <= max(1, self.min_layers):
            return self.add_node(rng)
        return replace(self, num_layers=self.num_layers - 1), {"layer": self.num_layers - 1}

    def with_activation(self, activation: str) -> LSTMArch:
        """The same encoder with another latent activation (the LSTM's gates are fixed)."""
        check_activation(activation)
        return replace(self, activation=activation)

    def describe(self) -> str:
        """E.g. ``lstm[128x1]`` (hidden state size, number of layers)."""
        return f"lstm[{self.hidden_state_size}x{self.num_layers}]"
