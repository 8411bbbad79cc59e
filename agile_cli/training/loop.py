"""The evolutionary loop: train every member, evaluate, select, mutate, checkpoint, repeat."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from dataclasses import field
from pathlib import Path
from typing import Any

import numpy as np
import pydantic.dataclasses
import torch
from pydantic import ConfigDict

from agile_cli import __version__
from agile_cli.backend import RunResult
from agile_cli.errors import ManifestError, MembersLost, TrainingError, printable
from agile_cli.evolution.mutation import Mutator
from agile_cli.evolution.selection import SelectionStrategy, last_fitness
from agile_cli.host.registry import Registry
from agile_cli.manifest import TrainingManifest
from agile_cli.member import AgentContext, ExportsElite, Member, Rebuildable
from agile_cli.models.recipe import RecipeStep
from agile_cli.models.run_options import LocalRunOptions
from agile_cli.runner import AsynchronousRunner
from agile_cli.signals import interrupt_held
from agile_cli.training import checkpoint, provenance, reevaluation, setup, trust
from agile_cli.training.asynchronous import AsynchronousEvolution
from agile_cli.training.loggers import MetricSink, TensorBoardSink, WandbSink
from agile_cli.training.members import RunnerFactory
from agile_cli.training.progress import GenerationReport, MemberRow, Reporter, RunnerProgress
from agile_cli.training.reevaluation import Reevaluated
from agile_cli.training.resume import check_compatible, explain_mismatch
from agile_cli.training.run_folder import RunFolder

#: Early stop: the best lineage's mean over this many latest evaluations reaches the target.
TARGET_WINDOW = 3

#: Times in a row the loop may go back to its last checkpoint after its runner lost members.
MAX_GOING_BACK = 5


#: Run options that shape what the run writes or how it trains: a resumed run keeps them
#: (``--resume`` may add to them, never silently drop them).
RUN_SHAPING_OPTIONS = (
    "checkpoint_steps", "checkpoint_buffer", "per_member", "threads", "device", "elite_top",
    "elite_episodes", "compile",
)  # fmt: skip


def run_shaping(options: LocalRunOptions) -> tuple[str, ...]:
    """The options that shape ``options``' run: the local backend's and its backend's own."""
    return RUN_SHAPING_OPTIONS + type(options).shaping


@pydantic.dataclasses.dataclass(config=ConfigDict(strict=True, allow_inf_nan=False, extra="forbid"))
class LoopState:
    """Counters that a checkpoint carries across a resume (each of its type: a checkpoint's
    are checked as they are read, see :meth:`read`)."""

    generation: int = 0
    steps_per_member: int = 0
    global_steps: int = 0
    wall_seconds: float = 0.0
    snapshots: int = 0
    seed: int = 0
    target_reached_at: dict[str, Any] | None = None
    stopped_early: bool = False
    #: The members of the last generation reported: who of the next one survived selection.
    reported: list[int] = field(default_factory=list)
    #: Asynchronous runs: the rounds each position of the population has trained.
    rounds: list[int] = field(default_factory=list)

    @classmethod
    def read(cls, saved: Any, source: Path) -> LoopState:
        """The counters a checkpoint saved (its ``state``).

        :param source: the checkpoint's file, for the message.
        :raises TrainingError: one is not of its type, or the entry is not a mapping.
        """
        if not isinstance(saved, dict):
            raise TrainingError(f"{source} is not an agile checkpoint (its state is no mapping)")
        try:
            return cls(**saved)
        except pydantic.ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"])
            raise TrainingError(
                f"{source} is not an agile checkpoint as agile wrote it: state.{printable(where)}: "
                f"{error['msg'][:1].lower()}{error['msg'][1:]}",
                "resume from a checkpoint agile wrote (a step_N.pt snapshot), or train again",
            ) from None


