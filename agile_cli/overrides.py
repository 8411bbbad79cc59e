"""``--set PATH=VALUE``: change a manifest's values from the command line, before validation.

``PATH`` is dotted (``training.pop_size``, ``mutation.rl_hp_selection.lr.min``); a number
names an item of a list the manifest already has (``network.encoder_config.hidden_size.0``).
``VALUE`` is YAML, read as a manifest file's values are (``8``, ``3e-4``, ``true``,
``[64, 64]``, ``null``, ``{min: 1e-5, max: 1e-2}``). Missing mappings on the way are created.
Validation then sees the changed mapping, so its errors are a file's, each one about a value
``--set`` wrote marked ``(from --set)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agile_cli.errors import FieldError, ManifestError, UsageError
from agile_cli.host.registry import Registry
from agile_cli.loader import load_file, parse_yaml
from agile_cli.manifest import TrainingManifest
from agile_cli.models.base import dotted, suggest
from agile_cli.validation import SECTIONS, SELECTION_ALIAS

EXAMPLE = "e.g. --set training.pop_size=8"
FROM_SET = "from --set"
#: The most keys a ``--set`` path may have: a manifest's deepest field is a few levels down.
MAX_KEYS = 16


@dataclass(frozen=True)
class Override:
    """One ``--set``: the text as given, its path's keys, and its value (YAML-typed)."""

    text: str
    keys: tuple[str, ...]
    value: Any


def parse_overrides(texts: Iterable[str]) -> list[Override]:
    """Parse every ``PATH=VALUE``.

    :raises UsageError: (exit 2) at the first one that is malformed or names no section.
    """
    return [parse_override(text) for text in texts]


def parse_override(text: str) -> Override:
    """Parse one ``PATH=VALUE``; see :func:`parse_overrides`."""
    path, equals, raw = text.partition("=")
    path = path.strip()
    if not equals:
        raise UsageError(f"--set {text}: expected PATH=VALUE, with '='", EXAMPLE)
    if not path:
        raise UsageError(f"--set {text}: the path before '=' is empty", EXAMPLE)
    if path.count(".") >= MAX_KEYS:
        raise UsageError(
            f"--set {_shortened(path)}=...: the path has {path.count('.') + 1:,} keys; a "
            f"manifest's fields are at most {MAX_KEYS} deep",
            EXAMPLE,
        )
    keys = tuple(key.strip() for key in path.split("."))
    if "" in keys:
        raise UsageError(
            f"--set {text}: the path '{path}' has an empty key", "write keys joined by single dots"
        )
    _check_section(text, keys[0])
    try:
        value = parse_yaml(raw, source="--set")
    except ManifestError as error:
        detail = error.errors[0].message.replace("invalid YAML: ", "")
        raise UsageError(
            f"--set {text}: the value is not valid YAML: {detail}",
            "quote the value, e.g. --set 'environment.name=\"a: b\"'",
        ) from None
    return Override(text, keys, value)


def _shortened(text: str, size: int = 60) -> str:
    return text if len(text) <= size else f"{text[: size - 3]}..."


def _check_section(text: str, section: str) -> None:
    known = (*SECTIONS, SELECTION_ALIAS)
    if section in known:
        return
    close = suggest(section, known)
    listing = ", ".join(SECTIONS) + f", {SELECTION_ALIAS} (alias of tournament_selection)"
    hint = f"did you mean '{close}'?" if close else "valid sections: " + listing
    raise UsageError(f"--set {text}: unknown section '{section}'", hint)


def apply_overrides(
    data: dict[str, Any], overrides: Sequence[Override], source: str | None = None
) -> list[str]:
    """Write each override into ``data`` (in order: a later one wins), creating the mappings
    missing on its way; returns the dotted paths whose contents ``--set`` wrote.

    :raises ManifestError: listing every override whose path goes through a value that is
        neither a mapping nor a list, or names an item a list does not have.
    """
    written: list[str] = []
    problems: list[FieldError] = []
    for override in overrides:
        try:
            written.append(_apply(data, override))
        except _PathProblem as problem:
            problems.append(problem.error)
    if problems:
        raise ManifestError(problems, source=source)
    return written


