"""The ``tournament_selection`` section (also spelled ``selection_strategy``).

Its ``strategy`` key picks a selection strategy by name: ``tournament`` is the core's own, and
plugins add others through the ``agile_register_selection_strategies`` hook, each with a
:class:`SelectionSpec` subclass for the rest of the section.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agile_cli.errors import FieldError
from agile_cli.models import limits
from agile_cli.models.base import Spec
from agile_cli.models.training import TrainingSpec


class SelectionSpec(Spec):
    """The base of every selection strategy's section.

    A subclass declares ``strategy`` as a ``Literal`` of its registered name, plus its own
    fields. Rules that involve the population (its size is the ``training`` section's) go in
    :meth:`check_training`; defaults that depend on it are filled in by :meth:`resolved`.
    """

    strategy: str = Field(description="Selection strategy, by registered name.")
    name: str | None = Field(
        default=None,
        max_length=200,
        description="A label for the section (the reference writes one); agile keeps it.",
    )

    def check_training(self, training: TrainingSpec, section: str) -> list[FieldError]:
        """Errors of this section against the ``training`` section (paths from the root).

        :param section: the key the manifest uses for this section, to start paths with.
        """
        return []

    def resolved(self, training: TrainingSpec) -> SelectionSpec:
        """This section with the defaults that depend on the population filled in (what
        the run folder's ``manifest.yaml`` shows); called only when :meth:`check_training`
        found nothing wrong."""
        return self


class TournamentSelectionSpec(SelectionSpec):
    """Tournament selection with optional elitism, run between generations."""

    strategy: Literal["tournament"] = Field(
        default="tournament", description="Selection strategy: tournament (the default)."
    )
    tournament_size: int = Field(
        default=2,
        ge=2,
        le=limits.POPULATION,
        description="Members drawn (with replacement) for each tournament.",
    )
    elitism: bool = Field(
        default=True, description="Carry the best member into the next generation."
    )
