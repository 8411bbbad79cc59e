"""What ``agile report`` writes: a terminal view, PNG files, and a static HTML page with the
figures embedded (it opens from disk, with no server and nothing fetched)."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agile_cli.helpers import ordinal
from agile_report.compare import closeness_text
from agile_report.curves import bootstrap_interval, iqm, seeds_interval
from agile_report.events import lineage_events
from agile_report.runs import Group, Run, ScoredElite

SPARKS = "▁▂▃▄▅▆▇█"
#: A sparkline scale spans at least this fraction of the largest magnitude it shows, so that
#: a change of a percent or two never fills its height (and never reads as a collapse).
MIN_SPAN = 0.1

#: A run's table of lineage events longer than this starts folded.
MAX_OPEN_EVENTS = 40

Scale = tuple[float, float]


def spark_scale(series: list[list[float]]) -> Scale:
    """One scale for sparklines of all ``series``: their lowest to their highest value, its
    low end lowered (the highest stays on top) to span at least :data:`MIN_SPAN` of the
    largest magnitude."""
    values = np.concatenate([np.asarray(values, float) for values in series])
    low, high = float(values.min()), float(values.max())
    span = max(high - low, MIN_SPAN * max(abs(low), abs(high)))
    return high - span, high


def sparkline(values: list[float], width: int = 40, scale: Scale | None = None) -> str:
    """``values`` as a line of block characters, at most ``width`` of them (resampled), ``▁``
    at the low end of ``scale`` and ``█`` at its high end (default: :func:`spark_scale` of
    ``values``)."""
    if not values:
        return ""
    series = np.asarray(values, float)
    if series.size > width:
        series = series[np.linspace(0, series.size - 1, width).round().astype(int)]
    low, high = scale if scale is not None else spark_scale([values])
    if high - low < 1e-12:
        return SPARKS[len(SPARKS) // 2] * series.size
    fraction = np.clip((series - low) / (high - low), 0.0, 1.0)
    levels = (fraction * (len(SPARKS) - 1)).round().astype(int)
    return "".join(SPARKS[level] for level in levels)


def terminal_view(groups: list[Group]) -> list[str]:
    """A few lines per run, and a line across the seeds of each setup that has several.

    The sparklines of every run share one scale for the best fitness and one for the mean
    (:func:`spark_scale`), which the first line states: runs compare at a glance, and a run
    that only wavers near its best does not look like it collapsed."""
    runs = [run for group in groups for run in group.runs]
    scales = (spark_scale([[g.best for g in run.generations] for run in runs]),
              spark_scale([[g.mean for g in run.generations] for run in runs]))  # fmt: skip
    (best_low, best_high), (mean_low, mean_high) = scales
    lines = [f"sparklines, one scale for every run: best {SPARKS[0]} {best_low:.4g} to "
             f"{SPARKS[-1]} {best_high:.4g}; mean {SPARKS[0]} {mean_low:.4g} to "
             f"{SPARKS[-1]} {mean_high:.4g}", ""]  # fmt: skip
    for group in groups:
        lines.append(group.label + (f"  ({len(group.runs)} seeds)" if len(group.runs) > 1 else ""))
        for run in group.runs:
            lines += ["", *_run_lines(run, scales)]
        if len(group.runs) > 1:
            finals = np.array([run.generations[-1].best for run in group.runs])
            mean, low, high = (float(value) for value in seeds_interval(finals))
            lines += ["", f"  final best over {len(group.runs)} seeds: mean {mean:.4g}, "
                      f"95% CI {low:.4g} to {high:.4g} (within the seeds' range)",
                      _iqm_line(finals)]  # fmt: skip
            scored = group.scored_elites()
            if scored is not None:
                lines.append(_iqm_line(scored, "the elites scored again: "))
        lines.append("")
    return lines


def _iqm_line(finals: np.ndarray, what: str = "") -> str:
    """The seeds' interquartile mean of ``finals`` (the final best, unless ``what`` says
    otherwise) and its bootstrap interval."""
    low, high = bootstrap_interval(finals)
    return (f"  {what}interquartile mean {iqm(finals):.4g}, 95% bootstrap CI {low:.4g} to "
            f"{high:.4g} (seeds resampled)")  # fmt: skip


def _run_lines(run: Run, scales: tuple[Scale, Scale]) -> list[str]:
    gens = run.generations
    last = gens[-1]
    peak = max(gens, key=lambda g: g.best)
    seed = f", seed {run.seed}" if run.seed is not None else ""
    target = ""
    if run.target is not None:
        reached = next((g for g in gens if g.best >= run.target), None)
        target = (f"; target {run.target:g} reached at {reached.global_steps:,} {run.unit}"
                  if reached else f"; target {run.target:g} not reached")  # fmt: skip
    elite = last.best_member
    values = _hyperparameters(elite.hyperparameters)
    size = f" ({elite.parameters:,} weights)" if elite.parameters is not None else ""
    lines = [
        f"  {run.path}{seed}",
        f"  {len(gens)} generations, {last.global_steps:,} {run.unit} in all, "
        f"{last.wall_seconds:.1f} s; "
        f"best {peak.best:.4g} (generation {peak.number}){target}",
        f"  best  {sparkline([g.best for g in gens], scale=scales[0])}  "
        f"{gens[0].best:.4g} -> {last.best:.4g}",
        f"  mean  {sparkline([g.mean for g in gens], scale=scales[1])}  "
        f"{gens[0].mean:.4g} -> {last.mean:.4g}",
        f"  best member now: {elite.index}: {values or 'no hyperparameters'}; {elite.arch}{size}",
    ]
    lines += [f"  ({text})" for text in run.unread()]
    compared = closeness_text(run)
    if compared is not None:
        lines.append(f"  {compared}")
    if run.elite is not None:
        lines.append(f"  {elite_text(run.elite)}")
    return lines


def _hyperparameters(values: dict[str, float], most: int = 12) -> str:
    """``lr 0.001, gamma 0.99``: the first ``most`` of ``values``, the others counted."""
    shown = ", ".join(f"{name} {value:.4g}" for name, value in list(values.items())[:most])
    rest = len(values) - most
    return shown + (f" and {rest:,} more" if rest > 0 else "")


def elite_text(elite: ScoredElite) -> str:
    """``elite, scored again: member 28, -27.65 (95% interval ...) on 30 fresh episodes; 2nd
    by training fitness (-22.09)``."""
    interval = (f" (95% interval {elite.low:.4g} to {elite.high:.4g})"
                if elite.low is not None and elite.high is not None else "")  # fmt: skip
    return (
        f"elite, scored again: member {elite.member}, {elite.score:.4g}{interval} on "
        f"{elite.episodes} fresh episodes; {ordinal(elite.training_rank)} by training fitness "
        f"({elite.training_fitness:.4g})"
    )


@dataclass
class Picture:
    """One figure: a short name (for its PNG file), a title, its PNG bytes, and what the page
    says under it."""

    name: str
    title: str
    data: bytes
    caption: str = ""


def html_page(groups: list[Group], pictures: list[Picture]) -> str:
    """A self-contained page: the runs' summary, each setup's final best over its seeds, the
    replays' comparisons, every figure as an embedded PNG, and the events along each run's
    final best member's ancestry."""
    runs = [run for group in groups for run in group.runs]
    title = "agile report: " + ", ".join(dict.fromkeys(group.label for group in groups))
    rows = "\n".join(_html_row(run) for run in runs)
    figures = "\n".join(_html_figure(p) for p in pictures)
    sections = _setups_table(groups) + _replays(runs) + _unread(runs)
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
{sections}
{figures}
{_lineage_events(runs)}
</body></html>
"""


def _html_row(run: Run) -> str:
    last = run.generations[-1]
    cells = (run.name, run.title, "" if run.seed is None else str(run.seed),
             str(len(run.generations)), f"{last.global_steps:,}", f"{last.wall_seconds:.1f} s",
             f"{max(g.best for g in run.generations):.4g}", f"{last.best:.4g}")  # fmt: skip
    return "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells) + "</tr>"


def _html_figure(picture: Picture) -> str:
    data = base64.b64encode(picture.data).decode()
    caption = f"\n<p>{html.escape(picture.caption)}</p>" if picture.caption else ""
    return (f'<h2>{html.escape(picture.title)}</h2>\n<img alt="{html.escape(picture.title)}" '
            f'src="data:image/png;base64,{data}">{caption}')  # fmt: skip


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A table of text cells (escaped here)."""
    lines = ["<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in head) + "</tr>"]
    lines += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
              for row in rows]  # fmt: skip
    return "\n".join([*lines, "</table>"])


