"""The ``algorithm`` section of TD3: the deterministic actor-critic fields DDPG has too (from
``agile_cli``, with TD3's policy delay described), plus target-policy smoothing."""

from __future__ import annotations

from pydantic import Field

from agile_cli.helpers import AGILE_ONLY
from agile_rl import DeterministicActorCriticSpec


class TD3Spec(DeterministicActorCriticSpec):
    """Twin Delayed DDPG (Fujimoto et al., 2018), for Box action spaces."""

    policy_freq: int = Field(
        2,
        ge=1,
        description="Critic updates per actor update (TD3's policy delay); the targets follow "
        "with the actor.",
    )
    policy_noise: float = Field(
        0.2,
        ge=0,
        json_schema_extra=AGILE_ONLY,
        description="New in agile (not in AgileRL's schema): standard deviation of the "
        "target-policy smoothing noise added to target actions, in [-1, 1] action units.",
    )
    noise_clip: float = Field(
        0.5,
        ge=0,
        json_schema_extra=AGILE_ONLY,
        description="New in agile (not in AgileRL's schema): the smoothing noise is "
        "clipped to [-noise_clip, noise_clip].",
    )
