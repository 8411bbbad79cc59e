"""The interface every training backend implements, the result they all return, and
:class:`BackendTrainer`, which runs a manifest with a named backend from Python.

Backends are registered by plugins (``agile_register_backends``); ``local`` and ``arena`` take
the same validated manifest and return the same :class:`RunResult`. ``LocalTrainer`` (in
:mod:`agile_cli.training.trainer`) keeps the brief's signature; a backend plugin subclasses
:class:`BackendTrainer` with its own name and extras (the Arena plugin's ``ArenaTrainer``).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

from agile_cli.errors import UsageError
from agile_cli.host.plugins import installed_registry
from agile_cli.host.registry import Registry
from agile_cli.manifest import TrainingManifest
from agile_cli.models.base import Spec, field_errors


@dataclass
class RunResult:
    """A handle on a run, whichever backend ran it.

    :param name: the run's name (a run folder's name, an Arena experiment's name).
    :param status: ``completed``, ``interrupted``, ``submitted``, ...
    :param metrics: where to find the metrics (a file path, or the command that fetches them).
    :param summary: everything else the backend knows (best fitness, steps, project, ...).
    :param run_dir: the local run folder, if the backend writes one.
    :param population: the trained members, when they live in this process.
    :param fitnesses: their latest fitness, aligned with ``population``.
    """

    name: str
    status: str
    metrics: str
    summary: dict[str, Any] = field(default_factory=dict)
    run_dir: Path | None = None
    population: list[Any] | None = field(default=None, repr=False)
    fitnesses: list[float] | None = None

    @property
    def interrupted(self) -> bool:
        return self.status == "interrupted"


class Backend(abc.ABC):
    """Runs a validated manifest somewhere."""

    @abc.abstractmethod
    def train(
        self, manifest: TrainingManifest, options: Spec, registry: Registry, *, verbose: bool
    ) -> RunResult:
        """Run ``manifest`` with this backend's validated ``options``."""

    def resume(
        self, run_dir: Path, options: Spec, registry: Registry, *, verbose: bool
    ) -> RunResult:
        """Continue an earlier run."""
        raise UsageError(f"{type(self).__name__} cannot resume runs")


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
        result: RunResult = entry.load()().train(
            self.manifest, spec, self.registry, verbose=verbose
        )
        return result
