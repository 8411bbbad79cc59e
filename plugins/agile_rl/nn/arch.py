"""Architecture descriptions of evolvable networks, and their mutations as pure functions.

A :class:`NetworkArch` says what a network looks like (an encoder, a latent width and an MLP
head) without building it, so it can be mutated, compared, logged and written to a checkpoint
without torch. :mod:`agile_rl.nn.modules` builds torch modules from it.

Every mutation returns a new description together with the random arguments it drew (which
layer, how many nodes), so the caller can log what changed. A mutation that would leave its
bounds changes nothing, as in AgileRL's evolvable modules.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields, is_dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, TypeGuard, Union

from agile_cli import FieldError, ManifestError, Spec, limits
from agile_rl.models.network import (
    CNNEncoderConfig,
    CnnLstmEncoderConfig,
    LSTMEncoderConfig,
    MLPConfig,
    MultiInputEncoderConfig,
    NetworkSpec,
    SimBaEncoderConfig,
)
from agile_rl.nn.activations import ACTIVATIONS, check_activation
from agile_rl.nn.recurrent_arch import LSTMArch

if TYPE_CHECKING:
    import gymnasium
    import numpy as np


_NODE_STEPS = (16, 32, 64)
_LATENT_STEPS = (8, 16, 32)
_CHANNEL_STEPS = (8, 16, 32)
_KERNEL_SIZES = (3, 5, 7)

Args = dict[str, int]


def _step(value: int, step: int, low: int, high: int) -> int:
    """``value + step`` when that stays on the bounded side it moves towards, else ``value``."""
    moved = value + step
    if (step > 0 and moved <= high) or (step < 0 and moved >= low):
        return moved
    return value


def _resize_one(
    sizes: tuple[int, ...],
    steps: tuple[int, ...],
    grow: bool,
    bounds: tuple[int, int],
    rng: np.random.Generator,
) -> tuple[tuple[int, ...], Args]:
    """Grow or shrink one randomly chosen entry of ``sizes`` by a random step."""
    layer = int(rng.integers(len(sizes)))
    amount = int(rng.choice(steps))
    resized = list(sizes)
    resized[layer] = _step(sizes[layer], amount if grow else -amount, *bounds)
    return tuple(resized), {"layer": layer, "nodes": amount}


def _resize_latent(
    value: int, grow: bool, bounds: tuple[int, int], rng: np.random.Generator
) -> tuple[int, Args]:
    amount = int(rng.choice(_LATENT_STEPS))
    return _step(value, amount if grow else -amount, *bounds), {"nodes": amount}


@dataclass(frozen=True)
class ArchMethod:
    """One architecture mutation a network offers.

    :param name: namespaced name, e.g. ``head.add_layer`` or ``encoder.add_channel``.
    :param kind: ``"layer"`` (adds or removes a layer) or ``"node"`` (resizes one).
    """

    name: str
    kind: str


@dataclass(frozen=True)
class MLPArch:
    """A multi-layer perceptron: hidden widths, activations, initialisation and bounds."""

    kind: ClassVar[str] = "mlp"
    node_methods: ClassVar[tuple[str, ...]] = ("add_node", "remove_node")
    layer_methods: ClassVar[tuple[str, ...]] = ("add_layer", "remove_layer")

    hidden_size: tuple[int, ...]
    activation: str = "ReLU"
    output_activation: str | None = None
    layer_norm: bool = True
    init_layers: bool = True
    output_vanish: bool = True
    min_hidden_layers: int = 1
    max_hidden_layers: int = 3
    min_mlp_nodes: int = 8
    max_mlp_nodes: int = 500
    #: As an encoder, the latent is layer-normalised (no learned scale or shift) before its
    #: activation: for MLP encoders with ``layer_norm`` of algorithms that ask for it (DQN's:
    #: the heads read features of one scale). Architectures saved before it existed read back
    #: without it, and so compute what they did.
    latent_norm: bool = False

    @property
    def depth(self) -> int:
        """How many hidden layers: what the layer mutations change."""
        return len(self.hidden_size)

    def add_layer(self, rng: np.random.Generator) -> tuple[MLPArch, Args]:
        """Append a copy of the last layer; at the most layers allowed, add nodes instead."""
        if len(self.hidden_size) >= self.max_hidden_layers:
            return self.add_node(rng)
        width = self.hidden_size[-1]
        args = {"layer": len(self.hidden_size), "nodes": width}
        return replace(self, hidden_size=(*self.hidden_size, width)), args

    def remove_layer(self, rng: np.random.Generator) -> tuple[MLPArch, Args]:
        """Drop the last layer; at the fewest layers allowed, add nodes instead."""
        if len(self.hidden_size) <= self.min_hidden_layers:
            return self.add_node(rng)
        args = {"layer": len(self.hidden_size) - 1}
        return replace(self, hidden_size=self.hidden_size[:-1]), args

    def add_node(self, rng: np.random.Generator) -> tuple[MLPArch, Args]:
        """Widen a random layer by 16, 32 or 64 nodes, unless that passes ``max_mlp_nodes``."""
        return self._resize(True, rng)

    def remove_node(self, rng: np.random.Generator) -> tuple[MLPArch, Args]:
        """Narrow a random layer by 16, 32 or 64 nodes, unless that passes ``min_mlp_nodes``."""
        return self._resize(False, rng)

    def _resize(self, grow: bool, rng: np.random.Generator) -> tuple[MLPArch, Args]:
        bounds = (self.min_mlp_nodes, self.max_mlp_nodes)
        sizes, args = _resize_one(self.hidden_size, _NODE_STEPS, grow, bounds, rng)
        return replace(self, hidden_size=sizes), args

    def with_activation(self, activation: str) -> MLPArch:
        """The same MLP with another hidden activation (the output activation is kept)."""
        check_activation(activation)
        return replace(self, activation=activation)

    def describe(self) -> str:
        """E.g. ``mlp[64,64]``."""
        return f"mlp[{','.join(map(str, self.hidden_size))}]"


@dataclass(frozen=True)
class CNNArch:
    """A stack of 2-D convolutions: channels, kernels and strides of each layer, and bounds."""

    kind: ClassVar[str] = "cnn"
    node_methods: ClassVar[tuple[str, ...]] = ("add_channel", "remove_channel", "change_kernel")

    channel_size: tuple[int, ...]
    kernel_size: tuple[int, ...]
    stride_size: tuple[int, ...]
    activation: str = "ReLU"
    layer_norm: bool = False
    init_layers: bool = True
    min_hidden_layers: int = 1
    max_hidden_layers: int = 6
    min_channel_size: int = 8
    max_channel_size: int = 256

    def add_channel(self, rng: np.random.Generator) -> tuple[CNNArch, Args]:
        """Add 8, 16 or 32 channels to a random layer, unless that passes the maximum."""
        return self._resize(True, rng)

    def remove_channel(self, rng: np.random.Generator) -> tuple[CNNArch, Args]:
        """Remove 8, 16 or 32 channels from a random layer, unless that passes the minimum."""
        return self._resize(False, rng)

    def _resize(self, grow: bool, rng: np.random.Generator) -> tuple[CNNArch, Args]:
        bounds = (self.min_channel_size, self.max_channel_size)
        sizes, args = _resize_one(self.channel_size, _CHANNEL_STEPS, grow, bounds, rng)
        return replace(self, channel_size=sizes), {
            "layer": args["layer"],
            "channels": args["nodes"],
        }

    def change_kernel(self, rng: np.random.Generator) -> tuple[CNNArch, Args]:
        """Give a random layer another kernel size out of 3, 5 and 7.

        A kernel wider than the image at that layer is clamped when the module is built.
        """
        layer = int(rng.integers(len(self.kernel_size)))
        kernel = int(
            rng.choice([size for size in _KERNEL_SIZES if size != self.kernel_size[layer]])
        )
        kernels = list(self.kernel_size)
        kernels[layer] = kernel
        return replace(self, kernel_size=tuple(kernels)), {"layer": layer, "kernel": kernel}

    def with_activation(self, activation: str) -> CNNArch:
        """The same CNN with another activation."""
        check_activation(activation)
        return replace(self, activation=activation)

    def describe(self) -> str:
        """E.g. ``cnn[32k3s1,32k3s1]`` (channels, kernel, stride of each layer)."""
        layers = zip(self.channel_size, self.kernel_size, self.stride_size, strict=True)
        return f"cnn[{','.join(f'{c}k{k}s{s}' for c, k, s in layers)}]"


@dataclass(frozen=True)
class MultiInputArch:
    """Encoder of a gymnasium ``Dict`` observation: one sub-encoder per entry, concatenated.

    :param latent_dim: output width of each sub-encoder (mutated by ``encoder.add_node``).
    :param vector_space_mlp: give vector entries their own MLP (``mlp``) instead of passing
        them through flattened.
    :param mlp: the MLP of vector entries; its activation and init also serve the layer that
        joins the sub-encoders.
    :param cnn: the CNN of image entries.
    """

    kind: ClassVar[str] = "multiinput"
    node_methods: ClassVar[tuple[str, ...]] = ("add_node", "remove_node")

    latent_dim: int
    vector_space_mlp: bool
    min_latent_dim: int
    max_latent_dim: int
    mlp: MLPArch
    cnn: CNNArch

    def add_node(self, rng: np.random.Generator) -> tuple[MultiInputArch, Args]:
        """Widen every sub-encoder's output by 8, 16 or 32, within the latent bounds."""
        return self._resize(True, rng)

    def remove_node(self, rng: np.random.Generator) -> tuple[MultiInputArch, Args]:
        """Narrow every sub-encoder's output by 8, 16 or 32, within the latent bounds."""
        return self._resize(False, rng)

    def _resize(self, grow: bool, rng: np.random.Generator) -> tuple[MultiInputArch, Args]:
        bounds = (self.min_latent_dim, self.max_latent_dim)
        latent, args = _resize_latent(self.latent_dim, grow, bounds, rng)
        return replace(self, latent_dim=latent), args

    def with_activation(self, activation: str) -> MultiInputArch:
        """The same encoder with another activation in every sub-encoder."""
        return replace(
            self, mlp=self.mlp.with_activation(activation), cnn=self.cnn.with_activation(activation)
        )

    def describe(self) -> str:
        """E.g. ``multiinput(cnn[32k3s1], flat -> 64)``."""
        vector = self.mlp.describe() if self.vector_space_mlp else "flat"
        return f"multiinput({self.cnn.describe()}, {vector} -> {self.latent_dim})"


