"""A contextual bandit made from a labelled table, and the builder for the ``bandit`` section.

Each class of the targets is an arm. A step shows one random row's features (the context);
playing the row's class pays 1, any other arm 0. The network reads the features and outputs
one value per arm (not the "disjoint" encoding that puts the features in the played arm's
block of an arms x features vector: the shared network's gradient for one output already
differs per arm, which is all NeuralUCB's and NeuralTS's exploration needs).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from agile_bandits.spec import BanditEnvSpec, is_in_memory
from agile_cli import EnvironmentBuilder, EnvironmentNotFoundError, UsageError
from agile_cli.helpers import not_an_environment, printable, resolve_reference


class BanditEnv:
    """A one-copy bandit with the vector-environment API: arrays batched over one row.

    :param features: contexts, one row each.
    :param labels: each row's class, 0..K-1.
    :param seed: seeds the generator that draws rows.
    """

    num_envs = 1

    def __init__(self, features: np.ndarray, labels: np.ndarray, seed: int | None = None) -> None:
        self.features = features.astype(np.float32)
        self.labels = labels.astype(np.int64)
        width, arms = self.features.shape[1], int(self.labels.max()) + 1
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (width,), np.float32)
        self.single_action_space = gym.spaces.Discrete(arms)
        self.rng = np.random.default_rng(seed)
        self.row = 0

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        return self._draw(), {}

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Pay for the arm played on the current context, then show the next one."""
        reward = np.array([float(int(np.asarray(actions).reshape(-1)[0]) == self.labels[self.row])])
        done = np.ones(1, dtype=bool)
        return self._draw(), reward, done, np.zeros(1, dtype=bool), {}

    def close(self) -> None:
        pass

    def _draw(self) -> np.ndarray:
        self.row = int(self.rng.integers(len(self.labels)))
        return self.features[self.row][None, :]


class BanditBuilder(EnvironmentBuilder[BanditEnvSpec]):
    """Builds a :class:`BanditEnv` from tables, or calls the manifest's entrypoint."""

    def build(self, spec: BanditEnvSpec, *, seed: int | None = None) -> Any:
        base = Path(spec.path) if spec.path else Path.cwd()
        if spec.entrypoint:
            make_env = resolve_reference(spec.entrypoint, base, "environment.entrypoint")
            env = make_env(**spec.config)
            if isinstance(env, type) or not all(hasattr(env, name) for name in _BANDIT_API):
                raise not_an_environment(spec.entrypoint, env, "a bandit environment", _BANDIT_HINT)
            env.reset(seed=seed)
            return env
        features = load_table(spec.features, base, "environment.features")
        targets = load_table(spec.targets, base, "environment.targets", labels=True)
        if features.ndim == 1:
            features = features[:, None]
        labels = encode_labels(targets.reshape(len(targets), -1)[:, 0])
        if len(labels) != len(features):
            raise EnvironmentNotFoundError(
                f"environment.targets has {len(labels)} rows but features has {len(features)}",
                "give one label per features row",
            )
        return BanditEnv(features, labels, seed)


_BANDIT_API = ("num_envs", "single_observation_space", "single_action_space", "reset", "step")
_BANDIT_HINT = (
    "return an object with the vector-environment API (num_envs, single_observation_space, "
    "single_action_space, reset, step), like agile_bandits.environment.BanditEnv"
)


def encode_labels(values: np.ndarray) -> np.ndarray:
    """Class labels (strings or numbers) as 0..K-1, classes in sorted order."""
    _, codes = np.unique(values, return_inverse=True)
    return codes.reshape(-1)


def load_table(source: Any, base: Path, where: str, *, labels: bool = False) -> np.ndarray:
    """A table as an array: in-memory tables as they are, files by suffix.

    :param labels: a CSV file may hold text (class labels), not only numbers.
    """
    if is_in_memory(source):
        return np.asarray(getattr(source, "to_numpy", lambda: source)())
    path = base / source
    if not path.is_file():
        raise EnvironmentNotFoundError(
            f"{where} names no file: {path}",
            "paths are relative to environment.path, else to the working directory",
        )
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _read_csv(path, where, labels=labels)
    if suffix in (".parquet", ".pq"):
        return _read_parquet(path, where)
    return _read_hdf5(path, where)


