"""``agile train``: run a manifest with a backend, or resume a run folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from agile_cli.backend import Backend, RunResult
from agile_cli.errors import UsageError
from agile_cli.manifest import TrainingManifest
from agile_cli.models.base import field_errors, suggest
from agile_cli.plugins import PluginHost
from agile_cli.registry import BackendEntry

EXIT_INTERRUPTED = 130


def run_train(
    host: PluginHost,
    manifest_path: Path | None,
    *,
    backend_name: str,
    resume: Path | None,
    flags: dict[str, Any],
    verbose: bool,
) -> int:
    """Validate, then hand the run to the backend; return the exit status."""
    if (manifest_path is None) == (resume is None):
        raise UsageError("give a MANIFEST to train, or --resume RUN_DIR, not both")
    entry = _backend(host, backend_name)
    options = _options(entry, flags)
    backend: Backend = entry.load()()
    if resume is not None:
        result = backend.resume(resume, options, host.registry, verbose=verbose)
    else:
        assert manifest_path is not None
        manifest = TrainingManifest.get_validated(manifest_path, registry=host.registry)
        for warning in manifest.warnings:
            click.echo(f"warning: {warning}", err=True)
        result = backend.train(manifest, options, host.registry, verbose=verbose)
    return _exit_status(result)


def _backend(host: PluginHost, name: str) -> BackendEntry:
    backends = host.registry.backends
    if name not in backends:
        close = suggest(name, backends)
        raise UsageError(
            f"unknown backend '{name}'",
            f"did you mean '{close}'?" if close else "installed: " + ", ".join(sorted(backends)),
        )
    return backends[name]


def _options(entry: BackendEntry, flags: dict[str, Any]) -> Any:
    given = {key: value for key, value in flags.items() if value not in (None, False)}
    try:
        return entry.options.model_validate(given)
    except ValidationError as exc:
        errors = field_errors(exc, entry.options)
        first = errors[0]
        flag = "--" + first.path.replace("_", "-")
        raise UsageError(
            f"{flag}: {first.message} for backend '{entry.name}'",
            first.hint if first.message != "unknown field" else "the backend does not take it",
        ) from None


def _exit_status(result: RunResult) -> int:
    if result.interrupted:
        click.echo("interrupted; continue with: agile train --resume " + str(result.run_dir))
        return EXIT_INTERRUPTED
    return 0
