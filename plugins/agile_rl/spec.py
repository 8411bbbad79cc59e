"""The ``training`` fields the RL paradigms and algorithms add to the core's."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, model_validator

from agile_cli import AlgorithmSpec, TrainingSpec, limits
from agile_cli.helpers import located_error


class RLAlgorithmSpec(AlgorithmSpec):
    """Base of this library's algorithm specs: the fields every one of them reads."""

    normalize_images: bool = Field(
        default=True,
        description="Scale image observations (uint8 boxes) to [0, 1] before the networks; "
        "false: their 0-255 values as they are, as floats.",
    )


class RLOptions:
    """What an algorithm's spec says to the RL library beyond the core's fields: mix it into
    the spec class (``class MySpec(RLOptions, AlgorithmSpec)``) and set the flags. A spec
    without it has every flag off."""

    #: It learns from prioritised experience replay (``replay_buffer.per_buffer``).
    supports_per: ClassVar[bool] = False
    #: It learns from n-step returns (``replay_buffer.n_step_buffer``).
    supports_n_step: ClassVar[bool] = False
    #: MLP encoders with layer norm also normalise their latent (no learned scale or shift).
    normalised_latent: ClassVar[bool] = False

    def learns_from_first_steps(self) -> bool:
        """Whether it learns from the one-step transition each n-step row starts with too
        (the replay buffer then keeps it); no by default."""
        return False

    @staticmethod
    def has(spec: type[Any], flag: str) -> bool:
        """Whether the algorithm spec class ``spec`` sets ``flag`` (one of the above)."""
        return issubclass(spec, RLOptions) and bool(getattr(spec, flag))


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


class EpsilonGreedyTraining(TrainingSpec):
    """``training`` fields of epsilon-greedy exploration: epsilon starts at ``eps_start``, is
    multiplied by ``eps_decay`` after every vector step and stays at least ``eps_end``."""

    eps_start: float = Field(
        default=1.0, ge=0, le=1, description="Initial epsilon (epsilon-greedy)."
    )
    eps_end: float = Field(default=0.01, ge=0, le=1, description="Final epsilon (epsilon-greedy).")
    eps_decay: float = Field(
        default=0.999, gt=0, le=1, description="Per vector step multiplicative epsilon decay."
    )

    @model_validator(mode="after")
    def _epsilon_order(self) -> EpsilonGreedyTraining:
        if self.eps_start < self.eps_end:
            raise located_error("eps_end", f"{self.eps_end} is above eps_start ({self.eps_start})")
        return self
