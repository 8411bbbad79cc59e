"""The ``algorithm`` section of IPPO."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pydantic import Field

from agile_cli import AlgorithmSpec, FieldError
from agile_cli.models import StochasticNetworkSpec

if TYPE_CHECKING:
    from agile_cli import TrainingManifest


class IPPOSpec(AlgorithmSpec):
    """Independent PPO (de Witt et al., 2020): every agent learns its own clipped-objective
    actor-critic from its own rewards; agents of a group share one."""

    lr: float = Field(1e-4, gt=0, description="Adam learning rate of every actor and critic.")
    batch_size: int = Field(
        64, ge=1, description="Samples (one agent's step each) per gradient step of a group."
    )
    learn_step: int = Field(
        2048, ge=1, description="Rollout length: environment steps collected per update."
    )
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor.")
    gae_lambda: float = Field(0.95, ge=0, le=1, description="GAE lambda.")
    action_std_init: float = Field(
        0.0,
        description="Initial log standard deviation of the Gaussian policies (Box actions).",
    )
    clip_coef: float = Field(0.2, ge=0, le=1, description="Policy ratio clipping range.")
    ent_coef: float = Field(0.01, ge=0, le=1, description="Entropy bonus coefficient.")
    vf_coef: float = Field(0.5, ge=0, le=1, description="Value loss coefficient.")
    max_grad_norm: float = Field(0.5, ge=0, description="Gradient norm clip (0: no clipping).")
    target_kl: float | None = Field(
        None, ge=0, description="Stop a group's epochs early past this approximate KL."
    )
    update_epochs: int = Field(4, ge=1, description="Passes over each rollout.")
    action_batch_size: int | None = Field(
        None,
        ge=1,
        description=(
            "Acting: at most this many rows (agents of a group x environments) per forward "
            "pass, to bound memory with many environments; null: all at once."
        ),
    )
    torch_compiler: str | None = Field(
        None,
        description="Accepted for compatibility; must be null (torch.compile is not used).",
    )

    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "lr", "batch_size", "learn_step", "gamma", "gae_lambda", "clip_coef", "ent_coef",
        "vf_coef", "max_grad_norm", "update_epochs", "action_std_init",
    )  # fmt: skip
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "batch_size", "learn_step")
    network_spec: ClassVar[type[StochasticNetworkSpec]] = StochasticNetworkSpec

    def check_manifest(self, manifest: TrainingManifest) -> list[FieldError]:
        errors = []
        if self.torch_compiler is not None:
            errors.append(
                FieldError(
                    "algorithm.torch_compiler",
                    "torch.compile is not available yet",
                    "remove it or set it to null",
                )
            )
        if manifest.network.arch == "lstm":
            errors.append(
                FieldError(
                    "network.encoder_config.arch",
                    "IPPO's policies carry no hidden state",
                    "use an MLP (remove arch), or a CNN for image observations",
                )
            )
        return errors
