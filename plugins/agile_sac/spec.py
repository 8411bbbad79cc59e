"""The ``algorithm`` section of SAC (new in agile: AgileRL has no SAC)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from agile_cli import limits
from agile_rl import RLAlgorithmSpec, RLOptions


class SACSpec(RLOptions, RLAlgorithmSpec):
    """Soft Actor-Critic (Haarnoja et al., 2018), for Box actions (a tanh-squashed Gaussian
    policy) and Discrete actions (a categorical policy, Christodoulou, 2019); twin critics,
    and a temperature tuned towards a target entropy."""

    reference_gap: ClassVar[str | None] = "agilerl 2.58 has no SAC"

    batch_size: int = Field(
        default=256, ge=1, le=limits.BATCH, description="Transitions per gradient step."
    )
    lr_actor: float = Field(default=3e-4, gt=0, description="Adam learning rate of the actor.")
    lr_critic: float = Field(default=3e-4, gt=0, description="Adam learning rate of both critics.")
    lr_alpha: float = Field(
        default=3e-4, gt=0, description="Adam learning rate of the log temperature."
    )
    learn_step: int = Field(
        default=1,
        ge=1,
        le=limits.ROLLOUT,
        description="Environment steps between gradient steps (1: one gradient step per "
        "environment step, as in the paper).",
    )
    gamma: float = Field(default=0.99, ge=0, le=1, description="Discount factor.")
    tau: float = Field(
        default=5e-3, ge=0, le=1, description="Soft update rate of the target critics."
    )
    policy_freq: int = Field(
        default=1,
        ge=1,
        description="Critic updates per actor (and temperature) update.",
    )
    alpha: float = Field(
        default=1.0,
        gt=0,
        description="The entropy temperature at the start (auto_alpha) or throughout.",
    )
    auto_alpha: bool = Field(
        default=True,
        description="Tune the temperature so that the policy's entropy approaches "
        "target_entropy (false: alpha stays fixed).",
    )
    target_entropy: float | None = Field(
        default=None,
        description="The entropy auto_alpha aims for. Omitted: minus the number of action "
        "dimensions for Box actions; 0.89 * log(actions) for Discrete ones.",
    )
    starter_environment: ClassVar[str | None] = "Pendulum-v1"
    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "lr_actor", "lr_critic", "lr_alpha", "batch_size", "learn_step", "gamma", "tau",
    )  # fmt: skip
    default_mutable: ClassVar[tuple[str, ...]] = (
        "lr_actor", "lr_critic", "batch_size", "learn_step",
    )  # fmt: skip
    supports_per: ClassVar[bool] = True
    supports_n_step: ClassVar[bool] = True