class _PathProblem(Exception):
    def __init__(self, error: FieldError) -> None:
        super().__init__(error.message)
        self.error = error


def _apply(data: dict[str, Any], override: Override) -> str:
    """Write one override; returns the dotted path of the outermost thing it created or set."""
    node: Any = data
    walked: list[str | int] = []
    created: str | None = None
    for key in override.keys[:-1]:
        step = _step(node, key, walked, override, fresh=created is not None)
        child = node.get(step) if isinstance(node, dict) else node[step]
        walked.append(step)
        if child is None and isinstance(node, dict):  # missing, or null: a new mapping
            child = node[step] = {}
            created = created or dotted(walked)
        elif not isinstance(child, dict | list):
            raise _PathProblem(_inside_scalar(walked, child, override))
        node = child
    last = _step(node, override.keys[-1], walked, override, fresh=created is not None)
    node[last] = override.value
    return created or dotted([*walked, last])


def _step(
    node: Any, key: str, walked: list[str | int], override: Override, *, fresh: bool
) -> str | int:
    """The key or list index ``key`` names in ``node`` (``fresh``: a mapping ``--set`` has
    just created, in which a number cannot name a list's item)."""
    where = dotted(walked)
    whole = f"--set {'.'.join(override.keys[: len(walked)])}=[...]"
    if isinstance(node, dict) and not (fresh and key.isdigit()):
        return key
    if isinstance(node, dict):
        message = f"is not in the manifest, so --set {override.text} cannot name its item {key}"
        raise _PathProblem(FieldError(where, message, "set the whole list: " + whole))
    if not key.isdigit():
        message = f"is a list; --set {override.text} names '{key}' in it, not an item number"
        raise _PathProblem(FieldError(where, message, "items are numbered from 0, or " + whole))
    if int(key) >= len(node):
        count = f"{len(node)} item{'s' if len(node) != 1 else ''}"
        message = f"has {count}; --set {override.text} names item {key}"
        raise _PathProblem(FieldError(where, message, "items are numbered from 0, or " + whole))
    return int(key)


def _inside_scalar(walked: list[str | int], value: Any, override: Override) -> FieldError:
    where = dotted(walked)
    kinds = {str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    kind = kinds.get(type(value), "null" if value is None else type(value).__name__)
    prefix = ".".join(override.keys[: len(walked)])
    return FieldError(
        where,
        f"is {kind} ({value!r}), not a mapping: --set {override.text} cannot set a key in it",
        f"set it whole instead, e.g. --set {prefix}=VALUE",
    )


def marked(error: ManifestError, written: Sequence[str], source: str | None) -> ManifestError:
    """``error`` with each problem at or under a path ``--set`` wrote marked ``(from --set)``
    (its hint, if any, kept in its message)."""
    errors = [_marked(problem) if _under(problem.path, written) else problem
              for problem in error.errors]  # fmt: skip
    return ManifestError(errors, source=source or error.source)


def _under(path: str, written: Sequence[str]) -> bool:
    return any(path == root or path.startswith((root + ".", root + "[")) for root in written)


def _marked(problem: FieldError) -> FieldError:
    message = f"{problem.message} ({problem.hint})" if problem.hint else problem.message
    return FieldError(problem.path, message, FROM_SET)


def load_manifest(
    path: Path, overrides: Sequence[Override], registry: Registry
) -> TrainingManifest:
    """The manifest file at ``path`` with ``overrides`` applied, validated.

    :raises ManifestError: the file cannot be read, an override cannot be applied, or the
        result is invalid (problems in what ``--set`` wrote marked so).
    """
    if not overrides:
        manifest: TrainingManifest = TrainingManifest.get_validated(path, registry=registry)
        return manifest
    data = load_file(path)
    written = apply_overrides(data, overrides, source=str(path))
    try:
        manifest = TrainingManifest.get_validated(data, registry=registry)
    except ManifestError as error:
        raise marked(error, written, str(path)) from None
    return manifest
