"""``LocalTrainer``: train a population from Python, with a manifest or spec objects."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agile_cli.backend import RunResult
from agile_cli.errors import TrainingError, UsageError
from agile_cli.host.plugins import installed_registry
from agile_cli.host.registry import Registry
from agile_cli.manifest import TrainingManifest
from agile_cli.models.algorithm import AlgorithmSpec, EnvironmentSpec
from agile_cli.models.base import Spec
from agile_cli.models.run_options import LocalRunOptions
from agile_cli.training import checkpoint
from agile_cli.training.loop import EvolutionLoop, LoopState, run_shaping
from agile_cli.training.members import RunnerFactory
from agile_cli.training.progress import LogReporter, Reporter, RichReporter
from agile_cli.training.resume import check_compatible, checked_manifest, explain_mismatch
from agile_cli.training.run_folder import RunFolder, check_writable


def _section(value: Spec | Mapping[str, Any] | None) -> Any:
    if isinstance(value, Spec):
        return value.model_dump(mode="json", exclude_unset=False)
    return dict(value) if value is not None else None


class LocalTrainer:
    """Evolutionary training on this machine (CPU or GPU).

    ``LocalTrainer("PPO", "CartPole-v1", training=TrainingSpec(population_size=6), ...)``
    builds the same validated manifest a YAML file would; :meth:`from_manifest` takes a file,
    a mapping or a :class:`TrainingManifest`.
    """

    def __init__(
        self,
        algorithm: str | AlgorithmSpec,
        environment: str | EnvironmentSpec | Mapping[str, Any],
        training: Spec | Mapping[str, Any] | None = None,
        mutation: Spec | Mapping[str, Any] | None = None,
        tournament: Spec | Mapping[str, Any] | None = None,
        replay_buffer: Spec | Mapping[str, Any] | None = None,
        network: Spec | Mapping[str, Any] | None = None,
        *,
        selection_strategy: Spec | Mapping[str, Any] | None = None,
        device: str = "auto",
        registry: Registry | None = None,
    ) -> None:
        if tournament is not None and selection_strategy is not None:
            raise UsageError("give tournament or selection_strategy, not both")
        registry = registry if registry is not None else installed_registry()
        data: dict[str, Any] = {
            "algorithm": _algorithm_section(algorithm, registry),
            "environment": {"name": environment}
            if isinstance(environment, str)
            else _section(environment),
        }
        optional = {
            "training": training,
            "mutation": mutation,
            "tournament_selection": tournament if tournament is not None else selection_strategy,
            "replay_buffer": replay_buffer,
            "network": network,
        }
        data.update({key: _section(value) for key, value in optional.items() if value is not None})
        self.manifest: TrainingManifest = TrainingManifest.get_validated(data, registry=registry)
        self.registry = registry
        self.device = device

    @classmethod
    def from_manifest(
        cls,
        manifest: str | Path | Mapping[str, Any] | TrainingManifest,
        device: str = "auto",
        registry: Registry | None = None,
    ) -> LocalTrainer:
        """A trainer for a manifest file, mapping or validated manifest."""
        registry = registry if registry is not None else installed_registry()
        trainer = cls.__new__(cls)
        trainer.manifest = TrainingManifest.get_validated(manifest, registry=registry)
        trainer.registry = registry
        trainer.device = device
        return trainer

    def train(
        self,
        wb: bool = False,
        verbose: bool = True,
        *,
        tensorboard: bool = False,
        run_dir: str | Path | None = None,
        seed: int | None = None,
        checkpoint_steps: int | None = None,
        checkpoint_buffer: bool = False,
        overwrite: bool = False,
    ) -> tuple[list[Any], list[float]]:
        """Train; returns ``(population, fitnesses)``, the fitnesses aligned with the members."""
        options = LocalRunOptions(
            device=self.device,
            seed=seed,
            run_dir=Path(run_dir) if run_dir is not None else None,
            wb=wb,
            tensorboard=tensorboard,
            checkpoint_steps=checkpoint_steps,
            checkpoint_buffer=checkpoint_buffer,
            overwrite=overwrite,
        )
        result = run_local(self.manifest, self.registry, options, verbose=verbose)
        self.result = result
        assert result.population is not None and result.fitnesses is not None  # trained here
        return result.population, result.fitnesses


def _algorithm_section(algorithm: str | AlgorithmSpec, registry: Registry) -> dict[str, Any]:
    if isinstance(algorithm, str):
        return {"name": algorithm}
    for name, entry in registry.algorithms.items():
        if type(algorithm) is entry.spec:
            return {"name": name, **_section(algorithm)}
    raise UsageError(f"{type(algorithm).__name__} is not the spec of a registered algorithm")


def _reporter(verbose: bool) -> Reporter:
    return RichReporter() if verbose else LogReporter()


def run_local(
    manifest: TrainingManifest,
    registry: Registry,
    options: LocalRunOptions,
    *,
    verbose: bool = True,
    runner: RunnerFactory | None = None,
) -> RunResult:
    """Train ``manifest``, writing a new run folder here: in this process, or where the
    backend's ``runner`` trains the members (see :class:`~agile_cli.helpers.MemberTrainer`)."""
    if options.run_dir is not None:  # refuse a taken folder before any set-up
        RunFolder(options.run_dir).check_available(options.overwrite)
    loop = EvolutionLoop(manifest, registry, options, _reporter(verbose), runner=runner)
    return loop.run()


