"""The ``algorithm`` section of MATD3: MADDPG's, plus the policy delay.

MATD3 extends the first-party MADDPG plugin (its spec here, its implementation in
``agile_matd3.algorithm``), as TD3 extends DDPG.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from agile_maddpg.spec import MADDPGSpec


class MATD3Spec(MADDPGSpec):
    """Multi-Agent TD3 (Ackermann et al., 2019): MADDPG with twin centralised critics per agent,
    delayed policy updates and target-policy smoothing."""

    policy_freq: int = Field(
        2,
        ge=1,
        description="Critic updates per actor update (the policy delay); the targets follow "
        "with the actors.",
    )

    mutable_hyperparameters: ClassVar[tuple[str, ...]] = (
        *MADDPGSpec.mutable_hyperparameters, "policy_freq",
    )  # fmt: skip
