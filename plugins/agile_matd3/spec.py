"""The ``algorithm`` section of MATD3: the centralised actor-critic fields MADDPG has too (from
``agile_cli``), plus the policy delay."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from agile_rl import CentralisedActorCriticSpec


class MATD3Spec(CentralisedActorCriticSpec):
    """Multi-Agent TD3 (Ackermann et al., 2019): MADDPG with twin centralised critics per agent,
    delayed policy updates and target-policy smoothing."""

    policy_freq: int = Field(
        2,
        ge=1,
        description="Critic updates per actor update (the policy delay); the targets follow "
        "with the actors.",
    )

    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        *CentralisedActorCriticSpec.mutable_hyperparameters, "policy_freq",
    )  # fmt: skip
