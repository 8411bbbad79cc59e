"""The report's figures, drawn with matplotlib (the ``plot`` extra), imported only here.

Figures are built with ``matplotlib.figure.Figure``: no pyplot, no window, no global state.
Every figure is built and saved under :data:`LITERAL_TEXT` (:func:`literal_text`): names read
from run folders (folders, algorithms, environments, hyperparameters, settings) are drawn as
written, never as mathtext.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import numpy as np

from agile_cli import AgileError
from agile_report.compare import closeness_text, replay_series
from agile_report.curves import (
    Axis,
    bootstrap_interval,
    group_curve,
    iqm,
    iqm_curve,
    trajectories,
)
from agile_report.events import member_curves, run_events
from agile_report.replay import Replay, original_series
from agile_report.runs import Group, Run

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.collections import PathCollection
    from matplotlib.figure import Figure

#: What the diamond at the end of a setup's IQM curve is.
ELITES_MARK = "the elites scored again on fresh episodes at the end (IQM, 95% bootstrap CI)"
#: Lineage charts drawn at most (one per run); the others are named under the last one.
MAX_LINEAGES = 4
#: Hyperparameters drawn at most (a panel each, beside the network size's); the others are
#: counted under the panels.
MAX_HYPERPARAMETERS = 12
#: What the band around a setup's mean best fitness is (see :func:`~.curves.group_curve`).
BAND = "95% confidence interval of the seeds' mean best, within their range"
#: What the band around a setup's interquartile mean is (see :func:`~.curves.iqm_curve`).
IQM_BAND = "95% percentile-bootstrap confidence interval of the IQM (seeds resampled 2,000 times)"
#: What the interquartile-mean figure shows, for the page.
IQM_CAPTION = (
    "Line: the interquartile mean (IQM, the mean of the middle half) of the seeds' best "
    "fitness at each env step every seed reached, each seed interpolated onto the others' "
    "steps. Band: the IQM's 95% percentile-bootstrap confidence interval, the seeds "
    "resampled with replacement 2,000 times. A setup of one seed: its best fitness, dotted, "
    "with no interval."
)
#: The final best member's ancestry, in the lineage and in the members' fitness.
ANCESTRY = "#d62728"
#: How the members' fitness curves mark an event: its legend entry and its marker.
EVENT_MARKERS: dict[str, tuple[str, dict[str, Any]]] = {
    "cloned": ("cloned from another member (its curve leaves the parent's)",
               {"marker": "o", "markersize": 8, "markerfacecolor": "none",
                "markeredgecolor": "#ff7f0e", "markeredgewidth": 1.6}),
    "mutated": ("mutated (hyperparameters, network or weights)",
                {"marker": "x", "markersize": 6, "color": "#9467bd", "markeredgewidth": 1.6}),
}  # fmt: skip
#: matplotlib's settings while a figure is built and saved: text is drawn as written (a
#: ``$`` starts no mathtext: ``$\frac{1}{$`` would raise, ``$x^2$`` would become math; no LaTeX),
#: and tick labels are plain text too.
LITERAL_TEXT: dict[Any, Any] = {
    "text.parse_math": False,
    "text.usetex": False,
    "axes.formatter.use_mathtext": False,
}
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")  # fmt: skip


P = ParamSpec("P")
R = TypeVar("R")


def literal_text(build: Callable[P, R]) -> Callable[P, R]:
    """``build`` run under :data:`LITERAL_TEXT`: each text it places (a title, a label, a
    legend entry, a tick label) keeps that setting when the figure is drawn later."""

    @functools.wraps(build)
    def built(*args: P.args, **kwargs: P.kwargs) -> R:
        import matplotlib

        with matplotlib.rc_context(LITERAL_TEXT):
            return build(*args, **kwargs)

    return built


def require_matplotlib() -> None:
    """:raises AgileError: matplotlib is not installed (the ``plot`` extra)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise AgileError(
            "drawing a report needs matplotlib",
            "install it with `pip install matplotlib` or, in agile's folder, "
            '`pip install -e ".[plot]"`; or leave out --out for the terminal view',
        ) from None


