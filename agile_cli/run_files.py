"""Reading back the files of a run folder, which anyone may have written or changed.

The one reader of a run folder's files: whoever reads them (``agile report``, ``agile diff``)
gets either data of the shape agile writes or one sentence naming the file (and the line, or
the field) and what is wrong with it:

- ``manifest.yaml`` (:func:`read_manifest`) as the manifest loader reads a manifest: at most
  :data:`agile_cli.loader.MAX_BYTES`, no duplicate keys, no alias expanding past its bound,
  nested at most :data:`MAX_DEPTH` deep, no integer of more than :data:`MAX_DIGITS` digits;
- ``summary.json`` and ``provenance.json`` (:func:`read_json`): at most
  :data:`MAX_JSON_BYTES`, strict JSON (no ``NaN`` or ``Infinity``, no number past a float's
  range), an object nested at most :data:`MAX_DEPTH` deep;
- ``metrics.jsonl`` (:func:`metrics_lines`): line by line, each at most :data:`MAX_LINE`
  bytes, at most :data:`MAX_LINES` lines, each line's object (strict JSON, as above) or why
  it has none;
- the fields of a record (:class:`Fields`): typed, numbers finite and within
  :data:`MAX_MAGNITUDE`, counts within :data:`MAX_COUNT`.

Only regular files are read (a FIFO named ``manifest.yaml`` would block a reader forever).
Nothing read is ever run or imported.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from agile_cli.errors import ManifestError, TrainingError, UsageError

#: The largest ``summary.json`` or ``provenance.json`` read (agile writes a few KB).
MAX_JSON_BYTES = 4 << 20
#: The longest line of ``metrics.jsonl`` read (one generation; thousands of members fit).
MAX_LINE = 16 << 20
#: The most lines of ``metrics.jsonl`` read (one a generation).
MAX_LINES = 1_000_000
#: The deepest a manifest nests (agile writes sections of a few levels).
MAX_DEPTH = 64
#: The most digits of an integer in a manifest (Python's own limit is 4,300).
MAX_DIGITS = 100
#: The largest magnitude of a number read (fitness, seconds): its square is still finite.
MAX_MAGNITUDE = 1e100
#: The largest count read (steps, a member's weights).
MAX_COUNT = 2**63 - 1
#: What to do about a file agile did not write as it is.
HINT = "the file is not as agile train writes it: leave the run out, or train it again"


class RunFileError(UsageError):
    """A file of a run folder cannot be read, or holds what agile never writes there; the
    message names the file, and the line or the field where it can."""


def read_manifest(path: Path) -> dict[str, Any] | None:
    """A run's ``manifest.yaml``, read as the manifest loader reads manifests (None where
    there is no such file).

    :raises RunFileError: it is too big, not UTF-8, not YAML (with its line and column),
        expands past the loader's bound, nests or counts too much, or is not a mapping.
    """
    from agile_cli.loader import MAX_BYTES, parse_yaml

    data = _read_bytes(path, MAX_BYTES)
    if data is None:
        return None
    text = _decode(path, data)
    try:
        document = parse_yaml(text, str(path))
    except ManifestError as error:
        message = error.errors[0].message if error.errors else "invalid YAML"
        raise _error(path, message) from None
    if not isinstance(document, dict):
        raise _error(path, f"is {_kind(document)}, not a mapping of sections")
    _check_tree(path, document)
    return document


def read_json(path: Path) -> dict[str, Any] | None:
    """A run's ``summary.json`` or ``provenance.json`` (None where there is no such file).

    :raises RunFileError: it is too big, not UTF-8, not strict JSON (with its line and
        column), or not an object.
    """
    data = _read_bytes(path, MAX_JSON_BYTES)
    if data is None:
        return None
    problem, document = _parse_json(_decode(path, data))
    if problem is not None:
        raise _error(path, problem)
    if not isinstance(document, dict):
        raise _error(path, f"is {_kind(document)}, not a JSON object")
    _check_tree(path, document)
    return document


@dataclass(frozen=True)
class MetricsLine:
    """One line of ``metrics.jsonl``: where it is, and either its record or the sentence
    saying why it has none (naming the file and the line).

    :param path: the file.
    :param number: the line's number, the first being 1.
    :param text: the line as written, without its newline ("" where it was not kept: too
        long, or not UTF-8).
    :param record: its JSON object (None: see ``problem``).
    :param problem: why it has no record (None: it has one).
    """

    path: Path
    number: int
    text: str
    record: dict[str, Any] | None
    problem: str | None

    @property
    def where(self) -> str:
        """``runs/a/metrics.jsonl line 7``."""
        return f"{self.path} line {self.number:,}"

    def fields(self) -> Fields:
        """The record's fields (:class:`Fields`), their problems naming this line.

        :raises RunFileError: the line has no record (its ``problem``).
        """
        if self.record is None:
            raise RunFileError(self.problem or f"{self.where}: no record", HINT)
        return Fields(self.record, self.where)


def metrics_lines(path: Path) -> Iterator[MetricsLine]:
    """Each non-blank line of ``metrics.jsonl`` at ``path`` in order, read a bounded line at a
    time. A line longer than :data:`MAX_LINE` bytes, not UTF-8, not strict JSON, not an object,
    or cut short at the end of the file comes with its problem and no record. Past
    :data:`MAX_LINES` lines, one last line says so and the rest is not read.

    :raises RunFileError: the file cannot be opened, or is not a regular file.
    """
    with _open(path) as stream:
        number = 0
        while line := stream.readline(MAX_LINE + 1):
            number += 1
            if number > MAX_LINES:
                problem = f"the file holds more than {MAX_LINES:,} lines; the rest is not read"
                yield _unread(path, number, problem)
                return
            if len(line) > MAX_LINE and not line.endswith(b"\n"):  # more than MAX_LINE before it
                _skip_line(stream)
                yield _unread(path, number, f"is longer than {MAX_LINE:,} bytes")
            elif line.strip():
                yield _metrics_line(path, number, line)


def _unread(path: Path, number: int, problem: str, text: str = "") -> MetricsLine:
    return MetricsLine(path, number, text, None, f"{path} line {number:,}: {problem}")


def _metrics_line(path: Path, number: int, line: bytes) -> MetricsLine:
    try:
        text = line.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        return _unread(path, number, "is not UTF-8 text")
    problem, record = _parse_json(text, one_line=True)
    if problem is not None and not line.endswith(b"\n"):
        problem = "is cut short (the run stopped while writing it, or the file was cut)"
    elif problem is None and not isinstance(record, dict):
        problem = f"is {_kind(record)}, not a JSON object"
    if problem is not None:
        return _unread(path, number, problem, text)
    return MetricsLine(path, number, text, record, None)


def _skip_line(stream: IO[bytes]) -> None:
    """Read past the rest of an over-long line, a bounded piece at a time."""
    while (rest := stream.readline(MAX_LINE)) and not rest.endswith(b"\n"):
        pass


class Fields:
    """The fields of one JSON object of a run file, read with their types checked; what is
    missing or of the wrong type raises :class:`RunFileError` naming the file, the line and
    the field (``runs/a/metrics.jsonl line 7: members[2].fitness is a string, not a number``).

    :param data: the object.
    :param where: the file and line it came from (``runs/a/metrics.jsonl line 7``).
    :param prefix: its path within the line's object (``members[2]``; "" for the object).
    """

    def __init__(self, data: Mapping[str, Any], where: str, prefix: str = "") -> None:
        self.data, self.where, self.prefix = data, where, prefix

    def has(self, name: str) -> bool:
        """Whether the field is there and not null."""
        return self.data.get(name) is not None

    def number(self, name: str) -> float:
        """A finite number, at most :data:`MAX_MAGNITUDE` in size."""
        value = self._get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.problem(name, f"is {_kind(value)}, not a number")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.problem(name, f"is {value}, not a finite number")
        if abs(value) > MAX_MAGNITUDE:  # a huge integer compares exactly, never converted
            shown = "an integer" if isinstance(value, int) else f"{value:g},"
            raise self.problem(name, f"is {shown} beyond {MAX_MAGNITUDE:g} in size")
        return float(value)

    def integer(self, name: str) -> int:
        """A whole number, at most :data:`MAX_COUNT` in size."""
        value = self._get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.problem(name, f"is {_kind(value)}, not a whole number")
        if abs(value) > MAX_COUNT:
            raise self.problem(name, f"is a whole number beyond {MAX_COUNT:,} in size")
        return value

    def count(self, name: str) -> int:
        """A whole number from 0 to :data:`MAX_COUNT`."""
        value = self.integer(name)
        if value < 0:
            raise self.problem(name, f"is {value}, not a count (0 or more)")
        return value

    def text(self, name: str) -> str:
        """A string."""
        value = self._get(name)
        if not isinstance(value, str):
            raise self.problem(name, f"is {_kind(value)}, not a string")
        return value

    def mapping(self, name: str) -> Fields:
        """An object, as fields of its own."""
        value = self._get(name)
        if not isinstance(value, dict):
            raise self.problem(name, f"is {_kind(value)}, not a mapping")
        return Fields(value, self.where, self._path(name))

    def records(self, name: str) -> list[Fields]:
        """A list of objects, each as fields of its own."""
        value = self._get(name)
        if not isinstance(value, list):
            raise self.problem(name, f"is {_kind(value)}, not a list")
        found = []
        for position, item in enumerate(value):
            if not isinstance(item, dict):
                raise self.problem(f"{name}[{position}]", f"is {_kind(item)}, not a mapping")
            found.append(Fields(item, self.where, self._path(f"{name}[{position}]")))
        return found

    def numbers(self, name: str) -> dict[str, float]:
        """An object of numbers (:meth:`number` each), by name."""
        inner = self.mapping(name)
        return {key: inner.number(key) for key in inner.data}

    def problem(self, name: str, what: str) -> RunFileError:
        """The error for field ``name``: ``what`` is wrong with it."""
        return RunFileError(f"{self.where}: {self._path(name)} {what}", HINT)

    def _get(self, name: str) -> Any:
        if name not in self.data:
            raise RunFileError(f"{self.where}: {self._path(name)} is missing", HINT)
        return self.data[name]

    def _path(self, name: str) -> str:
        if not self.prefix:
            return name
        return f"{self.prefix}{name}" if name.startswith("[") else f"{self.prefix}.{name}"


def _kind(value: Any) -> str:
    """What ``value`` is, in words: ``a list``, ``a string``, ``null``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    names = {int: "a number", float: "a number", str: "a string", list: "a list",
             dict: "a mapping"}  # fmt: skip
    return names.get(type(value), f"a {type(value).__name__}")


