"""The run folder every training run leaves behind.

runs/<algorithm>-<environment>-<YYYYmmdd-HHMMSS>/
  .agile.lock          held by the one process training in the folder (see run_lock)
  .agile-run           agile's mark: agile made the folder, or took it empty, for a run
  manifest.yaml        the resolved manifest (every default filled in)
  command.txt          the command line that started (or resumed) the run
  provenance.json      per start or resume: versions, machine, device, command (see provenance)
  metrics.jsonl        one JSON object per generation
  checkpoints/         latest.pt (every generation) and step_<N>.pt snapshots
  elite.pt             the best member at the last selection (or at the end)
  elite/               the same member in a format other tools load, for algorithms that
                       have one (an LLM's LoRA adapter in PEFT's folder format)
  summary.json         best fitness, steps, speed, whether the target was reached

Nothing agile writes or deletes leaves the folder: a symbolic link where agile writes is
refused (see :mod:`.files`), and a folder agile did not mark as its own is never emptied.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from agile_cli.errors import UsageError
from agile_cli.manifest import TrainingManifest
from agile_cli.run_files import RunFileError, metrics_lines, read_json
from agile_cli.training import files, run_lock

#: What a run folder holds; ``--overwrite`` deletes these and nothing else.
RUN_FILES = (
    "manifest.yaml", "command.txt", "provenance.json", "metrics.jsonl", "summary.json", "elite.pt",
)  # fmt: skip
RUN_FOLDERS = ("checkpoints", "tensorboard", "wandb", "elite", "merged")
#: agile's mark on a folder it made, or took empty, for a run: only such a folder's
#: ``RUN_FOLDERS`` are ever deleted (``--overwrite``, or a run that never started).
MARK = ".agile-run"
# Temporary files of atomic writes: checkpoints (.latest.pt.<random>.tmp) and the rest.
_TEMPORARY = (".*.pt.*", ".*.tmp")
#: What a checkpoints folder of agile's holds: its checkpoints and their temporary files.
_CHECKPOINT_NAMES = re.compile(r"latest\.pt|step_\d+\.pt|\..*\.pt\..*|\..*\.tmp")


class RunFolder:
    """Paths and writers of one run folder."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.checkpoints = path / "checkpoints"

    @classmethod
    def create(
        cls, manifest: TrainingManifest, base: Path | None = None, *, overwrite: bool = False
    ) -> RunFolder:
        """Make a new run folder: ``base`` if given, else a new one under ``runs/``.

        :param overwrite: replace the run already in ``base`` (its files only).
        :raises UsageError: ``base`` holds a run (without ``overwrite``) or other files.
        """
        text = _resolved_manifest(manifest)
        folder = cls(base if base is not None else _new_default_folder(manifest))
        if base is not None:
            folder.claim(overwrite)
        else:
            folder.lock()
        try:
            files.write_atomically(folder.path / MARK, strict_json({"agile": _version()}) + "\n")
            folder.checkpoints.mkdir(parents=True, exist_ok=True)
            files.write_atomically(folder.manifest, text)
            folder.record_command()
        except BaseException:
            folder.unlock()
            raise
        return folder

    def lock(self) -> None:
        """Take the folder for this process until :meth:`unlock` (see :mod:`.run_lock`).

        :raises UsageError: another agile process is training in it.
        """
        run_lock.acquire(self.path)

    def unlock(self) -> None:
        run_lock.release(self.path)

    def check_available(self, overwrite: bool) -> None:
        """Raise unless a new run may start in ``self.path`` (changes nothing): the folder is
        new or empty, holds a run of agile's that never started, or (with ``overwrite``) one
        of agile's that did.

        :raises UsageError: the folder holds a run (without ``overwrite``), files agile did not
            write, or a link.
        """
        if self.path.exists() and not self.path.is_dir():
            raise UsageError(f"{self.path} is a file, not a folder", "choose another --run-dir")
        if self.path.is_symlink() and not self.path.exists():
            raise UsageError(
                f"{files.link_problem(self.path)}, which does not exist",
                "make the folder it points to, or choose another --run-dir",
            )
        check_writable(self.path, f"--run-dir {self.path}")
        if not self.path.exists():
            return
        self.check_links("--run-dir")
        if not run_lock.holds(self.path):
            run_lock.check_free(self.path)
        if not self.holds_run():
            if any(p.name not in (run_lock.LOCK_NAME, MARK) for p in self.path.iterdir()):
                raise UsageError(
                    f"{self.path} is not empty and holds no run", "choose a new or empty --run-dir"
                )
            return
        if self.started() and not overwrite:
            raise UsageError(
                f"{self.path} already holds a run",
                f"continue it with agile train --resume {self.path}, replace it with "
                "--overwrite, or choose another --run-dir",
            )
        self._check_ours(overwrite)

    def _check_ours(self, overwrite: bool) -> None:
        """Refuse to replace what agile cannot tell it wrote: a folder without agile's mark
        is taken only with ``overwrite``, and only when it holds agile's file names alone (a
        run of an agile from before the mark)."""
        if self.marked():
            return
        foreign = self._foreign_entries()
        if foreign:
            names = ", ".join(sorted(foreign)[:5]) + (", ..." if len(foreign) > 5 else "")
            raise UsageError(
                f"{self.path} holds files agile did not write ({names}) beside a run's files, "
                f"and no {MARK} mark that agile made the folder: agile deletes nothing there",
                "choose a new or empty --run-dir, or move those files away yourself",
            )
        if not overwrite:
            raise UsageError(
                f"{self.path} holds a run's files without agile's {MARK} mark",
                "replace them with --overwrite, or choose a new or empty --run-dir",
            )

    def _foreign_entries(self) -> list[str]:
        """What in the folder is not provably agile's by name: anything but its run files,
        its lock and a checkpoints folder of checkpoints."""
        known = {*RUN_FILES, run_lock.LOCK_NAME}
        foreign = [p.name for p in self.path.iterdir() if p.name not in {*known, "checkpoints"}]
        if self.checkpoints.is_dir():
            foreign += [f"checkpoints/{p.name}" for p in self.checkpoints.iterdir()
                        if not _CHECKPOINT_NAMES.fullmatch(p.name) or not p.is_file()]  # fmt: skip
        elif self.checkpoints.exists():
            foreign.append("checkpoints")
        return foreign

    def check_links(self, what: str = "--resume") -> None:
        """Refuse a folder where agile would write or delete through a symbolic link: any of
        the names it writes, or any entry of its checkpoints and elite folders.

        :param what: how the user named the folder (``--run-dir``), for the hint.
        :raises UsageError: naming the first link.
        """
        names = (*RUN_FILES, *RUN_FOLDERS, MARK, run_lock.LOCK_NAME, "recipe.yaml")
        places = [self.path / name for name in names]
        for folder in (self.checkpoints, self.portable_elite, self.path / "merged"):
            if folder.is_dir() and not folder.is_symlink():
                places += sorted(folder.iterdir())
        for place in places:
            problem = files.link_problem(place)
            if problem is not None:
                raise UsageError(
                    f"{problem}: agile writes and deletes nothing through a link in a run folder",
                    f"remove the link, or give {what} a folder without links",
                )

    def claim(self, overwrite: bool) -> None:
        """Take ``self.path`` for a new run, locked for this process (:meth:`lock`), so that
        two runs never share a folder and ``--overwrite`` never deletes a live run."""
        self.check_available(overwrite)
        self.path.mkdir(parents=True, exist_ok=True)
        self.lock()
        try:
            self.check_available(overwrite)  # again, now that no one else can change it
            if self.holds_run():
                self._remove_run()
            self.remove_temporary_files()
        except BaseException:
            self.unlock()
            raise

    def holds_run(self) -> bool:
        return any((self.path / name).exists() for name in (*RUN_FILES, "checkpoints"))

    def marked(self) -> bool:
        """Whether agile made the folder, or took it empty, for a run (its :data:`MARK`)."""
        mark = self.path / MARK
        return mark.is_file() and not mark.is_symlink()

    def started(self) -> bool:
        """Whether the run here ever wrote a checkpoint or a generation's metrics (one that
        never did, e.g. that stopped at a missing W&B login, holds nothing to keep: a new run
        may take its folder)."""
        checkpoints = self.checkpoints.is_dir() and any(self.checkpoints.glob("*.pt"))
        return checkpoints or self.metrics.is_file()

    def discard(self) -> None:
        """Remove what a run that never started wrote: its files, and the folder itself when
        it is then empty (as a new default folder is)."""
        self._remove_run()
        self.unlock()
        for name in (run_lock.LOCK_NAME, MARK):
            (self.path / name).unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # not empty: the user's folder, kept
            self.path.rmdir()

    def _remove_run(self) -> None:
        """Delete the run's files; its folders where agile marked the folder as its own, else
        only the checkpoints (:meth:`_check_ours` found nothing else there). Links are
        removed, never followed."""
        for name in RUN_FILES:
            (self.path / name).unlink(missing_ok=True)
        for name in RUN_FOLDERS if self.marked() else ("checkpoints",):
            folder = self.path / name
            if folder.is_symlink():
                folder.unlink()
            elif folder.is_dir():
                shutil.rmtree(folder)

    @property
    def manifest(self) -> Path:
        return self.path / "manifest.yaml"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def summary(self) -> Path:
        return self.path / "summary.json"

    @property
    def elite(self) -> Path:
        return self.path / "elite.pt"

    @property
    def portable_elite(self) -> Path:
        """Where :meth:`~agile_rl.Algorithm.save_portable` writes the elite."""
        return self.path / "elite"

    @property
    def latest(self) -> Path:
        return self.checkpoints / "latest.pt"

    def record_command(self) -> None:
        """Append the current command line (a resumed run gets a second line)."""
        files.append_line(
            self.path / "command.txt", shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])
        )

    @property
    def provenance(self) -> Path:
        return self.path / "provenance.json"

    def record_provenance(self, session: dict[str, Any]) -> None:
        """Append one session (a start or a resume) to ``provenance.json``; a file that is not
        this format's, or past its size bound, is started anew."""
        sessions: list[Any] = []
        with contextlib.suppress(RunFileError):
            earlier = read_json(self.provenance) or {}
            if isinstance(earlier.get("sessions"), list):
                sessions = earlier["sessions"]
        text = strict_json({"sessions": [*sessions, session]}, indent=2) + "\n"
        files.write_atomically(self.provenance, text)

    def append_metrics(self, record: dict[str, Any]) -> None:
        files.append_line(self.metrics, strict_json(record))

    def write_summary(self, summary: dict[str, Any]) -> None:
        files.write_atomically(self.summary, strict_json(summary, indent=2) + "\n")

    def records(self) -> list[dict[str, Any]]:
        """The generations' metrics records, in order (a line without one is skipped)."""
        if not self.metrics.is_file():
            return []
        return [line.record for line in metrics_lines(self.metrics) if line.record is not None]

    def keep_metrics_until(self, generation: int) -> list[str]:
        """Drop the records of generations after ``generation`` (written before a crash that
        the checkpoint did not see) and every line that holds no record (a torn last line);
        returns what the user should hear: the generations up to ``generation`` left with no
        record that way (a line cut short or edited inside the checkpointed range), which
        no checkpoint holds either."""
        if not self.metrics.is_file():
            return []
        kept: dict[int, str] = {}
        unreadable, dropped = [], 0
        for line in metrics_lines(self.metrics):
            number = line.record.get("generation") if line.record is not None else None
            if type(number) is int and 1 <= number <= generation and number not in kept:
                kept[number] = line.text
                continue
            dropped += 1
            if line.problem is not None:
                unreadable.append(line.problem)
        if dropped:
            files.write_atomically(self.metrics, "".join(f"{text}\n" for text in kept.values()))
        lost = generation - len(kept)  # each kept record is of one generation up to it
        return [_lost_records(self.metrics, _missing(kept, lost), lost, unreadable)] if lost else []

    def remove_temporary_files(self) -> list[Path]:
        """Delete what interrupted writes (a crash, kill -9) left behind; returns them. A link
        among them is removed itself; a checkpoints folder that is a link is not looked in.

        :raises TrainingError: the checkpoints folder is a link.
        """
        files.refuse_link(self.checkpoints)
        stale = {
            path
            for folder in (self.path, self.checkpoints) if folder.is_dir()
            for pattern in _TEMPORARY for path in folder.glob(pattern)
            if path.is_file() or path.is_symlink()
        }  # fmt: skip
        for path in stale:
            path.unlink(missing_ok=True)
        return sorted(stale)


