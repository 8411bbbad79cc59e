"""One generation of LLM fine-tuning for one member, and its fitness.

A step is one prompt. A generation is ``evo_steps`` iterations of ``batch_size`` prompts (the
core passes it in steps); a member reads the training split as a stream that visits every row
once per epoch in a fresh seeded order, at the position of the prompts it has trained on, so
members that trained equally long see the same prompts, and a resumed run reads on exactly
where it stopped. With ``training.num_epochs`` a member stops once it has read the split that
many times.

The fitness is measured on the held-out split (``environment.train_test_split``), the same
rows every time: minus the loss (SFT), preference accuracy (DPO), or the mean reward of greedy
completions (GRPO and its variants). A multi-turn environment has no rows: a step is one
episode, the training episodes are a stream of seeds, and the fitness is the mean return of
greedy play of the same held-out episodes (``training.eval_rows`` of them, else 32).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agile_cli import (
    AgentContext,
    Build,
    GenerationStats,
    Member,
    Paradigm,
    Runner,
    TrainingManifest,
)
from agile_llm import groups
from agile_llm.environment import prepare
from agile_llm.multiturn import EVAL_EPISODES, MultiTurnData
from agile_llm.population import LLMMember, Scores, build_population

Progress = Callable[[int], None]


@dataclass
class Plan:
    """One iteration: the positions of the members that step, and each one's rows."""

    taking: list[int]
    rows: list[list[dict[str, Any]]]


@dataclass(frozen=True)
class Rollouts:
    """How completions are sampled: in turn with learning, or asynchronously
    (``training.rollout_mode: async``), the copy's adapters synchronised every ``interval``
    updates, sampling ahead (``overlap``) unless the staleness allowed is 0."""

    asynchronous: bool = False
    interval: int = 1
    overlap: bool = True

    @classmethod
    def of(cls, manifest: TrainingManifest) -> Rollouts:
        """The manifest's: ``weight_sync_interval`` (1), no more than the replay buffer's
        ``max_rollout_version_lag`` (null: no bound; 0: no overlap)."""
        training = manifest.training
        if getattr(training, "rollout_mode", "colocated") != "async":
            return cls()
        lag = getattr(manifest.replay_buffer, "max_rollout_version_lag", None)
        interval = int(getattr(training, "weight_sync_interval", None) or 1)
        if lag is not None:
            interval = max(min(interval, lag), 1)
        return cls(True, interval, lag != 0)


