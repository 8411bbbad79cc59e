"""``agile validate``: check manifests, one report line per file."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from agile_cli.errors import (
    EXIT_USAGE,
    AgileError,
    EnvironmentNotFoundError,
    FieldError,
    ManifestError,
    UsageError,
    printable,
)
from agile_cli.host.plugins import PluginHost
from agile_cli.manifest import TrainingManifest
from agile_cli.overrides import load_manifest, parse_overrides


def run_validate(
    host: PluginHost,
    files: Sequence[Path],
    *,
    as_json: bool,
    check_env: bool,
    overrides: Sequence[str] = (),
    reference: bool = False,
) -> int:
    """Validate each file (with the ``--set`` ``overrides`` applied to each); print a report
    (or JSON, in agilerl 2.58's form with ``reference``); return the exit status.

    :raises UsageError: an override is malformed (before any file is read).
    """
    changes = parse_overrides(overrides)
    as_json = as_json or reference
    resolved: dict[str, Any] = {}
    status = 0
    for path in files:
        try:
            manifest = load_manifest(path, changes, host.registry)
            if check_env:
                _check_environment(host, manifest)
        except ManifestError as error:
            status = EXIT_USAGE
            _report_invalid(str(path), error, err=as_json)
            continue
        except EnvironmentNotFoundError as error:
            status = EXIT_USAGE
            problem = _environment_problem(error)
            _report_invalid(str(path), ManifestError([problem], str(path)), err=as_json)
            continue
        try:
            _report_valid(path, manifest, resolved, as_json=as_json, reference=reference)
        except UsageError as error:
            status = EXIT_USAGE
            click.echo(printable(f"{path}: {error.message}"), err=True)
            continue
        for warning in manifest.warnings:
            click.echo(printable(f"  warning: {warning}"), err=as_json)
        for lacking in manifest.algorithm.local_training_errors(manifest):
            said = f"  not on this machine: {lacking.render()}"  # valid all the same
            click.echo(printable(said), err=as_json)
    if as_json and resolved:
        document = next(iter(resolved.values())) if len(files) == 1 else resolved
        click.echo(json.dumps(document, indent=2))
    return status


_FIELD_PREFIX = re.compile(r"^(environment(?:\.\w+)+): (.+)$", re.DOTALL)


def _report_valid(
    path: Path,
    manifest: TrainingManifest,
    resolved: dict[str, Any],
    *,
    as_json: bool,
    reference: bool,
) -> None:
    """A valid manifest's line, or its resolved form kept in ``resolved`` for the JSON.

    :raises UsageError: ``reference`` and the manifest has no form in agilerl 2.58's format.
    """
    if reference:
        resolved[str(path)] = _reference_form(manifest)
    elif as_json:
        resolved[str(path)] = manifest.to_dict()
    else:
        click.echo(printable(f"{path}: ok ({manifest.summary()})"))


def _reference_form(manifest: TrainingManifest) -> dict[str, Any]:
    """The manifest in 2.58's form, each setting that form cannot carry noted on stderr."""
    from agile_cli.reference_form import reference_form

    form, notes = reference_form(manifest)
    for note in notes:
        click.echo(printable(f"  note: {note}"), err=True)
    return form


def _environment_problem(error: EnvironmentNotFoundError) -> FieldError:
    """The error under the field it names (``environment.entrypoint: ...``), else under
    ``environment``."""
    named = _FIELD_PREFIX.match(error.message)
    if named is None:
        return FieldError("environment", error.message, error.hint)
    return FieldError(named.group(1), named.group(2), error.hint)


def _report_invalid(source: str, error: ManifestError, *, err: bool) -> None:
    count = len(error.errors)
    click.echo(printable(f"{source}: invalid, {count} error{'s' if count != 1 else ''}"), err=err)
    for line in error.lines():
        click.echo(printable(f"  {line}", keep_newlines=True), err=err)


def _check_environment(host: PluginHost, manifest: TrainingManifest) -> None:
    """Resolve the environment with its builder's ``check``, then build one member on it."""
    assert manifest.family is not None
    if lacking := manifest.algorithm.local_training_errors(manifest):
        raise ManifestError(lacking)  # this machine cannot train it: nothing to build
    entry = host.registry.environment_for(manifest.family, manifest.environment_builder)
    assert entry is not None  # validation found one
    entry.load()().check(manifest.environment)
    _check_member(host, manifest)


def _check_member(host: PluginHost, manifest: TrainingManifest) -> None:
    """Build one member on the CPU for the environment's spaces, as ``agile train`` would, so
    that an algorithm refuses spaces it cannot handle now (``NotImplementedError`` in its
    ``build()``) rather than when training starts.

    :raises ManifestError: under ``algorithm``, when the member cannot be built.
    """
    from agile_cli.training import setup  # only --check-env pays for torch

    env = setup.build_environment(manifest, host.registry, seed=0)
    try:
        spaces = setup.member_spaces(manifest, env)
        try:
            setup.build_one_member(manifest, host.registry, env)
        except AgileError as error:
            problem = FieldError("algorithm", _own_words(manifest, error.message), error.hint)
            raise ManifestError([problem]) from None
        except Exception as error:
            raise ManifestError([_build_failure(manifest, spaces, error)]) from None
    finally:
        env.close()


def _own_words(manifest: TrainingManifest, message: str) -> str:
    """``message`` without the ``NAME: `` that training puts before an algorithm's refusal when
    the refusal already begins with the algorithm's name."""
    name = manifest.algorithm_name
    prefix = f"{name}: "
    if message.startswith(prefix + name):
        return message[len(prefix) :]
    return message


def _build_failure(
    manifest: TrainingManifest, spaces: dict[str, Any], error: Exception
) -> FieldError:
    words = {"observation": "observations", "action": "actions"}
    described = ", ".join(f"{words[name.split('_')[0]]} {space}" for name, space in spaces.items())
    said = " ".join(str(error).split())
    return FieldError(
        "algorithm",
        f"{manifest.algorithm_name} could not build a member for this environment "
        f"({described}): {type(error).__name__}" + (f": {said}" if said else ""),
        "an algorithm that does not support these spaces should raise NotImplementedError in "
        "build() saying so; otherwise report this to its plugin",
    )
