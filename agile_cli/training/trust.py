"""Code a saved run names, and when agile may import it.

A manifest can name code: an environment's ``entrypoint`` (a ``module:callable`` or a
``file.py:callable``; with a ``factory``, the id the factory makes), its ``factory``, its
``wrappers``, and an LLM environment's rubric file (``rubric_file_path``, August's
``reward_file_path``) and processors are imported and called when the environment is built.
``agile train m.yaml`` runs what the user's own manifest names. A checkpoint read back
(``agile evaluate``, ``agile export``, ``agile dataset collect``, ``agile train --resume``) may
come from someone else, so the code it names is imported only when this user's agile sealed
it, or when the user says ``--trust-code``.

The seal, in every checkpoint, records what the run imports: each file by its resolved path
and the sha256 of its content, each installed module by its name, and the *origin* (the
working directory of ``agile train``, which relative names were resolved against); with an
HMAC over all of it under a random key kept in ``~/.config/agile/trust.key``
(``$XDG_CONFIG_HOME``; readable by the user only). Someone else's checkpoint cannot carry a
valid seal, and an edited one (another path, another file, a file changed since) no longer
matches the seal it carries.

Read back, a run's relative names resolve against its sealed origin, never the current
directory (:func:`located`), and the code that will actually run (for a resume, what
``manifest.yaml`` names) must be the code the seal covers (:func:`checked`).

An installed module is sealed by its name. Python finds it on ``sys.path``, among the packages
this user installed, where nothing a run folder holds can appear; agile's own file-first
lookup (``base/module.py`` before the module) must still find no file, which the comparison
covers. A file is covered by its content, not the modules it imports in turn.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from agile_cli.environment import reference_file, wrapper_reference
from agile_cli.errors import UsageError, printable

if TYPE_CHECKING:
    from agile_cli.manifest import TrainingManifest

#: Manifest fields that decide which code is imported: a resume refuses any edit of them.
CODE_FIELDS = frozenset(
    f"environment.{name}"
    for name in (
        "entrypoint",
        "factory",
        "path",
        "wrappers",
        "rubric_file_path",
        "rubric_name",
        "reward_file_path",
        "reward_fn_name",
        "observation_processor",
        "action_processor",
    )
)
#: An LLM environment's rubric file and the name in it, in each spelling (2.58's, August's).
RUBRIC_SPELLINGS = (("rubric_file_path", "rubric_name"), ("reward_file_path", "reward_fn_name"))
#: Fields naming a ``module:callable`` that is imported and called (besides ``entrypoint``).
CALLABLE_FIELDS = ("factory", "observation_processor", "action_processor")
_SEAL_VERSION = 2
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Code:
    """One piece of code a manifest makes agile import.

    :param field: the manifest field that names it, e.g. ``environment.wrappers[0]``.
    :param reference: what the field names (a reward file: its name and function).
    :param file: the file imported, resolved; None for an installed module imported by name.
    :param sha256: the file's content hash; None when there is no such file.
    """

    field: str
    reference: str
    file: str | None = None
    sha256: str | None = None

    def __str__(self) -> str:
        shown = f"{self.field}: {self.reference}" + (f" ({self.file})" if self.file else "")
        return printable(shown)


def code(manifest: Mapping[str, Any], origin: Path) -> list[Code]:
    """What ``manifest`` (plain data) makes agile import, its relative names resolved against
    ``origin`` as the environment builders resolve them. Imports nothing."""
    environment = manifest.get("environment")
    if not isinstance(environment, Mapping):
        return []
    base = origin / _text(environment.get("path"))
    found = []
    if environment.get("entrypoint") and not environment.get("factory"):  # else an id
        reference = _text(environment["entrypoint"])
        found.append(_resolved("environment.entrypoint", reference, base))
    for name in CALLABLE_FIELDS:
        if environment.get(name):
            found.append(_resolved(f"environment.{name}", _text(environment[name]), base))
    wrappers = environment.get("wrappers") or []
    for index, item in enumerate(wrappers if isinstance(wrappers, list) else [wrappers]):
        target = _text(item[0] if isinstance(item, list | tuple) and item else item)
        found.append(_resolved(f"environment.wrappers[{index}]", wrapper_reference(target), base))
    for path_key, name_key in RUBRIC_SPELLINGS:
        if environment.get(path_key):
            file = origin / _text(environment[path_key])
            named = f"{file.name}:{_text(environment.get(name_key))}"
            found.append(_file_code(f"environment.{path_key}", named, file))
    return found


def located(
    manifest: Mapping[str, Any], origin: Path, like: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``manifest`` (plain data) with the places its code is found made absolute:
    ``environment.path`` (when the environment names an entrypoint or wrappers) and an LLM
    environment's rubric file, against ``origin``.

    :param like: the checkpoint's manifest, located: a relative place of ``manifest`` that this
        one already holds made absolute (a run resumed before) is taken as it holds it.
    """
    data = dict(manifest)
    updates = _locations(manifest, origin, like)
    if updates:
        data["environment"] = {**data["environment"], **updates}
    return data


