"""The training manifest, assembled from the core sections and what plugins registered."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SerializeAsAny

from agile_cli.models.algorithm import AlgorithmSpec, EnvironmentSpec, Family
from agile_cli.models.mutation import MutationSpec
from agile_cli.models.network import NetworkSpec
from agile_cli.models.replay_buffer import ReplayBufferSpec
from agile_cli.models.selection import TournamentSelectionSpec
from agile_cli.models.training import TrainingSpec
from agile_cli.registry import Registry

SECTIONS = (
    "algorithm",
    "environment",
    "training",
    "network",
    "mutation",
    "tournament_selection",
    "replay_buffer",
)
SELECTION_ALIAS = "selection_strategy"


class TrainingManifest(BaseModel):
    """A validated training run: every section resolved, every default filled in.

    Build one with :meth:`get_validated` from a file or mapping; the algorithm and environment
    sections are instances of the specs their plugins registered.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    algorithm: SerializeAsAny[AlgorithmSpec] = Field(description="The algorithm and its options.")
    environment: SerializeAsAny[EnvironmentSpec] = Field(description="Where experience comes from.")
    training: TrainingSpec = Field(default_factory=TrainingSpec, description="The training loop.")
    network: SerializeAsAny[NetworkSpec] = Field(
        default_factory=NetworkSpec, description="The evolvable network."
    )
    mutation: MutationSpec | None = Field(None, description="Mutations; null: none.")
    tournament_selection: TournamentSelectionSpec | None = Field(
        None, description="Selection between generations; null: none."
    )
    replay_buffer: ReplayBufferSpec | None = Field(
        None, description="Replay memory (off-policy algorithms)."
    )

    _algorithm_name: str = PrivateAttr("")
    _family: Family | None = PrivateAttr(None)
    _builder: str | None = PrivateAttr(None)
    _default_builder: bool = PrivateAttr(True)
    _warnings: list[str] = PrivateAttr(default_factory=list)

    @property
    def algorithm_name(self) -> str:
        """The registered name of the algorithm (``algorithm.name``)."""
        return self._algorithm_name

    @property
    def family(self) -> Family | None:
        return self._family

    @property
    def environment_builder(self) -> str | None:
        """The name of the environment builder the manifest resolved to."""
        return self._builder

    @property
    def warnings(self) -> list[str]:
        """Things that are valid but probably not what the author meant."""
        return list(self._warnings)

    @property
    def evolves(self) -> bool:
        """Whether the population is selected and mutated between generations."""
        return (
            self.training.hpo
            and self.mutation is not None
            and self.tournament_selection is not None
        )

    @property
    def evo_steps(self) -> int:
        """The resolved evolution interval."""
        assert self.training.evo_steps is not None  # resolved during validation
        return self.training.evo_steps

    def to_dict(self) -> dict[str, Any]:
        """The resolved manifest as plain data, in the brief's key order and spelling."""
        data = self.model_dump(mode="json")
        data["algorithm"] = {"name": self.algorithm_name, **data["algorithm"]}
        if not self._default_builder:  # the family's default builder goes unsaid
            data["environment"] = {"builder": self._builder, **data["environment"]}
        return {key: data[key] for key in SECTIONS if data.get(key) is not None}

    def summary(self) -> str:
        """One line: algorithm, environment, population and budget."""
        return (
            f"{self.algorithm_name} on {self.environment.name}, "
            f"pop {self.training.pop_size}, {self.training.max_steps:,} steps"
            + (f", evolves every {self.evo_steps:,}" if self.evolves else ", no evolution")
        )

    @classmethod
    def get_validated(
        cls,
        source: str | Path | Mapping[str, Any] | TrainingManifest,
        mode: Literal["python", "json"] = "python",
        *,
        registry: Registry | None = None,
    ) -> Any:
        """Load and validate a manifest.

        :param source: a YAML/JSON file path, an already-parsed mapping, or a manifest.
        :param mode: ``"python"`` returns the :class:`TrainingManifest`; ``"json"`` a plain dict.
        :param registry: what plugins registered; default: the installed plugins.
        :raises ManifestError: with every field error found.
        """
        if isinstance(source, TrainingManifest):
            manifest = source
        else:
            from agile_cli.loader import load_file
            from agile_cli.plugins import registry_or_default
            from agile_cli.validation import validate_mapping

            registry = registry_or_default(registry)
            if isinstance(source, Mapping):
                data, label = copy.deepcopy(dict(source)), None
            else:
                data, label = load_file(source), str(source)
            manifest = validate_mapping(data, registry, source=label)
        if mode == "json":
            return manifest.to_dict()
        if mode != "python":
            raise ValueError(f"mode must be 'python' or 'json', not {mode!r}")
        return manifest
