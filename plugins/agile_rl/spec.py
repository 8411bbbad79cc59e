"""The ``training`` fields the RL paradigms add to the core's."""

from __future__ import annotations

from pydantic import Field

from agile_cli import TrainingSpec, limits


class OffPolicyTraining(TrainingSpec):
    """Off-policy runs: when learning from the shared replay buffer starts."""

    learning_delay: int = Field(
        default=0,
        ge=0,
        le=limits.STEPS,
        description="Transitions collected before off-policy learning starts.",
    )


class TeamTraining(TrainingSpec):
    """Multi-agent runs: how a team's rewards make one fitness."""

    sum_scores: bool = Field(
        default=True, description="Multi-agent only: sum the agents' rewards into one fitness."
    )


class TeamOffPolicyTraining(TeamTraining, OffPolicyTraining):
    """Multi-agent off-policy runs."""
