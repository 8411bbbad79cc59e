"""The ``algorithm`` section of MADDPG (MATD3's spec extends it); the exploration-noise fields
come from the first-party DDPG plugin's spec."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pydantic import Field

from agile_cli import FieldError
from agile_cli.models import limits
from agile_ddpg.spec import ExplorationNoiseSpec

if TYPE_CHECKING:
    from agile_cli import TrainingManifest


class MADDPGSpec(ExplorationNoiseSpec):
    """Multi-Agent DDPG (Lowe et al., 2017): decentralised actors, centralised critics; each
    agent's actions may be Box or Discrete."""

    lr_actor: float = Field(1e-3, gt=0, description="Adam learning rate of every actor.")
    lr_critic: float = Field(1e-2, gt=0, description="Adam learning rate of every critic.")
    learn_step: int = Field(
        5, ge=1, le=limits.ROLLOUT, description="Environment steps between gradient steps."
    )
    gamma: float = Field(0.95, ge=0, le=1, description="Discount factor.")
    tau: float = Field(
        0.01, ge=0, le=1, description="Soft update rate of the target networks (1 copies them)."
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
        return [
            *self.num_envs_copy_errors("vect_noise_dim", manifest),
            *self.not_available_errors("torch_compiler", "torch.compile"),
        ]
