"""The report's figures, drawn with matplotlib (the ``plot`` extra), imported only here.

Figures are built with ``matplotlib.figure.Figure``: no pyplot, no window, no global state.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import numpy as np

from agile_cli.errors import AgileError
from agile_cli.report.curves import Axis, group_curve, trajectories
from agile_cli.report.runs import Group, Run

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: Lineage charts drawn at most (one per run); the others are named under the last one.
MAX_LINEAGES = 4
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")  # fmt: skip


def require_matplotlib() -> None:
    """:raises AgileError: matplotlib is not installed (the ``plot`` extra)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise AgileError(
            "drawing a report needs matplotlib",
            'install it with `pip install "agile-cli[plot]"`, or leave out --out for the '
            "terminal view",
        ) from None


def png(figure: Figure) -> bytes:
    """The figure as PNG bytes."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return buffer.getvalue()


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _steps_axis(axes: Axes) -> None:
    from matplotlib.ticker import EngFormatter

    axes.xaxis.set_major_formatter(EngFormatter(sep=""))
    axes.set_xlabel("global env steps")


def curves_figure(groups: list[Group]) -> Figure:
    """Best (solid) and mean (dashed) fitness against env steps and wall time; a band for
    the 95% confidence interval of the best fitness where a setup has several seeds."""
    figure = _figure(12, 4.4)
    by_steps, by_time = figure.subplots(1, 2, sharey=True)
    axis: Axis
    for axes, axis in ((by_steps, "steps"), (by_time, "seconds")):
        for number, group in enumerate(groups):
            _draw_curve(axes, group, axis, COLOURS[number % len(COLOURS)])
        target = next((g.target for g in groups if g.target is not None), None)
        if target is not None:
            axes.axhline(target, color="black", linestyle=":", linewidth=1, label="target")
        axes.grid(alpha=0.3)
    _steps_axis(by_steps)
    by_time.set_xlabel("wall time (s)")
    by_steps.set_ylabel("fitness")
    by_steps.set_title("Learning curve by env steps")
    by_time.set_title("Learning curve by wall time")
    by_steps.legend(loc="best", fontsize=9)
    return figure


def _draw_curve(axes: Axes, group: Group, axis: Axis, colour: str) -> None:
    curve = group_curve(group, axis)
    seeds = f" ({curve.seeds} seeds, 95% CI)" if curve.seeds > 1 else ""
    axes.plot(curve.x, curve.best, color=colour, linewidth=2, label=f"{curve.label}: best{seeds}")
    axes.plot(curve.x, curve.mean, color=colour, linewidth=1.2, linestyle="--",
              label=f"{curve.label}: population mean")  # fmt: skip
    if curve.low is not None and curve.high is not None:
        axes.fill_between(curve.x, curve.low, curve.high, color=colour, alpha=0.2, linewidth=0)


def lineage_figure(runs: list[Run]) -> Figure:
    """Per run: every member (a dot coloured by fitness) in every generation, joined to the
    member it continues or was cloned from; the final best member's ancestry in red."""
    shown = runs[:MAX_LINEAGES]
    figure = _figure(12, 3.2 * len(shown))
    panels = np.atleast_1d(figure.subplots(len(shown), 1, squeeze=False)[:, 0])
    for axes, run in zip(panels, shown, strict=True):
        _draw_lineage(figure, axes, run)
    if len(runs) > len(shown):
        rest = ", ".join(run.name for run in runs[len(shown) :])
        panels[-1].set_xlabel(f"generation (not drawn: {rest})")
    return figure


def _draw_lineage(figure: Figure, axes: Axes, run: Run) -> None:
    links = [run.lineage(k) for k in range(len(run.generations))]
    for k, generation_links in enumerate(links[1:], start=1):
        for slot, source in enumerate(generation_links):
            if source is None:
                continue
            before = run.generations[k - 1].members[source]
            kept = run.generations[k].members[slot].index == before.index
            axes.plot([k, k + 1], [source, slot], color="#999999", zorder=1,
                      linewidth=1.6 if kept else 0.8, linestyle="-" if kept else "--")  # fmt: skip
    _draw_ancestry(axes, run, links)
    from matplotlib.ticker import MaxNLocator

    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    xs = [k + 1 for k, g in enumerate(run.generations) for _ in g.members]
    ys = [slot for g in run.generations for slot in range(len(g.members))]
    fitness = [m.fitness for g in run.generations for m in g.members]
    dots = axes.scatter(xs, ys, c=fitness, cmap="viridis", s=36, zorder=3, edgecolors="none")
    figure.colorbar(dots, ax=axes, label="fitness", pad=0.01)
    axes.set_title(f"{run.name} ({run.title}). Solid: the member kept, dashed: cloned "
                   "from; red: the ancestry of the final best member")  # fmt: skip
    axes.set_xlabel("generation")
    axes.set_ylabel("position in population")
    axes.invert_yaxis()


def _draw_ancestry(axes: Axes, run: Run, links: list[list[int | None]]) -> None:
    last = run.generations[-1]
    slot: int | None = last.members.index(last.best_member)
    path: list[tuple[int, int]] = []
    for k in range(len(run.generations) - 1, -1, -1):
        if slot is None:
            break
        path.append((k + 1, slot))
        slot = links[k][slot]
    xs, ys = zip(*reversed(path), strict=True)
    axes.plot(xs, ys, color="#d62728", linewidth=2.2, zorder=2)


def hyperparameter_figure(groups: list[Group]) -> Figure | None:
    """One panel per evolving hyperparameter, and one for the network size: every member's
    value (dots) and the best member's (line), per run. None when nothing evolves."""
    colours = {g.label: COLOURS[n % len(COLOURS)] for n, g in enumerate(groups)}
    panels: dict[str, list[tuple[Any, str, str]]] = {}
    for group in groups:
        for run in group.runs:
            for trajectory in trajectories(run):
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
    for axes in list(grid.flat)[len(panels) :]:
        axes.set_visible(False)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colour, linewidth=2) for colour in colours.values()]
    figure.legend(handles, list(colours), loc="outside lower center", ncols=min(3, len(colours)),
                  fontsize=9, title="dots: every member; line: the best member of each "
                  "generation (one per seed)", title_fontsize=9)  # fmt: skip
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
        axes.set_yscale("log")
    elif values.max() >= 10_000:
        axes.yaxis.set_major_formatter(EngFormatter(sep=""))
    axes.set_title(name)
    _steps_axis(axes)
    axes.grid(alpha=0.3)
