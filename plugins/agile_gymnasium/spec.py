"""The ``environment`` section for single-agent (Gymnasium) algorithms."""

from __future__ import annotations

from pydantic import Field

from agile_cli.models.algorithm import VectorEnvironmentSpec


class GymEnvSpec(VectorEnvironmentSpec):
    """A vector of Gymnasium environments: a registered id (``config`` goes to
    ``gymnasium.make``) or your own callable."""

    name: str = Field(
        min_length=1,
        description="Registered Gymnasium id (e.g. CartPole-v1), or a label with entrypoint.",
    )