def check_writable(path: Path, what: str, hint: str = "choose a folder you can write to") -> None:
    """Refuse at once a file or folder that agile could not create or change at ``path``
    (a read-only file system, a folder without write permission), before any slow work.

    :param what: how the user named it, for the message (e.g. ``--video out.mp4``).
    :raises UsageError: the nearest existing folder at or above ``path`` is not writable.
    """
    existing = next((p for p in (path, *path.parents) if p.exists()), Path.cwd())
    folder = existing if existing.is_dir() else existing.parent
    if os.access(folder, os.W_OK | os.X_OK):
        return
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    reason = "is on a read-only file system" if read_only else "is not writable by you"
    raise UsageError(f"{what}: {folder} {reason}", hint)


def _new_default_folder(manifest: TrainingManifest) -> Path:
    """``runs/<algorithm>-<environment>-<time>[-N]``, created atomically (first come first
    served, so that runs started at the same second get distinct folders)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    label = re.sub(
        r"[^A-Za-z0-9._-]+", "_", f"{manifest.algorithm_name}-{manifest.environment.name}"
    )
    Path("runs").mkdir(exist_ok=True)
    for suffix in range(1, 10_000):
        path = Path("runs") / (f"{label}-{stamp}" + (f"-{suffix}" if suffix > 1 else ""))
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise UsageError(f"runs/ has too many folders named {label}-{stamp}", "pass --run-dir")


def strict_json(data: Any, indent: int | None = None) -> str:
    """JSON that strict parsers accept: non-finite numbers become null."""
    return json.dumps(_finite(data), indent=indent, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def _resolved_manifest(manifest: TrainingManifest) -> str:
    """``manifest.yaml``'s text: the manifest with every default filled in, as agile reads it
    back (``--resume``, ``evaluate``).

    :raises UsageError: it would be larger than a manifest agile reads.
    """
    from agile_cli.loader import MAX_BYTES

    text: str = yaml.safe_dump(manifest.to_dict(), sort_keys=False, allow_unicode=True)
    size = len(text.encode("utf-8"))
    if size > MAX_BYTES:
        raise UsageError(
            f"the resolved manifest would be {size:,} bytes, more than the {MAX_BYTES:,} agile "
            "reads back from a run folder (--resume, evaluate)",
            "shorten the manifest's free text or its nesting",
        )
    return text


def _version() -> str:
    from agile_cli import __version__

    return __version__


def _missing(kept: dict[int, str], lost: int, shown: int = 10) -> list[int]:
    """The first ``shown`` generations from 1 on that ``kept`` lacks (``lost`` lack one)."""
    found: list[int] = []
    number = 0
    while len(found) < min(lost, shown):
        number += 1
        if number not in kept:
            found.append(number)
    return found


def _lost_records(metrics: Path, missing: list[int], lost: int, unreadable: list[str]) -> str:
    """The note on the ``lost`` generations whose metrics records are lost, ``missing`` the
    first of them."""
    shown = ", ".join(str(number) for number in missing) + (", ..." if lost > len(missing) else "")
    why = f" ({unreadable[0]})" if unreadable else ""
    return (
        f"{metrics} holds no record of generation{'s' if lost > 1 else ''} {shown}{why}: the "
        "checkpoint does not hold them either, so reports show the run without them"
    )
