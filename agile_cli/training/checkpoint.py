"""Whole-population checkpoints, written atomically."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from agile_cli.errors import TrainingError

FORMAT_VERSION = 1


def save_atomically(state: dict[str, Any], path: Path) -> None:
    """Write ``state`` to ``path`` so that a crash leaves either the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            torch.save(state, stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def load(path: Path) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_atomically`."""
    if not path.is_file():
        raise TrainingError(f"no checkpoint at {path}", "is this a run folder of agile train?")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # a foreign or damaged file
        raise TrainingError(f"cannot read checkpoint {path}: {exc}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT_VERSION:
        raise TrainingError(f"{path} is not an agile checkpoint (format {FORMAT_VERSION})")
    return state
