"""One generation of offline training: gradient steps on a replay buffer filled from a fixed
dataset instead of by acting."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from agile_cli import GenerationStats, TrainingError, TrainingManifest
from agile_rl import (
    EpisodeRunner,
    GroupLearner,
    OffPolicyAlgorithm,
    ReplayBuffer,
    RLParadigm,
    experience,
    learn_stacked,
    learning_groups,
    write_back,
)

Progress = Callable[[int], None]

CHUNK = 10_000  # transitions copied into the buffer at a time
PROGRESS_EVERY = 100  # gradient steps between progress reports


class OfflineRunner(EpisodeRunner[OffPolicyAlgorithm]):
    """Fills the shared buffer from the environment's dataset once, then learns from it.

    The environment carries the dataset as ``env.load_dataset()``, which returns numpy arrays
    ``obs``, ``actions``, ``rewards``, ``next_obs`` and ``terminated`` of equal length (the
    offline environment builder attaches it). The buffer is filled on the first generation and
    again whenever it is empty (a resumed run restores it from the checkpoint instead).
    """

    def __init__(self, env: Any, buffer: ReplayBuffer) -> None:
        super().__init__(env)
        self.buffer = buffer
        self.groups: list[list[int]] = []

    def generation_metrics(self) -> dict[str, Any]:
        """The last generation's groups (members by index) when they learnt together."""
        return {"groups": self.groups} if self.groups else {}

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

    def train(self, member: OffPolicyAlgorithm, steps: int, progress: Progress) -> GenerationStats:
        """``steps`` gradient steps for ``member``, each counted as one step."""
        return self._train_groups([member], [([0], None)], steps, progress)[0]

    def train_population(
        self, members: list[OffPolicyAlgorithm], steps: int, progress: Progress
    ) -> list[GenerationStats]:
        """``steps`` gradient steps for every member. Members whose networks stack take each
        step together, as one update of their group learner on a batch of each one's own;
        the others, and every member under ``--per-member``, one after the other."""
        groups = learning_groups(members, "off_policy") if self.together else []
        if all(learner is None for _, learner in groups):
            self.groups = []
            return super().train_population(members, steps, progress)
        self.groups = [[members[i].index for i in positions] for positions, _ in groups]
        try:
            return self._train_groups(members, groups, steps, progress)
        finally:
            write_back(groups)

    def _train_groups(
        self,
        members: list[OffPolicyAlgorithm],
        groups: list[tuple[list[int], GroupLearner | None]],
        steps: int,
        progress: Progress,
    ) -> list[GenerationStats]:
        """``steps`` gradient steps of every group (a member alone: ``learner`` None), filling
        the buffer first if it is empty; progress every :data:`PROGRESS_EVERY` steps."""
        if len(self.buffer) == 0:
            self.fill()
        stats = [GenerationStats() for _ in members]
        pending = 0
        for _ in range(steps):
            for positions, learner in groups:
                self._step_group(members, positions, learner, stats)
            pending += 1
            if pending == PROGRESS_EVERY:
                progress(len(members) * pending)
                pending = 0
        if pending:
            progress(len(members) * pending)
        return stats

    def _step_group(
        self,
        members: list[OffPolicyAlgorithm],
        positions: list[int],
        learner: GroupLearner | None,
        stats: list[GenerationStats],
    ) -> None:
        """One gradient step for the members at ``positions``: together through ``learner``,
        or a member alone (``learner`` None) on a batch of its own."""
        if learner is None:
            member = members[positions[0]]
            batch = self.buffer.sample(int(member.spec.batch_size), member.generator)
            losses = [member.learn(batch).loss]
        else:
            losses = learn_stacked(learner, self.buffer, [True] * len(positions))
        for position, loss in zip(positions, losses, strict=True):
            stats[position].losses.append(loss)
            stats[position].steps += 1
            members[position].record.steps += 1


class Offline(RLParadigm):
    """Learn from a fixed dataset copied into a replay buffer, without acting."""

    def buffer(self, manifest: TrainingManifest, env: Any, device: torch.device) -> ReplayBuffer:
        """The buffer the dataset is copied into."""
        return experience.replay_buffer(manifest, env, device, gamma=experience.discount(manifest))

    def runner(self, manifest: TrainingManifest, env: Any, buffer: Any) -> OfflineRunner:
        return OfflineRunner(env, buffer)