class EvolutionLoop:
    """Trains a population locally, as the manifest says, writing a run folder."""

    def __init__(
        self,
        manifest: TrainingManifest,
        registry: Registry,
        options: LocalRunOptions,
        reporter: Reporter,
        folder: RunFolder | None = None,
        runner: RunnerFactory | None = None,
    ) -> None:
        """:param runner: a backend's way to train the members elsewhere (see
        :mod:`.members`); by default they train in this process."""
        self.manifest = manifest
        self.registry = registry
        self.options = options
        self.reporter = reporter
        if lacking := manifest.algorithm.local_training_errors(manifest):  # agile's own code
            raise ManifestError(lacking, "training on this machine")  # before loading anything
        size = manifest.training.pop_size
        reporter.phase(f"building {size} member" + ("s" if size != 1 else ""))
        self.state = LoopState(seed=_run_seed(manifest, options))
        self.seeds = setup.seeds(self.state.seed)
        self.device = setup.resolve_device(options.device)
        self.cls = setup.algorithm_class(manifest, registry)
        self.threads = torch_threads(manifest, requested=options.threads)
        if note := busy_machine_note(self.threads):
            reporter.note(note)
        self._build_members(registry, remote=runner is not None)
        self.buffer: Any = None  # off-policy: what the members share
        if runner is not None:
            self.env.close()  # it only told the members their spaces
            self.runner = runner(manifest, self.state.seed, reporter.note)
        else:
            self.buffer = setup.build_buffer(manifest, self.env, self.device)
            self.runner = setup.build_runner(manifest, self.env, self.buffer)
            self.runner.stack = not options.per_member
            self.runner.compile = options.compile
        self.mutator = self._mutator()
        self.selection: SelectionStrategy | None = self._selection(registry)
        self.selection_rng = np.random.default_rng(self.seeds["selection"])
        self.asynchronous = (
            AsynchronousEvolution(self, self.runner)
            if isinstance(self.runner, AsynchronousRunner)
            else None
        )
        self.elite: Member | None = None
        self.went_back = 0  # times in a row the loop went back to its checkpoint
        self.checkpointed = 0  # the generation of the last checkpoint taken
        self.sinks: list[MetricSink] = []
        # Last, so that a manifest that cannot be built leaves no empty run folder behind.
        self.folder = folder or RunFolder.create(
            manifest, options.run_dir, overwrite=options.overwrite
        )

    # -- set-up ----------------------------------------------------------------------------------

    def _build_members(self, registry: Registry, *, remote: bool) -> None:
        """The environment, the members' context and spaces, and the population. Remote
        workers hold the environments and buffers: then one member's environment, here,
        only tells the spaces."""
        manifest, size = self.manifest, self.manifest.training.pop_size
        members = 1 if remote else size
        self.env = setup.build_environment(manifest, registry, self.seeds["environment"], members)
        try:
            if not remote:
                setup.check_memory(manifest, self.env, self.device, size)
            self.context = AgentContext(
                device=self.device,
                num_envs=setup.member_envs(self.env, members),
                training=manifest.training,
                seed=self.seeds["members"],
                network=manifest.network,
                replay_buffer=manifest.replay_buffer,
                mutation=manifest.mutation,
            )
            self.spaces = setup.describe_spaces(setup.member_spaces(manifest, self.env))
            self.population = setup.build_population(manifest, self.cls, self.env, self.context)
        except BaseException:
            self.env.close()  # subprocess workers must not outlive a refused run
            raise

    def _mutator(self) -> Mutator | None:
        if not self.manifest.evolves or self.manifest.mutation is None:
            return None
        rng = np.random.default_rng(self.seeds["mutation"])
        return Mutator(self.manifest.mutation, self.manifest.algorithm, rng)

    def _selection(self, registry: Registry) -> SelectionStrategy | None:
        spec = self.manifest.tournament_selection
        if not self.manifest.evolves or spec is None:
            return None
        strategy = registry.selections[spec.strategy].build(spec, self.manifest.training.pop_size)
        if not isinstance(strategy, SelectionStrategy):
            raise TrainingError(
                f"selection strategy '{spec.strategy}' built {type(strategy).__name__}, "
                "not an agile_cli.SelectionStrategy",
                "report this to the plugin's authors",
            )
        return strategy

    def _open_sinks(self) -> None:
        if self.options.wb:
            name = self.folder.path.name
            self.sinks.append(WandbSink(self.folder.path, self.manifest.to_dict(), name))
        if self.options.tensorboard:
            self.sinks.append(TensorBoardSink(self.folder.path))

    # -- the loop --------------------------------------------------------------------------------

    def run(self, *, fresh: bool = True, only_finish: bool = False) -> RunResult:
        """Train until the step budget is spent, the target is reached, or Ctrl-C.

        Checkpoints are taken at generation boundaries only (and once before the first
        generation): after Ctrl-C, the run resumes from the end of the last whole generation.
        However the run ends, the run folder's lock is given back.

        :param only_finish: train no generation, only end the run (its last checkpoint was
            taken, but it was killed before its elite and summary were written).
        """
        try:
            return self._train(fresh, only_finish)
        except BaseException:
            if fresh and not self.folder.started():  # nothing to resume: leave nothing behind
                self.folder.discard()
            raise
        finally:
            self.folder.unlock()

    def _train(self, fresh: bool, only_finish: bool = False) -> RunResult:
        training = self.manifest.training
        total = training.max_steps * len(self.population)
        self.reporter.start(
            total, self.state.global_steps, self._title(), self.manifest.step_unit,
            len(self.population),
        )  # fmt: skip
        interrupted = False
        self.folder.record_provenance(
            provenance.session(
                self.manifest.environment.name, self.device, self.threads, self.state.seed
            )
        )
        try:
            self._open_sinks()
            if fresh:
                if self.mutator is not None:
                    self.mutator.mutate(self.population, pre_training=True)
                self.save_checkpoint()
            generation = self.asynchronous.generation if self.asynchronous else self._generation
            while not only_finish and self.state.steps_per_member < training.max_steps:
                try:
                    if generation():
                        break
                except MembersLost as lost:
                    self._go_back(lost)
        except KeyboardInterrupt:
            interrupted = True
            self.reporter.note(self._interruption_note())
        finally:
            for sink in self.sinks:
                sink.close()
        return self._finish(interrupted)

    def _go_back(self, lost: MembersLost) -> None:
        """Continue from the last checkpoint after the runner lost members: the generations
        since are trained again.

        :raises TrainingError: it happened :data:`MAX_GOING_BACK` times in a row.
        """
        self.went_back += 1
        if self.went_back > MAX_GOING_BACK:
            raise TrainingError(
                f"{lost.message}, {self.went_back} times in a row: stopping",
                "see why the workers die (e.g. their logs, for running out of memory); "
                "agile train --resume RUN continues from the last checkpoint",
            )
        if self.asynchronous is not None:
            self.asynchronous.forget()
        state = checkpoint.load(self.folder.latest, kind=checkpoint.POPULATION)
        done = state["state"]["generation"]
        self.reporter.note(
            f"{lost.message}: going back to the checkpoint of generation {done} and training "
            f"on from generation {done + 1} again"
        )
        self.restore(state)
        for note in self.folder.keep_metrics_until(done):
            self.reporter.note(note)

    def _interruption_note(self) -> str:
        done, kept = self.state.generation, self.checkpointed
        named = f"generation {kept}" if kept else "the start (no generation had finished)"
        redone = f"generation {done + 1}" if kept == done else f"generations {kept + 1}-{done + 1}"
        return (
            f"interrupted during generation {done + 1}: the checkpoint of {named} is kept, "
            f"and resuming redoes {redone}"
        )

    def _generation(self) -> bool:
        """One generation; returns True when training should stop early.

        The loop's counters change only once the generation is whole, so that an interrupted
        generation leaves them (and the checkpoint) as they were at its start.
        """
        training = self.manifest.training
        left = training.max_steps - self.state.steps_per_member
        steps = min(self.manifest.generation_steps, left)
        started = time.perf_counter()
        trained = global_steps = 0
        exhausted = True
        if self.manifest.recipe is not None:
            self._follow_recipe(self.manifest.recipe.step(self.state.generation + 1))
        self.reporter.phase(f"generation {self.state.generation + 1}: training")
        progress = RunnerProgress(self.reporter)  # steps and finished episodes, for the display
        generation = self.runner.train_population(self.population, steps, progress)
        for note in self.runner.notes():
            self.reporter.note(note)
        for member, stats in zip(self.population, generation, strict=True):
            exhausted = exhausted and stats.exhausted
            trained = stats.steps
            global_steps += stats.steps
            member.record.episode_returns = (member.record.episode_returns + stats.episode_returns)[
                -100:
            ]
        self.reporter.phase(f"generation {self.state.generation + 1}: evaluating")
        fitnesses = self.runner.evaluate_population(
            self.population, training.eval_loop, training.eval_steps
        )
        # Trained and scored: the generation is kept whole. Ctrl-C from here waits for its
        # checkpoint, so that the counters, its metrics line and the checkpoint agree.
        with interrupt_held():
            for member, fitness in zip(self.population, fitnesses, strict=True):
                member.record.fitness.append(float(fitness))
            elapsed = time.perf_counter() - started
            self.state = dataclasses.replace(
                self.state,
                generation=self.state.generation + 1,
                global_steps=self.state.global_steps + global_steps,
                steps_per_member=self.state.steps_per_member + trained,
                wall_seconds=self.state.wall_seconds + elapsed,
            )
            for member in self.population:
                member.record.lineage.append(self.lineage_entry(member))
            self.report(global_steps / max(elapsed, 1e-9))
            if exhausted:
                self.reporter.note("every member has trained on all the data it may: stopping")
            stop = self.target_met() or exhausted
            self.state.stopped_early = stop
            last = stop or self.state.steps_per_member >= training.max_steps
            if not last:
                self._evolve()
            if last or self.snapshot_due() or self.runner.checkpoint_due(self.state.generation):
                self.save_checkpoint()
            self.went_back = 0
        return stop

    def _follow_recipe(self, step: RecipeStep) -> None:
        """Give the member the hyperparameters (and architecture) of the recipe's ``step``.

        :raises TrainingError: the step's architecture does not fit the member.
        """
        for member in self.population:
            for name, value in step.hyperparameters.items():
                member.set_hyperparameter(name, value)
            if step.architecture is None:
                continue
            if not isinstance(member, Rebuildable):
                raise TrainingError(
                    f"recipe.schedule[{step.generation - 1}].architecture: "
                    f"{self.manifest.algorithm_name}'s members cannot rebuild their networks",
                    "remove the architecture entries to replay the hyperparameters alone",
                )
            try:
                # asked only where it applies: a Rebuildable written before it still replays
                kept = {"keep_function": True} if step.kept_function else {}
                member.adopt_architecture(step.architecture, **kept)
            except ValueError as exc:
                raise TrainingError(
                    f"recipe.schedule[{step.generation - 1}].architecture: {exc}",
                    "write the recipe again with agile recipe RUN from the run it came from",
                ) from None

    def lineage_entry(self, member: Member) -> dict[str, Any]:
        """What ``record.lineage`` keeps of the generation just scored (see
        :class:`~agile_cli.MemberRecord`): the architecture where it changed, and first."""
        entry: dict[str, Any] = {
            "generation": self.state.generation,
            "steps": self.state.steps_per_member,
            "fitness": member.record.fitness[-1],
            "mutation": member.record.mutation,
            "hyperparameters": member.hyperparameters(),
        }
        if isinstance(member, Rebuildable):
            architecture = member.architecture()
            if architecture != _last_architecture(member.record.lineage):
                entry["architecture"] = architecture
        return entry

    def _evolve(self) -> None:
        if self.selection is None or self.mutator is None:
            return
        outcome = self.selection.select(self.population, self.selection_rng)
        self.elite = outcome.elite
        self.population = outcome.population
        self.mutator.mutate(self.population, only=outcome.to_mutate)
        self.save_member(self.elite, self.folder.elite)

    # -- reporting -------------------------------------------------------------------------------

    def _title(self) -> str:
        return f"{self.manifest.algorithm_name} on {self.manifest.environment.name}"

    def _shown_hyperparameters(self, member: Member) -> dict[str, float | int]:
        """The hyperparameters evolution changes (all mutable ones without evolution)."""
        values = member.hyperparameters()
        names = self.mutator.ranges if self.mutator is not None else member.spec.default_mutable
        return {name: values[name] for name in names if name in values} or values

    def report(self, speed: float, members: list[Member] | None = None) -> None:
        """Report the generation just scored: ``members`` (default: the population)."""
        members = self.population if members is None else members
        survivors = set(self.state.reported)
        rows = [
            MemberRow(
                index=m.index,
                fitness=last_fitness(m),
                recent=float(np.mean(m.record.fitness[-TARGET_WINDOW:])),
                mutation=m.record.mutation,
                hyperparameters=self._shown_hyperparameters(m),
                arch=m.describe_network(),
                parent=m.index if m.index in survivors else m.record.parent,
                parameters=network_size(m),
            )
            for m in members
        ]
        self.state.reported = [m.index for m in members]
        report = GenerationReport(self.state.generation, self.state.global_steps, speed, rows)
        best = report.best
        target = self.manifest.training.target_score
        if target is not None and self.state.target_reached_at is None and best.fitness >= target:
            self.state.target_reached_at = self._moment()
        self.reporter.generation(report)
        self.folder.append_metrics(self._metrics_record(report))
        scalars = {
            "fitness/best": best.fitness,
            "fitness/mean": float(np.mean([r.fitness for r in rows])),
            "speed/steps_per_second": speed,
        }
        for sink in self.sinks:
            sink.log(scalars, step=self.state.global_steps)

    def _metrics_record(self, report: GenerationReport) -> dict[str, Any]:
        record = {**self._report_record(report), **self.runner.generation_metrics()}
        selection = self.selection.metrics(self.population) if self.selection else {}
        if selection:
            record["selection"] = selection
        if self.asynchronous is not None:
            record["async"] = self.asynchronous.metrics()
        return record

    def _report_record(self, report: GenerationReport) -> dict[str, Any]:
        return {
            "generation": report.generation,
            "global_steps": report.global_steps,
            "steps_per_member": self.state.steps_per_member,
            "wall_seconds": round(self.state.wall_seconds, 3),
            "steps_per_second": round(report.steps_per_second, 1),
            "best_fitness": report.best.fitness,
            "best_member": report.best.index,
            "members": [dataclasses.asdict(row) for row in report.members],
        }

    def _moment(self) -> dict[str, Any]:
        return {
            "generation": self.state.generation,
            "global_steps": self.state.global_steps,
            "wall_seconds": round(self.state.wall_seconds, 3),
        }

    def target_met(self, members: list[Member] | None = None) -> bool:
        """Whether a member of ``members`` (default: the population) reached the target."""
        target = self.manifest.training.target_score
        if target is None:
            return False
        members = self.population if members is None else members
        window = [m.record.fitness[-TARGET_WINDOW:] for m in members]
        return any(len(f) == TARGET_WINDOW and np.mean(f) >= target for f in window)

    # -- checkpoints and the end -----------------------------------------------------------------

    def _header(self, kind: str) -> dict[str, Any]:
        """What every checkpoint of this run says about itself (see :mod:`.checkpoint`)."""
        manifest = self.manifest.to_dict()
        return {
            "format": checkpoint.FORMAT_VERSION,
            "kind": kind,
            "agile_version": __version__,
            "algorithm": self.manifest.algorithm_name,
            "environment": self.manifest.environment.name,
            "spaces": self.spaces,
            "manifest": manifest,
            "code_seal": trust.seal(manifest),
            "run_seed": self.state.seed,
        }

    def save_member(self, member: Member, path: Path) -> None:
        state = {**self._header(checkpoint.MEMBER), "member": member.state_dict()}
        checkpoint.save_atomically(state, path)
        if path == self.folder.elite:
            member.save_portable(self.folder.portable_elite)
            if isinstance(member, ExportsElite):
                member.export_elite(self.folder.path, at_end=False)

    def checkpoint_state(self) -> dict[str, Any]:
        """The whole run as it stands: members, counters, generators, optionally the buffer."""
        buffer = self.buffer if self.options.checkpoint_buffer else None
        return {
            **self._header(checkpoint.POPULATION),
            "state": dataclasses.asdict(self.state),
            "members": self.runner.state_dicts(self.population),
            "elite": self.elite.state_dict() if self.elite is not None else None,
            "mutation_rng": self.mutator.rng.bit_generator.state if self.mutator else None,
            "selection_rng": self.selection_rng.bit_generator.state,
            "selection": self.selection.state_dict() if self.selection else None,
            "buffer": buffer.state_dict() if buffer is not None else None,
            "run_options": {n: getattr(self.options, n) for n in run_shaping(self.options)},
        }

    def _snapshots_due(self) -> int:
        """How many ``--checkpoint-steps`` (or ``training.checkpoint_steps``) snapshots the
        steps trained so far call for (0 without the option)."""
        every = self.options.checkpoint_steps or self.manifest.training.checkpoint_steps or 0
        return self.state.steps_per_member // every if every else 0

    def snapshot_due(self) -> bool:
        """Whether a snapshot is due now."""
        return self._snapshots_due() > self.state.snapshots

    def save_checkpoint(self) -> None:
        snapshot = self.snapshot_due()
        if snapshot:
            self.state.snapshots = self._snapshots_due()
        state = self.checkpoint_state()
        if snapshot and not self.manifest.training.overwrite_checkpoints:
            # before latest.pt, which counts it taken: a kill between the two keeps both
            name = f"step_{self.state.steps_per_member}.pt"
            checkpoint.save_atomically(state, self.folder.checkpoints / name)
        checkpoint.save_atomically(state, self.folder.latest)
        self.checkpointed = self.state.generation

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from a checkpoint made by :meth:`checkpoint_state`.

        :raises TrainingError: the checkpoint does not belong to a run like this one.
        """
        check_compatible(state, self.manifest, self.spaces)
        with explain_mismatch():
            self._restore_members(state)
            if self.mutator is not None and state["mutation_rng"] is not None:
                self.mutator.rng.bit_generator.state = state["mutation_rng"]
            self.selection_rng.bit_generator.state = state["selection_rng"]
            if self.selection is not None:
                self.selection.load_state_dict(state["selection"])
            if self.buffer is not None and state["buffer"] is not None:
                self.buffer.load_state_dict(state["buffer"])
            self.state = LoopState.read(state["state"], self.folder.latest)
            self.checkpointed = self.state.generation

    def recheck_target(self, records: list[dict[str, Any]]) -> None:
        """Find again when the target was first reached, from the generations' ``records``
        (the run folder's metrics): a resumed run whose ``training.target_score`` was edited
        reports the moment its new target was reached, or that it was not."""
        target = self.manifest.training.target_score
        reached = next(
            (r for r in records if target is not None and _number(r.get("best_fitness")) >= target),
            None,
        )
        moment = ("generation", "global_steps", "wall_seconds")
        self.state.target_reached_at = (
            None if reached is None else {k: reached.get(k) for k in moment}
        )

    def _restore_members(self, state: dict[str, Any]) -> None:
        members = []
        for saved in state["members"]:
            member = self.population[0].clone(saved["index"])
            member.load_state_dict(saved)
            members.append(member)
        self.population = members
        if state["elite"] is not None:
            self.elite = self.population[0].clone(state["elite"]["index"])
            self.elite.load_state_dict(state["elite"])

    def _finish(self, interrupted: bool) -> RunResult:
        fitnesses = [last_fitness(member) for member in self.population]
        best = self.population[int(np.argmax(fitnesses))] if fitnesses else None
        if best is not None and not best.record.fitness:
            best = None  # no generation has finished: nobody has a fitness yet
        scored = self._score_again() if best is not None and not interrupted else []
        elite = next(m for m in self.population if m.index == scored[0].member) if scored else best
        if elite is not None and not (interrupted and self.folder.elite.exists()):
            self.save_member(elite, self.folder.elite)
        summary = self._summary(best, interrupted)
        if elite is not None and not interrupted and isinstance(elite, ExportsElite):
            self.reporter.phase("writing the elite's exports")
            written = elite.export_elite(self.folder.path, at_end=True)
            if written:
                summary["exports"] = [str(path) for path in written]
        if scored:
            summary["elite"] = {
                **scored[0].to_dict(),
                "seed": reevaluation.evaluation_seed(self.state.seed),
                "population": len(self.population),
                "candidates": [result.to_dict() for result in scored],
            }
        self.folder.write_summary(summary)
        self.reporter.finish(summary)
        with contextlib.suppress(Exception):  # workers already gone after Ctrl-C
            self.env.close()
        path = self.folder.path
        return RunResult(
            name=path.name,
            status="interrupted" if interrupted else "completed",
            metrics=str(path / "metrics.jsonl"),
            summary=summary,
            run_dir=path,
            population=self.population,
            fitnesses=fitnesses,
        )

    def _score_again(self) -> list[Reevaluated]:
        """The best ``--elite-top`` members scored again on fresh evaluation seeds, best
        first (see :mod:`.reevaluation`); empty where there is nothing to choose between."""
        count = min(self.options.elite_top, len(self.population))
        if count == 0 or (count == 1 and len(self.population) == 1):
            return []
        episodes = self.options.elite_episodes
        self.reporter.phase(f"scoring the best {count} again on {episodes} fresh episodes each")
        ranked = reevaluation.top_members(self.population, count)
        seed = reevaluation.evaluation_seed(self.state.seed)
        return reevaluation.reevaluate(ranked, self.manifest, self.registry, episodes, seed)

    def _summary(self, best: Member | None, interrupted: bool) -> dict[str, Any]:
        state = self.state
        seconds = state.wall_seconds
        return {
            "algorithm": self.manifest.algorithm_name,
            "environment": self.manifest.environment.name,
            "best_fitness": last_fitness(best) if best is not None else None,
            "best_member": best.index if best is not None else None,
            "global_steps": state.global_steps,
            "steps_per_member": state.steps_per_member,
            "step_unit": self.manifest.step_unit,
            "generations": state.generation,
            "wall_seconds": round(seconds, 3),
            "steps_per_second": round(state.global_steps / seconds, 1) if seconds > 0 else None,
            "target_score": self.manifest.training.target_score,
            "target_reached": state.target_reached_at is not None,
            "target_reached_at": state.target_reached_at,
            "stopped_early": state.stopped_early,
            "interrupted": interrupted,
            "device": str(self.device),
            "torch_threads": self.threads,
            "seed": state.seed,
            "run_dir": str(self.folder.path),
        }


def _last_architecture(lineage: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The architecture a lineage recorded last (entries hold one only where it changed)."""
    return next((e["architecture"] for e in reversed(lineage) if "architecture" in e), None)


def _number(value: Any) -> float:
    """A record's number; minus infinity for anything else (null, a string)."""
    return float(value) if isinstance(value, int | float) else float("-inf")


def _run_seed(manifest: TrainingManifest, options: LocalRunOptions) -> int:
    if options.seed is not None:
        return options.seed
    return manifest.mutation.rand_seed if manifest.mutation is not None else 0


def network_size(member: Member) -> int | None:
    """How many weights the member's networks hold; None where it has none of its own. A
    member that stands in for one held elsewhere counts them with ``parameter_count()``."""
    count = getattr(member, "parameter_count", None)
    if callable(count):
        counted: int = count()
        return counted
    networks = getattr(member, "networks", None)
    if not networks:
        return None
    total: int = sum(p.numel() for network in networks.values() for p in network.parameters())
    return total


def torch_threads(manifest: TrainingManifest, requested: int | None = None) -> int:
    """Set torch's threads for training and return their number: ``requested``
    (``--threads``) when given, else the paradigm's choice (:meth:`~agile_cli.Paradigm.
    torch_threads`: one for the RL library's small networks, see docs/training.md), else
    torch's own, never more than the CPUs this process may use. The count is fixed, never
    read from the machine's load: results depend on it, and a run must repeat."""
    chosen = setup.paradigm_of(manifest).torch_threads(manifest)
    if requested is not None:
        wanted = requested
    elif chosen is not None:
        wanted = chosen
    else:
        wanted = min(torch.get_num_threads(), available_cpus())
    if torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)
    return wanted


def busy_machine_note(threads: int) -> str | None:
    """A hint when ``threads`` torch threads will compete with other processes for the
    CPUs (the last minute's load average leaves fewer free than that); None otherwise."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows
        return None
    cpus = available_cpus()
    if threads <= 1 or cpus - load >= threads - 0.5:
        return None
    return (
        f"the machine is busy (load {load:.1f} on {cpus} CPUs): {threads} torch "
        "threads will wait on each other; --threads 1 is often several times faster here"
    )


#: Where cgroup v2 says how much CPU time this process's group may use: "QUOTA PERIOD" or "max".
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def available_cpus(cpu_max: Path = CGROUP_CPU_MAX) -> int:
    """The CPUs this process may use: those of its affinity mask (``taskset``, a container's
    cpuset), and no more than a cgroup CPU quota allows (``docker --cpus``)."""
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        count = os.cpu_count() or 1
    try:
        quota, period = cpu_max.read_text().split()
        return max(1, min(count, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):  # no cgroup v2 quota ("max"), or not Linux
        return count