@literal_text
def png(figure: Figure) -> bytes:
    """The figure as PNG bytes."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return buffer.getvalue()


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _steps_axis(axes: Axes, groups: list[Group]) -> None:
    """Env steps on the x axis, from 0 to the longest run's end: every steps panel of the
    report spans the same range."""
    from matplotlib.ticker import EngFormatter

    axes.xaxis.set_major_formatter(EngFormatter(sep=""))
    axes.set_xlabel("global env steps")
    end = max(run.generations[-1].global_steps for group in groups for run in group.runs)
    axes.set_xlim(0, end * 1.03 or 1)


@literal_text
def curves_figure(groups: list[Group]) -> Figure:
    """Best (solid) and population-mean (dashed) fitness against env steps and wall time.

    A setup with several seeds is drawn as their average over the range where every seed has
    data, with a band for the 95% confidence interval of the average best (clipped to the
    range the seeds' best fitnesses span), and each seed's own best fitness as a thin line
    to its end (a seed that stopped early at the target ends there). The legend, under the
    panels, names each setup by what sets it apart.
    """
    common, labels = legend_labels(groups)
    rows = max(len(groups), 5)  # the legend's
    figure = _figure(12, 4.2 + 0.22 * rows)
    by_steps, by_time = figure.subplots(1, 2, sharey=True)
    target = next((g.target for g in groups if g.target is not None), None)
    axis: Axis
    for axes, axis in ((by_steps, "steps"), (by_time, "seconds")):
        for number, group in enumerate(groups):
            _draw_curve(axes, group, axis, COLOURS[number % len(COLOURS)])
        if target is not None:
            axes.axhline(target, color="black", linestyle=":", linewidth=1)
        axes.grid(alpha=0.3)
    _steps_axis(by_steps, groups)
    by_time.set_xlim(left=0)
    by_time.set_xlabel("wall time (s)")
    by_steps.set_ylabel("fitness")
    by_steps.set_title("Learning curve by env steps")
    by_time.set_title("Learning curve by wall time")
    if common:
        figure.suptitle(common)
    _curves_legend(figure, groups, labels, target)
    return figure


def legend_labels(groups: list[Group]) -> tuple[str, list[str]]:
    """What the setups have in common (their algorithm and environment, when they share
    them; else ""), and each setup's label without it, with its number of seeds."""
    titles = {run.title for group in groups for run in group.runs}
    common = titles.pop() if len(titles) == 1 else ""
    labels = []
    for group in groups:
        label = group.label
        rest = label.removeprefix(common)
        if common and rest.startswith(" (") and rest.endswith(")"):
            label = rest[2:-1]
        seeds = len(group.runs)
        labels.append(label + (f", {seeds} seeds" if seeds > 1 else ""))
    return common, labels


def _curves_legend(
    figure: Figure, groups: list[Group], labels: list[str], target: float | None
) -> None:
    """Two columns: the setups (their colours), and what each kind of line means."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    grey = "#555555"
    setups = [Line2D([], [], color=COLOURS[n % len(COLOURS)], linewidth=2)
              for n in range(len(groups))]  # fmt: skip
    kinds: list[Any] = [Line2D([], [], color=grey, linewidth=2),
                        Line2D([], [], color=grey, linewidth=1.2, linestyle="--")]  # fmt: skip
    meanings = ["best fitness", "the population's mean fitness"]
    if any(len(group.runs) > 1 for group in groups):
        meanings = [f"{meaning} (several seeds: their mean)" for meaning in meanings]
        kinds += [Line2D([], [], color=grey, linewidth=0.8, alpha=0.6),
                  Patch(color=grey, alpha=0.2, linewidth=0)]  # fmt: skip
        meanings += ["each seed's best fitness", BAND]
    if target is not None:
        kinds.append(Line2D([], [], color="black", linestyle=":", linewidth=1))
        meanings.append(f"target {target:g}")
    rows = max(len(setups), len(kinds))
    blank = Line2D([], [], alpha=0)  # the legend fills a column before the next
    handles = setups + [blank] * (rows - len(setups)) + kinds + [blank] * (rows - len(kinds))
    names = labels + [""] * (rows - len(labels)) + meanings + [""] * (rows - len(meanings))
    figure.legend(handles, names, loc="outside lower center", ncols=2, fontsize=9,
                  frameon=False, columnspacing=3)  # fmt: skip


def _draw_curve(axes: Axes, group: Group, axis: Axis, colour: str) -> None:
    curve = group_curve(group, axis)
    if curve.seeds > 1:
        for x, best in curve.runs:
            axes.plot(x, best, color=colour, linewidth=0.8, alpha=0.6)
    axes.plot(curve.x, curve.best, color=colour, linewidth=2)
    axes.plot(curve.x, curve.mean, color=colour, linewidth=1.2, linestyle="--")
    if curve.low is not None and curve.high is not None:
        axes.fill_between(curve.x, curve.low, curve.high, color=colour, alpha=0.2, linewidth=0)


@literal_text
def iqm_figure(groups: list[Group]) -> Figure | None:
    """The interquartile mean of the seeds' best fitness against env steps, per setup, with
    its 95% percentile-bootstrap interval as a band (see :data:`IQM_CAPTION`); a setup of one
    seed is its own best fitness, dotted, with no band. None when no setup has several seeds.
    """
    if all(len(group.runs) < 2 for group in groups):
        return None
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    common, labels = legend_labels(groups)
    figure = _figure(12, 4.6 + 0.22 * len(groups))
    axes = figure.subplots()
    handles: list[Any] = []
    for number, group in enumerate(groups):
        colour = COLOURS[number % len(COLOURS)]
        curve = iqm_curve(group, "steps")
        style: Any = "-" if curve.seeds > 1 else ":"  # one seed: dotted
        axes.plot(curve.x, curve.centre, color=colour, linewidth=2, linestyle=style)
        if curve.low is not None and curve.high is not None:
            axes.fill_between(curve.x, curve.low, curve.high, color=colour, alpha=0.2,
                              linewidth=0)  # fmt: skip
        else:
            labels[number] += ", one seed: its best fitness, no interval"
        handles.append(Line2D([], [], color=colour, linewidth=2, linestyle=style))
        if _draw_scored_elites(axes, group, curve.x[-1], colour):
            handles.append(Line2D([], [], color=colour, marker="D", linestyle=""))
            labels.append(f"{labels[number]}: {ELITES_MARK}")
    target = next((g.target for g in groups if g.target is not None), None)
    if target is not None:
        axes.axhline(target, color="black", linestyle=":", linewidth=1)
    axes.grid(alpha=0.3)
    _steps_axis(axes, groups)
    axes.set_ylabel("best fitness: interquartile mean over seeds")
    axes.set_title("Interquartile mean of the seeds' best fitness" +
                   (f", {common}" if common else ""))  # fmt: skip
    handles.append(Patch(color="#555555", alpha=0.2, linewidth=0))
    labels.append(IQM_BAND)
    figure.legend(handles, labels, loc="outside lower center", ncols=1, fontsize=9,
                  frameon=False)  # fmt: skip
    return figure


def _draw_scored_elites(axes: Axes, group: Group, x: float, colour: str) -> bool:
    """Where every seed of ``group`` chose its elite by scoring its best members again, mark
    the elites' interquartile mean at ``x`` with its bootstrap interval; whether it did."""
    scores = group.scored_elites()
    if scores is None:
        return False
    centre = iqm(scores)
    low, high = bootstrap_interval(scores)
    axes.errorbar([x], [centre], yerr=[[centre - low], [high - centre]], color=colour,
                  marker="D", capsize=4, linestyle="")  # fmt: skip
    return True


@literal_text
def replay_figure(runs: list[Run]) -> Figure | None:
    """Per replay run (at most :data:`MAX_LINEAGES`), the original lineage's fitness (from the
    recipe's schedule) and the replay's, against steps per member. None when no run is a
    replay."""
    replays = [(run, run.replay) for run in runs if run.replay is not None]
    if not replays:
        return None
    shown = replays[:MAX_LINEAGES]
    figure = _figure(12, 3.4 * len(shown))
    panels = figure.subplots(len(shown), 1, squeeze=False)[:, 0]
    for axes, (run, replay) in zip(panels, shown, strict=True):
        _draw_replay(axes, run, replay)
    if len(replays) > len(shown):
        rest = ", ".join(run.name for run, _ in replays[len(shown) :])
        panels[-1].set_xlabel(f"steps per member (not drawn: {rest})")
    return figure


def _draw_replay(axes: Axes, run: Run, replay: Replay) -> None:
    from matplotlib.ticker import EngFormatter

    axes.plot(*original_series(replay), color="#555555", linewidth=1.6, marker="o",
              markersize=4, label=f"original lineage: {replay.name}")  # fmt: skip
    axes.plot(*replay_series(run), color=COLOURS[0], linewidth=2, marker="o", markersize=4,
              label=f"replay: {run.name}")  # fmt: skip
    axes.xaxis.set_major_formatter(EngFormatter(sep=""))
    axes.set_xlabel("steps per member")
    axes.set_ylabel("fitness")
    axes.grid(alpha=0.3)
    axes.set_title(closeness_text(run) or run.name, fontsize=10)
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=9, frameon=False)