# -- reading, bounded ----------------------------------------------------------------------


def _open(path: Path) -> IO[bytes]:
    """``path`` opened for reading, a regular file only (a FIFO is refused, never waited on).

    :raises RunFileError: it cannot be opened, or is not a regular file.
    """
    from agile_cli.training.files import open_regular

    try:
        descriptor = open_regular(path, os.O_RDONLY)
    except OSError as error:
        raise _error(path, f"cannot be read: {error.strerror or type(error).__name__}") from None
    except TrainingError:
        raise _error(path, "is not a regular file (a folder, a FIFO or a device)") from None
    return os.fdopen(descriptor, "rb")


def _read_bytes(path: Path, limit: int) -> bytes | None:
    """The bytes of ``path``, or None where there is no such file.

    :raises RunFileError: it holds more than ``limit`` bytes, or cannot be read.
    """
    if not path.exists() and not path.is_symlink():
        return None
    with _open(path) as stream:
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise _error(path, f"is over {limit:,} bytes, more than agile ever writes there")
    return data


def _decode(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _error(path, f"is not UTF-8 text (byte {error.start + 1:,})") from None


class _Refused(ValueError):
    """A JSON value agile never writes: a constant strict JSON does not have (``NaN``,
    ``Infinity``), or a number beyond a float's range."""

    def __init__(self, token: str, what: str) -> None:
        super().__init__(what)
        self.token = token


def _refuse_constant(name: str) -> Any:
    raise _Refused(name, f"holds {name}, which strict JSON does not allow (agile writes null)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(text, f"holds {text[:24]}, a number beyond what a float holds")
    return value


#: A JSON string, or a bare token between JSON's punctuation (a number, a constant).
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|([^\s"\[\]{},:]+)')


def _located(text: str, token: str) -> str:
    """``line 3, column 14: `` where ``token`` first stands outside a string ("" if never)."""
    for match in _TOKENS.finditer(text):
        if match.group(1) == token:
            before = text[: match.start()]
            column = match.start() - before.rfind("\n")
            return f"line {before.count(chr(10)) + 1:,}, column {column:,}: "
    return ""


def _parse_json(text: str, *, one_line: bool = False) -> tuple[str | None, Any]:
    """``(None, document)``, or ``(problem, None)`` where ``text`` is not strict JSON or holds
    a number no float holds (``1e400``): every number parsed is finite.

    :param one_line: ``text`` is a line of a file: a problem names its column alone.
    """
    try:
        return None, json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except _Refused as refused:
        return ("" if one_line else _located(text, refused.token)) + str(refused), None
    except json.JSONDecodeError as error:
        if one_line:
            return f"is not JSON ({error.msg} at column {error.colno:,})", None
        return f"line {error.lineno:,}, column {error.colno:,}: is not JSON ({error.msg})", None
    except ValueError:  # an integer past Python's limit on digits
        return "holds an integer of more digits than agile reads", None
    except RecursionError:
        return "nests too deeply", None


#: Where a value sits in a document, as a chain back to the top: ``(key, the parent's)``.
_Trail = tuple[str, "_Trail"] | None


def _check_tree(path: Path, document: Any) -> None:
    """Refuse a document nested past :data:`MAX_DEPTH` (readers walk it by recursion), or
    holding an integer of more than :data:`MAX_DIGITS` digits (hexadecimal YAML integers
    escape Python's own limit, and no such integer is ever shown). The walk is bounded: by the
    file's size, and for YAML by the loader's bound on what aliases expand to."""
    pending: list[tuple[Any, int, _Trail]] = [(document, 0, None)]
    while pending:
        value, depth, trail = pending.pop()
        if depth > MAX_DEPTH:
            raise _error(path, f"{_dotted(trail)} nests deeper than {MAX_DEPTH} levels")
        if isinstance(value, int) and abs(value) >= 10**MAX_DIGITS:
            raise _error(path, f"{_dotted(trail)} is an integer of more than {MAX_DIGITS} digits")
        if isinstance(value, dict):
            pending += [(item, depth + 1, (str(key), trail)) for key, item in value.items()]
        elif isinstance(value, list):
            pending += [(item, depth + 1, (f"[{k}]", trail)) for k, item in enumerate(value)]


def _dotted(trail: _Trail) -> str:
    """``training.schedule[2].fitness``: the path a trail leads back along."""
    keys: list[str] = []
    while trail is not None:
        key, trail = trail
        keys.append(key)
    text = ""
    for key in reversed(keys):
        text += key if key.startswith("[") or not text else f".{key}"
    return text or "the document"


def _error(path: Path, message: str) -> RunFileError:
    """``runs/a/manifest.yaml line 3, column 2: ...`` or ``runs/a/summary.json: ...``."""
    joint = " " if message.startswith("line ") else ": "
    return RunFileError(f"{path}{joint}{message}", HINT)
