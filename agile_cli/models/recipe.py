"""The ``recipe`` section: retrain one member from scratch on the schedule of hyperparameters
and architectures its lineage followed in an evolutionary run (``agile recipe`` writes it).

A manifest with a recipe trains a population of one without evolution; at the start of
generation ``g`` the member takes the hyperparameters (and, where given, the architecture) of
the schedule's entry ``g``, the last entry holding for any generation past the schedule.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from agile_cli.models import limits
from agile_cli.models.base import Spec, located_error


class RecipeStep(Spec):
    """What the lineage's member had in one generation of the original run."""

    generation: int = Field(ge=1, le=limits.GENERATIONS, description="The generation (from 1).")
    steps_per_member: int = Field(
        default=0, ge=0, le=limits.STEPS,
        description="Steps per member the original run had trained at the generation's end.",
    )  # fmt: skip
    hyperparameters: dict[str, Any] = Field(
        default_factory=dict,
        description="The algorithm's hyperparameters in this generation, each checked as the "
        "algorithm section's field of that name is.",
    )
    architecture: dict[str, Any] | None = Field(
        default=None,
        description="The networks' architecture from this generation on (as the algorithm "
        "describes it); null: unchanged.",
    )
    fitness: float | None = Field(
        default=None, description="The lineage's fitness in the original run (for comparison)."
    )
    mutation: str | None = Field(
        default=None,
        description="What evolution changed before this generation (a note; where it ends in "
        "'same function', the replayed architecture keeps the network's function as it did).",
    )

    @property
    def kept_function(self) -> bool:
        """Whether the original run's architecture change kept the network's function."""
        return self.mutation is not None and self.mutation.endswith("same function")


class RecipeSpec(Spec):
    """Retrain one member on a schedule instead of evolving a population."""

    source: str = Field(default="", description="The run the recipe came from (a note).")
    member: int | None = Field(
        default=None, ge=0, description="The member of that run it retrains (a note)."
    )
    schedule: list[RecipeStep] = Field(
        min_length=1,
        max_length=limits.GENERATIONS,
        description="One entry per generation, from generation 1, in order. At most "
        f"{limits.GENERATIONS:,}.",
    )

    @model_validator(mode="after")
    def _in_order(self) -> RecipeSpec:
        for position, step in enumerate(self.schedule):
            if step.generation != position + 1:
                raise located_error(
                    f"schedule.{position}.generation",
                    f"is {step.generation}, expected {position + 1}: one entry per "
                    "generation, from 1, in order",
                )
        return self

    def step(self, generation: int) -> RecipeStep:
        """The entry for ``generation`` (from 1): the last one past the schedule's end."""
        return self.schedule[min(generation, len(self.schedule)) - 1]
