"""The ``algorithm`` fields of deterministic actor-critics (DDPG, TD3, MADDPG, MATD3).

A plugin's spec subclasses one of these and adds its docstring (the schema's description) and
any field of its own; a field it redefines keeps its place in the schema.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pydantic import Field

from agile_cli import FieldError, limits
from agile_rl.spec import RLAlgorithmSpec, RLOptions

if TYPE_CHECKING:
    from agile_cli import TrainingManifest


class ExplorationNoiseSpec(RLAlgorithmSpec):
    """The exploration-noise fields of deterministic policies (DDPG, TD3, MADDPG, MATD3)."""

    O_U_noise: bool = Field(
        default=True,
        description="Exploration noise from an Ornstein-Uhlenbeck process (false: Gaussian).",
    )
    expl_noise: float = Field(
        default=0.1,
        ge=0,
        description="Scale of the exploration noise, in [-1, 1] action units: the Gaussian's "
        "standard deviation, or the Ornstein-Uhlenbeck process's sigma. For the Discrete "
        "agents of MADDPG and MATD3: the chance of a uniformly random action.",
    )
    mean_noise: float = Field(
        default=0.0,
        description="Mean of the Gaussian noise, or the level the O-U process reverts to.",
    )
    theta: float = Field(
        default=0.15, ge=0, description="Ornstein-Uhlenbeck mean-reversion rate (O_U_noise only)."
    )
    dt: float = Field(
        default=0.01, gt=0, description="Ornstein-Uhlenbeck time step (O_U_noise only)."
    )
    vect_noise_dim: int | None = Field(
        default=None,
        ge=1,
        description="Derived from environment.num_envs (one noise process per environment); "
        "leave it out.",
    )


class DeterministicActorCriticSpec(RLOptions, ExplorationNoiseSpec):
    """The fields of a single-agent deterministic actor-critic (DDPG's; TD3 changes defaults),
    for :class:`~agile_rl.DeterministicActorCritic`."""

    lr_actor: float = Field(default=1e-4, gt=0, description="Adam learning rate of the actor.")
    lr_critic: float = Field(default=1e-3, gt=0, description="Adam learning rate of the critic(s).")
    learn_step: int = Field(
        default=5, ge=1, le=limits.ROLLOUT, description="Environment steps between gradient steps."
    )
    gamma: float = Field(default=0.99, ge=0, le=1, description="Discount factor.")
    tau: float = Field(
        default=5e-3,
        ge=0,
        le=1,
        description="Soft update rate of the target networks (1 copies them). 5e-3 for DDPG "
        "as for TD3 (AgileRL's DDPG default, 1e-3, left Pendulum unlearnt at 150,000 "
        "steps).",
    )
    policy_freq: int = Field(
        default=2,
        ge=1,
        description="Critic updates per actor update; the targets follow with the actor.",
    )
    share_encoders: bool = Field(
        default=False,
        description="Tie the critics' encoder to the actor's: each critic has heads only and "
        "reads the actor's current encoder output, without gradient (only the actor's loss "
        "trains the encoder); each target critic reads the target actor's encoder, which "
        "follows the soft update. Nothing is copied, so the tie holds at every step, through "
        "architecture mutations and checkpoints. Members then step side by side as groups of "
        "one, each computing alone. "
        "False: actor and critics each have their own encoder.",
    )
    starter_environment: ClassVar[str | None] = "Pendulum-v1"  # Box actions only
    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "lr_actor", "lr_critic", "batch_size", "learn_step", "gamma", "tau", "policy_freq",
        "theta", "dt", "expl_noise", "mean_noise",
    )  # fmt: skip
    default_mutable: ClassVar[tuple[str, ...]] = (
        "lr_actor", "lr_critic", "batch_size", "learn_step",
    )  # fmt: skip
    supports_per: ClassVar[bool] = True
    supports_n_step: ClassVar[bool] = True

    def check_manifest(self, manifest: TrainingManifest) -> list[FieldError]:
        return self.num_envs_copy_errors("vect_noise_dim", manifest)


# Why MADDPG's and MATD3's batch size, critic learning rate and learn step differ from the
# defaults of AgileRL (64, 1e-2, 5), measured on MPE's speaker-listener.
_CRITIC_NOTE = (
    "AgileRL's defaults (batch 64, critic rate 1e-2, a step every 5) collapsed the "
    "Discrete actors of MPE's speaker-listener early, and the team never got above -37."
)


class CentralisedActorCriticSpec(ExplorationNoiseSpec):
    """The fields of decentralised actors with centralised critics (MADDPG's; MATD3 adds the
    policy delay), for :class:`~agile_rl.CentralisedActorCritic`."""

    batch_size: int = Field(
        default=256,
        ge=1,
        le=limits.BATCH,
        description=f"Transitions per gradient step. At most {limits.BATCH:,}. {_CRITIC_NOTE}",
    )
    lr_actor: float = Field(default=1e-3, gt=0, description="Adam learning rate of every actor.")
    lr_critic: float = Field(
        default=1e-3, gt=0, description=f"Adam learning rate of every critic. {_CRITIC_NOTE}"
    )
    learn_step: int = Field(
        default=16,
        ge=1,
        le=limits.ROLLOUT,
        description=f"Environment steps between gradient steps. {_CRITIC_NOTE}",
    )
    gamma: float = Field(default=0.95, ge=0, le=1, description="Discount factor.")
    tau: float = Field(
        default=0.01,
        ge=0,
        le=1,
        description="Soft update rate of the target networks (1 copies them).",
    )
    torch_compiler: str | None = Field(
        default=None,
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
