"""The local backend: evolutionary training in this process."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from agile_cli import (
    Backend,
    Registry,
    RunOptions,
    RunResult,
    Spec,
    TrainingManifest,
    TrainResult,
    resume_local,
    run_local,
)
from agile_local.spec import LocalOptions


def _run_options(spec: Spec) -> RunOptions:
    options = cast(LocalOptions, spec)  # the CLI validated them against LocalOptions
    return RunOptions(
        device=options.device,
        seed=options.seed,
        run_dir=Path(options.run_dir) if options.run_dir else None,
        wb=options.wb,
        tensorboard=options.tensorboard,
        checkpoint_steps=options.checkpoint_steps,
        checkpoint_buffer=options.checkpoint_buffer,
        overwrite=options.overwrite,
        trust_code=options.trust_code,
        per_member=options.per_member,
    )


def _result(result: TrainResult) -> RunResult:
    return RunResult(
        name=result.run_dir.name,
        status="interrupted" if result.interrupted else "completed",
        metrics=str(result.run_dir / "metrics.jsonl"),
        summary=result.summary,
        run_dir=result.run_dir,
        population=result.population,
        fitnesses=result.fitnesses,
    )


class LocalBackend(Backend):
    """Trains on this machine's CPU or GPU and writes a run folder."""

    def train(
        self,
        manifest: TrainingManifest,
        options: Spec,
        registry: Registry,
        *,
        verbose: bool,
    ) -> RunResult:
        return _result(run_local(manifest, registry, _run_options(options), verbose=verbose))

    def resume(
        self, run_dir: Path, options: Spec, registry: Registry, *, verbose: bool
    ) -> RunResult:
        return _result(resume_local(run_dir, registry, _run_options(options), verbose=verbose))
