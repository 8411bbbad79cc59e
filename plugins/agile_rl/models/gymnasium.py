"""The ``environment`` fields of a vector of Gymnasium environments (the ``gymnasium`` and
``offline`` builders)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from agile_cli import VectorEnvironmentSpec


class GymnasiumEnvSpec(VectorEnvironmentSpec):
    """A vector of Gymnasium environments: a registered id (``config`` goes to
    ``gymnasium.make``) or your own callable. :func:`~agile_rl.gym_vector_env` builds it."""

    registered_makers: ClassVar[tuple[str, ...]] = ("gymnasium:make",)

    name: str = Field(
        min_length=1,
        description="Registered Gymnasium id (e.g. CartPole-v1), or a label with entrypoint.",
    )
