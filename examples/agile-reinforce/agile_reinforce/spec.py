"""The ``algorithm`` section of REINFORCE: every field typed, bounded and described."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from agile_cli import AlgorithmSpec


class REINFORCESpec(AlgorithmSpec):
    """REINFORCE with a learned baseline (Williams, 1992)."""

    lr: float = Field(1e-3, gt=0, description="Adam learning rate.")
    learn_step: int = Field(
        1024, ge=1, description="Environment steps collected per policy-gradient update."
    )
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor of the returns.")
    vf_coef: float = Field(0.5, ge=0, description="Weight of the baseline's squared error.")
    ent_coef: float = Field(0.01, ge=0, description="Entropy bonus coefficient.")
    max_grad_norm: float = Field(0.5, ge=0, description="Gradient norm clip (0: no clipping).")
    normalize_advantages: bool = Field(True, description="Standardise advantages per update.")

    # Numeric fields mutation may change (mutation.rl_hp_selection keys are checked against it),
    # and those it changes when rl_hp_selection is empty.
    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        "lr", "learn_step", "gamma", "vf_coef", "ent_coef",
    )  # fmt: skip
    default_mutable: ClassVar[tuple[str, ...]] = ("lr", "learn_step")
