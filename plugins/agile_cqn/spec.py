"""The ``algorithm`` section of CQN."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from agile_cli import TrainingSpec, limits
from agile_cli.helpers import AGILE_ONLY
from agile_rl import EpsilonGreedyTraining, RLAlgorithmSpec


class CQNSpec(RLAlgorithmSpec):
    """Conservative Q-Network: DQN trained offline with the CQL(H) penalty (Kumar et al., 2020)."""

    lr: float = Field(1e-4, ge=0, description="Adam learning rate.")
    learn_step: int = Field(
        5,
        ge=1,
        le=limits.ROLLOUT,
        description="Accepted for its mutation; offline training learns every step.",
    )
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor.")
    tau: float = Field(
        1e-3, gt=0, le=1, description="Soft update rate of the target network (1 copies it)."
    )
    double: bool = Field(False, description="Double DQN: the online network picks the action.")
    cql_alpha: float = Field(
        1.0,
        ge=0,
        json_schema_extra=AGILE_ONLY,
        description=(
            "Weight of the conservative term logsumexp_a Q(s, a) - Q(s, a_data); 0 is plain DQN."
        ),
    )

    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "lr", "batch_size", "learn_step", "gamma", "tau",
    )  # fmt: skip
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "batch_size", "learn_step")
    default_evo_steps: ClassVar[int] = 5_000
    training_spec: ClassVar[type[TrainingSpec] | None] = EpsilonGreedyTraining