@dataclass(frozen=True)
class SimBaArch:
    """SimBa's residual encoder for vector observations (Lee et al., 2024, "SimBa: Simplicity
    Bias for Scaling Up Parameters in Deep Reinforcement Learning").

    A linear embedding to ``hidden_size``, ``num_blocks`` residual blocks
    ``x + MLP(LayerNorm(x))`` whose MLP is ``hidden -> scale_factor * hidden -> hidden`` with a
    ReLU, a final LayerNorm, and a linear layer to the latent.

    Evolution resizes the blocks (``add_node``/``remove_node``) and nothing else, as in
    AgileRL, where an encoder offers node mutations only and layers are added to the head.
    ``add_block``/``remove_block`` are there for code that changes the depth on purpose; like
    the MLP's ``layer_methods`` of an encoder, :class:`NetworkArch` does not offer them.

    The ReLU inside the blocks is part of the design (the residual stream and its LayerNorms
    assume it), so activation mutation leaves a SimBa encoder as it is.

    :param hidden_size: width of the embedding and of the residual stream.
    :param num_blocks: residual blocks.
    :param output_activation: activation of the latent, if any.
    :param scale_factor: how much wider each block's inner layer is than ``hidden_size``.
    """

    kind: ClassVar[str] = "simba"
    node_methods: ClassVar[tuple[str, ...]] = ("add_node", "remove_node")
    layer_methods: ClassVar[tuple[str, ...]] = ("add_block", "remove_block")

    hidden_size: int
    num_blocks: int
    output_activation: str | None = None
    scale_factor: int = 4
    min_blocks: int = 1
    max_blocks: int = 4
    min_mlp_nodes: int = 16
    max_mlp_nodes: int = 500

    def add_block(self, rng: np.random.Generator) -> tuple[SimBaArch, Args]:
        """Append a residual block; at the most blocks allowed, add nodes instead."""
        if self.num_blocks >= self.max_blocks:
            return self.add_node(rng)
        return replace(self, num_blocks=self.num_blocks + 1), {"block": self.num_blocks}

    def remove_block(self, rng: np.random.Generator) -> tuple[SimBaArch, Args]:
        """Drop the last residual block; at the fewest blocks allowed, add nodes instead."""
        if self.num_blocks <= self.min_blocks:
            return self.add_node(rng)
        return replace(self, num_blocks=self.num_blocks - 1), {"block": self.num_blocks - 1}

    def add_node(self, rng: np.random.Generator) -> tuple[SimBaArch, Args]:
        """Widen the blocks by 16, 32 or 64 nodes, unless that passes ``max_mlp_nodes``."""
        return self._resize(True, rng)

    def remove_node(self, rng: np.random.Generator) -> tuple[SimBaArch, Args]:
        """Narrow the blocks by 16, 32 or 64 nodes, unless that passes ``min_mlp_nodes``."""
        return self._resize(False, rng)

    def _resize(self, grow: bool, rng: np.random.Generator) -> tuple[SimBaArch, Args]:
        amount = int(rng.choice(_NODE_STEPS))
        bounds = (self.min_mlp_nodes, self.max_mlp_nodes)
        hidden = _step(self.hidden_size, amount if grow else -amount, *bounds)
        return replace(self, hidden_size=hidden), {"nodes": amount}

    def with_activation(self, activation: str) -> SimBaArch:
        """This encoder unchanged: its blocks keep SimBa's ReLU (see the class docstring)."""
        check_activation(activation)
        return self

    def describe(self) -> str:
        """E.g. ``simba[128x2]`` (block width, number of blocks)."""
        return f"simba[{self.hidden_size}x{self.num_blocks}]"


