"""The torch module of the recurrent encoders: :class:`LSTMEncoder`, built from
:class:`LSTMArch`, and the base of :class:`~agile_rl.nn.modules.CnnLstmEncoder`, which reads
images.

Their parameters are ``lstm.*`` (``nn.LSTM``'s own names, ``lstm.weight_ih_l0`` and so on, whose
rows stack the input, forget, cell and output gates: :func:`agile_rl.nn.transfer.gate_blocks`
resizes them gate by gate) and ``out``, the linear layer to the latent, after the CNN-LSTM's
convolutions ``cnn.*``. Parameter mutation leaves the ``lstm`` tensors alone (it skips names
containing ``lstm``).

The encoder reads observation sequences time-major, ``[T, B, ...]``, from a hidden state
``(h, c)`` of two ``[num_layers, B, hidden_state_size]`` tensors, and can reset the state of
single sequences to zeros where a new episode starts inside them.

Dropout between stacked layers is drawn from the generator the encoder was built with (the
member's), not by ``nn.LSTM`` itself, whose dropout masks come from torch's global generator
(and, on CUDA, from cuDNN's own state): in training mode with dropout the layers run one by
one with a mask drawn between them.
"""

from __future__ import annotations

from itertools import pairwise

import torch
from torch import nn

from agile_rl.nn.activations import make_activation
from agile_rl.nn.eager import uninitialised
from agile_rl.nn.recurrent_arch import LSTMArch
from agile_rl.nn.sampling import uniform

LSTMState = tuple[torch.Tensor, torch.Tensor]
"""An LSTM's ``(h, c)``, each ``[num_layers, batch, hidden_state_size]``."""

_LATENT_GAIN = 2**0.5
_LAYER_PARAMETERS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


def _segments(starts: torch.Tensor) -> list[int]:
    """The steps at which some sequence starts a new episode, with step 0 always included:
    between two of them every sequence runs uninterrupted."""
    inside = torch.nonzero(starts[1:].any(dim=1)).flatten() + 1
    return [0, *inside.tolist()]


class LSTMEncoder(nn.Module):
    """``nn.LSTM`` over flattened observations, then a ``Linear`` to the latent (``out``).

    The LSTM's weights are orthogonal and its biases zero (as in CleanRL's recurrent PPO);
    ``out`` is orthogonal with gain sqrt 2, like a hidden layer.

    :param n_in: input width (observations are flattened after the time and batch dimensions).
    :param arch: the LSTM's architecture.
    :param n_out: width of the latent.
    :param generator: source of the initial weights and of the dropout masks (None: torch's
        global generator).
    """

    def __init__(
        self, n_in: int, arch: LSTMArch, n_out: int, generator: torch.Generator | None = None
    ) -> None:
        super().__init__()
        self.num_layers = arch.num_layers
        self.hidden_size = arch.hidden_state_size
        self.dropout = arch.dropout if arch.num_layers > 1 else 0.0
        self.generator = generator
        # Uninitialised, then seeded below; without dropout of its own (see _run).
        self.lstm = uninitialised(nn.LSTM, n_in, arch.hidden_state_size, arch.num_layers)
        self.out = uninitialised(nn.Linear, arch.hidden_state_size, n_out)
        with torch.no_grad():
            for name, parameter in self.lstm.named_parameters():
                if name.startswith("weight"):
                    nn.init.orthogonal_(parameter, 1.0, generator=generator)
                else:
                    nn.init.zeros_(parameter)
            nn.init.orthogonal_(self.out.weight, _LATENT_GAIN, generator=generator)
            nn.init.zeros_(self.out.bias)
        self.out_act = make_activation(arch.activation)

    def initial_state(self, batch: int) -> LSTMState:
        """A zero state for ``batch`` sequences, on the module's device."""
        weight = self.out.weight
        shape = (self.num_layers, batch, self.hidden_size)
        return weight.new_zeros(shape), weight.new_zeros(shape)

    def forward(
        self,
        x: torch.Tensor,
        state: LSTMState | None = None,
        starts: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, LSTMState]:
        """The latent along sequences ``x`` of shape ``[T, B, ...]``, and the final state.

        :param state: the state before the first step.
        :param starts: ``[T, B]`` booleans, True where a sequence's state is reset to zeros
            before that step (a new episode starts there); None: no resets.
        :returns: the latent ``[T, B, n_out]`` and the state after the last step.
        """
        if state is None:
            raise TypeError(
                "a recurrent encoder reads sequences from a hidden state: use "
                "EvolvableNetwork.unroll(obs, state) and initial_state(batch)"
            )
        steps, batch = x.shape[:2]
        x = self._inputs(x)
        h, c = state
        if starts is None:
            out, (h, c) = self._run(x, (h, c))
        else:
            parts = []
            for begin, end in pairwise([*_segments(starts), steps]):
                keep = (~starts[begin]).to(h.dtype).view(1, batch, 1)
                part, (h, c) = self._run(x[begin:end], (h * keep, c * keep))
                parts.append(part)
            out = torch.cat(parts)
        return self.out_act(self.out(out)), (h, c)

    def _inputs(self, x: torch.Tensor) -> torch.Tensor:
        """What the LSTM reads at each step of observations ``x`` ``[T, B, ...]``: each
        observation flattened, ``[T, B, n_in]``."""
        return x.reshape(*x.shape[:2], -1)

    def _run(self, x: torch.Tensor, state: LSTMState) -> tuple[torch.Tensor, LSTMState]:
        """The stacked LSTM along ``x`` from ``state``: in one call, or layer by layer when
        dropout applies between them."""
        if not (self.training and self.dropout > 0):
            return self.lstm(x, state)
        h, c = state
        finals: list[LSTMState] = []
        for layer in range(self.num_layers):
            if layer:
                x = self._drop(x)
            weights = [getattr(self.lstm, f"{kind}_l{layer}") for kind in _LAYER_PARAMETERS]
            part = (h[layer : layer + 1], c[layer : layer + 1])
            x, h_n, c_n = torch.lstm(x, part, weights, True, 1, 0.0, True, False, False)
            finals.append((h_n, c_n))
        return x, (torch.cat([f[0] for f in finals]), torch.cat([f[1] for f in finals]))

    def _drop(self, x: torch.Tensor) -> torch.Tensor:
        """Inverted dropout of rate ``self.dropout``, its mask from the encoder's generator."""
        if self.generator is None:
            return nn.functional.dropout(x, self.dropout, training=True)
        if self.dropout >= 1.0:
            return torch.zeros_like(x)
        keep = uniform(x.shape, self.generator, x.device) >= self.dropout
        return x * keep.to(x.dtype) / (1.0 - self.dropout)
