"""A tiny random CartPole dataset in the offline HDF5 layout, for tests."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import numpy as np


def write_cartpole_dataset(path: Path, rows: int = 200, seed: int = 0, **extra: np.ndarray) -> Path:
    """Random CartPole-shaped steps (episodes of 20), plus ``extra`` datasets."""
    import h5py

    rng = np.random.default_rng(seed)
    terminals = np.zeros(rows, dtype=bool)
    terminals[19::20] = True
    columns = {
        "observations": rng.normal(size=(rows, 4)).astype(np.float32),
        "actions": rng.integers(0, 2, size=rows),
        "rewards": np.ones(rows, dtype=np.float32),
        "terminals": terminals,
        **extra,
    }
    with h5py.File(path, "w") as file:
        for name, column in columns.items():
            file.create_dataset(name, data=column)
    return path


@functools.cache
def toy_offline_environment() -> dict:
    """The ``environment`` section of a CartPole offline run on a random dataset (written once
    per test process, and removed when it exits)."""
    folder = tempfile.TemporaryDirectory(prefix="agile-offline-")
    _KEPT.append(folder)
    path = write_cartpole_dataset(Path(folder.name) / "toy.h5")
    return {"name": "CartPole-v1", "num_envs": 2, "sync": True, "dataset_path": str(path)}


#: The dataset folders of this process, deleted when it exits.
_KEPT: list[tempfile.TemporaryDirectory[str]] = []