def _setups_table(groups: list[Group]) -> str:
    """Per setup: its seeds, the interquartile mean of their final best fitness and its 95%
    bootstrap interval (as the terminal's line), or, for one seed, its final best alone."""
    rows = []
    for group in groups:
        finals = np.array([run.generations[-1].best for run in group.runs])
        if finals.size > 1:
            low, high = bootstrap_interval(finals)
            interval = f"{low:.4g} to {high:.4g}"
        else:
            interval = "none: one seed"
        rows.append((group.label, str(finals.size), f"{iqm(finals):.4g}", interval))
    head = ("setup", "seeds", "final best: interquartile mean over seeds",
            "95% bootstrap CI of the interquartile mean")  # fmt: skip
    return (f"<h2>Final best fitness by setup</h2>\n{_table(head, rows)}\n<p>The interval: "
            "95% percentile bootstrap of the interquartile mean, the seeds resampled with "
            "replacement 2,000 times.</p>")  # fmt: skip


def _replays(runs: list[Run]) -> str:
    """The terminal's replay comparison, per run that has one."""
    compared = [(run, text) for run in runs if (text := closeness_text(run)) is not None]
    return _list("Replays against their original lineage", compared)


def _unread(runs: list[Run]) -> str:
    """What could not be read of each run (:meth:`~.runs.Run.unread`), as the terminal says."""
    return _list("What could not be read", [(run, text) for run in runs for text in run.unread()])


