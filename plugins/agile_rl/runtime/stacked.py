"""Several members' copies of one network as stacked tensors: one batched forward for all.

A :class:`StackedNetwork` holds, for ``k`` members, every parameter of a network as one tensor
with the members along dimension 0, all of them views into one flat ``[k, P]`` buffer, so
that an optimizer step, a gradient norm or a soft update is one operation for the whole group
whatever the number of layers. Its forward pass runs the members' MLPs as batched matrix
products (``baddbmm``): ``k`` small networks cost about as much as one. Convolutions, whose
arithmetic dwarfs their calls' overhead, run member by member.

**Padding.** Members whose networks have the same layout (the same layers, activations and
norms) but different widths (node mutations) stack too: every parameter is padded with
zeros to the widest member's shape, and each member's extra hidden units are masked to zero
after their activation; layer norms take their statistics over the member's own units only.
Padded units then neither change a member's outputs nor receive any gradient, so they stay
zero, and a member computes exactly what its own network does (up to float rounding).
Convolutions pad their channels the same way (their kernels and strides must be equal). The
price is compute: a member is evaluated at the group's widest shape, so
:func:`~agile_rl.runtime.group.group_members` pads a member into a group only where its cost
model says the group still costs less than its members alone.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from agile_rl.nn.arch import CNNArch, CnnLstmArch, EncoderArch, MLPArch, NetworkArch
from agile_rl.nn.modules import (
    CNN,
    MLP,
    BorrowedEncoder,
    CnnLstmEncoder,
    ConvFeatures,
    EvolvableNetwork,
    LogStd,
)
from agile_rl.nn.neurons import GradientSums
from agile_rl.nn.noisy import NoisyLinear, draw_normals, signed_sqrt
from agile_rl.nn.recurrent import LSTMEncoder
from agile_rl.nn.recurrent_arch import LSTMArch
from agile_rl.runtime.compiled import (
    LAYER_NORM_EPS,
    Masks,
    compiled_forward,
    masked_layer_norm,
    masked_layers,
    probe_parts,
    program_of,
    reported,
)

#: Hidden activations that do not act unit by unit (or carry parameters): not stacked.
_UNSTACKABLE = frozenset({"Softmax", "GumbelSoftmax", "PReLU"})


def layout_key(network: nn.Module) -> Hashable | None:
    """What must be equal for two networks to stack (their widths may differ); None for a
    network this module cannot stack (:func:`unstackable` says why)."""
    if isinstance(network, LogStd):
        return ("log_std", tuple(network.log_std.shape))
    if unstackable(network) is not None:
        return None
    assert isinstance(network, EvolvableNetwork)
    return (
        _widthless(network.arch),
        tuple(sorted(network.head_sizes.items())),
        network.head_extra,
        network.noisy_std is not None,
        repr(network.observation_space),
        isinstance(network.encoder, BorrowedEncoder),
    )


def unstackable(network: nn.Module) -> str | None:
    """Why ``network`` cannot be stacked, completing "the network ..."; None where it can."""
    if isinstance(network, LogStd):
        return None
    if not isinstance(network, EvolvableNetwork):
        return f"is a {type(network).__name__}, not an evolvable network"
    encoder, head = network.arch.encoder, network.arch.head
    parts = (encoder.cnn, encoder.lstm) if isinstance(encoder, CnnLstmArch) else (encoder,)
    activations: list[str | None] = [head.activation]
    for part in parts:
        if not isinstance(part, MLPArch | CNNArch | LSTMArch):
            return f"has a {encoder.kind} encoder, which does not stack yet"
        if isinstance(part, LSTMArch) and part.num_layers > 1 and part.dropout > 0:
            return "is an LSTM with dropout between layers (drawn member by member)"
        if isinstance(part, CNNArch) and part.layer_norm:
            return f"has a {encoder.kind} encoder with layer_norm, which does not stack yet"
        activations.append(part.activation)
    for activation in activations:
        if activation in _UNSTACKABLE:
            return f"uses the {activation} activation, which does not act unit by unit"
    return None


def _widthless(arch: NetworkArch) -> NetworkArch:
    """``arch`` with every width set to zero: what node mutations leave unchanged."""
    return replace(
        arch,
        encoder=_widthless_encoder(arch.encoder),
        latent_dim=0,
        head=replace(arch.head, hidden_size=(0,) * len(arch.head.hidden_size)),
    )


def _widthless_encoder(encoder: EncoderArch) -> EncoderArch:
    """``encoder`` (of a kind that stacks) with its widths set to zero."""
    if isinstance(encoder, LSTMArch):
        return replace(encoder, hidden_state_size=0)
    if isinstance(encoder, CNNArch):  # kernels and strides stay: they must be equal
        return replace(encoder, channel_size=(0,) * len(encoder.channel_size))
    if isinstance(encoder, CnnLstmArch):
        cnn, lstm = _widthless_encoder(encoder.cnn), _widthless_encoder(encoder.lstm)
        assert isinstance(cnn, CNNArch) and isinstance(lstm, LSTMArch)
        return replace(encoder, cnn=cnn, lstm=lstm)
    assert isinstance(encoder, MLPArch)
    return replace(encoder, hidden_size=(0,) * len(encoder.hidden_size))


#: Parameters of an LSTM, whose rows stack its four gates: stacked gate by gate.
_GATED = (".lstm.weight_ih_l", ".lstm.weight_hh_l", ".lstm.bias_ih_l", ".lstm.bias_hh_l")


def stack_shape(name: str, shape: torch.Size | tuple[int, ...]) -> tuple[int, ...]:
    """How a member's parameter ``name`` is laid out in a stack: an LSTM's gated parameters
    ``[4 * H, ...]`` as ``[4, H, ...]``, so that padding a smaller hidden state pads each gate
    (its zero units then stay zero); every other parameter as it is."""
    if any(part in name for part in _GATED):
        return (4, shape[0] // 4, *shape[1:])
    return tuple(shape)


def as_stacked(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """A member's parameter (or its optimizer moment) in its :func:`stack_shape`."""
    return tensor.reshape(stack_shape(name, tensor.shape))


