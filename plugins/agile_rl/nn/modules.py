"""Torch modules built from an architecture description (:mod:`agile_rl.nn.arch`).

Parameter names are stable across architecture changes so that
:func:`agile_rl.nn.transfer.transfer_weights` can match them: an MLP's hidden layers are
``layers.<i>`` (with ``norms.<i>`` and ``acts.<i>``) and its output layer is always ``out``; a
CNN's convolutions are ``convs.<i>`` and its final linear layer ``out``; SimBa has ``embed``,
``blocks.<i>.norm``/``up``/``down``, ``norm`` and ``out``; an LSTM (built in
:mod:`agile_rl.nn.recurrent`) has ``lstm`` and ``out``, and a CNN-LSTM has the convolutions
under ``cnn`` (``cnn.convs.<i>``, ``cnn.norms.<i>``), then ``lstm`` and ``out``. A network's
encoder lives under ``encoder`` and each head under ``heads.<name>``, e.g.
``heads.q.out.weight``.

Every random draw made while initialising comes from the ``generator`` passed in. Layers are
created uninitialised (:func:`agile_rl.nn.eager.uninitialised`) so building a network never
touches the global random state when a generator is given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import partial
from itertools import pairwise
from typing import Any, cast

import gymnasium
import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agile_rl.nn.activations import make_activation
from agile_rl.nn.arch import (
    CNNArch,
    CnnLstmArch,
    MLPArch,
    MultiInputArch,
    NetworkArch,
    SimBaArch,
    is_image_space,
)
from agile_rl.nn.eager import uninitialised
from agile_rl.nn.noisy import NoisyLinear
from agile_rl.nn.recurrent import LSTMEncoder
from agile_rl.nn.recurrent_arch import LSTMArch
from agile_rl.nn.transfer import transfer_weights

Observation = torch.Tensor | dict[str, torch.Tensor]

_HIDDEN_GAIN = math.sqrt(2)
_VANISH = 0.1


def _initialise(
    layer: nn.Linear | nn.Conv2d, gain: float | None, generator: torch.Generator | None
) -> None:
    """Orthogonal weights with ``gain`` and zero biases; ``gain=None`` is PyTorch's default."""
    bias = cast(torch.Tensor, layer.bias)  # the layers made here all have one
    with torch.no_grad():
        if gain is not None:
            nn.init.orthogonal_(layer.weight, gain, generator=generator)
            nn.init.zeros_(bias)
            return
        nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=generator)
        bound = 1 / math.sqrt(layer.weight[0].numel())
        nn.init.uniform_(bias, -bound, bound, generator=generator)


def _linear(
    n_in: int, n_out: int, gain: float | None, generator: torch.Generator | None
) -> nn.Linear:
    layer = uninitialised(nn.Linear, n_in, n_out)
    _initialise(layer, gain, generator)
    return layer


def _any_linear(
    n_in: int,
    n_out: int,
    gain: float | None,
    *,
    noisy_std: float | None,
    generator: torch.Generator | None,
) -> nn.Linear | NoisyLinear:
    """A plain layer, or a noisy one (``noisy_std`` set) whose mean starts as the plain would."""
    if noisy_std is None:
        return _linear(n_in, n_out, gain, generator)
    return NoisyLinear(n_in, n_out, noisy_std, gain=gain, generator=generator)


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(x.shape[0], -1)


