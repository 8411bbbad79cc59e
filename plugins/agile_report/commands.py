"""The ``report`` and ``diff`` commands' options (light: what they run is imported when they
run, so that ``agile --help`` imports nothing heavy)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False),
              help="report.html (a page with every figure, and its PNGs beside it) or "
              "report.png (the figures as PNGs); overwritten if there.")  # fmt: skip
def report(runs: tuple[Path, ...], out: Path | None) -> None:
    """Learning curves, lineage and hyperparameters of RUN folders (or folders of them).

    Runs of one manifest with different seeds are drawn as one curve, their mean with a 95%
    confidence band; other runs are overlaid. Without --out: a summary in the terminal.
    """
    from agile_report.command import run_report

    run_report(runs, out)


@click.command()
@click.argument("first", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.argument("second", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the differences as JSON.")
def diff(first: Path, second: Path, as_json: bool) -> None:
    """What differs between two run folders, and their results side by side.

    Settings (the resolved manifest.yaml, field by field), provenance (the latest session of
    provenance.json: versions, machine, device, seed, command) and results (summary.json).
    """
    from agile_report.diff import run_diff

    run_diff(first, second, as_json=as_json)
