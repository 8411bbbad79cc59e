"""Checkpoints: written atomically, read back without ever running code.

The format (``FORMAT_VERSION`` 2) is a PyTorch zip archive (``torch.save``) holding one
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
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agile_cli import memory
from agile_cli.errors import TrainingError, printable
from agile_cli.signals import interrupt_held

FORMAT_VERSION = 2
POPULATION = "population"
MEMBER = "member"

#: The entries each kind must hold, and of what type, for the loop and evaluation to read.
_LAYOUT: dict[str, dict[str, type | tuple[type, ...]]] = {
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
    """Read a checkpoint written by :func:`save_atomically`, without running any code in it.

    :param kind: the kind or kinds required (:data:`POPULATION`, :data:`MEMBER`), whose
        entries are then checked too; None takes any agile file of this format.
    :raises TrainingError: the file is missing, damaged, foreign, or of another kind.
    """
    if not path.is_file():
        raise TrainingError(f"no checkpoint at {path}")
    _check_archive(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a foreign, damaged or malicious file
        reason = " ".join(str(exc).split())[:300]
        raise TrainingError(
            f"{path} is not a readable agile checkpoint: {reason}",
            "agile reads only plain data and tensors from checkpoints; it never runs code in them",
        ) from None
    _check_header(state, path, kind)
    return _decode(state)


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


def _check_header(state: Any, path: Path, kind: str | tuple[str, ...] | None) -> None:
    if not isinstance(state, dict) or "format" not in state:
        raise TrainingError(f"{path} is not an agile checkpoint")
    if state["format"] != FORMAT_VERSION:
        raise _unreadable_format(state, path)
    if kind is None:
        return
    kinds = (kind,) if isinstance(kind, str) else kind
    if len(kinds) == 1 and state.get("kind") in _LAYOUT and state.get("kind") != kinds[0]:
        what = "one member (an elite)" if state.get("kind") == MEMBER else "a whole population"
        raise TrainingError(f"{path} holds {what}, not a {kinds[0]} checkpoint")
    if state.get("kind") not in kinds:
        raise TrainingError(
            f"{path} is not an agile checkpoint (unknown kind {state.get('kind')!r})"
        )
    layout = _LAYOUT[state["kind"]]
    wrong = [key for key, types in layout.items() if not isinstance(state.get(key), types)]
    if wrong:
        raise TrainingError(f"{path} is not an agile checkpoint (no valid {', '.join(wrong)})")


def _unreadable_format(state: dict[str, Any], path: Path) -> TrainingError:
    """Why a checkpoint of another format is refused, and what to do: a newer one names the
    agile that wrote it and how to upgrade; an older one, how to go on."""
    from agile_cli import __version__

    found, writer = state["format"], printable(str(state.get("agile_version", "unknown")))
    said = f"{path} has checkpoint format {printable(repr(found))}"
    if isinstance(found, int) and not isinstance(found, bool) and found > FORMAT_VERSION:
        return TrainingError(
            f"{said}, written by agile {writer}; this agile ({__version__}) reads format "
            f"{FORMAT_VERSION}",
            f"upgrade agile to {writer} or later (pip install -U agile-cli, or git pull and "
            "pip install -e . in a clone), then run the command again",
        )
    return TrainingError(
        f"{said}; this agile ({__version__}) reads format {FORMAT_VERSION}",
        "train the run again with this version of agile",
    )


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


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if len(value) == 1 and _ARRAY_TAG in value:
            return value[_ARRAY_TAG].numpy()
        return {key: _decode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decode(item) for item in value]
    if isinstance(value, tuple) and not isinstance(value, torch.Size):
        return tuple(_decode(item) for item in value)
    return value