class Flatten(nn.Module):
    """Flatten everything after the batch dimension (a 1-D batch becomes one column)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _flat(x)


class MLP(nn.Module):
    """Hidden blocks ``Linear -> (LayerNorm) -> activation``, then the output ``Linear``.

    As a head, the output takes ``output_activation`` and, with ``output_vanish``, weights
    scaled by 0.1. As an encoder (``latent=True``) the output is a latent that heads read: it
    takes the hidden activation, is initialised like a hidden layer and, with the
    architecture's ``latent_norm``, is layer-normalised (no learned scale or shift) first.

    With ``noisy_std`` the hidden and output layers are :class:`~agile_rl.nn.noisy.NoisyLinear`
    (parameters ``weight_mu``, ``weight_sigma``, ``bias_mu``, ``bias_sigma``), their means
    initialised as the plain layers would be.

    :param n_in: input width (inputs are flattened after the batch dimension).
    :param arch: the MLP's architecture.
    :param n_out: output width.
    :param latent: build an encoder rather than a head.
    :param generator: source of the initial weights.
    :param noisy_std: initial noise scale of noisy layers; ``None`` for plain ones.
    """

    def __init__(
        self,
        n_in: int,
        arch: MLPArch,
        n_out: int,
        *,
        latent: bool = False,
        generator: torch.Generator | None = None,
        noisy_std: float | None = None,
    ) -> None:
        super().__init__()
        hidden_gain = _HIDDEN_GAIN if arch.init_layers else None
        out_gain = hidden_gain if latent else (1.0 if arch.init_layers else None)
        widths = (n_in, *arch.hidden_size)
        linear = partial(_any_linear, noisy_std=noisy_std, generator=generator)
        self.layers = nn.ModuleList(linear(a, b, hidden_gain) for a, b in pairwise(widths))
        self.norms = nn.ModuleList(
            nn.LayerNorm(width) if arch.layer_norm else nn.Identity() for width in arch.hidden_size
        )
        self.acts = nn.ModuleList(make_activation(arch.activation) for _ in arch.hidden_size)
        self.out = linear(widths[-1], n_out, out_gain)
        self.out_norm: nn.Module = nn.Identity()
        if latent and arch.latent_norm:
            self.out_norm = nn.LayerNorm(n_out, elementwise_affine=False)
        self.out_act = make_activation(arch.activation if latent else arch.output_activation)
        if arch.output_vanish and not latent:
            with torch.no_grad():
                out = self.out
                weight = out.weight_mu if isinstance(out, NoisyLinear) else out.weight
                weight.mul_(_VANISH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _flat(x)
        for layer, norm, act in zip(self.layers, self.norms, self.acts, strict=True):
            x = act(norm(layer(x)))
        return self.out_act(self.out_norm(self.out(x)))


def channels_last(shape: tuple[int, ...]) -> bool:
    """Whether an image of ``shape`` is laid out ``(H, W, C)`` rather than ``(C, H, W)``.

    The rule: the last dimension is channels when it is at most 4 (grey, RGB, RGBA or four
    stacked frames) and smaller than the first, which is then the height.
    """
    return shape[-1] <= 4 and shape[-1] < shape[0]


def _clamped_kernels(arch: CNNArch, height: int, width: int) -> list[int]:
    """The kernel of each layer, clamped to the image size at that layer (padding is 0)."""
    kernels = []
    for kernel, stride in zip(arch.kernel_size, arch.stride_size, strict=True):
        kernel = min(kernel, height, width)
        kernels.append(kernel)
        height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
    return kernels


def _conv_gain(arch: CNNArch) -> float | None:
    """The gain of a CNN's layers: He-scaled orthogonal with ``init_layers``, else PyTorch's."""
    return _HIDDEN_GAIN if arch.init_layers else None


class ConvFeatures(nn.Module):
    """Convolutions (padding 0) each followed by a norm and the activation: the features of
    each image, flattened to ``n_features``. What a :class:`CNN` reads its latent from, and
    what a CNN-LSTM (:class:`CnnLstmEncoder`) reads every frame with.

    With ``layer_norm`` the norm is ``GroupNorm(1, C)``: a layer norm over each sample's whole
    feature map, with one scale and shift per channel. Channels-last images (see
    :func:`channels_last`) are permuted to channels-first.

    :param shape: the image shape of one observation.
    :param arch: the convolutions' architecture.
    :param generator: source of the initial weights.
    """

    def __init__(
        self, shape: tuple[int, ...], arch: CNNArch, generator: torch.Generator | None = None
    ) -> None:
        super().__init__()
        self.channels_last = channels_last(shape)
        channels, height, width = (shape[2], shape[0], shape[1]) if self.channels_last else shape
        kernels = _clamped_kernels(arch, height, width)
        convs = []
        sizes = pairwise((channels, *arch.channel_size))
        for (n_in, n_conv), kernel, stride in zip(sizes, kernels, arch.stride_size, strict=True):
            conv = uninitialised(nn.Conv2d, n_in, n_conv, kernel, stride=stride)
            _initialise(conv, _conv_gain(arch), generator)
            convs.append(conv)
        self.convs = nn.ModuleList(convs)
        self.norms = nn.ModuleList(
            nn.GroupNorm(1, size) if arch.layer_norm else nn.Identity()
            for size in arch.channel_size
        )
        self.acts = nn.ModuleList(make_activation(arch.activation) for _ in arch.channel_size)
        with torch.no_grad():
            self.n_features = self.features(torch.zeros(1, *shape)).shape[1]

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The flattened features ``[N, n_features]`` of images ``[N, *shape]``."""
        if self.channels_last:
            x = x.permute(0, 3, 1, 2)
        for conv, norm, act in zip(self.convs, self.norms, self.acts, strict=True):
            x = act(norm(conv(x)))
        return _flat(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)


