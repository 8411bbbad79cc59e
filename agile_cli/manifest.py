"""The training manifest, assembled from the core sections and what plugins registered."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, InstanceOf, SerializeAsAny

from agile_cli.errors import ManifestError
from agile_cli.host.registry import ParadigmEntry, Registry
from agile_cli.models.algorithm import AlgorithmSpec, EnvironmentSpec
from agile_cli.models.base import Spec
from agile_cli.models.mutation import MutationSpec
from agile_cli.models.recipe import RecipeSpec
from agile_cli.models.selection import SelectionSpec
from agile_cli.models.training import TrainingSpec
from agile_cli.validation import SECTIONS, SELECTION_ALIAS, Resolution, validate_mapping

__all__ = ["SECTIONS", "SELECTION_ALIAS", "TrainingManifest"]


class TrainingManifest(BaseModel):
    """A validated training run: every section resolved, every default filled in.

    Build one with :meth:`get_validated` from a file or mapping; the algorithm and environment
    sections are instances of the specs their plugins registered. A manifest is frozen: its
    sections cannot be replaced (``model_copy(update=...)`` makes a changed copy).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    algorithm: SerializeAsAny[AlgorithmSpec] = Field(description="The algorithm and its options.")
    environment: SerializeAsAny[EnvironmentSpec] = Field(description="Where experience comes from.")
    training: SerializeAsAny[TrainingSpec] = Field(
        default_factory=TrainingSpec, description="The training loop."
    )
    network: SerializeAsAny[Spec] | None = Field(
        default=None,
        description="The members' networks, as the algorithm's paradigm describes them (an "
        "evolvable network's layout, a pretrained model to fine-tune); null: none.",
    )
    mutation: MutationSpec | None = Field(default=None, description="Mutations; null: none.")
    tournament_selection: SerializeAsAny[SelectionSpec] | None = Field(
        default=None,
        description="Selection between generations (the strategy its 'strategy' key names); "
        "null: none.",
    )
    replay_buffer: SerializeAsAny[Spec] | None = Field(
        default=None, description="Replay memory, for the paradigms that keep one."
    )
    recipe: RecipeSpec | None = Field(
        default=None,
        description="Retrain one member on the schedule an evolved lineage followed "
        "(agile recipe RUN writes it); null: none.",
    )

    # What resolution decided; not sections of the file (left out of to_dict and dumps).
    algorithm_name: str = Field(
        default="",
        exclude=True,
        description="The registered name of the algorithm (algorithm.name).",
    )
    paradigm: InstanceOf[ParadigmEntry] | None = Field(
        default=None, exclude=True, description="The algorithm's training paradigm."
    )
    environment_builder: str | None = Field(
        default=None, exclude=True, description="The environment builder the manifest resolved to."
    )
    default_builder: bool = Field(
        default=True, exclude=True, description="The builder is the family's default (goes unsaid)."
    )
    warnings: tuple[str, ...] = Field(
        default=(), exclude=True, description="Valid, but probably not what the author meant."
    )

    @property
    def family(self) -> str | None:
        """The name of the algorithm's paradigm (its registered ``family``)."""
        return None if self.paradigm is None else self.paradigm.name

    @property
    def evolves(self) -> bool:
        """Whether the population is selected and mutated between generations."""
        return self.mutation is not None and self.tournament_selection is not None

    @property
    def evo_steps(self) -> int:
        """The resolved evolution interval, as the manifest writes it."""
        assert self.training.evo_steps is not None  # resolved during validation
        return self.training.evo_steps

    @property
    def generation_steps(self) -> int:
        """Steps each member trains per generation (``evo_steps`` in steps)."""
        return self.training.generation_steps(self.algorithm)

    def to_dict(self) -> dict[str, Any]:
        """The resolved manifest as plain data, in the brief's key order and spelling."""
        data = self.model_dump(mode="json")
        data["algorithm"] = {"name": self.algorithm_name, **data["algorithm"]}
        if not self.default_builder:  # the family's default builder goes unsaid
            data["environment"] = {"builder": self.environment_builder, **data["environment"]}
        spelled = {key: data[key] for key in SECTIONS if data.get(key) is not None}
        selection = spelled.get("tournament_selection")
        if selection is not None and selection["strategy"] != "tournament":
            return {  # the key the reference format uses for its other strategies
                (SELECTION_ALIAS if key == "tournament_selection" else key): value
                for key, value in spelled.items()
            }
        return spelled

    @property
    def step_unit(self) -> str:
        """What ``training.max_steps`` counts (env steps, the paradigm's own unit, or the
        algorithm's for this manifest)."""
        own = self.algorithm.step_unit(self)
        if own is not None:
            return own
        return self.paradigm.step_unit if self.paradigm is not None else "steps"

    def summary(self) -> str:
        """One line: algorithm, environment, population and budget."""
        return (
            f"{self.algorithm_name} on {self.environment.name}, pop {self.training.pop_size}, "
            f"{self.training.max_steps:,} {self.step_unit} per member"
            + (
                f", evolves every {self.training.generation_label(self.algorithm)}"
                if self.evolves
                else ", no evolution"
            )
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
        :param registry: what plugins registered; default: the installed plugins, loaded now
            (:func:`~agile_cli.helpers.installed_registry`).
        :raises ManifestError: with every field error found.
        """
        if isinstance(source, TrainingManifest):
            manifest = source
        else:
            from agile_cli.host.plugins import installed_registry
            from agile_cli.loader import load_file

            registry = registry if registry is not None else installed_registry()
            if isinstance(source, Mapping):
                data, label = copy.deepcopy(dict(source)), None
            else:
                data, label = load_file(source), str(source)
            try:
                resolution = validate_mapping(data, registry, source=label)
            except ManifestError as error:
                raise cls._with_late_errors(error, label) from None
            manifest = cls._resolved(resolution, label)
        if mode == "json":
            return manifest.to_dict()
        if mode != "python":
            raise ValueError(f"mode must be 'python' or 'json', not {mode!r}")
        return manifest

    @classmethod
    def _with_late_errors(cls, error: ManifestError, source: str | None) -> ManifestError:
        """``error`` with what the algorithm's rules across sections find in what was read
        despite it (nothing more when a section could not be read at all)."""
        late = []
        if error.resolution is not None:
            manifest = cls._unchecked(error.resolution)
            late = [e for e in manifest.algorithm.check_manifest(manifest) if e not in error.errors]
        # a new error: what validation read stays behind (the error may travel, pickled)
        return ManifestError([*error.errors, *late], source=source)

    @classmethod
    def _unchecked(cls, resolution: Resolution) -> TrainingManifest:
        return cls(
            **resolution.sections,
            algorithm_name=resolution.algorithm_name,
            paradigm=resolution.paradigm,
            environment_builder=resolution.environment_builder,
            default_builder=resolution.default_builder,
            warnings=resolution.warnings,
        )

    @classmethod
    def _resolved(cls, resolution: Resolution, source: str | None) -> TrainingManifest:
        """The manifest of a resolution, after the algorithm's rules across sections."""
        manifest = cls._unchecked(resolution)
        late = manifest.algorithm.check_manifest(manifest)
        if late:
            raise ManifestError(late, source=source)
        more = tuple(manifest.algorithm.manifest_warnings(manifest))
        return (
            manifest.model_copy(update={"warnings": manifest.warnings + more}) if more else manifest
        )
