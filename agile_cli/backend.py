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
    """What a backend hands back.

    :param summary: best fitness, steps, speed, target... (see the run folder's summary.json).
    :param run_dir: the local run folder, if the backend writes one.
    :param population: the trained members, when they live in this process.
    :param fitnesses: their latest fitness, aligned with ``population``.
    :param interrupted: the user stopped the run (a checkpoint was saved).
    """

    summary: dict[str, Any]
    run_dir: Path | None = None
    population: list[Any] | None = field(default=None, repr=False)
    fitnesses: list[float] | None = None
    interrupted: bool = False


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
