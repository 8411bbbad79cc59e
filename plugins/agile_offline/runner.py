"""One generation of offline training: gradient steps on a replay buffer filled from a fixed
dataset instead of by acting."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from agile_cli import GenerationStats, TrainingError, TrainingManifest
from agile_rl import (
    OffPolicyAlgorithm,
    PopulationRunner,
    ReplayBuffer,
    SideBySide,
    Slot,
    experience,
    gradient_step,
)

Progress = Callable[[int], None]

CHUNK = 10_000  # transitions copied into the buffer at a time
PROGRESS_EVERY = 100  # gradient steps between progress reports


class OfflineRunner(PopulationRunner):
    """Fills the shared buffer from the environment's dataset once, then learns from it;
    members are scored as every RL population is, side by side in the environment.

    The environment carries the dataset as ``env.load_dataset()``, which returns numpy arrays
    ``obs``, ``actions``, ``rewards``, ``next_obs`` and ``terminated`` of equal length (the
    offline environment builder attaches it). The buffer is filled on the first generation and
    again whenever it is empty (a resumed run restores it from the checkpoint instead).
    """

    family = "off_policy"

    def __init__(self, env: Any, buffer: ReplayBuffer) -> None:
        super().__init__(env)
        self.buffer = buffer

    def fill(self) -> int:
        """Copy the dataset into the buffer; returns the transitions kept."""
        data = self.env.load_dataset()
        total = len(data)
        if total == 0:
            raise TrainingError(
                "the dataset holds no transitions",
                "check environment.dataset_path or environment.minari_dataset_id",
            )
        start = max(0, total - self.buffer.capacity)
        if start:
            warnings.warn(
                f"the replay buffer holds {self.buffer.capacity} of the dataset's {total} "
                f"transitions (the last ones); raise replay_buffer.max_size to keep them all",
                stacklevel=2,
            )
        for begin in range(start, total, CHUNK):
            rows = slice(begin, min(begin + CHUNK, total))
            self.buffer.add(
                data.obs[rows], data.actions[rows], data.rewards[rows], data.next_obs[rows],
                data.terminated[rows],
            )  # fmt: skip
        return total - start

    def train_slots(
        self,
        members: list[OffPolicyAlgorithm],
        slots: list[Slot],
        steps: int,
        progress: Progress,
    ) -> list[GenerationStats]:
        """``steps`` gradient steps of every member, each counted as one step, a group's
        members taking theirs together on a batch of each one's own; the buffer is filled
        first if it is empty; progress every :data:`PROGRESS_EVERY` steps."""
        if len(self.buffer) == 0:
            self.fill()
        stats = [GenerationStats() for _ in members]
        pending = 0
        for _ in range(steps):
            for slot in slots:
                losses = gradient_step(slot.actor, self.buffer, [True] * len(slot.positions))
                for position, loss in zip(slot.positions, losses.tolist(), strict=True):
                    stats[position].losses.append(loss)
                    stats[position].steps += 1
                    members[position].record.steps += 1
            pending += 1
            if pending == PROGRESS_EVERY:
                progress(len(members) * pending)
                pending = 0
        if pending:
            progress(len(members) * pending)
        return stats


class Offline(SideBySide):
    """Learn from a fixed dataset copied into a replay buffer, without acting; the members
    are scored side by side."""

    def buffer(self, manifest: TrainingManifest, env: Any, device: torch.device) -> ReplayBuffer:
        """The buffer the dataset is copied into."""
        return experience.replay_buffer(manifest, env, device, gamma=experience.discount(manifest))

    def runner(self, manifest: TrainingManifest, env: Any, buffer: Any) -> OfflineRunner:
        return OfflineRunner(env, buffer)
