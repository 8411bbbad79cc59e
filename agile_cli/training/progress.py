"""What a person sees while a population trains: a live bar, a table per generation, a summary.

``RichReporter`` draws with rich (a live progress bar with steps/s and ETA); ``LogReporter``
prints one plain line per generation, for logs and ``--quiet``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table


@dataclass
class MemberRow:
    """One member's line in a generation's table."""

    index: int
    fitness: float
    recent: float
    mutation: str
    hyperparameters: dict[str, float | int]
    arch: str


@dataclass
class GenerationReport:
    """What happened in one generation."""

    generation: int
    global_steps: int
    steps_per_second: float
    members: list[MemberRow] = field(default_factory=list)
    elite: int | None = None

    @property
    def best(self) -> MemberRow:
        return max(self.members, key=lambda row: row.fitness)


class Reporter(Protocol):
    def start(self, total: int, done: int, title: str) -> None: ...
    def advance(self, steps: int) -> None: ...
    def generation(self, report: GenerationReport) -> None: ...
    def note(self, message: str) -> None: ...
    def finish(self, summary: dict[str, Any]) -> None: ...


class _StepsPerSecond(TextColumn):
    def __init__(self) -> None:
        super().__init__("")

    def render(self, task: Any) -> Any:
        speed = task.finished_speed or task.speed
        return super().render(task) if speed is None else f"{speed:,.0f} steps/s"


class RichReporter:
    """Live progress bar plus a table after each generation."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=False)
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            _StepsPerSecond(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
        self.task: Any = None

    def start(self, total: int, done: int, title: str) -> None:
        self.progress.start()
        self.task = self.progress.add_task(title, total=total, completed=done)

    def advance(self, steps: int) -> None:
        self.progress.advance(self.task, steps)

    def note(self, message: str) -> None:
        self.console.print(message)

    def generation(self, report: GenerationReport) -> None:
        table = Table(
            title=f"generation {report.generation} | {report.global_steps:,} env steps | "
            f"{report.steps_per_second:,.0f} steps/s",
            title_justify="left",
        )
        for column in ("member", "fitness", "last 3", "mutation", "hyperparameters", "network"):
            table.add_column(column, overflow="fold")
        best = report.best.index
        for row in report.members:
            marker = " *" if row.index == best else ""
            table.add_row(
                f"{row.index}{marker}", f"{row.fitness:.1f}", f"{row.recent:.1f}", row.mutation,
                _format_hps(row.hyperparameters), row.arch,
            )  # fmt: skip
        self.progress.console.print(table)

    def finish(self, summary: dict[str, Any]) -> None:
        self.progress.stop()
        self.console.print(_summary_lines(summary))


class LogReporter:
    """One plain line per generation (``--quiet``, logs, CI)."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stdout

    def start(self, total: int, done: int, title: str) -> None:
        print(f"{title}: {done:,}/{total:,} env steps", file=self.stream, flush=True)

    def advance(self, steps: int) -> None:
        pass

    def note(self, message: str) -> None:
        print(message, file=self.stream, flush=True)

    def generation(self, report: GenerationReport) -> None:
        best = report.best
        print(
            f"generation {report.generation}: steps {report.global_steps:,}, "
            f"best fitness {best.fitness:.1f} (member {best.index}), "
            f"{report.steps_per_second:,.0f} steps/s",
            file=self.stream,
            flush=True,
        )

    def finish(self, summary: dict[str, Any]) -> None:
        print(_summary_lines(summary), file=self.stream, flush=True)


def _format_hps(values: dict[str, float | int]) -> str:
    return " ".join(
        f"{name}={value}" if isinstance(value, int) else f"{name}={value:.3g}"
        for name, value in values.items()
    )


def _summary_lines(summary: dict[str, Any]) -> str:
    best, speed = summary["best_fitness"], summary["steps_per_second"]
    lines = [
        "summary",
        f"  best fitness     {best:.2f} (member {summary['best_member']})"
        if best is not None
        else "  best fitness     none yet (no generation finished)",
        f"  env steps        {summary['global_steps']:,} in {summary['wall_seconds']:.1f} s"
        + (f" ({speed:,.0f} steps/s)" if speed is not None else ""),
        f"  generations      {summary['generations']}",
    ]
    target = summary.get("target_score")
    if target is not None:
        reached = summary.get("target_reached_at")
        where = (
            f"reached at {reached['global_steps']:,} steps, generation {reached['generation']}"
            if reached
            else "not reached"
        )
        lines.append(f"  target {target:g}     {where}")
        if summary.get("stopped_early"):
            lines.append("  stopped early    the best lineage's mean of its last 3 evaluations "
                         "reached the target")  # fmt: skip
    if summary.get("interrupted"):
        lines.append(
            "  interrupted      continue from the last whole generation with agile train --resume"
        )
    lines.append(f"  run folder       {summary['run_dir']}")
    return "\n".join(lines)
