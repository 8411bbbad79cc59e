"""``agile diff``: what differs between two run folders, and their results side by side.

Reads each run's ``manifest.yaml`` (the resolved settings), the latest session of its
``provenance.json`` (versions, machine, device, seed, command) and its ``summary.json``
(results) through the run-folder readers of :mod:`agile_cli.helpers`: as data, bounded and
typed. A manifest that cannot be read refuses the comparison; a provenance or summary that
cannot be read is left out, with a note saying why.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from agile_cli import UsageError
from agile_cli.helpers import Fields, RunFileError, printable, read_json, read_manifest

#: Summary fields shown side by side, and their labels.
RESULTS = (
    ("best_fitness", "best fitness"),
    ("generations", "generations"),
    ("global_steps", "steps in all"),
    ("steps_per_member", "steps per member"),
    ("wall_seconds", "wall seconds"),
    ("steps_per_second", "steps/s"),
    ("target_reached", "target reached"),
    ("target_reached_at", "target reached at"),
)
#: Provenance fields that differ between any two sessions and say nothing about the run.
_EVERY_TIME = ("started",)


def run_diff(first: Path, second: Path, *, as_json: bool = False) -> int:
    """Print what differs between runs ``first`` and ``second`` (as JSON with ``as_json``).

    :raises UsageError: a folder holds no run.
    :raises RunFileError: a run's ``manifest.yaml`` cannot be read (naming it, and the line).
    """
    notes: list[str] = []
    runs = [_load(first, notes), _load(second, notes)]
    report = {
        "runs": [str(first), str(second)],
        "settings": changed(*(flat(run["manifest"]) for run in runs)),
        "provenance": changed(*(flat(_latest(run["provenance"])) for run in runs)),
        "results": {
            **{key: [run["summary"].get(key) for run in runs] for key, _ in RESULTS},
            "elite": [
                _elite(run["summary"], path, notes)
                for run, path in zip(runs, (first, second), strict=True)
            ],
        },
        "notes": notes,
    }
    if as_json:
        click.echo(json.dumps(report, indent=2, default=str))
        return 0
    for line in _lines(report):
        click.echo(printable(line))
    return 0


def flat(document: Any, prefix: str = "") -> dict[str, Any]:
    """``document``'s leaves by dotted path (lists are leaves)."""
    if not isinstance(document, dict):
        return {prefix: document} if prefix else {}
    leaves: dict[str, Any] = {}
    for key, value in document.items():
        leaves.update(flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return leaves


def changed(first: dict[str, Any], second: dict[str, Any]) -> dict[str, list[Any]]:
    """The paths whose values differ (absent on one side: None there)."""
    paths = sorted(set(first) | set(second))
    return {p: [first.get(p), second.get(p)] for p in paths if first.get(p) != second.get(p)}


def _load(path: Path, notes: list[str]) -> dict[str, Any]:
    """The run's manifest, provenance and summary (an unreadable one of the last two is
    empty, with a note in ``notes``).

    :raises UsageError: the folder has no ``manifest.yaml``.
    :raises RunFileError: its ``manifest.yaml`` cannot be read.
    """
    manifest = read_manifest(path / "manifest.yaml")
    if manifest is None:
        raise UsageError(
            f"{path} is not a run folder (no manifest.yaml)",
            "give two folders agile train wrote, e.g. agile diff runs/A runs/B",
        )
    return {
        "manifest": manifest,
        "provenance": _noted(lambda: read_json(path / "provenance.json"), notes, "provenance is"),
        "summary": _noted(lambda: read_json(path / "summary.json"), notes, "results are"),
    }


def _noted(
    read: Callable[[], dict[str, Any] | None], notes: list[str], what: str
) -> dict[str, Any]:
    """What ``read`` returns ({} for no file); {} where it raises :class:`RunFileError`,
    with its sentence in ``notes`` saying that ``what`` ("results are") left out."""
    try:
        return read() or {}
    except RunFileError as error:
        notes.append(f"{error.message}; its {what} left out")
        return {}


def _latest(provenance: dict[str, Any]) -> dict[str, Any]:
    """The run's latest session, without what differs every time."""
    sessions = provenance.get("sessions")
    if not isinstance(sessions, list) or not sessions or not isinstance(sessions[-1], dict):
        return {}
    return {key: value for key, value in sessions[-1].items() if key not in _EVERY_TIME}


def _lines(report: dict[str, Any]) -> list[str]:
    first, second = report["runs"]
    lines = [f"A: {first}", f"B: {second}", *(f"note: {note}" for note in report["notes"])]
    for section, source in (("settings", "manifest.yaml"), ("provenance", "provenance.json")):
        differences = report[section]
        count = len(differences)
        lines.append(f"{section} ({source}): " + (f"{count} differ" if count else "the same"))
        lines += _table([(path, *values) for path, values in differences.items()])
    lines.append("results (summary.json):")
    labels = {**dict(RESULTS), "elite": "elite scored again"}
    results = {**report["results"], "elite": [_elite_text(e) for e in report["results"]["elite"]]}
    lines += _table([(labels[key], *values) for key, values in results.items()])
    return lines


def _elite(summary: dict[str, Any], run: Path, notes: list[str]) -> dict[str, Any] | None:
    """The elite the run chose by scoring its best again (``summary.json``'s ``elite``),
    without the other members it scored; None where it has none, or (with a note) where its
    score, member or interval is not as agile writes them."""
    fields = Fields(summary, str(run / "summary.json"))
    if not fields.has("elite"):
        return None
    try:
        elite = fields.mapping("elite")
        elite.number("score")
        for name in ("low", "high"):
            if elite.has(name):
                elite.number(name)
        if elite.has("member"):
            elite.integer("member")
    except RunFileError as error:
        notes.append(f"{error.message}; its elite is left out")
        return None
    return {key: value for key, value in elite.data.items() if key != "candidates"}


def _elite_text(elite: dict[str, Any] | None) -> str | None:
    """``-27.65 (member 28; 95% interval -32.62 to -22.54)``."""
    if elite is None:
        return None
    score, member = elite["score"], elite.get("member")  # numbers, as _elite checked
    low, high = elite.get("low"), elite.get("high")
    interval = f"; 95% interval {low:.4g} to {high:.4g}" if None not in (low, high) else ""
    return f"{score:.4g} (member {member}{interval})"


def _table(rows: list[tuple[str, Any, Any]]) -> list[str]:
    if not rows:
        return []
    shown = [(name, _shown(a), _shown(b)) for name, a, b in rows]
    name_width = max(len(name) for name, _, _ in shown)
    value_width = max(len(a) for _, a, _ in shown)
    return [f"  {name:<{name_width}}  {a:<{value_width}}  {b}" for name, a, b in shown]


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e6 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return value if isinstance(value, str) else json.dumps(value, default=str)
