"""``agile init``: write a commented starter manifest for a registered algorithm."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from agile_cli.errors import AgileError, UsageError
from agile_cli.host.registry import Registry
from agile_cli.starter import Doubt, Starter, starter_manifest

if TYPE_CHECKING:
    from agile_cli.manifest import TrainingManifest


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

    :raises UsageError: for an unknown algorithm, an environment whose actions it refuses,
        or an ``out`` that exists (without ``force``) or cannot be written.
    """
    if algorithm is None:
        _list_algorithms(registry)
        return 0
    if out is not None and out.exists() and not force:
        hint = "add --force, or choose another --out"
        raise UsageError(f"{out} exists; not overwriting it", hint)
    starter = starter_manifest(registry, algorithm, environment)
    if starter.doubt is not None and not starter.notes:
        _check_actions(registry, algorithm, starter, starter.doubt)
    text = starter.text()
    if out is None:
        click.echo(text, nl=False)
    else:
        _write(out, text)
        click.echo(f"wrote {out}; check it with: agile validate {out}", err=True)
    for note in starter.notes:
        click.echo(f"note: {note}", err=True)
    return 0


def _check_actions(registry: Registry, algorithm: str, starter: Starter, doubt: Doubt) -> None:
    """Build one member on the environment, as ``agile validate --check-env`` does, when its
    kind of actions differs from the algorithm's own starter environment's: only the
    algorithm's ``build()`` knows whether it takes both (PPO does, TD3 takes Box only). This
    imports torch and the environment's package, so it is done only then. An environment
    that cannot be built here (not installed, say) leaves a note instead.

    :raises UsageError: the algorithm refuses the environment, naming what it trains on.
    """
    from agile_cli.loader import load_text
    from agile_cli.manifest import TrainingManifest
    from agile_cli.training import setup

    data = load_text(starter.text(), source="starter")
    if "num_envs" in data["environment"]:  # one copy, in this process, is enough to ask
        data["environment"].update(num_envs=1, sync=True)
    manifest = TrainingManifest.get_validated(data, registry=registry)
    try:
        env = setup.build_environment(manifest, registry, seed=0)
    except Exception as error:  # no verdict on the algorithm
        why = " ".join(error.lines()) if isinstance(error, AgileError) else repr(error)
        starter.notes.append(
            f"{doubt.environment} could not be built here to check that {algorithm} takes its "
            f"{doubt.actions} actions (its starter environment, {doubt.usual}, has "
            f"{doubt.usual_actions} ones): {why}; once it builds, agile validate --check-env "
            "checks the pair"
        )
        return
    try:
        reason = _refusal(manifest, registry, env)
    finally:
        env.close()
    if reason is not None:
        raise UsageError(
            f"{algorithm} cannot train on {doubt.environment} ({doubt.actions} actions): {reason}",
            f"give it an environment with {doubt.usual_actions} actions, e.g. "
            f"{', '.join(doubt.fitting())}; without ENVIRONMENT, `agile init {algorithm}` "
            f"writes {doubt.usual}",
        )


def _refusal(manifest: TrainingManifest, registry: Registry, env: Any) -> str | None:
    """Why one member of the manifest's algorithm cannot be built on ``env``; None when it can.
    A refusal is the algorithm's own words (NotImplementedError in its ``build()``); any other
    failure is named with its type, as ``agile validate --check-env`` names it."""
    from agile_cli.training import setup

    try:
        setup.build_one_member(manifest, registry, env)
    except AgileError as error:
        return error.message
    except Exception as error:
        said = " ".join(str(error).split())
        return f"building a member failed: {type(error).__name__}" + (f": {said}" if said else "")
    return None


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