def seal(manifest: Mapping[str, Any]) -> dict[str, Any] | None:
    """This user's seal over the code ``manifest`` names, resolved from the working directory
    as training resolves it (None when it names none, when no key can be kept, or when the
    working directory is gone)."""
    try:
        origin = Path.cwd()
    except OSError:
        return None
    found = code(located(manifest, origin), origin)
    key = _key()
    if not found or key is None:
        return None
    body = {
        "version": _SEAL_VERSION,
        "origin": str(origin),
        "code": [dataclasses.asdict(item) for item in found],
    }
    return {**body, "mac": _digest(key, body)}


def origin(state: Mapping[str, Any]) -> Path:
    """The directory a checkpoint's relative names resolve against: the origin its valid seal
    records, else (someone else's run, or an older agile's) the current directory."""
    sealed = _verified(state)
    return Path(sealed[0]) if sealed is not None else Path.cwd()


def checked(
    state: Mapping[str, Any],
    manifest: TrainingManifest,
    source: Path,
    *,
    trusted: bool,
    like: Mapping[str, Any] | None = None,
    named_by: str = "its manifest",
) -> TrainingManifest:
    """``manifest``, the one that will run, with its code located as :func:`located` says;
    refused unless that code is what this user sealed in ``state``.

    :param source: the checkpoint, for messages.
    :param trusted: the user passed ``--trust-code``: any code is located and allowed.
    :param like: as for :func:`located`.
    :param named_by: what ``manifest`` is, for messages.
    :raises UsageError: the manifest names code that this user's seal does not cover.
    """
    start, data = origin(state), manifest.to_dict()
    if trusted and not start.is_dir():  # a trusted run whose folder has moved: from here
        start = Path.cwd()
    updates = _locations(data, start, like)
    found = code(located(data, start, like), start)
    if found and not trusted:
        _check(state, found, source, named_by)
    environment = manifest.environment.model_copy(update=updates)
    return manifest.model_copy(update={"environment": environment})


def _check(state: Mapping[str, Any], found: list[Code], source: Path, named_by: str) -> None:
    sealed = _verified(state)
    if sealed is None:
        older = isinstance(state.get("code_seal"), str)
        raise UsageError(
            f"{source} was not written by your agile"
            + (" (or by an older agile, whose seal did not cover files)" if older else "")
            + f", and {named_by} names code that would be imported and run: "
            + "; ".join(map(str, found)),
            "pass --trust-code if you trust whoever made it",
        )
    covered = {item.field: item for item in sealed[1]}
    problems = [_difference(item, covered.get(item.field)) for item in found]
    shown = [printable(problem) for problem in problems if problem]
    if shown:
        raise UsageError(
            f"the seal of {source} does not cover the code {named_by} names: " + "; ".join(shown),
            "pass --trust-code to run the code as it is now, if you trust it",
        )