@dataclass(frozen=True)
class CnnLstmArch:
    """A recurrent encoder for images: a CNN's convolutions on each frame, an LSTM over their
    flattened features, and a linear layer to the latent (with ``lstm.activation``).

    Evolution leaves it as it is, as agilerl 2.58 does (``node_methods`` is empty): the latent
    and the head still mutate.

    :param cnn: the convolutions (its ``activation`` follows each of them); the linear layer
        of a CNN encoder is not built: the LSTM reads the features.
    :param lstm: the LSTM and the latent's activation.
    """

    kind: ClassVar[str] = "cnn_lstm"
    node_methods: ClassVar[tuple[str, ...]] = ()

    cnn: CNNArch
    lstm: LSTMArch

    def with_activation(self, activation: str) -> CnnLstmArch:
        """The same encoder with another activation after the convolutions (the LSTM's gates
        and the latent's activation are kept)."""
        return replace(self, cnn=self.cnn.with_activation(activation))

    def describe(self) -> str:
        """E.g. ``cnn[32k3s1,32k3s1]+lstm[128x1]``."""
        return f"{self.cnn.describe()}+{self.lstm.describe()}"


EncoderArch = MLPArch | CNNArch | MultiInputArch | SimBaArch | LSTMArch | CnnLstmArch
_KINDS: dict[str, type[EncoderArch]] = {
    cls.kind: cls for cls in (MLPArch, CNNArch, MultiInputArch, SimBaArch, LSTMArch, CnnLstmArch)
}


