"""The Ray actor that trains one slot of the population (a plain class: the backend wraps it
with ``ray.remote``, so this module never imports Ray)."""

from __future__ import annotations

import os
import time
from typing import Any

from agile_cli.helpers import MemberOutcome, MemberTrainer


class MemberWorker:
    """Holds a :class:`~agile_cli.helpers.MemberTrainer` (its environment and replay buffer) in a
    Ray worker process, and trains the members the driver sends each generation.

    Ray restarts the process when it dies; the trainer is then built afresh (an empty buffer),
    and since every call carries the members' states, a retried call redoes the generation."""

    def __init__(self, manifest: dict[str, Any], options: dict[str, Any]) -> None:
        self.steps = 0
        self.trainer = MemberTrainer(manifest, **options)

    def pid(self) -> int:
        """This worker's process id (e.g. to find it on its node)."""
        return os.getpid()

    def progress(self) -> int:
        """Env steps trained in the current call so far (read while :meth:`train` runs)."""
        return self.steps

    def train(
        self, states: list[dict[str, Any]], steps: int, rounds: int, eval_steps: int | None
    ) -> tuple[list[MemberOutcome], float]:
        """The members trained and scored, and the seconds that took here."""
        self.steps = 0
        started = time.perf_counter()
        outcomes = self.trainer.train(states, steps, rounds, eval_steps, self._advance)
        return outcomes, time.perf_counter() - started

    def _advance(self, steps: int) -> None:
        self.steps += steps
