"""``agile report``: learning curves, lineage and hyperparameters of one or more run folders."""

from __future__ import annotations

from pathlib import Path

import click

from agile_cli import UsageError
from agile_cli.helpers import printable
from agile_report.page import Picture, html_page, picture_paths, terminal_view
from agile_report.runs import Group, find_runs, group_runs, load_run

SUFFIXES = (".html", ".png")
LINEAGE_CAPTION = (
    "Under each run's lineage, every member's fitness: a circle where it was cloned from "
    "another member, a cross where it was mutated. The events along the final best member's "
    "ancestry, with the mutations' labels, are listed at the end of the page."
)
REPLAY_CAPTION = (
    "The original lineage's fitness, generation by generation, as the recipe's schedule "
    "records it, beside the replay's; both against the steps each member had trained."
)


def run_report(paths: tuple[Path, ...], out: Path | None) -> int:
    """Print the terminal view, or write the figures (and the page) ``out`` names.

    :raises UsageError: a path holds no run, or ``out`` is neither .html nor .png.
    """
    if out is not None and out.suffix.lower() not in SUFFIXES:
        raise UsageError(f"--out {out}: write a .html page or .png figures",
                         "e.g. --out report.html")  # fmt: skip
    runs = [load_run(path) for path in find_runs(paths)]
    groups = group_runs(runs)
    if out is None:
        for line in terminal_view(groups):  # labels and values read from run folders
            click.echo(printable(line))
        click.echo("figures: add --out report.html (or report.png)")
        return 0
    pictures = draw(groups)
    written = _write_pictures(out, pictures)
    if out.suffix.lower() == ".html":
        _write(out, html_page(groups, pictures).encode())
        written.insert(0, out)
    count = sum(len(group.runs) for group in groups)
    click.echo(f"report of {count} run" + ("s" if count != 1 else "") + ":")
    for path in written:
        click.echo(f"  {path}")
    return 0


def draw(groups: list[Group]) -> list[Picture]:
    """Every figure of the report, as PNG."""
    from agile_report import figures

    figures.require_matplotlib()
    runs = [run for group in groups for run in group.runs]
    pictures = [Picture("curves", "Learning curves", figures.png(figures.curves_figure(groups)))]
    spread = figures.iqm_figure(groups)
    if spread is not None:
        iqm_title = "Interquartile mean over seeds"
        pictures.append(Picture("iqm", iqm_title, figures.png(spread), figures.IQM_CAPTION))
    lineage = figures.png(figures.lineage_figure(runs))
    pictures.append(Picture("lineage", "Lineage through selection", lineage, LINEAGE_CAPTION))
    evolving = figures.hyperparameter_figure(groups)
    if evolving is not None:
        pictures.append(
            Picture("hyperparameters", "Hyperparameters and network size", figures.png(evolving))
        )
    replays = figures.replay_figure(runs)
    if replays is not None:
        replay_title = "Replay and original lineage, by steps per member"
        pictures.append(Picture("replay", replay_title, figures.png(replays), REPLAY_CAPTION))
    return pictures


def _write_pictures(out: Path, pictures: list[Picture]) -> list[Path]:
    paths = picture_paths(out, pictures)
    for path, picture in zip(paths, pictures, strict=True):
        _write(path, picture.data)
    return paths


def _write(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise UsageError(f"cannot write {path}: {reason}", "choose another --out") from None