@literal_text
def lineage_figure(runs: list[Run]) -> Figure:
    """Per run, two panels: every member (a dot coloured by fitness) in every generation,
    joined to the member it continues or was cloned from; under it, every member's fitness
    curve, marked where it was cloned and where it was mutated. The final best member's
    ancestry is red in both."""
    shown = runs[:MAX_LINEAGES]
    figure = _figure(12, 0.5 + 5.6 * len(shown))
    panels = figure.subplots(2 * len(shown), 1, squeeze=False,
                             height_ratios=[3.0, 2.6] * len(shown))[:, 0]  # fmt: skip
    for number, run in enumerate(shown):
        lineage, curves = panels[2 * number], panels[2 * number + 1]
        curves.sharex(lineage)  # one generation, one x, in both
        dots = _draw_lineage(lineage, run)
        figure.colorbar(dots, ax=[lineage, curves], label="fitness", pad=0.01, aspect=40)
        _draw_member_curves(curves, run)
    if len(runs) > len(shown):
        rest = ", ".join(run.name for run in runs[len(shown) :])
        panels[-1].set_xlabel(f"generation (not drawn: {rest})")
    figure.legend(*panels[1].get_legend_handles_labels(), loc="outside lower center", ncols=3,
                  fontsize=9, frameon=False)  # fmt: skip
    return figure


