"""Packaging a custom environment for upload: the archive plus its two sidecar files.

A directory becomes a gzip-compressed tar of every regular file below it (paths relative to the
directory, sorted, nothing excluded); a ``.tar.gz``/``.tgz`` file is sent as it is; any other
single file becomes a tar.gz holding just that file. ``env_config`` (constructor keyword
arguments) and ``requirements`` are found at the top of a directory unless given explicitly, and
are sent as empty placeholders when there are none. Archives are built in a temporary file and
streamed, so large environments are never held in memory.
"""

from __future__ import annotations

import os
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from agile_arena.errors import ArenaConfigError

ENV_CONFIG_NAMES = ("env_config.yaml", "env_config.yml", "env_config.json")
REQUIREMENTS_NAME = "requirements.txt"
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")


@dataclass(frozen=True)
class Part:
    """One file part of a multipart upload.

    :param filename: the name the server sees.
    :param content: the bytes, or an open binary file (rewound before each send).
    :param content_type: its media type.
    """

    filename: str
    content: bytes | IO[bytes]
    content_type: str

    def field(self) -> tuple[str, bytes | IO[bytes], str]:
        """The ``(filename, content, content type)`` tuple httpx expects, rewound."""
        if not isinstance(self.content, bytes):
            self.content.seek(0)
        return (self.filename, self.content, self.content_type)


@dataclass(frozen=True)
class EnvironmentPackage:
    """An environment ready to upload; close it (or use ``with``) to release the archive."""

    archive: Part
    env_config: Part
    requirements: Part

    def files(self) -> dict[str, tuple[str, bytes | IO[bytes], str]]:
        """The multipart file parts ``file``, ``env_config`` and ``requirements``, rewound."""
        return {
            "file": self.archive.field(),
            "env_config": self.env_config.field(),
            "requirements": self.requirements.field(),
        }

    def close(self) -> None:
        if not isinstance(self.archive.content, bytes):
            self.archive.content.close()

    def __enter__(self) -> EnvironmentPackage:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def package_environment(
    source: Path, *, env_config: Path | None = None, requirements: Path | None = None
) -> EnvironmentPackage:
    """Package ``source`` (a directory, an archive or one file) with its sidecars.

    :param source: what to upload.
    :param env_config: constructor keyword arguments (YAML or JSON); overrides the one found in a
        directory source.
    :param requirements: a ``requirements.txt``; overrides the one found in a directory source.
    """
    source = Path(source)
    if source.is_dir():
        found_config = next(
            (source / name for name in ENV_CONFIG_NAMES if (source / name).is_file()), None
        )
        found_requirements = source / REQUIREMENTS_NAME
        env_config = env_config or found_config
        if requirements is None and found_requirements.is_file():
            requirements = found_requirements
    archive = _archive(source)
    try:
        return EnvironmentPackage(
            archive=archive,
            env_config=_env_config_part(env_config),
            requirements=_sidecar(requirements, REQUIREMENTS_NAME, "text/plain"),
        )
    except BaseException:
        if not isinstance(archive.content, bytes):
            archive.content.close()
        raise


def _archive(source: Path) -> Part:
    if source.is_dir():
        name = source.resolve().name or "environment"
        return Part(f"{name}.tar.gz", _tar(source, _regular_files(source)), "application/gzip")
    if source.is_file() and source.name.endswith(_ARCHIVE_SUFFIXES):
        return Part(source.name, source.open("rb"), "application/gzip")
    if source.is_file():
        return Part(f"{source.stem}.tar.gz", _tar(source.parent, [source.name]), "application/gzip")
    raise ArenaConfigError(
        f"Source path not found: {source}", "pass --source a directory, a .py file or a .tar.gz"
    )


def _regular_files(directory: Path) -> list[str]:
    """Every regular file below ``directory``, as sorted POSIX paths relative to it."""
    found: list[str] = []
    for root, _dirs, names in os.walk(directory):
        for name in names:
            path = Path(root, name)
            if path.is_file():
                found.append(path.relative_to(directory).as_posix())
    return sorted(found)


def _tar(base: Path, members: list[str]) -> IO[bytes]:
    """A temporary tar.gz of ``members`` (paths relative to ``base``), rewound."""
    archive = tempfile.TemporaryFile()  # noqa: SIM115 - returned open, closed by the package
    member = ""
    try:
        with tarfile.open(fileobj=archive, mode="w:gz", dereference=True) as tar:
            for member in members:
                tar.add(base / member, arcname=member, recursive=False)
    except OSError as error:
        archive.close()
        raise ArenaConfigError(
            f"Could not package {base / member}: {error.strerror or error}",
            "check that every file of the environment is readable",
        ) from None
    except BaseException:
        archive.close()
        raise
    archive.seek(0)
    return archive


def _env_config_part(path: Path | None) -> Part:
    kind = "application/json" if path is not None and path.suffix == ".json" else None
    return _sidecar(path, ENV_CONFIG_NAMES[0], kind or "application/x-yaml")


def _sidecar(path: Path | None, placeholder: str, content_type: str) -> Part:
    if path is None:
        return Part(placeholder, b"", content_type)
    path = Path(path)
    try:
        return Part(path.name, path.read_bytes(), content_type)
    except OSError:
        raise ArenaConfigError(
            f"Upload file not found: {path}", "check the --env-config / --requirements path"
        ) from None
