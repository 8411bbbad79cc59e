"""The ``algorithm`` section of DQN."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from agile_cli import TrainingSpec, limits
from agile_rl import EpsilonGreedyTraining, RLAlgorithmSpec, RLOptions


class DQNSpec(RLOptions, RLAlgorithmSpec):
    """Deep Q-Network (Mnih et al., 2015), with an optional double-Q target (van Hasselt, 2016)."""

    lr: float = Field(1e-4, gt=0, description="Adam learning rate.")
    learn_step: int = Field(
        5, ge=1, le=limits.ROLLOUT, description="Environment steps between gradient steps."
    )
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor.")
    tau: float = Field(
        3e-3,
        gt=0,
        le=1,
        description="Soft update rate of the target network (1 copies it). 3e-3 by default "
        "(AgileRL: 1e-3): on CartPole with population 4 it reached 475 in 5 of 8 seeds "
        "within 400,000 global steps, where 1e-3 did in 3.",
    )
    double: bool = Field(
        True,
        description="Double DQN: the online network picks the next action, the target network "
        "values it. True by default, as in AgileRL 2.58 (its older schema said false): on "
        "CartPole with population 4 it learnt faster than the single-network target.",
    )
    cudagraphs: bool = Field(
        False,
        description="The reference's CUDA-graph capture of the update on a GPU. Accepted for "
        "compatibility and not used yet, on any device: agile's update is not compiled.",
    )

    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "lr", "batch_size", "learn_step", "gamma", "tau",
    )  # fmt: skip
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "batch_size", "learn_step")
    supports_per: ClassVar[bool] = True
    supports_n_step: ClassVar[bool] = True
    training_spec: ClassVar[type[TrainingSpec] | None] = EpsilonGreedyTraining
    normalised_latent: ClassVar[bool] = True

    def manifest_warnings(self, manifest: Any) -> list[str]:
        """``cudagraphs: true`` is accepted and not used (see the field)."""
        if not self.cudagraphs:
            return []
        return [
            "algorithm.cudagraphs: not used: agile does not capture its update in a CUDA graph "
            "yet, on this device or any other; the update runs as it would without it"
        ]