class LLMRunner(Runner[LLMMember]):
    """Trains members on batches of prompts from the data and scores them on held-out rows."""

    def __init__(
        self, env: Any, *, epochs: int | None, eval_rows: int | None,
        rollouts: Rollouts | None = None, evo_epochs: int | None = None,
    ) -> None:  # fmt: skip
        super().__init__(env)
        self.epochs = epochs
        #: Passes over the training split per generation (``training.evo_epochs``); None:
        #: the generation is the steps the loop asks for.
        self.evo_epochs = evo_epochs
        self.eval_rows = eval_rows
        self.rollouts = rollouts or Rollouts()
        self._generator: Any = None  # asynchronous rollouts' copy of the model, once made
        self.last: dict[int, Scores] = {}

    def train_population(
        self, members: list[LLMMember], steps: int, progress: Progress
    ) -> list[GenerationStats]:
        """Train every member on about ``steps`` prompts, ``batch_size`` at a time: each
        iteration one step of every member, members that can share a pass as one computation.
        Each member reads the data at its own position."""
        stats = [GenerationStats() for _ in members]
        if self.evo_epochs is not None:
            steps = min(steps, self.evo_epochs * len(self.env.train))
        plans = self._plans(members, steps, stats)
        if self.rollouts.asynchronous:
            self._asynchronously(members, plans, stats, progress)
        else:
            for plan in plans:
                losses = self._step([members[i] for i in plan.taking], plan.rows)
                self._record(members, plan, losses, stats, progress)
        limit = self._sample_limit()
        for member, stat in zip(members, stats, strict=True):
            if limit is not None and member.record.steps >= limit:
                stat.exhausted = True
        return stats

    def _plans(
        self, members: list[LLMMember], steps: int, stats: list[GenerationStats]
    ) -> list[Plan]:
        """The generation's iterations, each the members that step and their rows: every
        member ``batch_size`` prompts at a time from where it is in the data, until it has
        about ``steps`` (the rows are known ahead: a member's next ones follow from how many
        it has read)."""
        at = [member.record.steps for member in members]
        done = [0] * len(members)
        plans: list[Plan] = []
        while True:
            plan = Plan([], [])
            for i, member in enumerate(members):
                size = self._batch(member, at[i], stats[i]) if done[i] < steps else 0
                if size > 0:
                    plan.taking.append(i)
                    plan.rows.append(self.env.rows_at(at[i], size))
                    at[i] += size
                    done[i] += size
            if not plan.taking:
                return plans
            plans.append(plan)

    def _record(
        self, members: list[LLMMember], plan: Plan, losses: list[float],
        stats: list[GenerationStats], progress: Progress,
    ) -> None:  # fmt: skip
        """Count an iteration's prompts, losses and sampled rewards."""
        for i, batch, loss in zip(plan.taking, plan.rows, losses, strict=True):
            member = members[i]
            stats[i].losses.append(loss)
            if member.last_rewards is not None:  # the mean reward of what it sampled
                stats[i].add_episodes([float(member.last_rewards.mean())], progress)
            stats[i].steps += len(batch)
            member.record.steps += len(batch)
            progress(len(batch))

    def _asynchronously(
        self, members: list[LLMMember], plans: list[Plan], stats: list[GenerationStats],
        progress: Progress,
    ) -> None:  # fmt: skip
        """The iterations with each one's completions sampled ahead by a copy of the model
        (:mod:`agile_llm.asynchronous`)."""
        from agile_llm.asynchronous import Generator, Pipeline

        if self._generator is None:
            self._generator = Generator(members[0].shared.adapters)
        pipeline = Pipeline(self._generator, self.rollouts.interval, self.rollouts.overlap)

        def sample(plan: Plan) -> list[Any]:
            taking: list[Any] = [members[i] for i in plan.taking]  # GRPO's family: it samples
            return [type(taking[g[0]]).sample([taking[i] for i in g], [plan.rows[i] for i in g],
                                              self.env, self._generator)
                    for g in self._groups(taking)]  # fmt: skip

        def learn(plan: Plan, sampled: list[Any]) -> None:
            losses = self._step([members[i] for i in plan.taking], plan.rows, sampled)
            self._record(members, plan, losses, stats, progress)

        try:
            pipeline.run(members, plans, sample, learn)
        finally:
            pipeline.close()

    def _batch(self, member: LLMMember, at: int, stats: GenerationStats) -> int:
        """How many prompts ``member`` takes next, at position ``at`` of the data (0: the
        epochs it may read are done)."""
        size = int(member.spec.batch_size)
        limit = self._sample_limit()
        if limit is not None:
            size = min(size, limit - at)
            if size <= 0:
                stats.exhausted = True
        return max(size, 0)

    def _step(
        self, members: list[LLMMember], rows: list[list[dict[str, Any]]],
        ahead: list[Any] | None = None,
    ) -> list[float]:  # fmt: skip
        """One training step of each member on its rows, each group of members that can share
        a pass as one computation (:meth:`~agile_llm.population.LLMMember.train_group`; with
        each group's completions sampled ``ahead``, by asynchronous rollouts)."""
        for member in members:
            member.last_rewards = None
        losses = [0.0] * len(members)  # every group below sets its members' own
        for number, group in enumerate(self._groups(members)):
            cls = type(members[group[0]])
            extra = () if ahead is None else (ahead[number],)
            stepped = cls.train_group([members[i] for i in group], [rows[i] for i in group],
                                      self.env, *extra)  # fmt: skip
            for i, loss in zip(group, stepped, strict=True):
                losses[i] = loss
        return losses

    def _groups(self, members: list[LLMMember]) -> list[list[int]]:
        """The members' positions in groups that may step and score together (each alone
        with ``--per-member``)."""
        if not self.stack:
            return [[i] for i in range(len(members))]
        return groups.compatible(members)

    def _sample_limit(self) -> int | None:
        if self.epochs is None:
            return None
        return self.epochs * len(self.env.train)

    def evaluate_population(
        self, members: list[LLMMember], rounds: int, max_steps: int | None
    ) -> list[float]:
        """Every member's score on the held-out rows, each group as one computation
        (:meth:`~agile_llm.population.LLMMember.score_group`)."""
        rows = self.env.test if self.eval_rows is None else self.env.test[: self.eval_rows]
        for group in self._groups(members):
            cls = type(members[group[0]])
            scored = cls.score_group([members[i] for i in group], rows, self.env)
            for i, scores in zip(group, scored, strict=True):
                self.last[members[i].index] = scores
        return [self.last[member.index].fitness for member in members]

    def details(self, member: LLMMember) -> list[str]:
        """The held-out metrics of the last evaluation and a few of its outputs."""
        scores = self.last.get(member.index)
        if scores is None:
            return []
        rows = self.env.test if self.eval_rows is None else self.env.test[: self.eval_rows]
        what = "episodes" if self.env.env_type == "multiturn" else "rows"
        lines = [f"held-out {what}: {len(rows)}"]
        lines += [f"{name}: {value:.4g}" for name, value in scores.metrics.items()]
        for prompt, output, target in scores.samples:
            lines.append(f"  prompt {prompt!r} -> {output!r} (expected {target!r})")
        return lines


class LanguageModels(Paradigm):
    """Fine-tune LoRA adapters of one frozen language model on prompts: the environment is the
    prompts (or multi-turn episodes), and the population is built together, over one base."""

    def environment(self, manifest: TrainingManifest, build: Build, members: int) -> Any:
        return prepare(build(), manifest)

    def runner(self, manifest: TrainingManifest, env: Any, buffer: Any) -> LLMRunner:
        return llm_runner(manifest, env)

    def population(
        self,
        manifest: TrainingManifest,
        cls: type[Member],
        env: Any,
        context: AgentContext,
        size: int,
    ) -> list[Member]:
        return build_population(manifest, cls, env, context, size)


def llm_runner(manifest: TrainingManifest, env: Any) -> LLMRunner:
    """The runner for ``env``'s prompts, or its held-out multi-turn episodes."""
    training = manifest.training
    eval_rows = getattr(training, "eval_rows", None)
    epochs = getattr(training, "num_epochs", None)
    env.eval_samples = int(getattr(training, "eval_samples_per_task", 0))
    env.eval_greedy = bool(getattr(training, "eval_greedy", True))
    buffer = getattr(manifest, "replay_buffer", None)
    env.drop_uninformative = bool(getattr(buffer, "drop_uninformative_groups", False))
    if isinstance(env, MultiTurnData):  # no data to pass over; held-out episodes, not rows
        written = "eval_rows" in training.model_fields_set
        env.hold_out(int(eval_rows) if written and eval_rows is not None else EVAL_EPISODES)
        return LLMRunner(env, epochs=None, eval_rows=None, rollouts=Rollouts.of(manifest))
    return LLMRunner(env, epochs=epochs, eval_rows=eval_rows, rollouts=Rollouts.of(manifest),
                     evo_epochs=getattr(training, "evo_epochs", None))  # fmt: skip