_RESUME_ELSEWHERE = (
    "a resumed run writes checkpoints and metrics in its folder: copy the folder somewhere "
    "writable and resume the copy"
)


def resume_local(
    run_dir: Path,
    registry: Registry,
    options: LocalRunOptions,
    *,
    verbose: bool = True,
    runner: RunnerFactory | None = None,
    adopt: Callable[[LocalRunOptions], None] | None = None,
) -> RunResult:
    """Continue the run in ``run_dir`` from its latest checkpoint (whichever backend trained
    it), in this process or with the backend's ``runner``.

    :param adopt: called with the options the run resumes with (those it started with that
        shape it, unless given anew), before ``runner`` makes the backend's runner.
    """
    _refuse_fresh_run_options(options)
    folder = RunFolder(run_dir)
    if not folder.manifest.is_file():
        raise UsageError(f"{run_dir} is not a run folder (no manifest.yaml)")
    check_writable(run_dir, f"--resume {run_dir}", _RESUME_ELSEWHERE)
    folder.lock()
    try:
        folder.check_links()
        return _resume(folder, registry, options, verbose=verbose, runner=runner, adopt=adopt)
    finally:
        folder.unlock()


def _resume(
    folder: RunFolder,
    registry: Registry,
    options: LocalRunOptions,
    *,
    verbose: bool,
    runner: RunnerFactory | None,
    adopt: Callable[[LocalRunOptions], None] | None = None,
) -> RunResult:
    run_dir = folder.path
    if not folder.latest.is_file():
        raise TrainingError(
            f"no generation of {run_dir} finished: it has no checkpoint to resume from",
            "start it again: " + _start_again(folder),
        )
    state = checkpoint.load(folder.latest, kind=checkpoint.POPULATION)
    LoopState.read(state["state"], folder.latest)  # its counters, before anything reads them
    manifest = TrainingManifest.get_validated(folder.manifest, registry=registry)
    check_compatible(state, manifest)
    manifest, notes = checked_manifest(state, manifest, folder.latest, trusted=options.trust_code)
    with explain_mismatch():
        finished = _finished(state, manifest, run_dir)
        if finished is not None and folder.summary.is_file():
            raise finished
        options = options.model_copy(update={"seed": int(state["state"]["seed"])})
        options, kept = _keep_run_options(state["run_options"], options)
        notes += kept
    if adopt is not None:
        adopt(options)
    reporter = _reporter(verbose)
    loop = EvolutionLoop(manifest, registry, options, reporter, folder=folder, runner=runner)
    loop.restore(state)
    folder.remove_temporary_files()
    notes += folder.keep_metrics_until(loop.state.generation)
    if manifest.training.target_score != state["manifest"].get("training", {}).get("target_score"):
        loop.recheck_target(folder.records())
    folder.record_command()
    for note in notes:
        reporter.note(note)
    if finished is not None:  # killed after its last checkpoint, before its end: end it
        reporter.note("the run trained to its end; finishing it (elite and summary)")
    return loop.run(fresh=False, only_finish=finished is not None)