def _draw_lineage(axes: Axes, run: Run) -> PathCollection:
    """The run's lineage; returns its dots (coloured by fitness), for a colour bar."""
    from matplotlib.collections import LineCollection

    kept: list[Any] = []  # each a segment from the member in one generation to the next
    cloned: list[Any] = []
    for k in range(1, len(run.generations)):
        for slot, source in enumerate(run.lineage(k)):
            if source is not None:
                before = run.generations[k - 1].members[source]
                same = run.generations[k].members[slot].index == before.index
                (kept if same else cloned).append([(k, source), (k + 1, slot)])
    axes.add_collection(LineCollection(kept, colors="#999999", linewidths=1.6, zorder=1))
    axes.add_collection(LineCollection(cloned, colors="#999999", linewidths=0.8,
                                       linestyles="--", zorder=1))  # fmt: skip
    path = [(k + 1, slot) for k, slot in run.ancestry()]
    axes.plot(*zip(*path, strict=True), color=ANCESTRY, linewidth=2.2, zorder=2)
    from matplotlib.ticker import MaxNLocator

    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    xs = [k + 1 for k, g in enumerate(run.generations) for _ in g.members]
    ys = [slot for g in run.generations for slot in range(len(g.members))]
    fitness = [m.fitness for g in run.generations for m in g.members]
    dots = axes.scatter(xs, ys, c=fitness, cmap="viridis", s=36, zorder=3, edgecolors="none")
    axes.set_title(f"{run.name} ({run.title}). Solid: the member kept, dashed: cloned "
                   "from; red: the ancestry of the final best member")  # fmt: skip
    axes.set_xlabel("generation")
    axes.set_ylabel("position in population")
    axes.invert_yaxis()
    return dots


