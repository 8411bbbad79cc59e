"""Reading a fixed dataset of transitions: the HDF5 layout, and Minari datasets.

HDF5 layout (one row per environment step, in episode order):

- ``observations`` ``[N, *obs_shape]``;
- ``actions`` ``[N]`` (Discrete) or ``[N, *action_shape]`` (Box);
- ``rewards`` ``[N]``; ``terminals`` ``[N]``: the episode really ended at this step;
- optional ``next_observations`` ``[N, *obs_shape]``: each step's next observation;
- optional ``timeouts`` ``[N]``: the episode was cut short (time limit) at this step.

With ``next_observations`` every row is one transition. Without it, transition ``i`` takes
``observations[i + 1]`` as its next observation, except where that row starts the next
episode: a step flagged in ``timeouts`` is dropped (its true next observation is not stored,
and bootstrapping from the next episode's first one would be wrong), and so is the last row
unless it is terminal. A terminal row keeps whatever next observation it gets, since learning
never bootstraps from it. (AgileRL's loader ignores episode boundaries altogether.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from agile_cli import EnvironmentNotFoundError

REQUIRED = ("observations", "actions", "rewards", "terminals")
H5PY_HINT = (
    'install it with `pip install h5py` or, in agile\'s folder, `pip install -e ".[offline]"`'
)


@dataclass
class OfflineDataset:
    """Transitions as numpy arrays of equal length, ready for ``ReplayBuffer.add``."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray

    def __len__(self) -> int:
        return int(self.rewards.shape[0])


def _h5py() -> Any:
    try:
        import h5py
    except ModuleNotFoundError:
        raise EnvironmentNotFoundError("h5py is not installed", H5PY_HINT) from None
    return h5py


def read_hdf5(
    path: Path, observation_space: spaces.Space, action_space: spaces.Space, env_name: str
) -> OfflineDataset:
    """Every transition of an HDF5 file, checked against the environment's spaces."""
    with _open(path) as file:
        check_hdf5(file, observation_space, action_space, env_name)
        columns = {key: np.asarray(file[key][()]) for key in file if key in _KNOWN}
    return transitions_from_columns(columns, action_space)


_KNOWN = (*REQUIRED, "next_observations", "timeouts")


def check_hdf5_file(
    path: Path, observation_space: spaces.Space, action_space: spaces.Space, env_name: str
) -> int:
    """Open the file and check its datasets (reads no data); return the bytes loading needs."""
    with _open(path) as file:
        return check_hdf5(file, observation_space, action_space, env_name)


def _open(path: Path) -> Any:
    h5py = _h5py()
    if not path.is_file():
        raise EnvironmentNotFoundError(
            f"environment.dataset_path: no file {path}",
            "check the path; relative paths start at the working directory",
        )
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        raise EnvironmentNotFoundError(
            f"environment.dataset_path: {path} is not a readable HDF5 file ({exc})"
        ) from None


def check_hdf5(
    file: Any, observation_space: spaces.Space, action_space: spaces.Space, env_name: str
) -> int:
    """Refuse a file whose datasets are missing, hold no numbers, disagree in rows, do not fit
    the environment's spaces or would not fit in memory; return the bytes loading needs."""
    missing = [key for key in REQUIRED if key not in file]
    if missing:
        raise EnvironmentNotFoundError(
            f"{_WHERE}: {file.filename} has no dataset " + ", ".join(f"'{key}'" for key in missing),
            "it needs observations, actions, rewards and terminals (see `agile dataset --help`)",
        )
    if not isinstance(observation_space, spaces.Box):
        raise EnvironmentNotFoundError(
            f"environment: offline datasets need Box observations; {env_name} observes "
            f"{type(observation_space).__name__}",
            "flatten the observations with a wrapper",
        )
    columns = {key: file[key] for key in _KNOWN if key in file}
    rows = _check_columns(columns)
    _check_shapes(columns, rows, observation_space, action_space, env_name)
    return _check_memory(columns, rows, observation_space, file.filename)


_WHERE = "environment.dataset_path"


def _check_columns(columns: dict[str, Any]) -> int:
    """Every column is a numeric array with as many rows as the observations; their rows."""
    for key, column in columns.items():
        if not getattr(column, "shape", None):
            raise EnvironmentNotFoundError(
                f"{_WHERE}: {key} is not an array of rows", "store one row per environment step"
            )
        if column.dtype.kind not in "biuf":
            raise EnvironmentNotFoundError(
                f"{_WHERE}: {key} has dtype {column.dtype}, not a numeric one",
                "store numbers: floats, integers or booleans",
            )
    rows = int(columns["observations"].shape[0])
    for key, column in columns.items():
        if column.shape[0] != rows:
            raise EnvironmentNotFoundError(
                f"{_WHERE}: {key} has {column.shape[0]:,} rows but observations has {rows:,}",
                "give every dataset one row per environment step",
            )
    return rows


def _check_shapes(
    columns: dict[str, Any],
    rows: int,
    observation_space: spaces.Box,
    action_space: spaces.Space,
    env_name: str,
) -> None:
    expected = {
        "observations": (rows, *observation_space.shape),
        "next_observations": (rows, *observation_space.shape),
        "actions": (rows, *(action_space.shape or ())),
        "rewards": (rows,),
        "terminals": (rows,),
        "timeouts": (rows,),
    }
    for key, column in columns.items():
        if tuple(column.shape) != expected[key]:
            raise EnvironmentNotFoundError(
                _shape_message(key, column.shape, expected[key], env_name)
            )