def _list(heading: str, items: list[tuple[Run, str]]) -> str:
    """A section listing each run's ``items`` (none: no section)."""
    if not items:
        return ""
    rows = "\n".join(
        f"<li>{html.escape(run.name)}: {html.escape(text)}</li>" for run, text in items
    )
    return f"\n<h2>{html.escape(heading)}</h2>\n<ul>\n{rows}\n</ul>"


def _lineage_events(runs: list[Run]) -> str:
    """Per run, a table of the clonings and mutations along the final best member's
    ancestry (what the lineage figure marks, with the mutations' labels)."""
    parts = ["<h2>Cloned and mutated along the final best member's ancestry</h2>"]
    for run in runs:
        events = lineage_events(run)
        if not events:
            parts.append(f"<p>{html.escape(run.name)}: never cloned or mutated.</p>")
            continue
        rows = [(str(e.generation), str(e.member), e.what) for e in events]
        shown = " open" if len(events) <= MAX_OPEN_EVENTS else ""
        parts.append(f"<details{shown}><summary>{html.escape(run.name)}: {len(events)} events"
                     f"</summary>\n{_table(('generation', 'member', 'event'), rows)}\n"
                     "</details>")  # fmt: skip
    return "\n".join(parts)


def picture_paths(out: Path, pictures: list[Picture]) -> list[Path]:
    """Where each PNG goes: ``out`` itself for the first when ``out`` is a .png, else
    ``<stem>-<name>.png`` next to it."""
    paths = [out.with_name(f"{out.stem}-{p.name}.png") for p in pictures]
    if out.suffix.lower() == ".png" and paths:
        paths[0] = out
    return paths
