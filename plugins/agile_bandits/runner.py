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

import copy
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import torch

from agile_bandits.environment import BanditEnv
from agile_bandits.spec import BanditTraining
from agile_cli import GenerationStats, Runner, TrainingManifest
from agile_cli.helpers import reset_seed
from agile_rl import (
    Alone,
    GroupLearner,
    OffPolicyAlgorithm,
    ReplayBuffer,
    RLParadigm,
    experience,
    gradient_step,
    learning_groups,
    write_back,
)

Progress = Callable[[int], None]


class BanditRunner(Runner[OffPolicyAlgorithm]):
    """Plays a bandit environment, stores what it saw in the shared buffer and learns."""

    def __init__(self, env: Any, buffer: ReplayBuffer, *, episode_steps: int) -> None:
        super().__init__(env)
        self.buffer = buffer
        self.episode_steps = episode_steps
        self.groups: list[list[int]] = []

    def train_population(
        self, members: list[OffPolicyAlgorithm], steps: int, progress: Progress
    ) -> list[GenerationStats]:
        """Every member's ``steps`` bandit steps, in lockstep, each on its own copy of the
        table's environment (reset from its own seeds, as alone). Members whose networks stack
        take their gradient steps together, one update of their group learner; the buffer
        then holds every member's rows up to this step rather than whole generations of the
        members before. An environment of one's own (``entrypoint``) cannot be copied: the
        members take turns in it."""
        if not isinstance(self.env, BanditEnv):
            self.groups = []
            return [self._train_alone(m, steps, progress) for m in members]
        groups = learning_groups(members, "off_policy", stack=self.stack)
        self.groups = [[members[i].index for i in positions] for positions, _ in groups]
        envs = [copy.copy(self.env) for _ in members]  # the table is shared, not copied
        try:
            return self._train_groups(members, groups, envs, steps, progress)
        finally:
            write_back(groups)

    def _train_alone(
        self, member: OffPolicyAlgorithm, steps: int, progress: Progress
    ) -> GenerationStats:
        """Train ``member`` by itself in the runner's own environment."""
        groups: list[tuple[list[int], GroupLearner | Alone]] = [([0], Alone(member))]
        member.watch_neurons()
        try:
            return self._train_groups([member], groups, [self.env], steps, progress)[0]
        finally:
            write_back(groups)

    def _train_groups(
        self,
        members: list[OffPolicyAlgorithm],
        groups: list[tuple[list[int], GroupLearner | Alone]],
        envs: list[Any],
        steps: int,
        progress: Progress,
    ) -> list[GenerationStats]:
        """``steps`` bandit steps of every member in lockstep, member ``i`` in ``envs[i]``, in
        episodes of ``episode_steps``; each group learns after every step."""
        stats = [GenerationStats() for _ in members]
        done = 0
        while done < steps:
            length = min(self.episode_steps, steps - done)
            returns = self._lockstep_episode(members, groups, envs, length, stats, progress)
            for stat, value in zip(stats, returns, strict=True):
                stat.add_episodes([value], progress)
            done += length
        return stats

    def _lockstep_episode(
        self,
        members: list[OffPolicyAlgorithm],
        groups: list[tuple[list[int], GroupLearner | Alone]],
        envs: list[Any],
        length: int,
        stats: list[GenerationStats],
        progress: Progress,
    ) -> list[float]:
        """One episode of ``length`` steps for every member at once; their summed rewards."""
        contexts = [
            env.reset(seed=reset_seed([m], "train"))[0]
            for env, m in zip(envs, members, strict=True)
        ]
        totals = [0.0] * len(members)
        for _ in range(length):
            for i, (member, env) in enumerate(zip(members, envs, strict=True)):
                arms = member.act(contexts[i], explore=True)
                following, rewards, _, _, _ = env.step(arms)
                self.buffer.add(
                    contexts[i], arms, rewards, contexts[i], np.ones_like(rewards, dtype=bool)
                )
                totals[i] += float(np.sum(rewards))
                contexts[i] = following
            for positions, actor in groups:
                self._learn(members, positions, actor, stats)
            for member, stat in zip(members, stats, strict=True):
                stat.steps += 1
                member.record.steps += 1
            progress(len(members))
        return totals

    def _learn(
        self,
        members: list[OffPolicyAlgorithm],
        positions: list[int],
        actor: GroupLearner | Alone,
        stats: list[GenerationStats],
    ) -> None:
        """The ``learn_step`` gradient steps of the members at ``positions`` once the buffer
        holds a batch for them; a group's members then act on their new weights."""
        chosen = [members[i] for i in positions]
        ready = [len(self.buffer) >= int(m.spec.batch_size) for m in chosen]
        for repeat in range(max(int(m.spec.learn_step) for m in chosen)):
            active = [
                on and repeat < int(m.spec.learn_step) for m, on in zip(chosen, ready, strict=True)
            ]
            if not any(active):
                break
            losses = gradient_step(actor, self.buffer, active).tolist()
            for position, loss, on in zip(positions, losses, active, strict=True):
                if on:
                    stats[position].losses.append(loss)
        if isinstance(actor, GroupLearner) and any(ready):
            actor.group.write_back()

    def generation_metrics(self) -> dict[str, Any]:
        """The last generation's groups (members by index) when they trained together."""
        return {"groups": self.groups} if self.groups else {}

    def evaluate_population(
        self, members: list[OffPolicyAlgorithm], rounds: int, max_steps: int | None
    ) -> list[float]:
        """Each member's mean summed reward of ``rounds`` runs of ``max_steps`` greedy
        steps."""
        return [self._score(member, rounds, max_steps) for member in members]

    def _score(self, member: OffPolicyAlgorithm, rounds: int, max_steps: int | None) -> float:
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
