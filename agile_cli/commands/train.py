"""``agile train``: run a manifest with a backend, or resume a run folder."""

from __future__ import annotations

import contextlib
import copy
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from agile_cli.backend import Backend, RunResult
from agile_cli.errors import EXIT_INTERRUPTED, UsageError, printable
from agile_cli.host.plugins import PluginHost
from agile_cli.host.registry import BackendEntry, Registry
from agile_cli.models.base import field_errors, suggest
from agile_cli.overrides import load_manifest, parse_overrides

#: What Ctrl-C says before the backend has the run.
INTERRUPTED_BEFORE = "interrupted before training started; nothing was written"


def run_train(
    host: PluginHost,
    manifest_path: Path | None,
    *,
    backend_name: str,
    resume: Path | None,
    flags: dict[str, Any],
    verbose: bool,
    overrides: Sequence[str] = (),
) -> int:
    """Validate (after the ``--set`` ``overrides``), then hand the run to the backend; return
    the exit status.

    :raises KeyboardInterrupt: at Ctrl-C outside the backend's training loop (which handles
        its own), saying in its text what was left behind.
    """
    if manifest_path is None and resume is None:
        raise UsageError(
            "nothing to train: give a MANIFEST, or --resume RUN_DIR to continue a run",
            "e.g. agile train configs/training/ppo/cartpole.yaml",
        )
    if manifest_path is not None and resume is not None:
        raise UsageError(
            "give a MANIFEST or --resume RUN_DIR, not both",
            "a resumed run keeps the manifest in its folder",
        )
    if overrides and resume is not None:
        raise UsageError(
            "--set cannot change a resumed run: it continues with the manifest.yaml in its folder",
            "edit that file instead; resume honours edits of training.max_steps, target_score, "
            "checkpoint_steps and overwrite_checkpoints",
        )
    with _interrupted(INTERRUPTED_BEFORE):
        changes = parse_overrides(overrides)
        entry = _backend(host, backend_name)
        options = _options(entry, flags)
        backend: Backend = entry.load()()
        if resume is None:
            assert manifest_path is not None
            manifest = load_manifest(manifest_path, changes, host.registry)
            for warning in manifest.warnings:
                click.echo(printable(f"warning: {warning}"), err=True)
    with _interrupted(_interrupted_in_backend(resume)):
        if resume is not None:
            result = backend.resume(resume, options, host.registry, verbose=verbose)
        else:
            result = backend.train(manifest, options, host.registry, verbose=verbose)
    return _exit_status(result)


@contextlib.contextmanager
def _interrupted(said: str) -> Iterator[None]:
    """Ctrl-C in the block comes out as a KeyboardInterrupt saying ``said`` (unless the code
    it interrupted gave it words of its own)."""
    try:
        yield
    except KeyboardInterrupt as interrupt:
        raise KeyboardInterrupt(str(interrupt) or said) from None


def _interrupted_in_backend(resume: Path | None) -> str:
    """What Ctrl-C that escapes the backend says: the training loop handles Ctrl-C itself, so
    it struck while the run was being set up (environments, members) or closed."""
    where = "interrupted while the run was set up or closed"
    if resume is not None:
        return f"{where}; its last checkpoint is kept: agile train --resume {resume}"
    return f"{where}; agile keeps a run folder only once it holds a checkpoint"


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
    # not `value not in (None, False)`: 0 == False, and `--elite-top 0` means something
    given = {key: value for key, value in flags.items() if value is not None and value is not False}
    try:
        return entry.options.model_validate(given)
    except ValidationError as exc:
        first = field_errors(exc, entry.options)[0]
        flag = _SHOWN.get(first.path, "--" + first.path.replace("_", "-"))
        if first.message == "unknown field":
            raise UsageError(
                f"{flag} is not an option of backend '{entry.name}'",
                "see `agile train --help` for which backend takes it",
            ) from None
        raise UsageError(f"{flag}: {first.message}", first.hint) from None


def with_backend_options(command: click.Command, registry: Registry) -> click.Command:
    """``command`` with one option per field of every backend's options spec."""
    extended = copy.copy(command)
    extended.params = [*command.params, *_backend_flags(registry)]
    return extended


#: The flag an error names for a backend option declared with other flags (``--async``).
_SHOWN: dict[str, str] = {}


def _backend_flags(registry: Registry) -> list[click.Option]:
    flags: dict[str, click.Option] = {}
    for name in sorted(registry.backends, key=lambda n: (n != "local", n)):
        for field_name, field in registry.backends[name].options.model_fields.items():
            if field_name in flags:
                continue
            extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
            flag = _flag(field_name, field.annotation, field.description, name)
            named = extra.get("flags")
            aliases = [str(a) for a in named] if isinstance(named, list) else []
            flag.opts[:0] = aliases
            if aliases:
                _SHOWN[field_name] = aliases[0]
            flags[field_name] = flag
    return list(flags.values())


def _flag(name: str, annotation: Any, description: str | None, backend: str) -> click.Option:
    declared = ["--" + name.replace("_", "-"), name]
    text = f"{description or ''} [{backend}]"
    if annotation is bool:
        return click.Option(declared, is_flag=True, default=False, help=text)
    kinds = {int: int, float: float}
    inner = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    kind = kinds.get(annotation) or next((kinds[a] for a in inner if a in kinds), str)
    return click.Option(declared, type=kind, default=None, help=text)


def _exit_status(result: RunResult) -> int:
    """130 after Ctrl-C (the run's summary has already named the command that continues it)."""
    return EXIT_INTERRUPTED if result.interrupted else 0
