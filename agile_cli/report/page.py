"""What ``agile report`` writes: a terminal view, PNG files, and a static HTML page with the
figures embedded (it opens from disk, with no server and nothing fetched)."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agile_cli.report.curves import confidence
from agile_cli.report.runs import Group, Run

SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int = 40) -> str:
    """``values`` as a line of block characters, at most ``width`` of them (resampled)."""
    if not values:
        return ""
    series = np.asarray(values, float)
    if series.size > width:
        series = series[np.linspace(0, series.size - 1, width).round().astype(int)]
    low, high = float(series.min()), float(series.max())
    if high - low < 1e-12:
        return SPARKS[len(SPARKS) // 2] * series.size
    levels = ((series - low) / (high - low) * (len(SPARKS) - 1)).round().astype(int)
    return "".join(SPARKS[level] for level in levels)


def terminal_view(groups: list[Group]) -> list[str]:
    """A few lines per run, and a line across the seeds of each setup that has several."""
    lines: list[str] = []
    for group in groups:
        lines.append(group.label + (f"  ({len(group.runs)} seeds)" if len(group.runs) > 1 else ""))
        for run in group.runs:
            lines += ["", *_run_lines(run)]
        if len(group.runs) > 1:
            finals = np.array([[run.generations[-1].best] for run in group.runs])
            half = float(confidence(finals)[0])
            lines += ["", f"  final best over {len(group.runs)} seeds: "
                      f"{finals.mean():.4g} +/- {half:.3g} (95% CI)"]  # fmt: skip
        lines.append("")
    return lines


def _run_lines(run: Run) -> list[str]:
    gens = run.generations
    last = gens[-1]
    peak = max(gens, key=lambda g: g.best)
    seed = f", seed {run.seed}" if run.seed is not None else ""
    target = ""
    if run.target is not None:
        reached = next((g for g in gens if g.best >= run.target), None)
        target = (f"; target {run.target:g} reached at {reached.global_steps:,} steps"
                  if reached else f"; target {run.target:g} not reached")  # fmt: skip
    elite = last.best_member
    values = ", ".join(f"{k} {v:.4g}" for k, v in elite.hyperparameters.items())
    size = f" ({elite.parameters:,} weights)" if elite.parameters is not None else ""
    lines = [
        f"  {run.path}{seed}",
        f"  {len(gens)} generations, {last.global_steps:,} steps, {last.wall_seconds:.1f} s; "
        f"best {peak.best:.4g} (generation {peak.number}){target}",
        f"  best  {sparkline([g.best for g in gens])}  {gens[0].best:.4g} -> {last.best:.4g}",
        f"  mean  {sparkline([g.mean for g in gens])}  {gens[0].mean:.4g} -> {last.mean:.4g}",
        f"  best member now: {elite.index}: {values or 'no hyperparameters'}; {elite.arch}{size}",
    ]
    if run.skipped:
        lines.append(f"  ({run.skipped} unreadable metrics lines skipped)")
    return lines


@dataclass
class Picture:
    """One figure: a short name (for its PNG file), a title, and its PNG bytes."""

    name: str
    title: str
    data: bytes


def html_page(groups: list[Group], pictures: list[Picture]) -> str:
    """A self-contained page: the runs' summary, then every figure as an embedded PNG."""
    runs = [run for group in groups for run in group.runs]
    title = "agile report: " + ", ".join(dict.fromkeys(group.label for group in groups))
    rows = "\n".join(_html_row(run) for run in runs)
    figures = "\n".join(
        f'<h2>{html.escape(p.title)}</h2>\n<img alt="{html.escape(p.title)}" '
        f'src="data:image/png;base64,{base64.b64encode(p.data).decode()}">'
        for p in pictures
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1400px}}
table{{border-collapse:collapse}}td,th{{padding:.3em .8em;border-bottom:1px solid #ddd;
text-align:left}}img{{max-width:100%}}</style></head><body>
<h1>{html.escape(title)}</h1>
<table><tr><th>run</th><th>setup</th><th>seed</th><th>generations</th><th>env steps</th>
<th>wall time</th><th>best fitness</th><th>final best</th></tr>
{rows}
</table>
{figures}
</body></html>
"""


def _html_row(run: Run) -> str:
    last = run.generations[-1]
    cells = (run.name, run.title, "" if run.seed is None else str(run.seed),
             str(len(run.generations)), f"{last.global_steps:,}", f"{last.wall_seconds:.1f} s",
             f"{max(g.best for g in run.generations):.4g}", f"{last.best:.4g}")  # fmt: skip
    return "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells) + "</tr>"


def picture_paths(out: Path, pictures: list[Picture]) -> list[Path]:
    """Where each PNG goes: ``out`` itself for the first when ``out`` is a .png, else
    ``<stem>-<name>.png`` next to it."""
    paths = [out.with_name(f"{out.stem}-{p.name}.png") for p in pictures]
    if out.suffix.lower() == ".png" and paths:
        paths[0] = out
    return paths
