"""Reading the rows an ``llm`` environment trains on, renaming their columns and splitting them.

A dataset is a local file (JSON Lines, JSON, CSV or Parquet) or a Hugging Face hub id. A hub
dataset is read only from the local cache: the whole run is offline, so a dataset that was
never fetched fails at once with the command that fetches it, instead of hanging on a network
that may not be there. Whatever the source, the rows must fit in the memory this machine has
available; a file agile reads never takes unbounded memory.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from agile_cli import UsageError
from agile_cli.helpers import available_memory, format_bytes

Row = dict[str, Any]

#: Suffixes read as local files; anything else that names no file is taken as a hub id.
FILE_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".pq")
#: Python objects take a few times the bytes of the text or Arrow data they are read from.
_EXPANSION = 4
#: Levels of lists and objects inside one another a row may have. Python's JSON reader gives
#: up past about a thousand (with a RecursionError); no dataset's rows come near a hundred.
MAX_NESTING = 100
_TOO_DEEP = f"nests lists or objects more than {MAX_NESTING} deep"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_WHERE = "environment.dataset"
_INSTALL_HINT = (
    "install it with `pip install datasets pyarrow` or, in agile's folder, "
    '`pip install -e ".[llm]"`'
)


def load_rows(dataset: str) -> list[Row]:
    """Every row of ``dataset``, as dicts with the same columns.

    :param dataset: a file path (relative to the working directory) or a hub id.
    :raises UsageError: the file is missing, empty, malformed or too large, or the hub
        dataset is not cached.
    """
    path = Path(dataset)
    if path.is_dir():
        rows = read_folder(path)
    elif path.suffix.lower() in FILE_SUFFIXES or path.exists() or not _HUB_ID.match(dataset):
        rows = read_file(path)
    else:
        rows = read_hub(dataset)
    check_rows(rows, dataset)
    return rows


def read_folder(path: Path) -> list[Row]:
    """The rows of every data file directly in ``path`` (of one kind), in name order, as
    ``datasets.load_dataset`` reads a local folder."""
    files = sorted(child for child in path.iterdir()
                   if child.is_file() and child.suffix.lower() in FILE_SUFFIXES)  # fmt: skip
    kinds = {file.suffix.lower().replace(".pq", ".parquet") for file in files}
    if not files or len(kinds) > 1:
        found = "none" if not files else ", ".join(sorted(kinds))
        raise UsageError(
            f"{_WHERE}: the folder {path.absolute()} must hold data files of one kind "
            f"({', '.join(FILE_SUFFIXES)}); found {found}",
            "keep one kind of data file in it, or name the file itself",
        )
    check_fits(sum(file.stat().st_size for file in files), path.absolute())
    return [row for file in files for row in read_file(file)]


def read_file(path: Path) -> list[Row]:
    """The rows of a local file, by its suffix."""
    absolute = path.absolute()
    if not path.is_file():
        raise UsageError(
            f"{_WHERE}: no file {absolute}",
            "paths are relative to the working directory; a hub id looks like owner/name",
        )
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        return _read_parquet(absolute)
    readers = {".jsonl": _read_jsonl, ".json": _read_json, ".csv": _read_csv}
    if suffix not in readers:
        raise UsageError(
            f"{_WHERE}: cannot read {absolute}", f"use a file ending in {', '.join(FILE_SUFFIXES)}"
        )
    check_fits(absolute.stat().st_size, absolute)
    try:
        return readers[suffix](absolute)
    except UnicodeDecodeError as error:
        raise UsageError(
            f"{_WHERE}: {absolute} is not UTF-8 text (byte {error.start})", "save it as UTF-8"
        ) from None


def check_fits(size: int, source: Path | str) -> None:
    """Refuse data whose rows would need more memory than this machine has available.

    :param size: bytes of the file (or of the decoded table) the rows come from.
    """
    needed, available = size * _EXPANSION, available_memory()
    if available is not None and needed > available:
        raise UsageError(
            f"{_WHERE}: {source} holds {format_bytes(size)} of data, whose rows need about "
            f"{format_bytes(needed)}, more than the {format_bytes(available)} available",
            "use a smaller dataset, or a machine with more memory",
        )


def _read_jsonl(path: Path) -> list[Row]:
    return list(_jsonl_rows(path))


def _jsonl_rows(path: Path) -> Iterator[Row]:
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise _bad_line(path, number, f"is not JSON ({error.msg})") from None
            except RecursionError:
                raise _bad_line(path, number, _TOO_DEEP) from None
            if not isinstance(row, dict):
                raise _bad_line(path, number, f"is {_kind(row)}, not an object")
            if nesting(row) > MAX_NESTING:
                raise _bad_line(path, number, _TOO_DEEP)
            yield row


def _read_json(path: Path) -> list[Row]:
    try:
        rows = json.loads(path.read_text(encoding="utf-8") or "[]")
    except json.JSONDecodeError as error:
        raise _bad_line(path, error.lineno, f"is not JSON ({error.msg})") from None
    except RecursionError:
        raise UsageError(f"{_WHERE}: {path} {_TOO_DEEP}", "flatten its rows") from None
    if not isinstance(rows, list):
        raise UsageError(
            f"{_WHERE}: {path} holds {_kind(rows)}, not a list of objects",
            'write [{"prompt": ...}, ...], or one object a line in a .jsonl file',
        )
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise UsageError(f"{_WHERE}: {path}: item {index} is {_kind(row)}, not an object")
        if nesting(row) > MAX_NESTING:
            raise UsageError(f"{_WHERE}: {path}: item {index} {_TOO_DEEP}", "flatten that item")
    return rows


def nesting(value: Any) -> int:
    """How many levels of lists and objects ``value`` has inside one another (0 for a plain
    value), counted without recursion and only until past :data:`MAX_NESTING`."""
    if not isinstance(value, dict | list):
        return 0
    deepest, stack = 0, [(value, 1)]
    while stack and deepest <= MAX_NESTING:
        item, level = stack.pop()
        deepest = max(deepest, level)
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, level + 1) for child in children if isinstance(child, dict | list))
    return deepest


def _read_csv(path: Path) -> list[Row]:
    rows: list[Row] = []
    with path.open(encoding="utf-8", newline="") as file:
        reader = csv.DictReader(file)
        try:
            for row in reader:
                if None in row or None in row.values():
                    raise _bad_line(
                        path, reader.line_num, "has a different number of fields than the header"
                    )
                rows.append(dict(row))
        except csv.Error as error:
            raise _bad_line(path, reader.line_num + 1, f"is not CSV ({error})") from None
    return rows


def _read_parquet(path: Path) -> list[Row]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError(f"{_WHERE}: reading Parquet needs pyarrow", _INSTALL_HINT) from None
    try:
        file = pq.ParquetFile(path)
        metadata = file.metadata
        size = sum(metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups))
        check_fits(size, path)
        return list(file.read().to_pylist())
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError
        raise UsageError(f"{_WHERE}: {path} is not a readable Parquet file ({error})") from None


def _kind(value: Any) -> str:
    """``a list``, ``an int``: what ``value`` is, for a message."""
    noun = type(value).__name__
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


def _bad_line(path: Path, number: int, what: str) -> UsageError:
    return UsageError(f"{_WHERE}: {path}, line {number} {what}", "fix or remove that line")


def read_hub(dataset_id: str) -> list[Row]:
    """The ``train`` split of a hub dataset, from the local cache only (never the network)."""
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        import datasets
    except ImportError:
        raise UsageError(
            f"{_WHERE}: {dataset_id!r} is a Hugging Face dataset id, which needs `datasets`",
            _INSTALL_HINT,
        ) from None
    _force_offline(datasets)
    try:
        table = datasets.load_dataset(dataset_id, split="train")
    except Exception as error:  # any failure here means: not in the cache as asked
        raise _not_cached(dataset_id, error) from None
    check_fits(int(table.data.nbytes), dataset_id)
    return list(table.to_list())


def _force_offline(datasets: Any) -> None:
    """Offline mode even when ``datasets`` was imported before the variables were set (both
    libraries read them once, at import)."""
    import huggingface_hub.constants

    datasets.config.HF_HUB_OFFLINE = True
    datasets.config.HF_DATASETS_OFFLINE = True
    huggingface_hub.constants.HF_HUB_OFFLINE = True


def _not_cached(dataset_id: str, error: Exception) -> UsageError:
    fetch = f"python -c \"import datasets; datasets.load_dataset('{dataset_id}')\""
    return UsageError(
        f"{_WHERE}: {dataset_id!r} is neither a file (no {Path(dataset_id).absolute()}) nor a "
        f"Hugging Face dataset in the local cache, and agile never downloads "
        f"({type(error).__name__}: {error})",
        f"fetch it once with `{fetch}` on a machine with network (the same HF_HOME), "
        "or give a local .jsonl, .json, .csv or .parquet file",
    )


def check_rows(rows: list[Row], source: str) -> None:
    """Refuse an empty dataset, or one whose rows do not all have the same columns."""
    if not rows:
        raise UsageError(f"{_WHERE}: {source} has no rows", "give a dataset with some rows")
    first = set(rows[0])
    for index, row in enumerate(rows):
        if set(row) != first:
            raise UsageError(
                f"{_WHERE}: {source}: row {index} has columns {sorted(row)}, "
                f"but row 0 has {sorted(first)}",
                "give every row the same columns",
            )


def rename(rows: list[Row], columns: dict[str, str] | None) -> list[Row]:
    """``rows`` with columns renamed by ``columns`` (source name -> new name); others kept."""
    if not columns:
        return rows
    have = set(rows[0]) if rows else set()
    missing = [source for source in columns if source not in have]
    if missing:
        raise UsageError(
            f"environment.columns: the data has no column {missing[0]!r}; it has {sorted(have)}",
            "environment.columns maps a column the data has to the name agile needs",
        )
    return [{columns.get(name, name): value for name, value in row.items()} for row in rows]


def split(rows: list[Row], train_fraction: float, seed: int) -> tuple[list[Row], list[Row]]:
    """``rows`` shuffled with ``seed``, cut into a training part of ``train_fraction`` of them
    and a test part of the rest (at least one row each).

    :raises UsageError: one of the parts would be empty.
    """
    count = len(rows)
    tests = min(count, math.ceil(round(count * (1.0 - train_fraction), 9)))
    if tests == 0 or tests == count:
        raise UsageError(
            f"environment.train_test_split: {train_fraction} of {count} rows leaves "
            f"{count - tests} for training and {tests} for testing",
            "both need at least one row: give more rows or a fraction strictly between 0 and 1",
        )
    order = np.random.default_rng(seed).permutation(count)
    shuffled = [rows[int(i)] for i in order]
    return shuffled[: count - tests], shuffled[count - tests :]
