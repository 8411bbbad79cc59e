"""Training through a named backend from Python: ``ArenaTrainer`` and friends.

``LocalTrainer`` (in :mod:`agile_cli.training.trainer`) keeps the brief's signature; a
:class:`BackendTrainer` submits the same validated manifest to any registered backend and
returns the backend's :class:`~agile_cli.backend.RunResult`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from agile_cli.backend import RunResult
from agile_cli.errors import UsageError
from agile_cli.manifest import TrainingManifest
from agile_cli.models.base import field_errors
from agile_cli.plugins import registry_or_default
from agile_cli.registry import Registry


class BackendTrainer:
    """Runs a manifest with the backend named by :attr:`backend`."""

    backend: ClassVar[str]

    def __init__(self, manifest: TrainingManifest, registry: Registry | None = None) -> None:
        registry = registry_or_default(registry)
        if self.backend not in registry.backends:
            raise UsageError(f"no '{self.backend}' backend is installed", "see `agile plugins`")
        self.manifest = manifest
        self.registry = registry

    @classmethod
    def from_manifest(
        cls,
        manifest: str | Path | Mapping[str, Any] | TrainingManifest,
        registry: Registry | None = None,
    ) -> BackendTrainer:
        """A trainer for a manifest file, mapping or validated manifest."""
        registry = registry_or_default(registry)
        return cls(TrainingManifest.get_validated(manifest, registry=registry), registry)

    def train(self, *, verbose: bool = True, **options: Any) -> RunResult:
        """Run with the backend's options (e.g. ``resource_id=``, ``project=``)."""
        from pydantic import ValidationError

        entry = self.registry.backends[self.backend]
        try:
            spec = entry.options.model_validate(options)
        except ValidationError as exc:
            first = field_errors(exc, entry.options)[0]
            raise UsageError(f"{self.backend} option {first.render()}") from None
        return entry.load()().train(self.manifest, spec, self.registry, verbose=verbose)


class ArenaTrainer(BackendTrainer):
    """Submits the manifest to Arena: ``ArenaTrainer.from_manifest("dqn.yaml").train(
    resource_id="arena-medium", num_nodes=2, project="my-project", experiment_name="x")``.

    :meth:`client` gives the Arena client for everything the CLI does afterwards.
    """

    backend = "arena"

    def client(self, **options: Any) -> Any:
        """The backend's Arena client (``api_key=``, ``base_url=``, timeouts as for train)."""
        entry = self.registry.backends[self.backend]
        return entry.load().client(entry.options.model_validate(options))

    def list_experiments(self, project: str | None = None) -> list[dict[str, Any]]:
        with self.client() as client:
            return client.list_experiments(project)

    def list_checkpoints(self, experiment_name: str) -> list[dict[str, Any]]:
        with self.client() as client:
            return client.list_checkpoints(experiment_name)

    def resume_from_checkpoint(self, experiment_name: str, max_steps: int) -> Any:
        with self.client() as client:
            return client.resume_experiment(experiment_name, max_steps)
