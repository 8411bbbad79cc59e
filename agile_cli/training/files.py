"""Writing a file inside a folder without ever leaving it.

A run folder may come from anyone (a copy, an archive, a shared disk), and a symbolic link in
it would carry a write or a delete wherever it points. What agile writes in a folder it
therefore writes without following links:

- a new version of a whole file (:func:`write_atomically`) is written to a temporary file that
  :func:`tempfile.mkstemp` creates (exclusively, under a random name) in the same folder and then
  renamed over the old one: the rename replaces a link, never what it points to;
- a line added to a log (:func:`append_line`) opens the file with ``O_NOFOLLOW``, and only a
  regular file (a FIFO would block, a device would take the line elsewhere);

and a link found where agile writes is refused with one sentence naming it
(:func:`refuse_link`).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from agile_cli.errors import TrainingError, printable

#: ``O_NOFOLLOW`` where the platform has it (POSIX); elsewhere no flag, and the checks of
#: :func:`refuse_link` stand alone.
NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def link_problem(path: Path) -> str | None:
    """Why agile would not write or delete at ``path``: it is a symbolic link (named with
    where it points), or None."""
    if not path.is_symlink():
        return None
    try:
        target = printable(os.readlink(path))
    except OSError:
        target = "somewhere unknown"
    return f"{printable(str(path))} is a symbolic link (to {target})"


def refuse_link(path: Path) -> None:
    """Raise when ``path`` is a symbolic link.

    :raises TrainingError: naming the link, and that agile writes nothing through one.
    """
    problem = link_problem(path)
    if problem is not None:
        raise _link_error(problem)


def _link_error(problem: str) -> TrainingError:
    return TrainingError(
        f"{problem}: agile writes and deletes nothing through a link in a run folder",
        "remove the link (the folder was not made by agile as it is), or use another folder",
    )


def append_line(path: Path, line: str) -> None:
    """Add ``line`` and a newline at the end of the regular file ``path`` (made if missing).

    :raises TrainingError: ``path`` is a link or not a regular file (a FIFO, a device).
    """
    descriptor = open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | NO_FOLLOW)
    with os.fdopen(descriptor, "a", encoding="utf-8") as stream:
        stream.write(line + "\n")


def open_regular(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open(path, flags)`` that refuses anything but a regular file (a FIFO does not
    block the open: it is opened without blocking, then refused), and a link where ``flags``
    hold :data:`NO_FOLLOW`. The descriptor is not inherited by child processes.

    :raises TrainingError: ``path`` is not a regular file, or a link refused.
    """
    try:
        descriptor = os.open(path, flags | _NONBLOCK | _CLOEXEC, mode)
    except OSError as error:
        if error.errno == errno.ELOOP:  # O_NOFOLLOW met a link
            raise _link_error(link_problem(path) or f"{path} is a symbolic link") from None
        raise
    kind = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(kind):
        os.close(descriptor)
        raise TrainingError(
            f"{printable(str(path))} is not a regular file (a FIFO, a socket or a device)",
            "remove it: agile writes only regular files in a run folder",
        )
    return descriptor


def write_atomically(path: Path, data: str | bytes) -> None:
    """Replace ``path`` with ``data`` (text as UTF-8) so that a crash leaves either the old
    file or the new one, and a link at ``path`` is replaced, never followed.

    :raises OSError: the folder cannot be written (the temporary file is removed).
    """
    with replacing(path) as temporary, temporary.open("wb") as stream:
        stream.write(data.encode("utf-8") if isinstance(data, str) else data)


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A new, empty file in ``path``'s folder for the caller to write (a writer that takes a
    file name, such as ``torch.jit.save``), renamed over ``path`` when the block ends, or
    removed when it raises: ``path`` is then whole or untouched, and a link there is replaced,
    never followed.

    :raises OSError: the folder cannot be written.
    """
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    with contextlib.suppress(OSError):  # mkstemp's 0600: the mode any new file would have
        os.fchmod(handle, 0o666 & ~_umask())
    os.close(handle)
    temporary = Path(name)
    try:
        yield temporary
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


@functools.cache
def _umask() -> int:
    """This process's umask, read without changing it (Linux); else the usual 022."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022