def _check_memory(
    columns: dict[str, Any], rows: int, observation_space: spaces.Box, filename: str
) -> int:
    """Refuse a dataset whose rows, read and converted to transitions, exceed the memory
    available (a small file can declare billions of rows it never stored)."""
    from agile_cli.helpers import available_memory, format_bytes

    stored = sum(_row_bytes(column) for column in columns.values())
    # float32 observations and next observations, actions, float32 rewards and terminations
    converted = 8 * int(np.prod(observation_space.shape)) + _row_bytes(columns["actions"]) + 8
    needed = rows * (stored + converted)
    available = available_memory()
    if available is not None and needed > available:
        raise EnvironmentNotFoundError(
            f"{_WHERE}: {filename} declares {rows:,} rows, which need "
            f"{format_bytes(needed)} to load ({stored + converted:,} B a row, read and "
            f"converted to transitions), more than the {format_bytes(available)} this "
            "machine has available",
            "use a smaller dataset, or a machine with more memory",
        )
    return needed


def _row_bytes(column: Any) -> int:
    return int(np.prod(column.shape[1:], dtype=np.int64)) * column.dtype.itemsize


def _shape_message(key: str, found: tuple[int, ...], wanted: tuple[int, ...], env: str) -> str:
    if key in ("observations", "next_observations"):
        return (
            f"environment.dataset_path: {key} have shape {_dims(found)} but {env} observes "
            f"{tuple(wanted[1:])}"
        )
    if key == "actions":
        return (
            f"environment.dataset_path: actions have shape {_dims(found)} but {env} takes "
            f"actions of shape {tuple(wanted[1:])}"
        )
    return f"environment.dataset_path: {key} have shape {_dims(found)}; expected (N,)"


def _dims(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(["N", *map(str, shape[1:])]) + ")" if len(shape) > 1 else "(N,)"


def transitions_from_columns(
    columns: dict[str, np.ndarray], action_space: spaces.Space
) -> OfflineDataset:
    """Transitions from the HDF5 layout's columns (see the module docstring)."""
    obs = columns["observations"].astype(np.float32)
    terminals = columns["terminals"].astype(bool)
    if "next_observations" in columns:
        keep = np.ones(len(obs), dtype=bool)
        next_obs = columns["next_observations"].astype(np.float32)
    else:
        timeouts = columns.get("timeouts", np.zeros(len(obs))).astype(bool)
        keep = ~timeouts
        keep[-1] = terminals[-1]  # the last row has no next observation unless it is terminal
        next_obs = np.concatenate([obs[1:], obs[-1:]])
    actions = columns["actions"]
    if isinstance(action_space, spaces.Discrete):
        actions = actions.astype(np.int64)
        _check_discrete(actions, action_space)
    return OfflineDataset(
        obs=obs[keep],
        actions=actions[keep],
        rewards=columns["rewards"].astype(np.float32)[keep],
        next_obs=next_obs[keep],
        terminated=terminals[keep].astype(np.float32),
    )


def _check_discrete(actions: np.ndarray, space: spaces.Discrete) -> None:
    low, high = int(space.start), int(space.start + space.n - 1)
    if actions.size and (actions.min() < low or actions.max() > high):
        raise EnvironmentNotFoundError(
            f"environment.dataset_path: actions range over [{actions.min()}, {actions.max()}] "
            f"but the environment takes actions in [{low}, {high}]"
        )


def _minari() -> Any:
    try:
        import minari
    except ModuleNotFoundError:
        raise EnvironmentNotFoundError(
            "Minari is not installed", "install it with `pip install minari`, or use dataset_path"
        ) from None
    return minari


def check_minari(dataset_id: str) -> None:
    """Refuse a Minari dataset that is not in the local Minari root (nothing is downloaded)."""
    if dataset_id not in set(_minari().list_local_datasets()):
        raise EnvironmentNotFoundError(
            f"environment.minari_dataset_id: no local Minari dataset '{dataset_id}'",
            f"run `minari download {dataset_id}` on a machine with network, then copy its "
            "folder into this machine's Minari root (~/.minari/datasets or $MINARI_DATASETS_PATH)",
        )


def read_minari(dataset_id: str, action_space: spaces.Space) -> OfflineDataset:
    """Every transition of a Minari dataset already in the local Minari root; Minari stores
    each episode's observations including the last, so every step has its next one."""
    check_minari(dataset_id)
    parts: list[dict[str, np.ndarray]] = []
    for episode in _minari().load_dataset(dataset_id).iterate_episodes():
        observations = np.asarray(episode.observations)
        parts.append({
            "observations": observations[:-1], "next_observations": observations[1:],
            "actions": np.asarray(episode.actions), "rewards": np.asarray(episode.rewards),
            "terminals": np.asarray(episode.terminations),
        })  # fmt: skip
    if not parts:
        raise EnvironmentNotFoundError(
            f"environment.minari_dataset_id: '{dataset_id}' holds no episodes"
        )
    columns = {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}
    return transitions_from_columns(columns, action_space)
