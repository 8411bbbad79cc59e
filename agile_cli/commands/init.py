"""``agile init``: write a commented starter manifest for a registered algorithm."""

from __future__ import annotations

from pathlib import Path

import click

from agile_cli.errors import UsageError
from agile_cli.host.registry import Registry
from agile_cli.starter import starter_manifest


def run_init(
    registry: Registry,
    algorithm: str | None,
    environment: str | None,
    *,
    out: Path | None,
    force: bool,
) -> int:
    """List the algorithms (no ``algorithm``), or write the starter manifest of one to
    stdout or ``out``; return the exit status.

    :raises UsageError: for an unknown algorithm, or an ``out`` that exists (without
        ``force``) or cannot be written.
    """
    if algorithm is None:
        _list_algorithms(registry)
        return 0
    if out is not None and out.exists() and not force:
        hint = "add --force, or choose another --out"
        raise UsageError(f"{out} exists; not overwriting it", hint)
    starter = starter_manifest(registry, algorithm, environment)
    text = starter.text()
    if out is None:
        click.echo(text, nl=False)
    else:
        _write(out, text)
        click.echo(f"wrote {out}; check it with: agile validate {out}", err=True)
    for note in starter.notes:
        click.echo(f"note: {note}", err=True)
    return 0


def _write(out: Path, text: str) -> None:
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise UsageError(f"cannot write {out}: {reason}", "choose another --out") from None


def _list_algorithms(registry: Registry) -> None:
    if not registry.algorithms:
        click.echo("No algorithm is registered; install an algorithm plugin (see `agile plugins`).")
        return
    click.echo("Usage: agile init ALGORITHM [ENVIRONMENT] [--out FILE]")
    click.echo("")
    click.echo("Registered algorithms:")
    width = max(len(name) for name in registry.algorithms)
    for name in sorted(registry.algorithms):
        entry = registry.algorithms[name]
        click.echo(f"  {name:<{width}}  {entry.family} (plugin {entry.plugin})")