def _difference(found: Code, sealed: Code | None) -> str | None:
    """What differs between the code found and the code sealed for one field (None: same)."""
    if found == sealed:
        return None
    if sealed is None or found.reference != sealed.reference:
        return f"{found}, which it was not sealed with"
    if sealed.file is not None and not Path(sealed.file).is_file():
        return f"{sealed.file} ({found.field}), sealed with the run, is gone"
    if found.file != sealed.file:
        now = found.file or f"the installed module {found.reference.partition(':')[0]}"
        return f"{found.field} now imports {now}, sealed as {sealed.file or 'a module'}"
    return f"{found.file} ({found.field}) changed since the run was sealed"


def _locations(
    manifest: Mapping[str, Any], origin: Path, like: Mapping[str, Any] | None
) -> dict[str, str]:
    environment = manifest.get("environment")
    if not isinstance(environment, Mapping):
        return {}
    previous = (like or {}).get("environment")
    previous = previous if isinstance(previous, Mapping) else {}
    updates = {}
    if "path" in environment and (environment.get("entrypoint") or environment.get("wrappers")):
        updates["path"] = _absolute(environment.get("path"), origin, previous.get("path"))
    for key, _ in RUBRIC_SPELLINGS:
        if environment.get(key):
            updates[key] = _absolute(environment[key], origin, previous.get(key))
    return updates


def _absolute(value: Any, origin: Path, held: Any) -> str:
    """``value`` (a path, maybe relative or None) against ``origin``; or ``held``, an absolute
    path ending in ``value``, as a checkpoint holds it."""
    relative = PurePath(_text(value))
    if isinstance(held, str) and PurePath(held).is_absolute():
        parts = PurePath(held).parts
        if relative.is_absolute() and held == str(relative):
            return held
        if not relative.is_absolute() and parts[len(parts) - len(relative.parts) :] == (
            relative.parts
        ):
            return held
    return str(origin / relative)


def _resolved(field: str, reference: str, base: Path) -> Code:
    file = reference_file(reference, base)
    return Code(field, reference) if file is None else _file_code(field, reference, file)


def _file_code(field: str, reference: str, file: Path) -> Code:
    try:
        path = file.resolve()
        digest = hashlib.sha256()
        with path.open("rb") as stream:
            while chunk := stream.read(_CHUNK):
                digest.update(chunk)
    except (OSError, ValueError):  # no such file (ValueError: a path with a NUL in it)
        return Code(field, reference, str(file))
    return Code(field, reference, str(path), digest.hexdigest())


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _verified(state: Mapping[str, Any]) -> tuple[str, list[Code]] | None:
    """The origin and code of ``state``'s seal when this user's key made it, else None."""
    given = state.get("code_seal")
    key = _key()
    if not isinstance(given, Mapping) or key is None:
        return None
    body = {name: given.get(name) for name in ("version", "origin", "code")}
    mac = given.get("mac")
    try:
        valid = isinstance(mac, str) and hmac.compare_digest(mac, _digest(key, body))
        if not valid or body["version"] != _SEAL_VERSION or not isinstance(body["code"], list):
            return None
        return str(body["origin"]), [Code(**item) for item in body["code"]]
    except (TypeError, ValueError):  # not JSON, or not entries of Code: not a seal of ours
        return None


def _digest(key: bytes, body: Mapping[str, Any]) -> str:
    text = json.dumps(body, sort_keys=True)
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def _key_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "agile" / "trust.key"


def _key() -> bytes | None:
    """The user's key, made on first use (atomically, 0600); None if it cannot be kept."""
    path = _key_path()
    try:
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            temporary = path.with_name(f".trust.key.{secrets.token_hex(6)}")
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as stream:
                stream.write(secrets.token_bytes(32))
            try:
                os.link(temporary, path)  # the first writer wins; the others read its key
            except FileExistsError:
                pass
            finally:
                temporary.unlink(missing_ok=True)
        key = path.read_bytes()
    except OSError:
        return None
    return key if len(key) == 32 else None
