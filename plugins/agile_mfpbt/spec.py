"""The ``selection_strategy`` section of MF-PBT, with the reference format's fields and
defaults; its layout is checked against ``training.pop_size``."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, field_validator, model_validator

from agile_cli import FieldError, SelectionSpec, TrainingSpec, limits

#: The four brackets of a subpopulation, best first.
BRACKETS = ("n_winners", "n_survivors", "n_open_for_migration", "n_losers")


@dataclass(frozen=True)
class Layout:
    """A population's MF-PBT layout, every default resolved.

    Subpopulation ``k`` holds the positions ``k * size`` to ``(k + 1) * size - 1``: selection
    replaces members in place, so a position never changes subpopulation.
    """

    subpopulations: int
    size: int
    ratios: tuple[int, ...]
    winners: int
    survivors: int
    open_for_migration: int
    losers: int

    @property
    def brackets(self) -> tuple[int, int, int, int]:
        """Winners, survivors, open for migration and losers."""
        return self.winners, self.survivors, self.open_for_migration, self.losers

    def positions(self, subpopulation: int) -> range:
        return range(subpopulation * self.size, (subpopulation + 1) * self.size)

    def subpopulation_of(self, position: int) -> int:
        return position // self.size


class MultiFrequencySpec(SelectionSpec):
    """Multi-frequency PBT: subpopulations evolving every ``evolution_frequency_ratios[k]``
    generations; in each, losers become mutated clones of winners and the open slots take
    stronger members of other subpopulations."""

    strategy: Literal["multi_frequency"] = Field(
        description="Selection strategy: multi_frequency (MF-PBT)."
    )
    n_subpopulations: int = Field(
        default=2,
        ge=2,
        le=limits.POPULATION,
        description="Subpopulations the population is split into, in order of position.",
    )
    n_winners: int | None = Field(
        default=None,
        ge=1,
        description="Best members of a subpopulation, cloned over its losers; "
        "null: round(subpopulation size / 4).",
    )
    n_survivors: int | None = Field(
        default=None, ge=0, description="Members after the winners, kept as they are; null: 0."
    )
    n_open_for_migration: int | None = Field(
        default=None,
        ge=1,
        description="Members after the survivors, replaced by better members of other "
        "subpopulations; null: round(subpopulation size / 4).",
    )
    n_losers: int | None = Field(
        default=None,
        ge=1,
        description="Worst members, replaced by mutated clones of winners; null: the rest.",
    )
    evolution_frequency_ratios: list[int] | None = Field(
        default=None,
        description="Generations between two evolutions of each subpopulation, strictly "
        "increasing; null or []: 1, 5, 10, 15, ...",
    )

    @field_validator("evolution_frequency_ratios")
    @classmethod
    def _increasing(cls, ratios: list[int] | None) -> list[int] | None:
        if not ratios:
            return None
        if min(ratios) < 1:
            raise ValueError("every ratio must be at least 1")
        if any(a >= b for a, b in itertools.pairwise(ratios)):
            raise ValueError(f"must be strictly increasing, not {ratios}")
        return ratios

    @model_validator(mode="after")
    def _one_ratio_each(self) -> MultiFrequencySpec:
        ratios = self.evolution_frequency_ratios
        if ratios is not None and len(ratios) != self.n_subpopulations:
            raise ValueError(
                f"evolution_frequency_ratios has {len(ratios)} ratios for "
                f"{self.n_subpopulations} subpopulations: give one per subpopulation"
            )
        return self

    @property
    def ratios(self) -> tuple[int, ...]:
        given = self.evolution_frequency_ratios
        return tuple(given) if given else (1, *(5 * k for k in range(1, self.n_subpopulations)))

    def layout(self, pop_size: int) -> Layout:
        """The resolved layout; only for a population :meth:`check_training` accepts."""
        size = pop_size // self.n_subpopulations
        winners = self.n_winners if self.n_winners is not None else round(size / 4)
        survivors = self.n_survivors if self.n_survivors is not None else 0
        open_ = self.n_open_for_migration
        open_ = open_ if open_ is not None else round(size / 4)
        losers = self.n_losers if self.n_losers is not None else size - winners - survivors - open_
        return Layout(self.n_subpopulations, size, self.ratios, winners, survivors, open_, losers)

    def check_training(self, training: TrainingSpec, section: str) -> list[FieldError]:
        pop, parts = training.pop_size, self.n_subpopulations
        if pop % parts or pop // parts < 3:
            return [
                FieldError(
                    "training.pop_size",
                    f"{pop} members do not split into {parts} subpopulations of 3 or more "
                    "(each needs a winner, an open slot and a loser)",
                    f"use a multiple of {parts} that is at least {3 * parts}, or fewer "
                    f"{section}.n_subpopulations",
                )
            ]
        layout = self.layout(pop)
        if layout.losers < 1 or sum(layout.brackets) != layout.size:
            counts = dict(zip(BRACKETS, layout.brackets, strict=True))
            field = "n_losers" if self.n_losers is None else None
            return [self._bracket_error(section, counts, layout.size, field)]
        return []

    def _bracket_error(
        self, section: str, counts: dict[str, int], size: int, field: str | None
    ) -> FieldError:
        said = ", ".join(f"{name} {value}" for name, value in counts.items())
        path = f"{section}.{field}" if field else section
        return FieldError(
            path,
            f"the brackets ({said}) must add up to the {size} members of a subpopulation "
            "(pop_size // n_subpopulations), with at least 1 loser",
            "change the bracket sizes, or leave n_losers out to take the rest",
        )

    def resolved(self, training: TrainingSpec) -> MultiFrequencySpec:
        layout = self.layout(training.pop_size)
        return self.model_copy(
            update={
                "n_winners": layout.winners,
                "n_survivors": layout.survivors,
                "n_open_for_migration": layout.open_for_migration,
                "n_losers": layout.losers,
                "evolution_frequency_ratios": list(layout.ratios),
            }
        )
