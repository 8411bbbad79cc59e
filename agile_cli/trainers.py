"""Training through a named backend from Python.

``LocalTrainer`` (in :mod:`agile_cli.training.trainer`) keeps the brief's signature; a
:class:`BackendTrainer` submits the same validated manifest to any registered backend and
returns the backend's :class:`~agile_cli.backend.RunResult`. A backend plugin subclasses it
with its own name and extras (the Arena plugin's ``ArenaTrainer``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Self

from agile_cli.backend import RunResult
from agile_cli.errors import UsageError
from agile_cli.manifest import TrainingManifest
from agile_cli.models.base import field_errors
from agile_cli.plugins import installed_registry
from agile_cli.registry import Registry


class BackendTrainer:
    """Runs a manifest with the backend named by :attr:`backend`."""

    backend: ClassVar[str]

    def __init__(self, manifest: TrainingManifest, registry: Registry | None = None) -> None:
        registry = registry if registry is not None else installed_registry()
        if self.backend not in registry.backends:
            raise UsageError(f"no '{self.backend}' backend is installed", "see `agile plugins`")
        self.manifest = manifest
        self.registry = registry

    @classmethod
    def from_manifest(
        cls,
        manifest: str | Path | Mapping[str, Any] | TrainingManifest,
        registry: Registry | None = None,
    ) -> Self:
        """A trainer for a manifest file, mapping or validated manifest.

        :param registry: what plugins registered; default: the installed plugins, loaded now.
        """
        registry = registry if registry is not None else installed_registry()
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
