"""The ``algorithm`` fields of the clipped-objective policy-gradient update with GAE (PPO, IPPO).

A plugin's spec subclasses :class:`ClippedObjectiveSpec`, adds its docstring (the schema's
description) and its own fields.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from agile_cli import limits
from agile_rl.models.network import StochasticNetworkSpec
from agile_rl.spec import RLAlgorithmSpec


class ClippedObjectiveSpec(RLAlgorithmSpec):
    """The fields of PPO's clipped-objective update with GAE (Schulman et al., 2017), shared
    by PPO and IPPO."""

    lr: float = Field(default=1e-4, gt=0, description="Adam learning rate.")
    learn_step: int = Field(
        default=2048,
        ge=1,
        le=limits.ROLLOUT,
        description="Rollout length: environment steps collected per update. "
        f"At most {limits.ROLLOUT:,}.",
    )
    gamma: float = Field(default=0.99, ge=0, le=1, description="Discount factor.")
    gae_lambda: float = Field(default=0.95, ge=0, le=1, description="GAE lambda.")
    action_std_init: float = Field(
        default=0.0,
        description="Initial log standard deviation of the Gaussian policy (Box actions).",
    )
    clip_coef: float = Field(default=0.2, ge=0, le=1, description="Policy ratio clipping range.")
    ent_coef: float = Field(default=0.01, ge=0, le=1, description="Entropy bonus coefficient.")
    vf_coef: float = Field(default=0.5, ge=0, le=1, description="Value loss coefficient.")
    max_grad_norm: float = Field(
        default=0.5, ge=0, description="Gradient norm clip (0: no clipping)."
    )
    target_kl: float | None = Field(
        default=None, ge=0, description="Stop an update's epochs early past this approximate KL."
    )
    update_epochs: int = Field(
        default=4, ge=1, le=limits.EPOCHS, description="Passes over each rollout."
    )

    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "lr", "batch_size", "learn_step", "gamma", "gae_lambda", "clip_coef", "ent_coef",
        "vf_coef", "max_grad_norm", "update_epochs", "action_std_init",
    )  # fmt: skip
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "batch_size", "learn_step")
    network_spec: ClassVar[type[StochasticNetworkSpec]] = StochasticNetworkSpec
