"""One generation of training, and the fitness, for contextual-bandit members.

A generation is ``steps`` bandit steps, in episodes of ``episode_steps`` (the environment is
reset when each starts; a generation's last episode may be shorter). After every step the
transition ``(context, arm, reward, context, terminated)`` goes into the shared replay buffer
and, once the buffer holds a batch, the member makes ``learn_step`` gradient steps. Each
episode's summed reward is reported as an episode return.

The fitness is the mean summed reward of ``rounds`` runs of ``max_steps`` greedy steps
(``episode_steps`` when ``training.eval_steps`` is null).

Unlike the reference's bandit loop, which evaluates after every episode and evolves every
``evo_steps``, the core's loop evaluates and evolves once per generation of ``evo_steps``
steps per member, as for every other paradigm.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np
import torch

from agile_bandits.spec import BanditTraining
from agile_cli import GenerationStats, Runner, TrainingManifest, reset_seed
from agile_rl import OffPolicyAlgorithm, ReplayBuffer, RLParadigm, experience

Progress = Callable[[int], None]


class BanditRunner(Runner[OffPolicyAlgorithm]):
    """Plays a bandit environment, stores what it saw in the shared buffer and learns."""

    def __init__(self, env: Any, buffer: ReplayBuffer, *, episode_steps: int) -> None:
        super().__init__(env)
        self.buffer = buffer
        self.episode_steps = episode_steps

    def train(self, member: OffPolicyAlgorithm, steps: int, progress: Progress) -> GenerationStats:
        """Train ``member`` for ``steps`` bandit steps."""
        stats = GenerationStats()
        done = 0
        while done < steps:
            length = min(self.episode_steps, steps - done)
            stats.add_episodes([self._episode(member, length, stats, progress)], progress)
            done += length
        return stats

    def _episode(
        self, member: OffPolicyAlgorithm, length: int, stats: GenerationStats, progress: Progress
    ) -> float:
        context, _ = self.env.reset(seed=reset_seed([member], "train"))
        total = 0.0
        for _ in range(length):
            arms = member.act(context, explore=True)
            next_context, rewards, _, _, _ = self.env.step(arms)
            self.buffer.add(context, arms, rewards, context, np.ones_like(rewards, dtype=bool))
            total += float(np.sum(rewards))
            context = next_context
            if len(self.buffer) >= int(member.spec.batch_size):
                for _ in range(int(member.spec.learn_step)):
                    batch = self.buffer.sample(int(member.spec.batch_size), member.generator)
                    stats.losses.append(member.learn(batch).loss)
            stats.steps += 1
            member.record.steps += 1
            progress(1)
        return total

    def evaluate(self, member: OffPolicyAlgorithm, rounds: int, max_steps: int | None) -> float:
        """Mean summed reward of ``rounds`` runs of ``max_steps`` greedy steps."""
        steps = max_steps or self.episode_steps
        totals = []
        for round_ in range(rounds):
            context, _ = self.env.reset(seed=reset_seed([member], "score", round_))
            total = 0.0
            for _ in range(steps):
                context, rewards, _, _, _ = self.env.step(member.act(context, explore=False))
                total += float(np.sum(rewards))
            totals.append(total)
        return float(np.mean(totals))


class Bandit(RLParadigm):
    """Pull arms in episodes of ``episode_steps``, learn from the buffer the population
    shares."""

    def buffer(self, manifest: TrainingManifest, env: Any, device: torch.device) -> ReplayBuffer:
        """Every member's (context, arm, reward) rows."""
        return experience.replay_buffer(manifest, env, device, gamma=experience.discount(manifest))

    def runner(self, manifest: TrainingManifest, env: Any, buffer: Any) -> BanditRunner:
        episode_steps = cast(BanditTraining, manifest.training).episode_steps
        return BanditRunner(env, buffer, episode_steps=episode_steps)
