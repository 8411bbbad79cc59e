"""The ``training`` section: step budget, evolution interval, population, checkpoints.

The core's :class:`TrainingSpec` holds what every run reads. A paradigm, an algorithm or a
backend that reads more registers a subclass with its own fields (e.g. the RL library's
epsilon-greedy exploration); a manifest's ``training`` section is validated against the
combination its algorithm, paradigm and the installed backends call for.
"""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, Field, model_validator

from agile_cli.models import limits
from agile_cli.models.base import Spec, located_error, reject_both_spellings


class TrainingSpec(Spec):
    """How long to train, how often to evolve, and how large the population is."""

    name: str | None = Field(
        default=None,
        max_length=200,
        description="A label for the section (the reference writes one); agile keeps it.",
    )
    max_steps: int = Field(
        default=1_000_000,
        ge=1,
        le=limits.STEPS,
        description="Environment steps each population member trains for. "
        f"At most {limits.STEPS:,}.",
    )
    evo_steps: int | None = Field(
        default=None,
        ge=1,
        le=limits.STEPS,
        validation_alias=AliasChoices("evo_steps", "metrics_interval"),
        description=(
            "Environment steps between evaluations and evolution (alias metrics_interval). "
            "Omitted: the algorithm's default, capped at max_steps; the resolved manifest shows it."
        ),
    )
    pop_size: int = Field(
        default=1,
        ge=1,
        le=limits.POPULATION,
        validation_alias=AliasChoices("pop_size", "population_size"),
        description="Number of agents trained side by side (alias population_size). "
        f"At most {limits.POPULATION:,}.",
    )
    eval_steps: int | None = Field(
        default=None,
        ge=1,
        le=limits.EPISODE_STEPS,
        description="Step cap per evaluation episode; null runs episodes to the end. "
        f"At most {limits.EPISODE_STEPS:,}.",
    )
    eval_loop: int = Field(
        default=1,
        ge=1,
        le=limits.EVALUATION_EPISODES,
        description="Evaluation episodes averaged into one fitness. "
        f"At most {limits.EVALUATION_EPISODES:,}.",
    )
    target_score: float | None = Field(
        default=None,
        description=(
            "Stop early once the best member's mean fitness over its last few evaluations "
            "reaches this score."
        ),
    )
    checkpoint_steps: int | None = Field(
        default=None,
        ge=1,
        le=limits.STEPS,
        description="Save the whole population every this many environment steps.",
    )
    checkpoint_path: str | None = Field(
        default=None, description="Where checkpoints go; default is the run folder's checkpoints/."
    )
    overwrite_checkpoints: bool = Field(
        default=False, description="Keep only the latest checkpoint instead of one per save."
    )
    hpo: bool = Field(
        default=False,
        description=(
            "Accepted for compatibility and ignored, as in the reference: a run evolves when "
            "both mutation and tournament_selection are given, and trains its members "
            "independently without them."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _one_spelling(cls, data: Any) -> Any:
        if isinstance(data, dict) and "replay_buffer" in data:
            raise located_error(
                "replay_buffer", "not read here; move it to the top-level replay_buffer section"
            )
        reject_both_spellings(data, ("pop_size", "population_size"))
        reject_both_spellings(data, ("evo_steps", "metrics_interval"))
        return data

    @model_validator(mode="after")
    def _cross_field(self) -> TrainingSpec:
        if self.evo_steps is not None and self.evo_steps > self.max_steps:
            raise located_error(
                "evo_steps", f"{self.evo_steps} exceeds max_steps ({self.max_steps})"
            )
        return self

    def generation_steps(self, algorithm: Any) -> int:
        """Steps each member trains per generation: ``evo_steps``. A paradigm whose
        ``evo_steps`` counts something else (e.g. LLM iterations of ``batch_size`` prompts)
        overrides this to convert.

        :param algorithm: the manifest's algorithm spec.
        """
        assert self.evo_steps is not None, "resolved during validation"
        return self.evo_steps

    def generation_label(self, algorithm: Any) -> str:
        """How a summary says the length of a generation: its steps, unless a paradigm counts
        it otherwise."""
        return f"{self.generation_steps(algorithm):,}"

    @property
    def population_size(self) -> int:
        """The population size (the brief's Python spelling)."""
        return self.pop_size
