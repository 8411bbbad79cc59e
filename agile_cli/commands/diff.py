"""``agile diff``: what differs between two run folders, and their results side by side.

Reads, as data and bounded in size, each run's ``manifest.yaml`` (the resolved settings),
the latest session of its ``provenance.json`` (versions, machine, device, seed, command) and
its ``summary.json`` (results).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from agile_cli.errors import UsageError, printable
from agile_cli.report.runs import read_json, read_yaml

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
    """
    runs = [_load(first), _load(second)]
    report = {
        "runs": [str(first), str(second)],
        "settings": changed(*(flat(run["manifest"]) for run in runs)),
        "provenance": changed(*(flat(_latest(run["provenance"])) for run in runs)),
        "results": {
            **{key: [run["summary"].get(key) for run in runs] for key, _ in RESULTS},
            "elite": [_elite(run["summary"]) for run in runs],
        },
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


def _load(path: Path) -> dict[str, Any]:
    if not (path / "manifest.yaml").is_file():
        raise UsageError(
            f"{path} is not a run folder (no manifest.yaml)",
            "give two folders agile train wrote, e.g. agile diff runs/A runs/B",
        )
    return {
        "manifest": read_yaml(path / "manifest.yaml"),
        "provenance": read_json(path / "provenance.json"),
        "summary": read_json(path / "summary.json"),
    }


def _latest(provenance: dict[str, Any]) -> dict[str, Any]:
    """The run's latest session, without what differs every time."""
    sessions = provenance.get("sessions")
    if not isinstance(sessions, list) or not sessions or not isinstance(sessions[-1], dict):
        return {}
    return {key: value for key, value in sessions[-1].items() if key not in _EVERY_TIME}


def _lines(report: dict[str, Any]) -> list[str]:
    first, second = report["runs"]
    lines = [f"A: {first}", f"B: {second}"]
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


def _elite(summary: dict[str, Any]) -> dict[str, Any] | None:
    """The elite the run chose by scoring its best again (``summary.json``'s ``elite``),
    without the other members it scored."""
    elite = summary.get("elite")
    if not isinstance(elite, dict):
        return None
    return {key: value for key, value in elite.items() if key != "candidates"}


def _elite_text(elite: dict[str, Any] | None) -> str | None:
    """``-27.65 (member 28; 95% interval -32.62 to -22.54)``."""
    if elite is None:
        return None
    score, member = elite.get("score"), elite.get("member")
    low, high = elite.get("low"), elite.get("high")
    if not isinstance(score, int | float):
        return None
    bounded = isinstance(low, int | float) and isinstance(high, int | float)
    interval = f"; 95% interval {low:.4g} to {high:.4g}" if bounded else ""
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
