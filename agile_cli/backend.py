"""The interface every training backend implements, and the result they all return.

Backends are registered by plugins (``agile_register_backends``); ``local`` and ``arena`` take
the same validated manifest and return the same :class:`RunResult`.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agile_cli.errors import UsageError
from agile_cli.manifest import TrainingManifest
from agile_cli.models.base import Spec
from agile_cli.registry import Registry


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