def _to_json(arch: EncoderArch) -> dict[str, Any]:
    data: dict[str, Any] = {"kind": arch.kind}
    for field in fields(arch):
        value = getattr(arch, field.name)
        if isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, EncoderArch):  # the sub-encoders of one that has them
            value = _to_json(value)
        data[field.name] = value
    return data


def _from_json(data: Any) -> EncoderArch:
    """The architecture ``_to_json`` wrote (values unchecked: see :func:`check_within`).

    :raises ValueError: ``data`` is not a mapping of a known kind with that kind's fields.
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"expected a mapping with a kind, got {_shown(data)}")
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in _KINDS:
        raise ValueError(
            f"unknown architecture kind {_shown(kind)}; expected one of {sorted(_KINDS)}"
        )
    cls = _KINDS[kind]
    names = {field.name for field in fields(cls)}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key == "kind":
            continue
        if key not in names:
            raise ValueError(f"an architecture of kind '{kind}' has no field {_shown(key)}")
        if isinstance(value, list):
            values[key] = tuple(value)
        elif isinstance(value, Mapping):
            values[key] = _from_json(value)
        else:
            values[key] = value
    required = {
        f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING
    }
    missing = sorted(required - set(values))
    if missing:
        raise ValueError(f"an architecture of kind '{kind}' needs {', '.join(missing)}")
    return cls(**values)


@dataclass(frozen=True)
class NetworkArch:
    """A whole network: an encoder to a latent of ``latent_dim``, and an MLP head on top."""

    encoder: EncoderArch
    latent_dim: int
    min_latent_dim: int
    max_latent_dim: int
    head: MLPArch

    def mutation_methods(self) -> list[ArchMethod]:
        """Every architecture mutation this network offers."""
        methods = [ArchMethod("latent.add_node", "node"), ArchMethod("latent.remove_node", "node")]
        methods += [ArchMethod(f"encoder.{name}", "node") for name in self.encoder.node_methods]
        methods += [ArchMethod(f"head.{name}", "layer") for name in MLPArch.layer_methods]
        methods += [ArchMethod(f"head.{name}", "node") for name in MLPArch.node_methods]
        return methods

    def apply(self, method: str, rng: np.random.Generator) -> tuple[NetworkArch, Args]:
        """Apply one mutation by name; return the new architecture and the arguments drawn.

        :param method: the name of one of :meth:`mutation_methods`.
        :param rng: source of the random choices.
        :raises ValueError: the name is not one of :meth:`mutation_methods`.
        """
        names = [candidate.name for candidate in self.mutation_methods()]
        if method not in names:
            raise ValueError(f"unknown architecture mutation {method!r}; expected one of {names}")
        part, operation = method.split(".", 1)
        if part == "latent":
            bounds = (self.min_latent_dim, self.max_latent_dim)
            latent, args = _resize_latent(self.latent_dim, operation == "add_node", bounds, rng)
            return replace(self, latent_dim=latent), args
        if part == "head":
            head, args = getattr(self.head, operation)(rng)
            return replace(self, head=head), args
        encoder, args = getattr(self.encoder, operation)(rng)
        return replace(self, encoder=encoder), args

    def with_activation(self, activation: str) -> NetworkArch:
        """The same network with another hidden activation in encoder and head.

        Output activations are untouched.
        """
        return replace(
            self,
            encoder=self.encoder.with_activation(activation),
            head=self.head.with_activation(activation),
        )

    def describe(self) -> str:
        """A short human-readable summary, e.g. ``mlp[64,64] -> 64 -> mlp[64]``."""
        return f"{self.encoder.describe()} -> {self.latent_dim} -> {self.head.describe()}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict that :meth:`from_dict` turns back into an equal architecture."""
        return {
            "encoder": _to_json(self.encoder),
            "latent_dim": self.latent_dim,
            "min_latent_dim": self.min_latent_dim,
            "max_latent_dim": self.max_latent_dim,
            "head": _to_json(self.head),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NetworkArch:
        """The architecture :meth:`to_dict` wrote. Its shape is checked, not its values: check
        data from a file with :func:`check_within` before building anything from it.

        :param data: the dict, e.g. read back from a JSON checkpoint.
        :raises ValueError: the dict does not describe a network architecture.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"expected a mapping, got {_shown(data)}")
        missing = [key for key in _NETWORK_KEYS if key not in data]
        if missing:
            raise ValueError(f"a network architecture needs {', '.join(missing)}")
        try:
            head, encoder = _from_json(data["head"]), _from_json(data["encoder"])
        except RecursionError:
            raise ValueError("its mappings nest too deeply") from None
        if not isinstance(head, MLPArch):
            raise ValueError(f"the head must be an mlp, not {head.kind}")
        return cls(
            encoder=encoder,
            latent_dim=_whole(data, "latent_dim"),
            min_latent_dim=_whole(data, "min_latent_dim"),
            max_latent_dim=_whole(data, "max_latent_dim"),
            head=head,
        )


_NETWORK_KEYS = ("encoder", "latent_dim", "min_latent_dim", "max_latent_dim", "head")


def _whole(data: Mapping[str, Any], key: str) -> int:
    """``data[key]`` as an int: an int, or a float without a fractional part."""
    value = data[key]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"{key} is {_shown(value)}, not a whole number")


def _shown(value: Any) -> str:
    """``value`` as an error message shows it: its repr, cut short."""
    text = repr(list(value) if isinstance(value, tuple) else value)
    return text if len(text) <= 40 else text[:37] + "..."


def is_image_space(space: gymnasium.spaces.Space) -> TypeGuard[gymnasium.spaces.Box]:
    """Whether ``space`` holds images: a 3-D ``Box``, channels-first or channels-last."""
    from gymnasium import spaces

    return isinstance(space, spaces.Box) and len(space.shape) == 3


def observed_kind(space: gymnasium.spaces.Space) -> str:
    """The encoder an observation space calls for: ``multiinput``, ``cnn`` or ``mlp``."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        return "multiinput"
    return "cnn" if is_image_space(space) else "mlp"


def _mismatch(path: str, message: str, hint: str) -> ManifestError:
    return ManifestError([FieldError(path, message, hint)])


#: The encoder that carries a hidden state for each kind of observation space that has one.
_RECURRENT = {"mlp": "lstm", "cnn": "cnn_lstm"}
#: What each of them reads.
_RECURRENT_READS = {"lstm": "vector", "cnn_lstm": "image (3-D Box)"}


def _encoder_kind(
    network: NetworkSpec, space: gymnasium.spaces.Space, recurrent: bool = False
) -> str:
    declared = network.arch
    observed = observed_kind(space)
    if recurrent or declared in _RECURRENT_READS:
        return _recurrent_kind(declared, observed, recurrent, space)
    if declared == "simba":
        if observed != "mlp":
            raise _simba_mismatch(network, space, observed)
        return declared
    if declared is None or declared == observed or (declared, observed) == ("mlp", "cnn"):
        return observed if declared is None else declared
    wanted = {"multiinput": "a Dict", "cnn": "an image (3-D Box)", "mlp": "a non-Dict"}[declared]
    raise _mismatch(
        "network.encoder_config.arch",
        f"'{declared}' needs {wanted} observation space, but the environment's is {space}",
        f"remove arch to let the observation space choose ('{observed}')",
    )


def _recurrent_kind(
    declared: str | None, observed: str, recurrent: bool, space: gymnasium.spaces.Space
) -> str:
    """The encoder that carries a hidden state for this observation space (``lstm`` for
    vectors, ``cnn_lstm`` for images), if it fits the algorithm and what the section
    declares."""
    if not recurrent:
        raise _mismatch(
            "network.encoder_config.arch",
            f"'{declared}' needs a recurrent algorithm, but algorithm.recurrent is not true",
            "set algorithm.recurrent: true, or remove arch",
        )
    if declared not in (None, *_RECURRENT_READS):
        raise _mismatch(
            "network.encoder_config.arch",
            f"'{declared}' carries no hidden state, but algorithm.recurrent is true",
            "write arch: lstm (vector observations) or cnn_lstm (images), or remove arch",
        )
    wanted = _RECURRENT.get(observed)
    if wanted is None:
        raise _mismatch(
            "algorithm.recurrent",
            "recurrent encoders read vector or image observations, but the environment's is "
            f"{space}",
            "set recurrent: false",
        )
    if declared not in (None, wanted):
        raise _mismatch(
            "network.encoder_config.arch",
            f"'{declared}' reads {_RECURRENT_READS[declared]} observations, but the "
            f"environment's is {space}",
            f"write arch: {wanted}, or remove arch",
        )
    return wanted


def _simba_mismatch(
    network: NetworkSpec, space: gymnasium.spaces.Space, observed: str
) -> ManifestError:
    written = "simba" if "simba" in network.model_fields_set else "encoder_config.arch"
    return _mismatch(
        f"network.{written}",
        f"SimBa is an encoder for vector observations, but the environment's is {space}",
        f"remove {written} to let the observation space choose ('{observed}')",
    )


def _from_config(
    cls: type[MLPArch | CNNArch | SimBaArch],
    config: MLPConfig | CNNEncoderConfig | CnnLstmEncoderConfig | SimBaEncoderConfig,
) -> Any:
    values = {f.name: getattr(config, f.name) for f in fields(cls) if hasattr(config, f.name)}
    kwargs: dict[str, Any] = {
        key: tuple(v) if isinstance(v, list) else v for key, v in values.items()
    }
    return cls(**kwargs)


def _default_cnn() -> CNNArch:
    return CNNArch(channel_size=(32, 32), kernel_size=(3, 3), stride_size=(1, 1))


def _mlp_encoder(config: Any) -> MLPArch:
    if isinstance(config, MLPConfig):
        return _from_config(MLPArch, config)
    return MLPArch(hidden_size=(64, 64))


def _cnn_encoder(config: Any) -> CNNArch:
    if isinstance(config, CNNEncoderConfig):
        return _from_config(CNNArch, config)
    # An MLP-shaped encoder_config without arch cannot describe an image encoder: use defaults.
    return _default_cnn()


def _multi_input_encoder(config: Any) -> MultiInputArch:
    if not isinstance(config, MultiInputEncoderConfig):
        return MultiInputArch(64, False, 8, 128, MLPArch(hidden_size=(64,)), _default_cnn())
    mlp = config.mlp_config
    cnn = config.cnn_config
    return MultiInputArch(
        latent_dim=config.latent_dim,
        vector_space_mlp=config.vector_space_mlp,
        min_latent_dim=config.min_latent_dim,
        max_latent_dim=config.max_latent_dim,
        mlp=_from_config(MLPArch, mlp) if mlp is not None else MLPArch(hidden_size=(64,)),
        cnn=_from_config(CNNArch, cnn) if cnn is not None else _default_cnn(),
    )


def _simba_encoder(config: Any) -> SimBaArch:
    if isinstance(config, SimBaEncoderConfig):
        return _from_config(SimBaArch, config)
    if config is None:
        return SimBaArch(hidden_size=128, num_blocks=2)
    # ``simba: true`` beside an MLP-shaped encoder_config: say so rather than drop its fields.
    raise _mismatch(
        "network.encoder_config",
        "describes an MLP encoder, but network.simba is true",
        "give SimBa's fields, e.g. {hidden_size: 128, num_blocks: 2}, or remove simba",
    )


def _lstm_from_config(config: LSTMEncoderConfig | CnnLstmEncoderConfig) -> LSTMArch:
    """The LSTM a recurrent encoder's config describes (its latent's activation aside)."""
    names = [f.name for f in fields(LSTMArch) if f.name != "activation"]
    return LSTMArch(**{name: getattr(config, name) for name in names})


def _lstm_encoder(config: Any) -> LSTMArch:
    if isinstance(config, LSTMEncoderConfig):
        return _lstm_from_config(config)
    if config is None:
        return LSTMArch(hidden_state_size=128)
    raise _not_recurrent("the LSTM's fields, e.g. {hidden_state_size: 64}")


def _cnn_lstm_encoder(config: Any) -> CnnLstmArch:
    if config is None:  # agilerl 2.58's defaults for a recurrent policy on images
        config = CnnLstmEncoderConfig()
    if not isinstance(config, CnnLstmEncoderConfig):
        raise _not_recurrent(
            "the CNN-LSTM's fields, e.g. {arch: cnn_lstm, channel_size: [32], kernel_size: [3], "
            "stride_size: [1], hidden_state_size: 64}"
        )
    lstm = replace(_lstm_from_config(config), activation=config.output_activation)
    return CnnLstmArch(cnn=_from_config(CNNArch, config), lstm=lstm)


def _not_recurrent(fields_wanted: str) -> ManifestError:
    """The refusal of an MLP's encoder_config (no arch) beside a recurrent algorithm."""
    return _mismatch(
        "network.encoder_config",
        "describes an MLP encoder, but algorithm.recurrent is true",
        f"give {fields_wanted}, or remove encoder_config",
    )


_ENCODER_BUILDERS: dict[str, Callable[[Any], EncoderArch]] = {
    "mlp": _mlp_encoder,
    "cnn": _cnn_encoder,
    "multiinput": _multi_input_encoder,
    "simba": _simba_encoder,
    "lstm": _lstm_encoder,
    "cnn_lstm": _cnn_lstm_encoder,
}


def arch_from_spec(
    network: NetworkSpec,
    observation_space: gymnasium.spaces.Space,
    *,
    recurrent: bool = False,
    latent_norm: bool = False,
) -> NetworkArch:
    """The architecture a validated ``network`` section describes for an observation space.

    The encoder is the one ``encoder_config.arch`` names (or SimBa, with ``simba: true``), else
    the one the space calls for (Dict -> multi-input, 3-D Box -> CNN, anything else -> MLP;
    for a recurrent algorithm, 3-D Box -> CNN-LSTM, anything else -> LSTM); fields the spec
    leaves out take their defaults.

    :param network: the validated ``network`` section.
    :param observation_space: the environment's (single, unbatched) observation space.
    :param recurrent: the algorithm carries a hidden state (``algorithm.recurrent``), which
        takes an LSTM or CNN-LSTM encoder, the ones that do.
    :param latent_norm: an MLP encoder with layer norm normalises its latent too (the
        algorithm's spec asks for it: ``normalised_latent``).
    :raises ManifestError: the declared encoder cannot read this observation space (e.g. SimBa,
        which reads vectors, on images), ``simba: true`` comes with an MLP's encoder_config,
        or a recurrent encoder and ``recurrent`` go one without the other.
    """
    kind = _encoder_kind(network, observation_space, recurrent)
    encoder = _ENCODER_BUILDERS[kind](network.encoder_config)
    if isinstance(encoder, MLPArch):
        encoder = replace(encoder, latent_norm=latent_norm and encoder.layer_norm)
    return NetworkArch(
        encoder=encoder,
        latent_dim=network.latent_dim,
        min_latent_dim=network.min_latent_dim,
        max_latent_dim=network.max_latent_dim,
        head=_from_config(MLPArch, network.head_config),
    )


# -- an architecture within a network section's bounds -------------------------------------------

#: What bounds each size of an architecture: ``field -> (least, the section's bounding field or
#: None, agile's limit)``. A field of several layers is bounded entry by entry.
Bounds = dict[str, tuple[int, str | None, int]]
_LATENT: Bounds = {
    name: (1, "max_latent_dim", limits.WIDTH)
    for name in ("latent_dim", "min_latent_dim", "max_latent_dim")
}
_NODES: Bounds = {
    name: (1, "max_mlp_nodes", limits.WIDTH)
    for name in ("hidden_size", "min_mlp_nodes", "max_mlp_nodes")
}
_SIZES: dict[type, Bounds] = {
    NetworkArch: _LATENT,
    MLPArch: {
        **_NODES,
        "min_hidden_layers": (1, "max_hidden_layers", limits.LAYERS),
        "max_hidden_layers": (1, "max_hidden_layers", limits.LAYERS),
    },
    CNNArch: {
        "channel_size": (1, "max_channel_size", limits.CHANNELS),
        "kernel_size": (1, None, limits.KERNEL),
        "stride_size": (1, None, limits.KERNEL),
        "min_channel_size": (1, "max_channel_size", limits.CHANNELS),
        "max_channel_size": (1, "max_channel_size", limits.CHANNELS),
        "min_hidden_layers": (1, "max_hidden_layers", limits.LAYERS),
        "max_hidden_layers": (1, "max_hidden_layers", limits.LAYERS),
    },
    MultiInputArch: _LATENT,
    CnnLstmArch: {},  # its parts are bounded one by one
    SimBaArch: {
        **_NODES,
        "num_blocks": (1, "max_blocks", limits.LAYERS),
        "min_blocks": (1, "max_blocks", limits.LAYERS),
        "max_blocks": (1, "max_blocks", limits.LAYERS),
        "scale_factor": (1, "scale_factor", 64),
    },
    LSTMArch: {
        "hidden_state_size": (1, "max_hidden_state_size", limits.WIDTH),
        "min_hidden_state_size": (1, "max_hidden_state_size", limits.WIDTH),
        "max_hidden_state_size": (1, "max_hidden_state_size", limits.WIDTH),
        "num_layers": (1, "max_layers", limits.LAYERS),
        "min_layers": (0, "max_layers", limits.LAYERS),
        "max_layers": (1, "max_layers", limits.LAYERS),
        "dropout": (0, None, 1),
    },
}
#: The field of layers whose length is an architecture's depth, and the section's bound of it.
_DEPTHS = {
    MLPArch: ("hidden_size", "max_hidden_layers"),
    CNNArch: ("channel_size", "max_hidden_layers"),
}
#: The encoders the observation space may call for when the network section names none: for an
#: algorithm without a hidden state, and for one with.
_OBSERVED = ("mlp", "cnn", "multiinput")
_OBSERVED_RECURRENT = tuple(_RECURRENT.values())


def check_within(arch: NetworkArch, network: NetworkSpec, *, recurrent: bool | None = None) -> None:
    """Refuse an architecture that members built from the validated ``network`` section could
    not have grown into: a size past the section's bound of it (or past agile's own limits,
    :mod:`agile_cli.limits`), bounds of its own (``max_mlp_nodes``, ``max_latent_dim``, ...)
    wider than the section's, or an encoder of another kind than the section declares.

    An architecture read from a file (a recipe's schedule, a checkpoint) is data anyone can
    write, and :meth:`NetworkArch.from_dict` checks its shape only: this checks its values
    too (whole numbers, flags, activation names), so that nothing large or broken is built
    from it. Each part is held to the section's config of that part (``head_config``,
    ``encoder_config`` where it describes the same kind of encoder, else that kind's
    defaults, which is what :func:`arch_from_spec` builds from).

    :param arch: the architecture, e.g. ``NetworkArch.from_dict(data)``.
    :param network: the validated network section whose bounds apply.
    :param recurrent: the algorithm carries a hidden state (its encoder is an LSTM or a
        CNN-LSTM, unless the section declares another, which building refuses); None: not
        known here, the observation space decides, so any encoder the section does not rule
        out passes.
    :raises ValueError: one sentence naming the first thing out of bounds, e.g.
        ``head.hidden_size[1] is 100000, over network.head_config.max_mlp_nodes 500``.
    """
    _check_types(arch, "")
    _check_kind(arch.encoder.kind, network, recurrent)
    for path, part, config, source in _bounded_parts(arch, network):
        _check_sizes(path, part, config, source)


def check_architecture(data: Mapping[str, Any], network: Spec, *, recurrent: bool) -> None:
    """The RL paradigms' check of an architecture a manifest names for their members (each
    entry of a recipe's schedule): data :meth:`NetworkArch.from_dict` reads, within the
    network section's bounds (:func:`check_within`).

    :param data: the architecture as the manifest gives it.
    :param network: the validated network section.
    :param recurrent: the algorithm carries a hidden state (``algorithm.recurrent``).
    :raises ValueError: naming what is wrong in ``data``.
    """
    if not isinstance(network, NetworkSpec):
        raise ValueError(
            f"names an architecture, but the network section is a {type(network).__name__}"
        )
    try:
        arch = NetworkArch.from_dict(data)
    except ValueError as exc:
        raise ValueError(f"not a network architecture: {exc}") from None
    check_within(arch, network, recurrent=recurrent)


def _check_kind(kind: str, network: NetworkSpec, recurrent: bool | None) -> None:
    """The encoder is of the kind members of ``network`` build: the one the section declares,
    else one the observation space may call for (a recurrent one for a recurrent algorithm)."""
    declared = network.arch
    if declared is not None:
        allowed: tuple[str, ...] = (declared,)
        wanted = f"the network section's is '{declared}'"
    elif recurrent is None:
        allowed = (*_OBSERVED, *_OBSERVED_RECURRENT)
        wanted = "the network section declares no simba"
    elif recurrent:
        allowed, wanted = _OBSERVED_RECURRENT, "a recurrent algorithm's is 'lstm' or 'cnn_lstm'"
    else:
        allowed = _OBSERVED
        wanted = "an algorithm without a hidden state takes no 'lstm' or 'cnn_lstm'"
    if kind not in allowed:
        raise ValueError(f"encoder.kind is '{kind}', but {wanted}")


def _bounded_parts(arch: NetworkArch, network: NetworkSpec) -> list[tuple[str, Any, Any, str]]:
    """Each part of ``arch`` with its path, the config bounding it and how to name that
    config."""
    encoder = arch.encoder
    config, source = _config(network.encoder_config, encoder.kind, "network.encoder_config")
    parts = [
        ("", arch, network, "network."),
        ("head", arch.head, network.head_config, "network.head_config."),
        ("encoder", encoder, config, source),
    ]
    if isinstance(encoder, MultiInputArch):
        for kind in ("mlp", "cnn"):
            inner = getattr(config, f"{kind}_config", None)
            parts.append((f"encoder.{kind}", getattr(encoder, kind),
                          *_config(inner, kind, f"{source}{kind}_config")))  # fmt: skip
    if isinstance(encoder, CnnLstmArch):  # one config bounds both parts
        parts += [(f"encoder.{name}", getattr(encoder, name), config, source)
                  for name in ("cnn", "lstm")]  # fmt: skip
    return parts


def _config(config: Spec | None, kind: str, path: str) -> tuple[Spec, str]:
    """The config bounding an encoder of ``kind``: ``config`` (at ``path``) where it describes
    one, else that kind's defaults."""
    spec = NetworkSpec.encoder_types()[kind]
    if isinstance(config, spec):
        return config, f"{path}."
    return spec(), f"the {kind} encoder's default "


def _check_layers(path: str, part: Any, config: Any, source: str) -> None:
    """``part``'s depth within ``config``'s bound of it (named by ``source``), and a CNN's
    kernels and strides one per layer."""
    depth = _DEPTHS.get(type(part))
    if depth is not None:
        layers, most = depth
        count, bound = len(getattr(part, layers)), getattr(config, most)
        if not 1 <= count <= bound:
            side = f"over {source}{most} {bound}" if count > bound else "under 1"
            raise ValueError(f"{_join(path, layers)} has {count} layers, {side}")
    if isinstance(part, CNNArch):
        lengths = {len(part.channel_size), len(part.kernel_size), len(part.stride_size)}
        if len(lengths) > 1:
            raise ValueError(f"{_join(path, 'kernel_size')} and stride_size need one entry per "
                             "layer of channel_size")  # fmt: skip


def _check_sizes(path: str, part: Any, config: Any, source: str) -> None:
    """Every size of ``part`` (at ``path``) within ``config``'s bound of it (``source`` names
    the config) and agile's limits."""
    _check_layers(path, part, config, source)
    for name, (least, bound_name, limit) in _SIZES[type(part)].items():
        bound = limit if bound_name is None else min(getattr(config, bound_name), limit)
        over = f"{source}{bound_name} {bound}" if bound != limit else f"agile's limit {limit}"
        for where, size in _entries(_join(path, name), getattr(part, name)):
            if size < least:
                raise ValueError(f"{where} is {size}, under {least}")
            if size > bound:
                raise ValueError(f"{where} is {size}, over {over}")


def _entries(path: str, value: Any) -> list[tuple[str, Any]]:
    """``(path, value)``, or each entry of a tuple with its index."""
    if isinstance(value, tuple):
        return [(f"{path}[{index}]", item) for index, item in enumerate(value)]
    return [(path, value)]


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _check_types(part: Any, path: str) -> None:
    """Every field of ``part`` and of the parts inside it holds what its annotation says."""
    hints = _hints(type(part))
    for field in fields(part):
        where, value, hint = _join(path, field.name), getattr(part, field.name), hints[field.name]
        if not _fits(value, hint):
            raise ValueError(f"{where} is {_shown(value)}, not {_words(hint)}")
        if is_dataclass(value):
            _check_types(value, where)
        elif field.name.endswith("activation") and value is not None and value not in ACTIVATIONS:
            raise ValueError(f"{where} is {_shown(value)}, not one of {', '.join(ACTIVATIONS)}")


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The annotations of ``cls``'s fields, evaluated once."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _fits(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(_fits(value, member) for member in typing.get_args(hint))
    if origin is tuple:
        item = typing.get_args(hint)[0]
        return isinstance(value, tuple) and all(_fits(entry, item) for entry in value)
    if hint is float:
        return type(value) is int or (type(value) is float and math.isfinite(value))
    if hint in (int, bool, str):
        return type(value) is hint
    if hint is type(None):
        return value is None
    return isinstance(value, hint)  # an architecture inside another


def _words(hint: Any) -> str:
    """What ``hint`` wants, as an error message says it."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(_words(member) for member in typing.get_args(hint))
    if origin is tuple:
        return "a list of whole numbers"
    plain = {int: "a whole number", float: "a finite number", bool: "true or false",
             str: "a name", type(None): "null"}  # fmt: skip
    return plain.get(hint) or f"a {getattr(hint, 'kind', 'known')} architecture"
