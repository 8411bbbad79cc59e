"""The ``algorithm`` section of MADDPG (MATD3's spec extends it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pydantic import Field

from agile_cli import AlgorithmSpec, FieldError

if TYPE_CHECKING:
    from agile_cli import TrainingManifest


class MADDPGSpec(AlgorithmSpec):
    """Multi-Agent DDPG (Lowe et al., 2017): decentralised actors, centralised critics; each
    agent's actions may be Box or Discrete."""

    lr_actor: float = Field(1e-3, gt=0, description="Adam learning rate of every actor.")
    lr_critic: float = Field(1e-2, gt=0, description="Adam learning rate of every critic.")
    learn_step: int = Field(5, ge=1, description="Environment steps between gradient steps.")
    gamma: float = Field(0.95, ge=0, le=1, description="Discount factor.")
    tau: float = Field(
        0.01, ge=0, le=1, description="Soft update rate of the target networks (1 copies them)."
    )
    O_U_noise: bool = Field(
        True,
        description="Box actions: exploration noise from an Ornstein-Uhlenbeck process "
        "(false: Gaussian). Discrete actions explore by sampling the actor's softmax.",
    )
    expl_noise: float = Field(
        0.1,
        ge=0,
        description="Scale of the exploration noise of Box actions, in [-1, 1] action units "
        "(the same for every agent).",
    )
    mean_noise: float = Field(
        0.0, description="Mean of the Gaussian noise, or the level the O-U process reverts to."
    )
    theta: float = Field(
        0.15, ge=0, description="Ornstein-Uhlenbeck mean-reversion rate (O_U_noise only)."
    )
    dt: float = Field(0.01, gt=0, description="Ornstein-Uhlenbeck time step (O_U_noise only).")
    vect_noise_dim: int | None = Field(
        None,
        ge=1,
        description="Derived from environment.num_envs (one noise process per environment); "
        "leave it out.",
    )
    torch_compiler: str | None = Field(
        None,
        description="Accepted for compatibility; must be null (torch.compile is not used).",
    )

    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "lr_actor", "lr_critic", "batch_size", "learn_step", "gamma", "tau", "theta", "dt",
    )  # fmt: skip
    default_mutable: ClassVar[tuple[str, ...]] = (
        "lr_actor", "lr_critic", "batch_size", "learn_step",
    )  # fmt: skip

    def check_manifest(self, manifest: TrainingManifest) -> list[FieldError]:
        errors = self.num_envs_copy_errors("vect_noise_dim", manifest)
        if self.torch_compiler is not None:
            errors.append(
                FieldError(
                    "algorithm.torch_compiler",
                    "torch.compile is not available yet",
                    "remove it or set it to null",
                )
            )
        return errors