def padded_shapes(networks: Sequence[nn.Module]) -> dict[str, tuple[int, ...]]:
    """Each parameter's stacked shape (:func:`stack_shape`) padded to the widest of
    ``networks`` (same layout)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for network in networks:
        for name, parameter in network.named_parameters():
            own = stack_shape(name, parameter.shape)
            old = shapes.get(name, (0,) * len(own))
            shapes[name] = tuple(max(a, b) for a, b in zip(old, own, strict=True))
    return shapes


def parameter_count(shapes: dict[str, tuple[int, ...]]) -> int:
    """The number of parameters of a network whose parameters have ``shapes``."""
    return sum(math.prod(shape) for shape in shapes.values())


class StackedNetwork:
    """``k`` members' copies of one network (same layout), stacked and padded.

    :param networks: each member's network, in group order.
    :param trainable: whether its parameters take gradients (False for target networks).
    """

    def __init__(self, networks: Sequence[nn.Module], *, trainable: bool) -> None:
        template = networks[0]
        self.template = template
        self.size = len(networks)
        self.shapes = padded_shapes(networks)
        device = next(template.parameters()).device
        total = parameter_count(self.shapes)
        self.flat = torch.zeros(self.size, total, device=device)
        self.trainable = trainable
        self.views = {
            name: view.requires_grad_(trainable) for name, view in self.views_of(self.flat).items()
        }
        self._load(networks)
        self.masks = self._masks(networks)
        self.noise = self._noise_buffers()
        self._noisy_layers = [_noisy_layers(network) for network in networks]
        self.mean_only = False
        #: Where forward passes that take gradients sum their units' gradients (one row per
        #: member, see :mod:`agile_rl.nn.neurons`); None: nowhere.
        self.gradients: GradientSums | None = None
        #: For networks whose encoder is a :class:`~agile_rl.nn.modules.BorrowedEncoder`: the
        #: stacked owners, whose latents it reads (set by the group that stacks both).
        self.borrowed: StackedNetwork | None = None
        #: Whether forward passes run compiled (:mod:`agile_rl.runtime.compiled`) where the
        #: network's layout allows it; set by the group.
        self.compiled = False
        self.program = program_of(template)
        self._all_masks: Masks | None = None
        #: Compiled passes' probes, whose gradients :attr:`gradients` has yet to count (see
        #: :mod:`agile_rl.runtime.compiled`): the group's next gradient step takes them.
        self.probes: list[torch.Tensor] = []

    def views_of(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Views ``[k, *shape]`` by parameter name of a ``[k, P]`` tensor laid out like
        :attr:`flat` (the parameters, or e.g. an optimizer's moments of them)."""
        views, offset = {}, 0
        for name, shape in self.shapes.items():
            count = math.prod(shape)
            views[name] = flat[:, offset : offset + count].view(self.size, *shape)
            offset += count
        return views

    # -- copying in and out ------------------------------------------------------------------

    def _load(self, networks: Sequence[nn.Module]) -> None:
        with torch.no_grad():
            for row, network in enumerate(networks):
                for name, parameter in network.named_parameters():
                    own = as_stacked(name, parameter)
                    self.views[name][row][corner(own.shape)].copy_(own)

    def write_back(self, networks: Sequence[nn.Module]) -> None:
        """Copy each member's part of the stacked parameters into its own network."""
        with torch.no_grad():
            for row, network in enumerate(networks):
                for name, parameter in network.named_parameters():
                    own = corner(stack_shape(name, parameter.shape))
                    parameter.copy_(self.views[name][row][own].reshape(parameter.shape))

    # -- padding masks -----------------------------------------------------------------------

    def _masks(self, networks: Sequence[nn.Module]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """For every layer (a convolution: its channels) whose output width differs between
        members: its ``[k, 1, W]`` mask of real units and ``[k, 1, 1]`` count of them."""
        masks = {}
        parameters = [dict(network.named_parameters()) for network in networks]
        for name, shape in self.shapes.items():
            if not name.endswith((".weight", ".weight_mu")) or len(shape) not in (2, 4):
                continue
            widths = [own[name].shape[0] for own in parameters]
            if min(widths) == shape[0]:
                continue
            layer = name.removesuffix("_mu").removesuffix(".weight")
            width = torch.tensor(widths, device=self.flat.device).view(-1, 1, 1)
            mask = (torch.arange(shape[0], device=self.flat.device).view(1, 1, -1) < width).float()
            masks[layer] = (mask, width.float())
        return masks

    # -- noisy layers (Fortunato et al., 2018) -----------------------------------------------

    def _noise_buffers(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Zero noise ``eps_in [k, in]`` and ``eps_out [k, out]`` for every noisy layer."""
        buffers = {}
        for name, shape in self.shapes.items():
            if name.endswith(".weight_mu"):
                out_width, in_width = shape
                zeros = partial(torch.zeros, self.size, device=self.flat.device)
                buffers[name.removesuffix(".weight_mu")] = (zeros(in_width), zeros(out_width))
        return buffers

    def reset_noise(self, generators: Sequence[torch.Generator | None]) -> None:
        """A new noise sample for every member's noisy layers, drawn as
        :func:`~agile_rl.nn.noisy.reset_noise` draws it for the member's own network (one
        draw from its generator, split among its layers in module order); a member whose
        generator is None keeps its noise."""
        for row, generator in enumerate(generators):
            if generator is None:
                continue
            layers = self._noisy_layers[row]
            sizes = [inputs + outputs for _, inputs, outputs in layers]
            noise = signed_sqrt(draw_normals(sum(sizes), generator).to(self.flat.device))
            for (name, inputs, outputs), part in zip(layers, noise.split(sizes), strict=True):
                eps_in, eps_out = self.noise[name]
                eps_in[row, :inputs] = part[:inputs]
                eps_out[row, :outputs] = part[inputs:]

    @contextmanager
    def mean_weights(self) -> Iterator[None]:
        """Inside, noisy layers compute with their mean weights (greedy actions)."""
        self.mean_only = True
        try:
            yield
        finally:
            self.mean_only = False

    # -- the forward pass --------------------------------------------------------------------

    def __call__(
        self, obs: torch.Tensor, extra: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        """Every head's output ``[k, B, width]`` on observations ``[k, B, ...]`` (and the
        extra head input ``[k, B, ...]``, e.g. actions, when the network has one)."""
        template = self.template
        assert isinstance(template, EvolvableNetwork), "only networks have a forward pass"
        if template.head_extra and extra is None:
            raise ValueError("this network's heads also need the extra input")
        if self.runs_compiled:
            return self._compiled_pass(obs, extra if template.head_extra else None)
        latent = self.latent(obs)
        if template.head_extra:
            assert extra is not None
            latent = torch.cat([extra.reshape(*extra.shape[:2], -1), latent], dim=-1)
        return self._heads(template, latent)

    def _compiled_pass(
        self, obs: torch.Tensor, extra: torch.Tensor | None
    ) -> dict[str, torch.Tensor]:
        """The compiled pass (:mod:`agile_rl.runtime.compiled`); where units' gradients are
        measured, with probes for the group's gradient step (:attr:`probes`)."""
        assert self.program is not None
        masks = self.all_masks()
        probe = None
        if self.gradients is not None and torch.is_grad_enabled():
            units = sum(mask.shape[-1] for mask in masks.values())
            probe = torch.zeros(self.size, obs.shape[1], units, device=obs.device)
            self.probes.append(probe.requires_grad_())
        forward = compiled_forward(self.program, probe is not None)
        # without gradients, a trained network's flat reads as a target's (one variant)
        flat = self.flat if torch.is_grad_enabled() else self.flat.detach()
        with reported():
            return forward(flat, masks, obs, extra, probe)

    def count_probe(self, grad: torch.Tensor) -> None:
        """Add a probe's gradient (:attr:`probes`), each layer's part, to :attr:`gradients`."""
        assert self.gradients is not None
        for layer, piece in probe_parts(grad, self.all_masks()).items():
            self.gradients.add(layer, piece)

    @property
    def runs_compiled(self) -> bool:
        """Whether forward passes run compiled: :attr:`compiled` is set, and the layout
        compiles (:func:`~agile_rl.runtime.compiled.program_of`) and reads no borrowed
        encoder. A compiled pass reads :attr:`flat` itself, so that the parameters' gradient
        comes as one ``[k, P]`` tensor (:meth:`trained_tensors`)."""
        return self.compiled and self.program is not None and self.borrowed is None

    def compile_passes(self) -> None:
        """Run forward passes compiled from now on, where the layout allows it; a trained
        network's :attr:`flat` then takes gradients itself (its views still do too, for eager
        passes; the buffer is written in place under ``no_grad`` only)."""
        self.compiled = True
        if self.runs_compiled and self.trainable:
            self.flat.requires_grad_(True)

    def trained_tensors(self) -> list[torch.Tensor]:
        """What a gradient step differentiates the loss by: :attr:`flat` where passes run
        compiled, else each parameter's view."""
        return [self.flat] if self.runs_compiled else list(self.views.values())

    def all_masks(self) -> Masks:
        """The masks ``[k, W]`` a compiled pass takes: every hidden layer's and the latent's,
        ones where the members' widths are equal."""
        if self._all_masks is None:
            assert self.program is not None
            masks = {}
            for layer in masked_layers(self.program):
                width = self.shapes[f"{layer}.weight"][0]
                mask, _ = self.masks.get(layer, (None, None))
                if mask is None:
                    mask = torch.ones(self.size, 1, width, device=self.flat.device)
                masks[layer] = mask[:, 0]
            self._all_masks = masks
        return self._all_masks

    def latent(self, obs: torch.Tensor) -> torch.Tensor:
        """The encoder's output ``[k, B, latent]`` on observations ``[k, B, ...]``: a
        borrowed encoder's is its owners', computed without gradient as a member's own
        :class:`~agile_rl.nn.modules.BorrowedEncoder` does."""
        if self.borrowed is not None:
            with torch.no_grad():
                return self.borrowed.latent(obs)
        encoder = self.template.encoder
        if isinstance(encoder, CNN):
            return self._cnn(encoder, obs)
        assert isinstance(encoder, MLP), "a stacked encoder is an MLP, a CNN or borrowed"
        return self._mlp("encoder", encoder, obs.reshape(*obs.shape[:2], -1))

    def _cnn(self, encoder: CNN, obs: torch.Tensor) -> torch.Tensor:
        """A CNN encoder's latents ``[k, B, latent]`` on images ``[k, B, *shape]``: the
        members' features (:meth:`_features`) into the latent's batched product."""
        latent = self._linear("encoder.out", self._features("encoder", encoder, obs))
        self._watch("encoder.out", latent)
        return self._masked("encoder.out", encoder.out_act(latent))

    def _features(self, prefix: str, convs: ConvFeatures, obs: torch.Tensor) -> torch.Tensor:
        """The flattened features ``[k, B, features]`` of convolutions ``convs`` (parameters
        under ``prefix``) on images ``[k, B, *shape]``: each member's convolutions on its own
        images (at the group's padded channels), stacked. Member by member, because the
        convolutions' arithmetic dwarfs their calls' overhead: a grouped convolution over the
        members' images side by side took 1.4 times as long on this CPU (the Nature CNN of
        configs/training/ppo/breakout.yaml, 4 members, 256 frames, a forward and backward
        pass, one thread: 0.82 s against 0.60 s), and stacking every layer's activations
        1.2 times."""
        images = obs.permute(0, 1, 4, 2, 3) if convs.channels_last else obs
        layers = [f"{prefix}.convs.{index}" for index in range(len(convs.convs))]
        weights = [self.views[f"{layer}.weight"].unbind(0) for layer in layers]
        biases = [self.views[f"{layer}.bias"].unbind(0) for layer in layers]
        features = []
        for row, x in enumerate(images.unbind(0)):  # unbind: its backward fills no zeros
            for index, (conv, act) in enumerate(zip(convs.convs, convs.acts, strict=True)):
                assert isinstance(conv, nn.Conv2d)
                x = act(F.conv2d(x, weights[index][row], biases[index][row], stride=conv.stride))
                if layers[index] in self.masks:
                    x = x * self.masks[layers[index]][0][row].view(-1, 1, 1)
            features.append(x.flatten(1))
        return torch.stack(features)

    def unroll(
        self,
        obs: torch.Tensor,
        state: tuple[torch.Tensor, ...],
        starts: torch.Tensor | None = None,
    ) -> tuple[dict[str, torch.Tensor], tuple[torch.Tensor, ...]]:
        """A recurrent network's head outputs along observation sequences ``[k, T, B, ...]``
        (each ``[k, T, B, width]``) and its hidden state after them, as
        :meth:`~agile_rl.nn.modules.EvolvableNetwork.unroll` gives them for one member.

        :param state: ``(h, c)``, each ``[k, num_layers, B, H]``, a member's own units first
            (zeros after); parts narrower than the group's widest hidden state are padded
            with zeros.
        :param starts: ``[k, T, B]`` booleans, True where a sequence's state is reset to zeros
            before that step; None: no resets.
        """
        template = self.template
        assert isinstance(template, EvolvableNetwork) and template.recurrent
        members, steps, batch = obs.shape[:3]
        encoder = template.encoder
        assert isinstance(encoder, LSTMEncoder), "a recurrent network encodes with an LSTM"
        if isinstance(encoder, CnnLstmEncoder):  # each frame's convolutions first
            x = self._features("encoder.cnn", encoder.cnn, obs.flatten(1, 2))
            x = x.view(members, steps, batch, -1)
        else:
            x = obs.reshape(members, steps, batch, -1)
        keep = None if starts is None else (~starts).to(x.dtype).unsqueeze(-1)
        width = self.views["encoder.lstm.weight_hh_l0"].shape[-1]
        h, c = (part if part.shape[-1] == width else F.pad(part, (0, width - part.shape[-1]))
                for part in state)  # fmt: skip
        finals_h, finals_c = [], []
        for layer in range(h.shape[1]):
            x, h_n, c_n = self._lstm_layer(layer, x, h[:, layer], c[:, layer], keep)
            finals_h.append(h_n)
            finals_c.append(c_n)
        latent = self._linear("encoder.out", x.reshape(members, steps * batch, -1))
        self._watch("encoder.out", latent)
        latent = self._masked("encoder.out", encoder.out_act(latent))
        outputs = {
            name: out.reshape(members, steps, batch, -1)
            for name, out in self._heads(template, latent).items()
        }
        return outputs, (torch.stack(finals_h, dim=1), torch.stack(finals_c, dim=1))

    def _heads(self, template: EvolvableNetwork, latent: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every head's output ``[k, B, width]`` on the members' latents ``[k, B, ...]``."""
        outputs = {}
        for name, head in template.heads.items():
            assert isinstance(head, MLP), "a network's heads are MLPs"
            outputs[name] = self._mlp(f"heads.{name}", head, latent)
        return outputs

    def _lstm_layer(
        self,
        layer: int,
        x: torch.Tensor,
        h: torch.Tensor,
        c: torch.Tensor,
        keep: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One LSTM layer along ``x`` ``[k, T, B, in]`` from ``h``, ``c`` ``[k, B, H]`` (gates
        in, forget, cell, out, as ``nn.LSTM``), resetting the state where ``keep`` is 0; its
        outputs ``[k, T, B, H]`` and final state."""
        views = self.views
        members, steps, batch = x.shape[:3]
        weight_ih = views[f"encoder.lstm.weight_ih_l{layer}"].flatten(1, 2)
        weight_hh = views[f"encoder.lstm.weight_hh_l{layer}"].flatten(1, 2).transpose(1, 2)
        bias = views[f"encoder.lstm.bias_ih_l{layer}"] + views[f"encoder.lstm.bias_hh_l{layer}"]
        inputs = torch.baddbmm(
            bias.flatten(1).unsqueeze(1), x.reshape(members, steps * batch, -1),
            weight_ih.transpose(1, 2),
        ).view(members, steps, batch, -1)  # fmt: skip
        outputs = []
        for step in range(steps):
            if keep is not None:
                h, c = h * keep[:, step], c * keep[:, step]
            gates = torch.baddbmm(inputs[:, step], h, weight_hh)
            in_gate, forget, cell, out = gates.chunk(4, dim=-1)
            c = torch.sigmoid(forget) * c + torch.sigmoid(in_gate) * torch.tanh(cell)
            h = torch.sigmoid(out) * torch.tanh(c)
            outputs.append(h)
        return torch.stack(outputs, dim=1), h, c

    def _mlp(self, prefix: str, module: MLP, x: torch.Tensor) -> torch.Tensor:
        for index, act in enumerate(module.acts):
            layer = f"{prefix}.layers.{index}"
            x = self._linear(layer, x)
            if f"{prefix}.norms.{index}.weight" in self.views:
                x = self._layer_norm(f"{prefix}.norms.{index}", layer, x)
            self._watch(layer, x)
            x = self._masked(layer, act(x))
        x = self._linear(f"{prefix}.out", x)
        if isinstance(module.out_norm, nn.LayerNorm):  # a normalised latent, no affine part
            x = self._normalised(f"{prefix}.out", x)
        if prefix == "encoder":  # the latent's units; a head's outputs are none
            self._watch("encoder.out", x)
        return self._masked(f"{prefix}.out", module.out_act(x))

    def _watch(self, producer: str, pre_activation: torch.Tensor) -> None:
        """Have the gradient of ``producer``'s units' ``pre_activation`` ``[k, ..., W]``
        summed into :attr:`gradients`, if set and the pass takes gradients."""
        if self.gradients is not None and pre_activation.requires_grad:
            pre_activation.register_hook(self.gradients.hook(producer))

    def _linear(self, layer: str, x: torch.Tensor) -> torch.Tensor:
        if layer in self.noise:
            weight, bias = self._noisy(layer)
        else:
            weight, bias = self.views[f"{layer}.weight"], self.views[f"{layer}.bias"]
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))

    def _noisy(self, layer: str) -> tuple[torch.Tensor, torch.Tensor]:
        """A noisy layer's weight and bias: ``mu + sigma * eps``, or ``mu`` in mean mode."""
        views = self.views
        weight, bias = views[f"{layer}.weight_mu"], views[f"{layer}.bias_mu"]
        if self.mean_only:
            return weight, bias
        eps_in, eps_out = self.noise[layer]
        noise = eps_out.unsqueeze(2) * eps_in.unsqueeze(1)
        weight = torch.addcmul(weight, views[f"{layer}.weight_sigma"], noise)
        return weight, torch.addcmul(bias, views[f"{layer}.bias_sigma"], eps_out)

    def _layer_norm(self, norm: str, layer: str, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.views[f"{norm}.weight"], self.views[f"{norm}.bias"]
        return torch.addcmul(bias.unsqueeze(1), self._normalised(layer, x), weight.unsqueeze(1))

    def _normalised(self, layer: str, x: torch.Tensor) -> torch.Tensor:
        """``layer``'s output normalised over each member's own units (no affine part)."""
        if layer not in self.masks:
            return F.layer_norm(x, x.shape[-1:], eps=LAYER_NORM_EPS)
        return masked_layer_norm(x, *self.masks[layer])

    def _masked(self, layer: str, x: torch.Tensor) -> torch.Tensor:
        masked = self.masks.get(layer)
        return x if masked is None else x * masked[0]


def corner(shape: torch.Size | tuple[int, ...]) -> tuple[slice, ...]:
    """The index of a member's own part of a padded tensor: its leading corner."""
    return tuple(slice(0, size) for size in shape)


def _noisy_layers(network: nn.Module) -> list[tuple[str, int, int]]:
    """Name, input and output width of each noisy layer of ``network``, in module order."""
    return [
        (name, module.in_features, module.out_features)
        for name, module in network.named_modules()
        if isinstance(module, NoisyLinear)
    ]


def stacked_observations(obs: Any, members: int) -> Any:
    """Preprocessed observations of ``members`` members' environments, ``[members * E, ...]``
    in member order, as ``[members, E, ...]`` (dict observations key by key)."""
    if isinstance(obs, dict):
        return {key: stacked_observations(value, members) for key, value in obs.items()}
    return obs.reshape(members, -1, *obs.shape[1:])


def flat_rows(obs: Any) -> Any:
    """Stacked observations ``[k, B, ...]`` as ``[k * B, ...]`` (dicts key by key): the
    inverse of :func:`stacked_observations`, e.g. to preprocess them."""
    if isinstance(obs, dict):
        return {key: flat_rows(value) for key, value in obs.items()}
    return obs.reshape(-1, *obs.shape[2:])
