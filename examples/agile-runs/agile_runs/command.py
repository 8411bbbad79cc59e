"""``agile runs``: what training runs a folder holds, read from their summary.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click


def read_runs(folder: Path) -> list[dict[str, Any]]:
    """One row per run folder with a summary, newest first; unreadable ones are skipped."""
    rows = []
    for summary in folder.glob("*/summary.json"):
        try:
            data = json.loads(summary.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        data["run"] = summary.parent.name
        data["modified"] = summary.stat().st_mtime
        rows.append(data)
    return sorted(rows, key=lambda row: row["modified"], reverse=True)


def _target(row: dict[str, Any]) -> str:
    if row.get("target_score") is None:
        return "-"
    return "reached" if row.get("target_reached") else "not reached"


@click.command(name="runs")
@click.argument("folder", default="runs", type=click.Path(path_type=Path, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def runs(folder: Path, as_json: bool) -> None:
    """List the training runs in FOLDER (default: runs/) and how they went."""
    rows = read_runs(folder)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo(f"no runs in {folder}/")
        return
    table = [("RUN", "ALGORITHM", "ENVIRONMENT", "BEST", "STEPS", "TARGET")]
    for row in rows:
        best = row.get("best_fitness")
        table.append((
            row["run"], str(row.get("algorithm", "?")), str(row.get("environment", "?")),
            "-" if best is None else f"{best:.1f}", f"{row.get('global_steps', 0):,}",
            _target(row),
        ))  # fmt: skip
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    for line in table:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
