"""The local backend: evolutionary training in this process."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from agile_cli import Backend, LocalRunOptions, ManifestError, RunResult, Spec, TrainingManifest
from agile_cli.helpers import Registry


def _run_options(spec: Spec) -> LocalRunOptions:
    return cast(LocalRunOptions, spec)  # the CLI validated them


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
        if lacking := manifest.algorithm.local_training_errors(manifest):
            # said before the training stack (torch) is even imported
            raise ManifestError(lacking, "training on this machine")
        from agile_cli.helpers import run_local

        return run_local(manifest, registry, _run_options(options), verbose=verbose)

    def resume(
        self, run_dir: Path, options: Spec, registry: Registry, *, verbose: bool
    ) -> RunResult:
        from agile_cli.helpers import resume_local

        run_options = _run_options(options)
        return resume_local(run_dir, registry, run_options, verbose=verbose)
