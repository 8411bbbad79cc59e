"""Checkpoints: written atomically, read back without ever running code, in any layout agile
ever wrote.

The format (``FORMAT_VERSION``) is a PyTorch zip archive (``torch.save``) holding one
``dict`` of plain data: ``dict``, ``list``, ``tuple``, ``str``, ``int``, ``float``, ``bool``,
``None`` and tensors. A numpy array is stored as ``{"__agile_ndarray__": tensor}`` and comes
back as an array. :func:`load` reads with ``torch.load(weights_only=True)``, whose unpickler
builds only those types: a file naming any other class or function is refused, not run. It
also refuses compressed archive entries, so that reading takes no more memory than the file
itself holds, and an entry that fails its CRC-32 (a file damaged on disk or in a copy).

Every checkpoint carries ``format``, ``kind`` (``population`` for ``checkpoints/*.pt``,
``member`` for ``elite.pt``), ``agile_version``, ``algorithm``, ``environment``, ``spaces``
(what members observe and do, as text) and ``manifest``; a population checkpoint adds the
loop's counters, every member, the elite, the evolution generators and optionally the buffer.

What a checkpoint holds changed while its ``format`` stayed 2: :data:`LAYOUTS` numbers every
layout agile wrote, :func:`layout_of` tells them apart by their content, and :func:`load`
brings an older one to the current layout one step at a time (``_from_N`` makes layout N into
N + 1), so that the loop, ``agile evaluate`` and ``--resume`` read one layout only. A change to
the layout bumps ``FORMAT_VERSION`` to the new layout's number and adds its step and a fixture
of the old layout (``tests/fixtures/checkpoints``) in the same commit (docs/checkpoints.md).
What a member or a buffer holds inside is its plugin's to read in every version it wrote.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pickletools
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from agile_cli import memory
from agile_cli.errors import TrainingError, printable
from agile_cli.signals import interrupt_held

#: The ``format`` this agile writes: the number of its layout, so that an older agile refuses
#: the file naming the version to upgrade to. Format 2 files hold any of layouts 2 to 8 (8 was
#: written as format 2 for a few commits), told apart by their content.
FORMAT_VERSION = 10
#: The formats files say: 1, 2 (layouts 2 to 8), and from 8 on each layout's own number.
READ_FORMATS = (1, 2, *range(8, FORMAT_VERSION + 1))
POPULATION = "population"
MEMBER = "member"


@dataclass(frozen=True)
class Layout:
    """One layout of checkpoint that agile wrote.

    :param number: its number; files of layout 1 say ``format: 1``, of layouts 2 to 8 ``2``.
    :param first: the commit of agile's history that first wrote it.
    :param last: the last commit that wrote it (None: this agile writes it).
    :param change: what it changed from the layout before.
    """

    number: int
    first: str
    last: str | None
    change: str


#: Every layout agile wrote, oldest first (all by agile 0.1.0: nothing was released yet).
LAYOUTS = (
    Layout(1, "5afd89c", "ae6d448", "format 1: read back by torch's full unpickler, which "
           "builds whatever a file names; no kind, environment, spaces or agile_version"),
    Layout(2, "b5978ad", "b5978ad", "format 2: plain data and tensors only; kind, environment, "
           "spaces and agile_version"),
    Layout(3, "f103a6b", "9272645", "code_seal: the run's code, sealed by the user's key"),
    Layout(4, "59d6b7c", "86c5a90", "selection: the strategy's state (was next_index)"),
    Layout(5, "0a0ebf5", "34a0010", "run_options (checkpoint_steps, checkpoint_buffer, "
           "per_member) and state.reported; from df6db00 on, a seal covers the files a run "
           "imports (older seals no longer verify: such a run needs --trust-code once)"),
    Layout(6, "ca832f6", "cad838b", "run_options.threads"),
    Layout(7, "318e335", "08d8322", "run_seed"),
    Layout(8, "cd84227", "91ce7dd", "each member's record.lineage; run_options.device, "
           "elite_top and elite_episodes; says format 8 from the commit after a2c2dcc on "
           "(format 2 before)"),
    Layout(9, "fa69e05", "da2e98d", "state.rounds (an asynchronous run's rounds per position); "
           "a backend's own run options in run_options (the ray backend's); ef9a82d and "
           "da2e98d also wrote run_options.compile"),
    Layout(10, "7bfd4d0", None, "run_options.compile (--compile)"),
)  # fmt: skip
#: The layout this agile writes.
CURRENT_LAYOUT = LAYOUTS[-1].number

#: The entries each kind must hold, and of what type, for the loop and evaluation to read.
_ENTRIES: dict[str, dict[str, type | tuple[type, ...]]] = {
    POPULATION: {"manifest": dict, "state": dict, "members": list, "elite": (dict, type(None))},
    MEMBER: {"manifest": dict, "member": dict},
}
_ARRAY_TAG = "__agile_ndarray__"
_CHUNK = 1 << 20  # bytes read at a time when checking an entry's checksum
_PLAIN = (str, int, float, bool, type(None), torch.Tensor, torch.dtype, torch.Size)


def save_atomically(state: dict[str, Any], path: Path) -> None:
    """Write ``state`` to ``path`` so that a crash leaves either the old file or the new one.

    :raises TrainingError: when ``state`` holds something other than plain data, or when the
        file cannot be written (a full disk, a read-only folder): the previous file is kept,
        the temporary one removed.
    """
    encoded = _encode(state, "checkpoint")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(
            prefix=f".{path.name}.", suffix=".tmp", dir=path.parent
        )
    except OSError as exc:
        raise _unwritable(path, exc) from None
    with interrupt_held():
        try:
            with os.fdopen(handle, "wb") as stream:
                torch.save(encoded, stream)
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temporary, path)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                Path(temporary).unlink(missing_ok=True)
            failure = _os_error(exc)
            if failure is None:
                raise
            raise _unwritable(path, failure) from None


def _os_error(exc: BaseException) -> OSError | None:
    """The OSError behind ``exc``: itself, or the one torch's zip writer was handling when it
    raised its own RuntimeError (it turns a failed write into one)."""
    seen: BaseException | None = exc
    while isinstance(seen, RuntimeError):
        seen = seen.__cause__ or seen.__context__
    return seen if isinstance(seen, OSError) else None


def _unwritable(path: Path, exc: OSError) -> TrainingError:
    reason = exc.strerror or str(exc) or type(exc).__name__
    kept = " (the previous one is kept)" if path.is_file() else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = f"free space on the disk that holds {path.parent}, or train on another (--run-dir)"
    else:
        hint = f"make {path.parent} writable, or train into a writable folder with --run-dir"
    return TrainingError(f"could not write the checkpoint {path}: {reason}{kept}", hint)


def load(path: Path, kind: str | tuple[str, ...] | None = None) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_atomically` (by this agile or an earlier one),
    without running any code in it, in the current layout (see :func:`migrate`).

    :param kind: the kind or kinds required (:data:`POPULATION`, :data:`MEMBER`); None takes
        any agile file of a format this agile reads.
    :raises TrainingError: the file is missing, damaged, foreign, of a format this agile does
        not read, or of another kind.
    """
    if not path.is_file():
        raise TrainingError(f"no checkpoint at {path}")
    _check_archive(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a foreign, damaged or malicious file
        if _says_format_one(path):
            raise _format_one(path, "it names Python classes, which agile never loads") from None
        reason = " ".join(str(exc).split())[:300]
        raise TrainingError(
            f"{path} is not a readable agile checkpoint: {reason}",
            "agile reads only plain data and tensors from checkpoints; it never runs code in them",
        ) from None
    _check_format(state, path)
    state = _decoded(state, path)
    held = _kind_of(state)
    if held in _ENTRIES:
        _check_holds(state, held, path)
        state = _migrated(state, path)
    elif state["format"] == 1:
        raise _format_one(path, "it holds neither a population nor a member")
    _check_kind(state, path, kind)
    return cast(dict[str, Any], state)


def _check_archive(path: Path) -> None:
    """A torch zip archive whose entries are stored uncompressed (memory bounded by size) and
    hold what their checksums say."""
    try:
        with zipfile.ZipFile(path) as archive:
            _check_entries(path, archive.infolist())
            _check_checksums(path, archive)
    except (zipfile.BadZipFile, OSError) as exc:
        raise TrainingError(f"{path} is not an agile checkpoint ({exc})") from None


def _check_entries(path: Path, entries: list[zipfile.ZipInfo]) -> None:
    if any(entry.compress_type != zipfile.ZIP_STORED for entry in entries):
        raise TrainingError(f"{path} is not an agile checkpoint (it has compressed entries)")
    if sum(entry.file_size for entry in entries) > path.stat().st_size:
        raise TrainingError(f"{path} is not an agile checkpoint (its entries exceed the file)")
    size, available = path.stat().st_size, memory.available_memory()
    if available is not None and size > available:
        raise TrainingError(
            f"{path} is {memory.format_bytes(size)}, more than the "
            f"{memory.format_bytes(available)} of memory this machine has available to read it"
        )


def _check_checksums(path: Path, archive: zipfile.ZipFile) -> None:
    """Read every entry, a chunk at a time: zipfile compares its CRC-32 at the end. A bit
    flipped on disk or in a copy would otherwise load as a slightly different tensor."""
    for entry in archive.infolist():
        try:
            with archive.open(entry) as stream:
                while stream.read(_CHUNK):
                    pass
        except (zipfile.BadZipFile, EOFError, OSError) as exc:
            name = printable(entry.filename)
            problem = "fails its checksum" if "CRC" in str(exc) else f"cannot be read: {exc}"
            raise TrainingError(
                f"{path} is damaged (entry {name} {problem})", _damaged_hint(path)
            ) from None


def _damaged_hint(path: Path) -> str:
    folder = path.parent if path.parent.name == "checkpoints" else path.parent / "checkpoints"
    snapshots = sorted((p for p in folder.glob("step_*.pt") if p != path), key=_step)
    if not snapshots:
        return "it changed after agile wrote it (a disk or copy fault); train the run again"
    return (
        f"it changed after agile wrote it; resume from {snapshots[-1]} (copy it over "
        f"{folder / 'latest.pt'}, then agile train --resume) or an earlier snapshot, or train "
        "the run again"
    )


def _step(snapshot: Path) -> int:
    number = snapshot.stem.removeprefix("step_")
    return int(number) if number.isdigit() else -1


def _check_format(state: Any, path: Path) -> None:
    if not isinstance(state, dict) or "format" not in state:
        raise TrainingError(f"{path} is not an agile checkpoint")
    found = state["format"]
    if type(found) is not int or found not in READ_FORMATS:
        raise _unreadable_format(state, path)


def _check_kind(state: dict[str, Any], path: Path, kind: str | tuple[str, ...] | None) -> None:
    if kind is None:
        return
    kinds = (kind,) if isinstance(kind, str) else kind
    if len(kinds) == 1 and state.get("kind") in _ENTRIES and state.get("kind") != kinds[0]:
        what = "one member (an elite)" if state.get("kind") == MEMBER else "a whole population"
        raise TrainingError(f"{path} holds {what}, not a {kinds[0]} checkpoint")
    if state.get("kind") not in kinds:
        raise TrainingError(
            f"{path} is not an agile checkpoint (unknown kind {state.get('kind')!r})"
        )


def _check_holds(state: dict[str, Any], kind: str, path: Path) -> None:
    """The entries ``kind`` holds in every layout are there, of their types."""
    layout = _ENTRIES[kind]
    wrong = [key for key, types in layout.items() if not isinstance(state.get(key), types)]
    if wrong:
        raise TrainingError(f"{path} is not an agile checkpoint (no valid {', '.join(wrong)})")


def _unreadable_format(state: dict[str, Any], path: Path) -> TrainingError:
    """Why a checkpoint of another format is refused, and what to do: a newer one names the
    agile that wrote it and how to upgrade; any other, how to go on."""
    from agile_cli import __version__

    found, writer = state["format"], printable(str(state.get("agile_version", "unknown")))
    said = f"{path} has checkpoint format {printable(repr(found))[:40]}"
    if isinstance(found, int) and not isinstance(found, bool) and found > FORMAT_VERSION:
        return TrainingError(
            f"{said}, written by agile {writer}; this agile ({__version__}) reads formats up "
            f"to {FORMAT_VERSION}",
            f"upgrade agile to {writer} or later (pip install -U agile-cli, or git pull and "
            "pip install -e . in a clone), then run the command again",
        )
    return TrainingError(
        f"{said}, which no agile wrote; this agile ({__version__}) reads formats up to "
        f"{FORMAT_VERSION}",
        "train the run again with this version of agile",
    )


def _format_one(path: Path, reason: str) -> TrainingError:
    """The refusal of a format 1 file that cannot be brought to the current layout."""
    oldest = LAYOUTS[0]
    return TrainingError(
        f"{path} has checkpoint format 1 (written by agile at commits {oldest.first} to "
        f"{oldest.last}), and this agile cannot read it: {reason}",
        f"train the run again with this version of agile, or read it with agile checked out at "
        f"commit {oldest.last}",
    )


#: The pickle opcodes that push a string or an integer, which :func:`_says_format_one` reads.
_VALUE_OPCODES = frozenset(
    {"BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "UNICODE", "BININT", "BININT1", "BININT2",
     "INT", "LONG1"}
)  # fmt: skip


def _says_format_one(path: Path) -> bool:
    """Whether the pickle in ``path`` opens with ``{"format": 1``: read opcode by opcode, so
    that nothing it names is built or run."""
    with zipfile.ZipFile(path) as archive:
        name = next((n for n in archive.namelist() if n.endswith("/data.pkl")), None)
        data = archive.read(name) if name is not None else b""
    values: list[Any] = []
    try:
        for opcode, argument, _ in pickletools.genops(data):
            if opcode.name in _VALUE_OPCODES:
                values.append(argument)
            if len(values) == 2 or opcode.name in ("GLOBAL", "STACK_GLOBAL", "STOP"):
                break
    except Exception:  # not a pickle, or a damaged one: then not format 1
        return False
    return values == ["format", 1]


# -- layouts and the steps between them --------------------------------------------------------


def layout_of(state: Mapping[str, Any]) -> int:
    """The number of the layout ``state`` (decoded, of a known kind) has: its format, or for
    format 2 the newest layout whose mark it bears (see :data:`LAYOUTS`). A member file holds
    none of the population's entries, so one of layouts 3 to 6 reads as 3: the steps between
    them change population files only."""
    if state["format"] != 2:
        return int(state["format"])
    saved = [member.get("record") for member in _saved_members(state)]
    records = [record for record in saved if isinstance(record, dict)]
    options = state.get("run_options")
    marks = (
        (8, bool(records) and all("lineage" in record for record in records)),
        (7, "run_seed" in state),
        (6, isinstance(options, dict) and "threads" in options),
        (5, "run_options" in state),
        (4, "selection" in state),
        (3, "code_seal" in state),
    )
    return next((number for number, marked in marks if marked), 2)


def migrate(state: dict[str, Any], layout: int | None = None) -> dict[str, Any]:
    """``state`` (decoded, of a known kind, with its kind's entries) in the current layout,
    brought there one step at a time from ``layout`` (None: the one :func:`layout_of`
    finds)."""
    for number in range(layout_of(state) if layout is None else layout, CURRENT_LAYOUT):
        _STEPS[number](state)
    state["format"] = FORMAT_VERSION
    return state


def _migrated(state: dict[str, Any], path: Path) -> dict[str, Any]:
    """:func:`migrate`, refusing a file whose entries are not as the agile of its layout wrote
    them (a crafted or damaged file)."""
    number = layout_of(state)
    try:
        return migrate(state, number)
    except (AttributeError, KeyError, TypeError, ValueError):
        raise TrainingError(
            f"{path} is not an agile checkpoint (its entries are not those of layout {number})"
        ) from None


def _from_1(state: dict[str, Any]) -> None:
    """Say what the file holds and where it was trained; its spaces were not recorded (None:
    :func:`~agile_cli.training.resume.check_compatible` leaves them to the weights' shapes)."""
    state["kind"] = _kind_of(state)
    environment = state["manifest"].get("environment")
    state["environment"] = environment.get("name") if isinstance(environment, dict) else None
    state["spaces"] = None
    state.setdefault("agile_version", "0.1.0")  # the version of every agile of format 1


def _from_2(state: dict[str, Any]) -> None:
    """No seal: code the run names is imported only with --trust-code, as for any file that
    this user's agile did not seal."""
    state["code_seal"] = None


def _from_3(state: dict[str, Any]) -> None:
    """The selection strategy's state, which was only its next member index."""
    if state["kind"] == POPULATION:
        state["selection"] = {"next_index": int(state.pop("next_index", 0))}


def _from_4(state: dict[str, Any]) -> None:
    """Run options a resume keeps: whether the buffer was saved shows in the file; the others
    were not recorded (None: a resume takes them from its command line, as it did)."""
    if state["kind"] == POPULATION:
        saved_buffer = state.get("buffer") is not None
        state["run_options"] = {
            "checkpoint_steps": None, "checkpoint_buffer": saved_buffer, "per_member": None
        }  # fmt: skip
        state["state"].setdefault("reported", [])


def _from_5(state: dict[str, Any]) -> None:
    """``--threads``, not recorded (None: a resume takes it from its command line)."""
    if state["kind"] == POPULATION:
        state["run_options"].setdefault("threads", None)


def _from_6(state: dict[str, Any]) -> None:
    """The run's seed: a population's counters hold it; for a member, the seed such a run
    takes without ``--seed`` (``mutation.rand_seed``, or 0), which agile evaluate assumed."""
    if state["kind"] == POPULATION:
        state["run_seed"] = state["state"].get("seed", 0)
        return
    mutation = state["manifest"].get("mutation")
    seed = mutation.get("rand_seed") if isinstance(mutation, dict) else None
    state["run_seed"] = seed if isinstance(seed, int) else 0


def _from_7(state: dict[str, Any]) -> None:
    """An empty lineage: the generations before were not recorded. The device and the
    elite's scoring were not kept either (None: a resume takes them from its command line,
    as it did)."""
    for saved in _saved_members(state):
        if isinstance(saved.get("record"), dict):
            saved["record"].setdefault("lineage", [])
    if state["kind"] == POPULATION:
        for name in ("device", "elite_top", "elite_episodes"):
            state["run_options"].setdefault(name, None)


def _from_8(state: dict[str, Any]) -> None:
    """No rounds: the run was synchronous (an asynchronous one takes its generations)."""
    if state["kind"] == POPULATION:
        state["state"].setdefault("rounds", [])


def _from_9(state: dict[str, Any]) -> None:
    """``--compile``, not recorded (None: a resume takes it from its command line; the run
    was eager unless that said ``on``)."""
    if state["kind"] == POPULATION:
        state["run_options"].setdefault("compile", None)


_STEPS: dict[int, Callable[[dict[str, Any]], None]] = {
    1: _from_1, 2: _from_2, 3: _from_3, 4: _from_4, 5: _from_5, 6: _from_6, 7: _from_7,
    8: _from_8, 9: _from_9,
}  # fmt: skip


def _kind_of(state: Mapping[str, Any]) -> str | None:
    """What the file holds: as it says, or for format 1 (which did not say) by its entries."""
    if state["format"] != 1:
        return state.get("kind")
    if "members" in state:
        return POPULATION
    return MEMBER if "member" in state else None


def _saved_members(state: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The saved members of a file: a population's and its elite, or the one of a member file."""
    saved = [*state.get("members", []), state.get("elite"), state.get("member")]
    yield from (member for member in saved if isinstance(member, dict))


def _encode(value: Any, where: str) -> Any:
    if isinstance(value, Mapping):
        return {key: _encode(item, f"{where}[{key!r}]") for key, item in value.items()}
    if isinstance(value, list | tuple) and not isinstance(value, torch.Size):
        items = [_encode(item, f"{where}[{i}]") for i, item in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biufc":
            raise TrainingError(f"{where} is a numpy array of {value.dtype}, not of numbers")
        return {_ARRAY_TAG: torch.from_numpy(np.ascontiguousarray(value).copy())}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, _PLAIN):
        return value
    raise TrainingError(
        f"{where} is a {type(value).__name__}: a checkpoint holds only dicts, lists, tuples, "
        "strings, numbers, None, tensors and numpy arrays",
        "convert it in the algorithm's extra_state()",
    )


class _Oversized(Exception):
    """The decoded structure passed its bounds (:func:`_decoded`)."""


def _decoded(state: Any, path: Path) -> Any:
    """``state`` with its numpy arrays restored, built within bounds the file sets: at most
    :data:`MAX_DEPTH` levels deep, and at most as many values as its pickle has bytes (plus a
    little), however many times it refers to one object. A crafted file that shares one list
    at every level of a deep nest (a few hundred bytes standing for billions of values), or
    holds a list that contains itself, is refused instead of filling memory.

    :raises TrainingError: naming the file and the bound.
    """
    budget = [_pickle_bytes(path) * _VALUES_PER_BYTE + _SPARE_VALUES]
    try:
        return _decode(state, budget, 0)
    except _Oversized as exc:
        raise TrainingError(
            f"{path} is not an agile checkpoint: {exc}",
            "agile reads only checkpoints whose content is bounded by their size",
        ) from None


#: The deepest nesting :func:`_decoded` builds (agile's checkpoints are about ten deep).
MAX_DEPTH = 64
#: Values built per byte of a file's pickle: each value takes at least one opcode, so a file
#: that shares no object never comes near; a file sharing a few does not either.
_VALUES_PER_BYTE = 4
_SPARE_VALUES = 10_000


def _pickle_bytes(path: Path) -> int:
    with zipfile.ZipFile(path) as archive:
        return sum(e.file_size for e in archive.infolist() if e.filename.endswith("data.pkl"))


def _decode(value: Any, budget: list[int], depth: int) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise _Oversized("it stands for more values than its size can hold (shared many times)")
    if depth > MAX_DEPTH:
        raise _Oversized(f"it nests more than {MAX_DEPTH} levels deep (or contains itself)")
    if isinstance(value, dict):
        if len(value) == 1 and _ARRAY_TAG in value and isinstance(value[_ARRAY_TAG], torch.Tensor):
            return value[_ARRAY_TAG].numpy()
        return {key: _decode(item, budget, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [_decode(item, budget, depth + 1) for item in value]
    if isinstance(value, tuple) and not isinstance(value, torch.Size):
        return tuple(_decode(item, budget, depth + 1) for item in value)
    return value
