"""The ``network`` section: the evolvable encoder and head every RL algorithm builds.

``encoder_config`` takes one of six shapes, chosen by ``arch`` (written there or at the top of
the section) or, when ``arch`` is omitted, by the keys present; with no distinguishing key the
encoder is chosen from the observation space when the environment is built (Dict -> multiinput,
image -> cnn, otherwise mlp; for a recurrent algorithm, image -> cnn_lstm, otherwise lstm).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, Tag, model_validator

from agile_cli import Spec, TrainingError, limits
from agile_cli.helpers import AGILE_ONLY, located_error

Activation = Literal[
    "Tanh", "GELU", "ReLU", "ELU", "LeakyReLU", "Sigmoid", "Softplus", "Softmax",
    "GumbelSoftmax", "PReLU", "Identity",
]  # fmt: skip
Arch = Literal["mlp", "cnn", "cnn_lstm", "lstm", "simba", "multiinput"]
_KernelInt = Annotated[int, Field(ge=1, le=limits.KERNEL)]
_WIDTH = f"At most {limits.WIDTH:,}."
_LAYERS = f"At most {limits.LAYERS:,}."


def _check_bounds(name: str, values: list[int], low: int, high: int, bound: str) -> None:
    for index, value in enumerate(values):
        if not low <= value <= high:
            raise located_error(
                f"{name}.{index}" if len(values) > 1 else name,
                f"{value} is outside [{low}, {high}]",
                f"change it or widen min_{bound}/max_{bound}",
            )


def _check_order(spec: Spec, low: str, high: str) -> None:
    if getattr(spec, low) > getattr(spec, high):
        raise located_error(high, f"{getattr(spec, high)} is below {low} ({getattr(spec, low)})")


class MLPConfig(Spec):
    """A multi-layer perceptron: the schema of every head and of the MLP encoder."""

    hidden_size: list[int] = Field(
        default_factory=lambda: [64], min_length=1, description="Width of each hidden layer."
    )
    activation: Activation = Field(default="ReLU", description="Hidden-layer activation.")
    output_activation: Activation | None = Field(
        default=None, description="Output activation, if any."
    )
    layer_norm: bool = Field(
        default=True, description="Layer normalisation after each hidden layer."
    )
    init_layers: bool = Field(default=True, description="Orthogonal initialisation of the layers.")
    output_vanish: bool = Field(default=True, description="Scale the output layer's weights down.")
    min_hidden_layers: int = Field(
        default=1, gt=0, le=limits.LAYERS, description="Fewest hidden layers mutation keeps."
    )
    max_hidden_layers: int = Field(
        default=3,
        gt=1,
        le=limits.LAYERS,
        description=f"Most hidden layers mutation allows. {_LAYERS}",
    )
    min_mlp_nodes: int = Field(
        default=8, gt=0, le=limits.WIDTH, description="Narrowest a hidden layer may become."
    )
    max_mlp_nodes: int = Field(
        default=500,
        gt=1,
        le=limits.WIDTH,
        description=f"Widest a hidden layer may become. {_WIDTH}",
    )

    @model_validator(mode="after")
    def _within_bounds(self) -> MLPConfig:
        _check_order(self, "min_hidden_layers", "max_hidden_layers")
        _check_order(self, "min_mlp_nodes", "max_mlp_nodes")
        _check_bounds(
            "hidden_size", [len(self.hidden_size)], self.min_hidden_layers,
            self.max_hidden_layers, "hidden_layers",
        )  # fmt: skip
        _check_bounds(
            "hidden_size", self.hidden_size, self.min_mlp_nodes, self.max_mlp_nodes, "mlp_nodes"
        )
        return self


class MLPEncoderConfig(MLPConfig):
    """MLP encoder for vector observations."""

    arch: Literal["mlp"] | None = Field(
        default=None, description="Encoder kind; null lets the observation space decide."
    )
    hidden_size: list[int] = Field(
        default_factory=lambda: [64, 64], min_length=1, description="Width of each hidden layer."
    )


class _Convolutions(Spec):
    """The convolutions of an image encoder (``cnn``, and ``cnn_lstm`` on each frame), and the
    bounds mutation keeps them in."""

    channel_size: list[int] = Field(
        default_factory=lambda: [32, 32], min_length=1, description="Channels of each layer."
    )
    kernel_size: list[_KernelInt] = Field(
        default_factory=lambda: [3, 3],
        min_length=1,
        description=f"Kernel size of each layer. At most {limits.KERNEL:,}.",
    )
    stride_size: list[_KernelInt] = Field(
        default_factory=lambda: [1, 1],
        min_length=1,
        description=f"Stride of each layer. At most {limits.KERNEL:,}.",
    )
    activation: Activation = Field(default="ReLU", description="Activation after each convolution.")
    layer_norm: bool = Field(
        default=False, description="Layer normalisation after each convolution."
    )
    init_layers: bool = Field(default=True, description="Orthogonal initialisation of the layers.")
    min_hidden_layers: int = Field(
        default=1, gt=0, le=limits.LAYERS, description="Fewest convolutions mutation keeps."
    )
    max_hidden_layers: int = Field(
        default=6,
        gt=1,
        le=limits.LAYERS,
        description=f"Most convolutions mutation allows. {_LAYERS}",
    )
    min_channel_size: int = Field(
        default=8, gt=0, le=limits.CHANNELS, description="Fewest channels a layer may have."
    )
    max_channel_size: int = Field(
        default=256,
        gt=1,
        le=limits.CHANNELS,
        description=f"Most channels a layer may have. At most {limits.CHANNELS:,}.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> _Convolutions:
        lengths = {len(self.channel_size), len(self.kernel_size), len(self.stride_size)}
        if len(lengths) > 1:
            raise located_error(
                "kernel_size", "channel_size, kernel_size and stride_size differ in length",
                "give one entry per layer in each",
            )  # fmt: skip
        _check_order(self, "min_hidden_layers", "max_hidden_layers")
        _check_order(self, "min_channel_size", "max_channel_size")
        _check_bounds(
            "channel_size", [len(self.channel_size)], self.min_hidden_layers,
            self.max_hidden_layers, "hidden_layers",
        )  # fmt: skip
        _check_bounds(
            "channel_size", self.channel_size, self.min_channel_size, self.max_channel_size,
            "channel_size",
        )  # fmt: skip
        return self


class CNNEncoderConfig(_Convolutions):
    """Convolutional encoder for image observations (channels-first or channels-last)."""

    arch: Literal["cnn"] = Field(default="cnn", description="Encoder kind.")


class _Recurrence(Spec):
    """The LSTM of a recurrent encoder (``lstm``, and ``cnn_lstm`` after its convolutions),
    and the bounds of its size."""

    hidden_state_size: int = Field(default=128, gt=0, description="Size of the LSTM hidden state.")
    num_layers: int = Field(default=1, gt=0, description="Stacked LSTM layers.")
    min_hidden_state_size: int = Field(
        default=8, gt=0, le=limits.WIDTH, description="Smallest hidden state allowed."
    )
    max_hidden_state_size: int = Field(
        default=512, gt=1, le=limits.WIDTH, description=f"Largest hidden state allowed. {_WIDTH}"
    )
    min_layers: int = Field(
        default=1, ge=0, le=limits.LAYERS, description="Fewest LSTM layers allowed."
    )
    max_layers: int = Field(
        default=3, ge=1, le=limits.LAYERS, description=f"Most LSTM layers allowed. {_LAYERS}"
    )
    dropout: float = Field(default=0.0, ge=0, le=1, description="Dropout between LSTM layers.")

    @model_validator(mode="after")
    def _within_bounds(self) -> _Recurrence:
        _check_order(self, "min_hidden_state_size", "max_hidden_state_size")
        _check_order(self, "min_layers", "max_layers")
        _check_bounds(
            "hidden_state_size", [self.hidden_state_size], self.min_hidden_state_size,
            self.max_hidden_state_size, "hidden_state_size",
        )  # fmt: skip
        _check_bounds("num_layers", [self.num_layers], self.min_layers, self.max_layers, "layers")
        return self


class LSTMEncoderConfig(_Recurrence):
    """Recurrent (LSTM) encoder for vector observations, used by recurrent PPO."""

    arch: Literal["lstm"] = Field(default="lstm", description="Encoder kind.")


def _named_or_keyed(schema: dict[str, Any]) -> None:
    """In the JSON Schema, a ``cnn_lstm`` encoder_config names its arch or uses keys of both a
    CNN and an LSTM, as :func:`encoder_arch` reads it: a CNN's or an LSTM's keys alone are
    not mistaken for it."""

    def any_key(arch: str) -> dict[str, Any]:
        keys = [key for key, hinted in _KEY_HINTS.items() if hinted == arch]
        return {"anyOf": [{"required": [key]} for key in keys]}

    schema["anyOf"] = [
        {"required": ["arch"]}, any_key("cnn_lstm"), {"allOf": [any_key("cnn"), any_key("lstm")]},
    ]  # fmt: skip


class CnnLstmEncoderConfig(_Recurrence, _Convolutions):
    """Recurrent encoder for image observations, used by recurrent PPO: convolutions read each
    frame, an LSTM reads their flattened features, a linear layer gives the latent. Its
    architecture does not mutate (the latent and the head still do), as in agilerl 2.58."""

    model_config = ConfigDict(json_schema_extra=_named_or_keyed)
    arch: Literal["cnn_lstm"] = Field(default="cnn_lstm", description="Encoder kind.")
    output_activation: Activation | None = Field(
        default=None, description="Activation of the latent; null leaves it linear."
    )
    block_type: Literal["Conv2d"] = Field(
        default="Conv2d",
        json_schema_extra=AGILE_ONLY,
        description="Convolution type: Conv2d, the one agile builds (frames are 2-D images).",
    )
    # agilerl 2.58's bounds of this encoder's LSTM are not those of its LSTM encoder.
    max_hidden_state_size: int = Field(
        default=256, gt=1, le=limits.WIDTH, description=f"Largest hidden state allowed. {_WIDTH}"
    )
    max_layers: int = Field(
        default=6, ge=1, le=limits.LAYERS, description=f"Most LSTM layers allowed. {_LAYERS}"
    )


class SimBaEncoderConfig(Spec):
    """SimBa residual MLP encoder (Lee et al., 2024)."""

    arch: Literal["simba"] = Field(default="simba", description="Encoder kind.")
    hidden_size: int = Field(default=128, gt=0, description="Width of the residual blocks.")
    num_blocks: int = Field(default=2, gt=0, description="Residual blocks.")
    output_activation: Activation | None = Field(
        default=None, description="Output activation, if any."
    )
    scale_factor: int = Field(
        default=4, gt=0, le=64, description="Expansion factor inside each block. At most 64."
    )
    min_blocks: int = Field(
        default=1, gt=0, le=limits.LAYERS, description="Fewest blocks mutation keeps."
    )
    max_blocks: int = Field(
        default=4, gt=1, le=limits.LAYERS, description=f"Most blocks mutation allows. {_LAYERS}"
    )
    min_mlp_nodes: int = Field(
        default=16, gt=0, le=limits.WIDTH, description="Narrowest the blocks may become."
    )
    max_mlp_nodes: int = Field(
        default=500, gt=1, le=limits.WIDTH, description=f"Widest the blocks may become. {_WIDTH}"
    )

    @model_validator(mode="after")
    def _within_bounds(self) -> SimBaEncoderConfig:
        _check_order(self, "min_blocks", "max_blocks")
        _check_order(self, "min_mlp_nodes", "max_mlp_nodes")
        _check_bounds(
            "hidden_size", [self.hidden_size], self.min_mlp_nodes, self.max_mlp_nodes, "mlp_nodes"
        )
        _check_bounds("num_blocks", [self.num_blocks], self.min_blocks, self.max_blocks, "blocks")
        return self


class MultiInputEncoderConfig(Spec):
    """Encoder for Dict observations: one sub-encoder per entry, concatenated."""

    arch: Literal["multiinput"] = Field(default="multiinput", description="Encoder kind.")
    latent_dim: int = Field(default=64, gt=0, description="Output size of each sub-encoder.")
    vector_space_mlp: bool = Field(
        default=False,
        description="Give vector entries their own MLP instead of passing them through.",
    )
    min_latent_dim: int = Field(
        default=8, gt=0, le=limits.WIDTH, description="Smallest latent size allowed."
    )
    max_latent_dim: int = Field(
        default=128, gt=1, le=limits.WIDTH, description=f"Largest latent size allowed. {_WIDTH}"
    )
    mlp_config: MLPEncoderConfig | None = Field(default=None, description="MLP for vector entries.")
    cnn_config: CNNEncoderConfig | None = Field(default=None, description="CNN for image entries.")

    @model_validator(mode="after")
    def _within_bounds(self) -> MultiInputEncoderConfig:
        _check_order(self, "min_latent_dim", "max_latent_dim")
        _check_bounds(
            "latent_dim", [self.latent_dim], self.min_latent_dim, self.max_latent_dim, "latent_dim"
        )
        return self


_KEY_HINTS: dict[str, str] = {
    "block_type": "cnn_lstm",
    "channel_size": "cnn", "kernel_size": "cnn", "stride_size": "cnn",
    "hidden_state_size": "lstm", "num_layers": "lstm", "dropout": "lstm",
    "num_blocks": "simba", "scale_factor": "simba",
    "vector_space_mlp": "multiinput", "mlp_config": "multiinput", "cnn_config": "multiinput",
}  # fmt: skip


def encoder_arch(data: Any) -> str:
    """Which encoder shape a mapping describes: its ``arch``, else the keys it uses (a CNN's
    and an LSTM's together: ``cnn_lstm``, as agilerl 2.58 reads them)."""
    if isinstance(data, Spec):
        return f"<{getattr(data, 'arch', None) or 'mlp'}>"
    if not isinstance(data, dict):
        return "<mlp>"
    if data.get("arch") in _ENCODERS:
        return f"<{data['arch']}>"
    hinted = [arch for key, arch in _KEY_HINTS.items() if key in data]
    if {"cnn", "lstm"} <= set(hinted):
        return "<cnn_lstm>"
    if hinted:
        return f"<{hinted[0]}>"
    if isinstance(data.get("hidden_size"), int):
        return "<simba>"
    return "<mlp>"


_ENCODERS: dict[str, type[Spec]] = {
    "mlp": MLPEncoderConfig,
    "cnn": CNNEncoderConfig,
    "cnn_lstm": CnnLstmEncoderConfig,
    "lstm": LSTMEncoderConfig,
    "simba": SimBaEncoderConfig,
    "multiinput": MultiInputEncoderConfig,
}

EncoderConfig = Annotated[
    Annotated[MLPEncoderConfig, Tag("<mlp>")]
    | Annotated[CNNEncoderConfig, Tag("<cnn>")]
    | Annotated[CnnLstmEncoderConfig, Tag("<cnn_lstm>")]
    | Annotated[LSTMEncoderConfig, Tag("<lstm>")]
    | Annotated[SimBaEncoderConfig, Tag("<simba>")]
    | Annotated[MultiInputEncoderConfig, Tag("<multiinput>")],
    Discriminator(encoder_arch),
]


class NetworkSpec(Spec):
    """The evolvable network: an encoder, a latent layer, and an MLP head."""

    latent_dim: int = Field(default=64, gt=0, description="Width of the encoder's output.")
    min_latent_dim: int = Field(
        default=8, gt=0, le=limits.WIDTH, description="Smallest latent width mutation allows."
    )
    max_latent_dim: int = Field(
        default=128,
        gt=1,
        le=limits.WIDTH,
        description=f"Largest latent width mutation allows. {_WIDTH}",
    )
    encoder_config: EncoderConfig | None = Field(
        default=None,
        description="Encoder options; null (or no arch) lets the observation space decide.",
    )
    head_config: MLPConfig = Field(
        default_factory=MLPConfig, description="MLP head(s) on top of the latent."
    )
    random_seed: int | None = Field(
        default=None, description="Seed of the network's own generator."
    )
    simba: bool = Field(default=False, description="Use the SimBa residual encoder for vectors.")

    @model_validator(mode="before")
    @classmethod
    def _lift_arch(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "arch" not in data:
            return data
        data = dict(data)
        arch = data.pop("arch")
        encoder = data.get("encoder_config")
        encoder = dict(encoder) if isinstance(encoder, dict) else {}
        if encoder.get("arch", arch) != arch:
            raise located_error(
                "arch", f"'{arch}' disagrees with encoder_config.arch '{encoder['arch']}'",
                "write arch once",
            )  # fmt: skip
        encoder["arch"] = arch
        data["encoder_config"] = encoder
        return data

    @model_validator(mode="after")
    def _consistent(self) -> NetworkSpec:
        _check_order(self, "min_latent_dim", "max_latent_dim")
        _check_bounds(
            "latent_dim", [self.latent_dim], self.min_latent_dim, self.max_latent_dim, "latent_dim"
        )
        arch = getattr(self.encoder_config, "arch", None)
        if self.simba and arch not in (None, "simba"):
            raise located_error("simba", f"true, but the encoder arch is '{arch}'")
        if arch == "simba" and not self.simba:
            object.__setattr__(self, "simba", True)
        return self

    @property
    def arch(self) -> str | None:
        """The declared encoder kind, or None when the observation space decides."""
        if self.encoder_config is not None and self.encoder_config.arch is not None:
            return self.encoder_config.arch
        return "simba" if self.simba else None

    @staticmethod
    def encoder_types() -> dict[str, type[Spec]]:
        """Each encoder kind and its spec."""
        return dict(_ENCODERS)


class StochasticNetworkSpec(NetworkSpec):
    """Network of a stochastic policy (PPO): adds output squashing."""

    squash_output: bool = Field(
        default=False,
        json_schema_extra=AGILE_ONLY,
        description="Squash continuous actions with tanh instead of clipping them.",
    )


def evolvable_network(manifest: Any) -> NetworkSpec:
    """The manifest's ``network`` section as the spec of an evolvable network, which RL
    members build.

    :param manifest: a resolved :class:`~agile_cli.TrainingManifest`.
    :raises TrainingError: its network section describes something else (e.g. a pretrained
        model to fine-tune), or its paradigm declares none.
    """
    network = manifest.network
    if not isinstance(network, NetworkSpec):
        what = "no network section" if network is None else f"a {type(network).__name__}"
        raise TrainingError(
            f"{manifest.algorithm_name}'s members build evolvable networks, but its paradigm "
            f"gives them {what}",
            "register the paradigm with network=agile_rl.NetworkSpec, or a subclass of it",
        )
    return network