def _draw_member_curves(axes: Axes, run: Run) -> None:
    """Each member's fitness (a grey dot per generation, joined into its curve), the final
    best's ancestry (red), and a marker for each member where it was cloned and where it was
    mutated."""
    from matplotlib.collections import LineCollection

    curves = [np.column_stack(curve) for curve in member_curves(run)]
    axes.add_collection(LineCollection(curves, colors="#999999", linewidths=0.8, alpha=0.7,
                                       zorder=1))  # fmt: skip
    numbers = [k + 1 for k, g in enumerate(run.generations) for _ in g.members]
    fitness = [m.fitness for g in run.generations for m in g.members]
    axes.scatter(numbers, fitness, color="#999999", s=6, zorder=1)
    path = [(k + 1, run.generations[k].members[slot].fitness) for k, slot in run.ancestry()]
    axes.plot(*zip(*path, strict=True), color=ANCESTRY, linewidth=2, zorder=2,
              label="the final best member's ancestry")  # fmt: skip
    events = run_events(run)
    for kind, (label, style) in EVENT_MARKERS.items():
        points = [(e.position + 1, e.fitness) for e in events if e.kind == kind]
        xs, ys = zip(*points, strict=True) if points else ((), ())
        axes.plot(xs, ys, linestyle="none", zorder=3, label=label, **style)
    axes.grid(alpha=0.3)
    axes.set_title(f"{run.name}: each member's fitness, marked where it was cloned or mutated")
    axes.set_xlabel("generation")
    axes.set_ylabel("fitness")


@literal_text
def hyperparameter_figure(groups: list[Group]) -> Figure | None:
    """One panel per evolving hyperparameter (the first :data:`MAX_HYPERPARAMETERS`; the
    legend counts the others), and one for the network size: every member's value (dots) and
    the best member's (line), per run. None when nothing evolves."""
    colours = {g.label: COLOURS[n % len(COLOURS)] for n, g in enumerate(groups)}
    runs = [run for group in groups for run in group.runs]
    names = list(dict.fromkeys(name for run in runs for name in run.hyperparameter_names()))
    drawn_names = names[:MAX_HYPERPARAMETERS]
    panels: dict[str, list[tuple[Any, str, str]]] = {}
    for group in groups:
        for run in group.runs:
            for trajectory in trajectories(run, drawn_names):
                entry = (trajectory, colours[group.label], group.label)
                panels.setdefault(trajectory.name, []).append(entry)
    if not panels:
        return None
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    figure = _figure(4.2 * columns, 3.2 * rows)
    grid = figure.subplots(rows, columns, squeeze=False)
    for axes, (name, drawn) in zip(grid.flat, panels.items(), strict=False):
        _draw_trajectories(axes, name, drawn)
        _steps_axis(axes, groups)
    for axes in list(grid.flat)[len(panels) :]:
        axes.set_visible(False)
    from matplotlib.lines import Line2D

    common, labels = legend_labels(groups)
    if common:
        figure.suptitle(common)
    handles = [Line2D([], [], color=colour, linewidth=2) for colour in colours.values()]
    title = "dots: every member; line: the best member of each generation (one per seed)"
    if len(names) > len(drawn_names):
        title += f"; {len(names) - len(drawn_names):,} more hyperparameters not drawn"
    figure.legend(handles, labels, loc="outside lower center", ncols=min(3, len(colours)),
                  fontsize=9, title=title, title_fontsize=9)  # fmt: skip
    return figure


def _draw_trajectories(axes: Axes, name: str, drawn: list[tuple[Any, str, str]]) -> None:
    from matplotlib.ticker import EngFormatter

    for trajectory, colour, _ in drawn:
        axes.scatter(trajectory.steps, trajectory.values, color=colour, s=9, alpha=0.35,
                     edgecolors="none")  # fmt: skip
        axes.plot(trajectory.best_steps, trajectory.best_values, color=colour, linewidth=1.5,
                  drawstyle="steps-post", alpha=0.85)  # fmt: skip
    values = np.concatenate([t.values for t, _, _ in drawn])
    if values.min() > 0 and values.max() / values.min() > 20:
        from matplotlib.ticker import LogFormatter

        axes.set_yscale("log")
        # the log scale's own labels are mathtext ($10^{-3}$), which LITERAL_TEXT shows as is
        axes.yaxis.set_major_formatter(LogFormatter())
        axes.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False))
    elif values.max() >= 10_000:
        axes.yaxis.set_major_formatter(EngFormatter(sep=""))
    axes.set_title(name)
    axes.grid(alpha=0.3)