#: The most of command.txt's first line read back (a command line is far shorter).
_COMMAND_LIMIT = 1 << 16


def _start_again(folder: RunFolder) -> str:
    """The command that starts ``folder``'s run again as it began (its ``command.txt``'s first
    line, which has its seed and options), into the same folder."""
    overwrite = " --overwrite" if folder.started() else ""
    try:
        with (folder.path / "command.txt").open(encoding="utf-8") as stream:
            words = shlex.split(stream.readline(_COMMAND_LIMIT))
    except (OSError, UnicodeDecodeError, ValueError):
        words = []
    if len(words) < 3 or words[1] != "train" or "--resume" in words:
        return f"agile train {folder.manifest} --run-dir {folder.path}{overwrite}"
    words = [word for word in words if word != "--overwrite"]
    if not any(word == "--run-dir" or word.startswith("--run-dir=") for word in words):
        words += ["--run-dir", str(folder.path)]
    return shlex.join(words) + overwrite


def _keep_run_options(
    saved: dict[str, Any], options: LocalRunOptions
) -> tuple[LocalRunOptions, list[str]]:
    """``options`` with the run-shaping options the run was started with (see
    :data:`~agile_cli.training.loop.RUN_SHAPING_OPTIONS`, and its backend's ``shaping``)
    unless the resume command sets them anew, and a note for each one it sets anew."""
    notes, kept = [], {}
    for name in run_shaping(options):
        given, before = getattr(options, name), saved.get(name)
        flag = "--" + name.replace("_", "-")
        if name not in options.model_fields_set:  # not given again: the run's own
            kept[name] = before if before is not None else given
        elif given != before:
            value = "" if isinstance(given, bool) else f" {given}"
            had = f"with {before}" if before else "without it"
            notes.append(f"resuming with {flag}{value} (the run started {had})")
    return options.model_copy(update=kept), notes


def _refuse_fresh_run_options(options: LocalRunOptions) -> None:
    given = [flag for flag, value in (("--seed", options.seed), ("--run-dir", options.run_dir),
                                      ("--overwrite", options.overwrite)) if value]  # fmt: skip
    if given:
        raise UsageError(
            f"{', '.join(given)}: not with --resume, which continues the run as it started",
            "drop them, or start a new run from the manifest",
        )


def _finished(
    state: dict[str, Any], manifest: TrainingManifest, run_dir: Path
) -> UsageError | None:
    """Why the run of ``state`` has nothing left to train (None: it has)."""
    counters, training = state["state"], manifest.training
    saved_target = state["manifest"].get("training", {}).get("target_score")
    if counters["stopped_early"] and saved_target is None:
        return UsageError(
            f"{run_dir} has finished: every member had trained on all the data it may",
            "start a new run, with more data or a larger training.max_steps",
        )
    if counters["stopped_early"] and training.target_score == saved_target:
        return UsageError(
            f"{run_dir} has finished: it reached its training.target_score {saved_target:g}",
            f"to train on, raise training.target_score in {run_dir / 'manifest.yaml'} and resume",
        )
    if counters["steps_per_member"] >= training.max_steps:
        return UsageError(
            f"{run_dir} has finished: it trained {counters['steps_per_member']:,} steps per "
            f"member of its training.max_steps {training.max_steps:,}",
            f"to train longer, raise training.max_steps in {run_dir / 'manifest.yaml'} and resume",
        )
    return None
