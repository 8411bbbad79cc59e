"""The local backend: evolutionary training in this process."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from agile_cli import (
    Backend,
    LocalRunOptions,
    Registry,
    RunOptions,
    RunResult,
    Spec,
    TrainingManifest,
    resume_local,
    run_local,
)


def _run_options(spec: Spec) -> RunOptions:
    return RunOptions.from_spec(cast(LocalRunOptions, spec))  # the CLI validated them


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
        return run_local(manifest, registry, _run_options(options), verbose=verbose).run_result()

    def resume(
        self, run_dir: Path, options: Spec, registry: Registry, *, verbose: bool
    ) -> RunResult:
        run_options = _run_options(options)
        return resume_local(run_dir, registry, run_options, verbose=verbose).run_result()
