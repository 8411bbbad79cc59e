"""The ``tournament_selection`` section (also spelled ``selection_strategy``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agile_cli.models import limits
from agile_cli.models.base import Spec


class TournamentSelectionSpec(Spec):
    """Tournament selection with optional elitism, run between generations."""

    strategy: Literal["tournament"] = Field(
        default="tournament", description="Selection strategy; only 'tournament' is available."
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