def _read_hdf5(path: Path, where: str) -> np.ndarray:
    """The file's first dataset, once it is known to fit in memory (a small file can declare
    a table of billions of rows it never stored)."""
    try:
        import h5py
    except ImportError:
        raise _missing(where, "HDF5", "h5py") from None
    with h5py.File(path, "r") as file:
        table = next((file[key] for key in file if isinstance(file[key], h5py.Dataset)), None)
        if table is None:
            raise EnvironmentNotFoundError(f"{where}: {path} holds no dataset", "store the table")
        _check_fits(table.shape, table.dtype.itemsize, where, path)
        return np.asarray(table)


def _check_fits(shape: tuple[int, ...], itemsize: int, where: str, path: Path) -> None:
    from agile_cli.helpers import available_memory, format_bytes

    needed = int(np.prod(shape, dtype=np.float64)) * itemsize
    available = available_memory()
    if available is not None and needed > available:
        raise EnvironmentNotFoundError(
            f"{where}: {path} declares a table of shape {tuple(shape)}, which needs "
            f"{format_bytes(needed)}, more than the {format_bytes(available)} "
            "this machine has available",
            "use a smaller table, or a machine with more memory",
        )


def _read_parquet(path: Path, where: str) -> np.ndarray:
    try:
        import pandas
    except ImportError:
        pass
    else:
        return pandas.read_parquet(path).to_numpy()
    try:
        import pyarrow.parquet
    except ImportError:
        raise _missing(where, "parquet", "pandas pyarrow") from None
    table = pyarrow.parquet.read_table(path)
    return np.column_stack([column.to_numpy() for column in table.columns])


def _read_csv(path: Path, where: str, *, labels: bool) -> np.ndarray:
    """A CSV of numbers (or, with ``labels``, of labels), with or without a header row.

    The first row is a header when it is not all numbers and the rows below are, or, for a
    table of labels, when its values appear nowhere below (a class seen once in the whole
    table would be taken for a header: give such a file a header).

    :raises UsageError: the file is not UTF-8 CSV, its rows differ in length, or a cell of a
        table of numbers is not one; the message names the line.
    """
    numbered = _csv_rows(path, where)
    rows = [row for _, row in numbered]
    if rows and _is_header(rows[0], rows[1:]):
        numbered, rows = numbered[1:], rows[1:]
    _check_widths(numbered, where, path)
    if all(_is_number(cell) for row in rows for cell in row):
        return np.array(rows, dtype=np.float64)
    if not labels:
        line, cell = next((n, c) for n, row in numbered for c in row if not _is_number(c))
        shown = printable(repr(cell if len(cell) <= 40 else cell[:37] + "..."))
        raise _bad_csv(
            where, path, line, f"holds {shown}, not a number",
            "features must be numbers: encode a category as numbers",
        )  # fmt: skip
    return np.array(rows, dtype=str)


def _check_widths(numbered: list[tuple[int, list[str]]], where: str, path: Path) -> None:
    """Refuse rows with another number of cells than the first."""
    if not numbered:
        return
    first, width = numbered[0][0], len(numbered[0][1])
    for line, row in numbered:
        if len(row) != width:
            raise _bad_csv(
                where, path, line, f"has {_cells(len(row))} but line {first} has {_cells(width)}",
                "give every row the same number of cells",
            )  # fmt: skip


def _csv_rows(path: Path, where: str) -> list[tuple[int, list[str]]]:
    """The file's non-empty rows, each with the number of the line it ends on."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")  # a spreadsheet's byte-order mark is no cell's text
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise _bad_csv(where, path, line, "is not UTF-8 text", "save it as UTF-8") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    rows: list[tuple[int, list[str]]] = []
    try:
        rows.extend((reader.line_num, row) for row in reader if row)
    except csv.Error as error:
        raise _bad_csv(where, path, reader.line_num, f"is not CSV ({error})", None) from None
    return rows


def _cells(count: int) -> str:
    return f"{count} cell{'' if count == 1 else 's'}"


def _bad_csv(where: str, path: Path, line: int, what: str, hint: str | None) -> UsageError:
    return UsageError(f"{where}: {path}, line {line} {what}", hint)


def _is_header(first: list[str], rest: list[list[str]]) -> bool:
    if all(_is_number(cell) for cell in first):
        return False
    if all(_is_number(cell) for row in rest for cell in row):
        return True
    return all(row != first for row in rest)


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _missing(where: str, kind: str, packages: str) -> EnvironmentNotFoundError:
    return EnvironmentNotFoundError(
        f"{where}: reading {kind} files needs {packages.replace(' ', ' and ')}",
        f"install it with `pip install {packages}`",
    )