class CNN(ConvFeatures):
    """An image encoder: :class:`ConvFeatures`, then a ``Linear`` to the latent (``out``) with
    the convolutions' activation.

    :param shape: the image shape of one observation.
    :param arch: the CNN's architecture.
    :param n_out: width of the output (the latent).
    :param generator: source of the initial weights.
    """

    def __init__(
        self,
        shape: tuple[int, ...],
        arch: CNNArch,
        n_out: int,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(shape, arch, generator)
        self.out = _linear(self.n_features, n_out, _conv_gain(arch), generator)
        self.out_act = make_activation(arch.activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_act(self.out(self.features(x)))


class CnnLstmEncoder(LSTMEncoder):
    """A recurrent encoder for images: the convolutions of a CNN (``cnn``,
    :class:`ConvFeatures`) read every frame, and :class:`LSTMEncoder`
    reads their flattened features (its state, resets and dropout as there), then ``out`` and
    the latent's activation.

    :param shape: the image shape of one observation (channels-first or channels-last).
    :param arch: the encoder's architecture.
    :param n_out: width of the latent.
    :param generator: source of the initial weights (the convolutions', then the LSTM's and
        ``out``'s) and of the dropout masks.
    """

    def __init__(
        self,
        shape: tuple[int, ...],
        arch: CnnLstmArch,
        n_out: int,
        generator: torch.Generator | None = None,
    ) -> None:
        cnn = ConvFeatures(shape, arch.cnn, generator)
        super().__init__(cnn.n_features, arch.lstm, n_out, generator)
        self.cnn = cnn

    def _inputs(self, x: torch.Tensor) -> torch.Tensor:
        """The features of every frame of ``x`` ``[T, B, *shape]``: ``[T, B, n_features]``."""
        steps, batch = x.shape[:2]
        return self.cnn(x.flatten(0, 1)).reshape(steps, batch, -1)


class SimBaBlock(nn.Module):
    """SimBa's residual block ``x + down(ReLU(up(norm(x))))``; ``up`` widens by ``scale_factor``.

    :param arch: the SimBa architecture (width and scale factor).
    :param generator: source of the initial weights.
    """

    def __init__(self, arch: SimBaArch, generator: torch.Generator | None = None) -> None:
        super().__init__()
        inner = arch.scale_factor * arch.hidden_size
        self.norm = nn.LayerNorm(arch.hidden_size)
        self.up = _linear(arch.hidden_size, inner, _HIDDEN_GAIN, generator)
        self.act = nn.ReLU()
        self.down = _linear(inner, arch.hidden_size, _HIDDEN_GAIN, generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(self.act(self.up(self.norm(x))))


class SimBa(nn.Module):
    """SimBa's encoder (Lee et al., 2024): ``embed``, residual ``blocks``, ``norm``, ``out``.

    Initialisation follows the paper: orthogonal with gain 1 for the embedding and the output,
    He-scaled (orthogonal, gain sqrt 2) inside the blocks, zero biases.

    The paper also normalises observations with running statistics. That is left out here: a
    module updating statistics on every training-mode forward pass would move them whenever a
    network is evaluated (agile's networks stay in training mode, and a PPO update re-reads
    the rollout's observations expecting the same outputs), and target networks and clones
    would drift apart from their sources. Normalising observations is the job of whoever
    collects them, once per environment step.

    :param n_in: input width (inputs are flattened after the batch dimension).
    :param arch: the SimBa architecture.
    :param n_out: width of the output (the latent).
    :param generator: source of the initial weights.
    """

    def __init__(
        self, n_in: int, arch: SimBaArch, n_out: int, generator: torch.Generator | None = None
    ) -> None:
        super().__init__()
        self.embed = _linear(n_in, arch.hidden_size, 1.0, generator)
        self.blocks = nn.ModuleList(SimBaBlock(arch, generator) for _ in range(arch.num_blocks))
        self.norm = nn.LayerNorm(arch.hidden_size)
        self.out = _linear(arch.hidden_size, n_out, 1.0, generator)
        self.out_act = make_activation(arch.output_activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(_flat(x))
        for block in self.blocks:
            x = block(x)
        return self.out_act(self.out(self.norm(x)))


def _sub_encoder(
    space: gymnasium.spaces.Space, arch: MultiInputArch, generator: torch.Generator | None
) -> tuple[nn.Module, int]:
    """The encoder of one entry of a Dict observation, and its output width."""
    if isinstance(space, spaces.Dict | spaces.Tuple):
        raise ValueError(f"nested observation spaces are not supported: {space}")
    if is_image_space(space):
        return CNN(space.shape, arch.cnn, arch.latent_dim, generator), arch.latent_dim
    width = spaces.flatdim(space)
    if arch.vector_space_mlp:
        encoder = MLP(width, arch.mlp, arch.latent_dim, latent=True, generator=generator)
        return encoder, arch.latent_dim
    return Flatten(), width


class MultiInputEncoder(nn.Module):
    """One sub-encoder per entry of a Dict observation (``encoders.<key>``), concatenated and
    joined by a ``Linear`` to the latent (``out``) with the vector MLP's activation and init.

    :param space: the Dict observation space.
    :param arch: the multi-input architecture.
    :param n_out: width of the latent.
    :param generator: source of the initial weights.
    """

    def __init__(
        self,
        space: spaces.Dict,
        arch: MultiInputArch,
        n_out: int,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        encoders: dict[str, nn.Module] = {}
        total = 0
        for key, subspace in space.spaces.items():
            encoders[key], width = _sub_encoder(subspace, arch, generator)
            total += width
        self.encoders = nn.ModuleDict(encoders)
        gain = _HIDDEN_GAIN if arch.mlp.init_layers else None
        self.out = _linear(total, n_out, gain, generator)
        self.out_act = make_activation(arch.mlp.activation)

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        parts = [encoder(obs[key]) for key, encoder in self.encoders.items()]
        return self.out_act(self.out(torch.cat(parts, dim=-1)))


def _encoder(
    arch: NetworkArch, space: gymnasium.spaces.Space, generator: torch.Generator | None
) -> nn.Module:
    encoder = arch.encoder
    is_dict = isinstance(space, spaces.Dict)
    if isinstance(encoder, MultiInputArch) and isinstance(space, spaces.Dict):
        return MultiInputEncoder(space, encoder, arch.latent_dim, generator)
    if isinstance(encoder, CNNArch) and is_image_space(space):
        return CNN(space.shape, encoder, arch.latent_dim, generator)
    if isinstance(encoder, MLPArch) and not is_dict:
        return MLP(
            spaces.flatdim(space), encoder, arch.latent_dim, latent=True, generator=generator
        )
    if isinstance(encoder, SimBaArch) and not is_dict and not is_image_space(space):
        return SimBa(spaces.flatdim(space), encoder, arch.latent_dim, generator)
    if isinstance(encoder, LSTMArch) and not is_dict and not is_image_space(space):
        return LSTMEncoder(spaces.flatdim(space), encoder, arch.latent_dim, generator)
    if isinstance(encoder, CnnLstmArch) and is_image_space(space):
        return CnnLstmEncoder(space.shape, encoder, arch.latent_dim, generator)
    raise ValueError(f"a {encoder.kind} encoder cannot read the observation space {space}")


class EvolvableNetwork(nn.Module):
    """An encoder to a latent of ``arch.latent_dim``, and one MLP head per output.

    :param arch: the architecture.
    :param observation_space: the (unbatched) observation space; observations reach
        :meth:`forward` batched and preprocessed by :func:`preprocess`.
    :param heads: name and output width of each head, e.g. ``{"policy": 2, "value": 1}``.
    :param head_extra: width of an extra input the heads read besides the latent, e.g. the
        action of a Q(s, a) critic; it is placed before the latent, so its weights stay put
        when the latent width mutates.
    :param generator: source of the initial weights (global torch randomness when None).
    :param device: where the parameters live.
    :param noisy_std: build the heads of noisy layers with this initial noise scale
        (:class:`~agile_rl.nn.noisy.NoisyLinear`); ``None`` for plain layers.
    """

    def __init__(
        self,
        arch: NetworkArch,
        observation_space: gymnasium.spaces.Space,
        heads: Mapping[str, int],
        *,
        head_extra: int = 0,
        generator: torch.Generator | None = None,
        device: str | torch.device = "cpu",
        noisy_std: float | None = None,
    ) -> None:
        super().__init__()
        self.arch = arch
        self.observation_space = observation_space
        self.head_sizes = dict(heads)
        self.head_extra = head_extra
        self.noisy_std = noisy_std
        # Built on the CPU so that a CPU generator serves any device, then moved.
        self.encoder = _encoder(arch, observation_space, generator)
        head = partial(MLP, head_extra + arch.latent_dim, arch.head)
        self.heads = nn.ModuleDict(
            {
                name: head(width, generator=generator, noisy_std=noisy_std)
                for name, width in heads.items()
            }
        )
        self.to(device)

    def latent(self, obs: Observation) -> torch.Tensor:
        """The encoder's output, shape ``[batch, latent_dim]``."""
        return self.encoder(obs)

    def head(self, name: str, latent: torch.Tensor) -> torch.Tensor:
        """One head's output on a latent, shape ``[batch, width]``."""
        return self.heads[name](latent)

    def forward(
        self, obs: Observation, extra: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        """Every head's output on a batch of observations (and the extra head input, such as
        actions, when the network has one), by head name."""
        latent = self.latent(obs)
        if self.head_extra:
            if extra is None:
                raise ValueError("this network's heads also need the extra input")
            latent = torch.cat([extra.reshape(extra.shape[0], -1), latent], dim=-1)
        return {name: head(latent) for name, head in self.heads.items()}

    @property
    def recurrent(self) -> bool:
        """Whether the encoder carries a hidden state (an LSTM or a CNN-LSTM): the network then
        reads observation sequences with :meth:`unroll`, and :meth:`forward` refuses."""
        return isinstance(self.arch.encoder, LSTMArch | CnnLstmArch)

    def initial_state(self, batch: int) -> tuple[torch.Tensor, ...]:
        """A recurrent network's zero hidden state for ``batch`` sequences: ``(h, c)``, each
        ``[num_layers, batch, hidden_state_size]``."""
        return cast("LSTMEncoder", self.encoder).initial_state(batch)

    def unroll(
        self,
        obs: Observation,
        state: tuple[torch.Tensor, ...],
        starts: torch.Tensor | None = None,
    ) -> tuple[dict[str, torch.Tensor], tuple[torch.Tensor, ...]]:
        """A recurrent network's head outputs along observation sequences, by head name, and
        its hidden state after them.

        :param obs: preprocessed observations ``[T, B, ...]``, time first (``T = 1``: one
            step of ``B`` environments).
        :param state: the state before the first step: :meth:`initial_state`, or what the
            previous call returned.
        :param starts: ``[T, B]`` booleans, True where an episode starts: that sequence's
            state is reset to zeros before the step. None: no resets.
        :returns: each head's output ``[T, B, width]``, and the state after the last step.
        """
        latent, state = self.encoder(obs, state, starts)
        steps, batch = latent.shape[:2]
        flat = latent.reshape(steps * batch, -1)
        outputs = {name: head(flat).reshape(steps, batch, -1) for name, head in self.heads.items()}
        return outputs, state

    def rebuilt(
        self, arch: NetworkArch, generator: torch.Generator | None = None
    ) -> EvolvableNetwork:
        """A new network of ``arch`` holding this one's weights wherever shapes overlap.

        :param arch: the new architecture (usually a mutation of :attr:`arch`).
        :param generator: source of the weights that are new.
        """
        device = next(self.parameters()).device
        network = EvolvableNetwork(
            arch,
            self.observation_space,
            self.head_sizes,
            head_extra=self.head_extra,
            generator=generator,
            device=device,
            noisy_std=self.noisy_std,
        )
        transfer_weights(self, network)
        return network.train(self.training)


class BorrowedEncoder(nn.Module):
    """The encoder of another network, its ``owner``, read but not owned.

    The owner is held outside this module's submodules, so its parameters are not this
    module's: they are not saved, trained, soft-updated or mutated through the borrower. The
    latent is computed without gradient, so no loss of the borrower reaches the owner's
    encoder. A deep copy of a member copies the owner along (one copy: the member's own).
    """

    owner: EvolvableNetwork

    def __init__(self, owner: EvolvableNetwork) -> None:
        super().__init__()
        self.borrow_from(owner)

    def borrow_from(self, owner: EvolvableNetwork) -> None:
        """Read ``owner``'s encoder from now on."""
        object.__setattr__(self, "owner", owner)  # bypasses nn.Module: not a submodule

    def forward(self, obs: Observation) -> torch.Tensor:
        with torch.no_grad():
            return self.owner.latent(obs)


def _one_hot(values: torch.Tensor, n: int) -> torch.Tensor:
    return nn.functional.one_hot(values, n).to(torch.float32)


def _multi_one_hot(space: spaces.MultiDiscrete, obs: torch.Tensor) -> torch.Tensor:
    values = _flat(obs.long()) - torch.as_tensor(space.start.reshape(-1), device=obs.device)
    sizes = space.nvec.reshape(-1)
    return torch.cat([_one_hot(values[:, i], int(n)) for i, n in enumerate(sizes)], dim=-1)


class RawPixels(spaces.Box):
    """A box of uint8 images whose values reach the networks as they are (0-255, as floats)
    rather than scaled to [0, 1]: the observation space of a member whose algorithm says
    ``normalize_images: false``. Stored, sampled and described as the box it stands for."""


def unscaled_images(space: gymnasium.spaces.Space) -> gymnasium.spaces.Space:
    """``space`` with its uint8 boxes (a ``Dict``'s too) as :class:`RawPixels`."""
    if isinstance(space, spaces.Dict):
        return spaces.Dict({key: unscaled_images(sub) for key, sub in space.spaces.items()})
    if isinstance(space, spaces.Box) and space.dtype == np.uint8:
        return RawPixels(space.low, space.high, space.shape, np.uint8)
    return space


def scales_pixels(space: gymnasium.spaces.Space) -> bool:
    """Whether observations of ``space`` are images that :func:`preprocess` divides by 255."""
    return (
        isinstance(space, spaces.Box)
        and space.dtype == np.uint8
        and not isinstance(space, RawPixels)
    )


def preprocess(
    observation_space: gymnasium.spaces.Space,
    obs: np.ndarray | dict | torch.Tensor,
    device: str | torch.device = "cpu",
) -> Observation:
    """Batched observations (e.g. from a vector env) as the float tensors a network takes.

    ``Box``: float32 as is, except ``uint8`` (pixel data) which is divided by 255 (but
    :class:`RawPixels`, which is not); ``Discrete``:
    one-hot; ``MultiDiscrete``: one one-hot per entry, concatenated; ``MultiBinary``: float32;
    ``Dict``: a dict of its entries preprocessed. Images keep their layout: the CNN handles
    channels-last.

    :param observation_space: the unbatched observation space.
    :param obs: a batch of observations, batch dimension first.
    :param device: where the tensors go.
    """
    space = observation_space
    if isinstance(space, spaces.Dict):
        entries = cast("dict[str, Any]", obs)  # a Dict space's observations are dicts
        # Any: a nested Dict space gives a nested dict
        processed: dict[str, Any] = {
            key: preprocess(sub, entries[key], device) for key, sub in space.spaces.items()
        }
        return processed
    if not isinstance(obs, torch.Tensor):
        obs = np.asarray(obs)
    tensor = torch.as_tensor(obs, device=device)
    if isinstance(space, spaces.Discrete):
        return _one_hot(tensor.long().reshape(-1) - int(space.start), int(space.n))
    if isinstance(space, spaces.MultiDiscrete):
        return _multi_one_hot(space, tensor)
    if scales_pixels(space):
        return tensor.to(torch.float32) / 255.0
    if isinstance(space, spaces.Box | spaces.MultiBinary):
        return tensor.to(torch.float32)
    raise ValueError(f"unsupported observation space {space}")


class LogStd(nn.Module):
    """The state-independent log standard deviation of a Gaussian policy. Registered among a
    member's networks, it is optimised, checkpointed and cloned with them."""

    def __init__(self, size: int, value: float) -> None:
        super().__init__()
        self.log_std = nn.Parameter(torch.full((size,), float(value)))

    def rebuilt(self, arch: NetworkArch, generator: torch.Generator | None = None) -> LogStd:
        """Architecture changes leave it as it is."""
        twin = LogStd(self.log_std.numel(), 0.0).to(self.log_std.device)
        twin.load_state_dict(self.state_dict())
        return twin
