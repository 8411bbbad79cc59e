"""One process per run folder.

A run folder is written by exactly one agile process at a time: ``agile train --run-dir D``
(with or without ``--overwrite``) and ``agile train --resume D`` take the folder's lock before
they read or change anything in it, and hold it until the run ends. A second process is
refused with the holder's pid, host and start time.

The lock is a POSIX record lock (``fcntl.lockf``) on ``D/.agile.lock``. The kernel (or the
NFS lock manager, on a shared folder) drops it when its process ends, however it ends
(``kill -9`` included), so a lock left by a dead process is taken over by the next run
without any guess about whether its pid is still alive; and unlike ``flock``, it is not
inherited by the environment workers a run forks, which may outlive it for a moment. The
file's text (pid, host, time, command) only names the holder for the message.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import IO, Any

from agile_cli.errors import TrainingError, UsageError, printable
from agile_cli.training import files

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no POSIX record locks
    fcntl = None  # type: ignore[assignment]  # the module is absent there, and checked for

LOCK_NAME = ".agile.lock"

# Record locks belong to a process, which may take one any number of times (and loses it on
# closing any descriptor of the file): this process's own locks are refused here instead.
_HELD: dict[Path, IO[str]] = {}


def acquire(folder: Path) -> None:
    """Take ``folder``'s lock for this process (the folder must exist).

    :raises UsageError: another process (or another run in this one) holds it, or the lock's
        place holds a link or something other than a regular file.
    """
    path = _lock_path(folder)
    if path in _HELD:
        raise UsageError(
            f"{folder} is in use by another run in this process", "wait for it to finish"
        )
    stream = _open(path)
    if fcntl is not None:
        try:
            fcntl.lockf(stream, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            stream.close()
            raise _in_use(folder, path) from None
    stream.seek(0)
    stream.truncate()
    stream.write(json.dumps(_holder()) + "\n")
    stream.flush()
    _HELD[path] = stream


def _lock_path(folder: Path) -> Path:
    """The lock file's path, its folder resolved (the file itself never is: a link there is
    refused, not followed)."""
    return folder.resolve() / LOCK_NAME


def _open(path: Path) -> IO[str]:
    """The lock file, opened for reading and writing without following a link.

    :raises UsageError: it is a link, a FIFO or anything but a regular file.
    """
    flags = os.O_RDWR | os.O_CREAT | files.NO_FOLLOW
    try:
        descriptor = files.open_regular(path, flags)
    except TrainingError as error:
        raise UsageError(error.message, error.hint) from None
    return os.fdopen(descriptor, "r+", encoding="utf-8")


def check_free(folder: Path) -> None:
    """Raise as :func:`acquire` would when another process holds ``folder``'s lock; take
    nothing (a check before a run's slow set-up: the lock is taken after it).

    :raises UsageError: another process (or another run in this one) holds it.
    """
    if (folder / LOCK_NAME).exists() or (folder / LOCK_NAME).is_symlink():
        acquire(folder)
        release(folder)


def release(folder: Path) -> None:
    """Give ``folder``'s lock back (nothing happens when this process does not hold it)."""
    stream = _HELD.pop(_lock_path(folder), None)
    if stream is not None:
        stream.close()  # closing the descriptor releases the record lock


def holds(folder: Path) -> bool:
    """Whether this process holds ``folder``'s lock."""
    return _lock_path(folder) in _HELD


def _holder() -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:500],
    }


def _in_use(folder: Path, path: Path) -> UsageError:
    try:
        descriptor = files.open_regular(path, os.O_RDONLY | files.NO_FOLLOW)
        with os.fdopen(descriptor, encoding="utf-8") as stream:
            holder = json.loads(stream.read(4096))
        pid, host = int(holder["pid"]), printable(str(holder["host"]))[:100]
        since = printable(str(holder["started"]))[:40]
        command = printable(str(holder.get("command", "")))[:200]
    except (OSError, ValueError, KeyError, TypeError, TrainingError):
        return UsageError(f"{folder} is in use by another agile process", "wait for it to finish")
    stop = f"kill {pid}" if host == socket.gethostname() else f"kill {pid} on {host}"
    return UsageError(
        f"{folder} is in use: agile (pid {pid} on {host}, since {since}) is training it"
        + (f" ({command})" if command else ""),
        f"wait for that run to finish, or stop it ({stop}) and resume with agile train "
        f"--resume {folder}",
    )
