"""What a person sees while a population trains: a live bar, a table per generation, a summary.

``RichReporter`` draws with rich (a live progress bar with steps/s and ETA, saying what the run
is doing, and under it the returns of the latest training episodes); ``LogReporter`` prints
plain lines, for logs and ``--quiet``: what the run is doing until the first generation ends,
then one line per generation, and a line at most every :attr:`LogReporter.heartbeat` seconds
of how far the generation has come and what the latest training episodes returned.
"""

from __future__ import annotations

import atexit
import datetime
import math
import shlex
import sys
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import click
from rich import box
from rich.console import Console, Group, RenderableType
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Column, Table
from rich.text import Text

from agile_cli.errors import printable
from agile_cli.training.reevaluation import ordinal

#: From this console width on, the live bar shows the elapsed time and the generation table
#: each member's network.
WIDE = 100

#: What the member numbers shown are.
MEMBER_IDS = "member: an id; copies made by selection get new ids"

#: How many of the latest finished training episodes the live display sums up.
RECENT_EPISODES = 20

#: What a step counts unless the paradigm says otherwise (its ``step_unit``).
ENV_STEPS = "env steps"


@dataclass
class MemberRow:
    """One member's line in a generation's table."""

    index: int
    fitness: float
    recent: float
    mutation: str
    hyperparameters: dict[str, float | int]
    arch: str
    parent: int | None = None
    """The member of the previous generation this one continues or was cloned from."""
    parameters: int | None = None
    """How many weights its networks hold (None where it has no networks of its own)."""


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
    def phase(self, text: str) -> None:
        """What the run does now ("building 4 members", "generation 2: evaluating"); it may
        come before :meth:`start`."""

    def start(
        self, total: int, done: int, title: str, unit: str = ENV_STEPS, members: int = 1
    ) -> None:
        """The run begins: ``total`` ``unit`` over all ``members`` (``done`` of them already,
        when resumed)."""

    def advance(self, steps: int) -> None: ...
    def episodes(self, returns: Sequence[float]) -> None:
        """Training episodes (of any member) just finished with these returns."""

    def generation(self, report: GenerationReport) -> None: ...
    def note(self, message: str) -> None: ...
    def finish(self, summary: dict[str, Any]) -> None: ...


class RecentReturns:
    """The returns of the latest :data:`RECENT_EPISODES` finished training episodes, and a
    line saying what they were (kept as text, which the live display's thread reads)."""

    def __init__(self) -> None:
        self.returns: deque[float] = deque(maxlen=RECENT_EPISODES)
        self.text = ""

    def add(self, returns: Iterable[float]) -> None:
        self.returns.extend(value for value in map(float, returns) if math.isfinite(value))
        if self.returns:
            values = list(self.returns)
            mean = sum(values) / len(values)
            self.text = (
                f"training episodes, last {len(values)}: return mean {_amount(mean)} "
                f"(min {_amount(min(values))}, max {_amount(max(values))})"
            )


def headline(title: str, total: int, unit: str, members: int, done: int | None = None) -> str:
    """``PPO on CartPole-v1: 400,000 env steps in all (100,000 per member)``; with ``done``,
    ``0/400,000 env steps in all``."""
    count = f"{total:,}" if done is None else f"{done:,}/{total:,}"
    per_member = f" ({total // members:,} per member)" if members > 1 else ""
    return f"{title}: {count} {unit} in all{per_member}"


def rate(unit: str) -> str:
    """How a speed in ``unit`` is written: ``steps/s`` for env steps, ``prompts/s``."""
    return f"{unit.split()[-1]}/s"


def _amount(value: float) -> str:
    """``1,234.5``, ``9.0``, ``0.0123``: a return to a readable precision."""
    return f"{value:,.1f}" if abs(value) >= 1 else f"{value:.3g}"


class RunnerProgress:
    """What the loop hands its runner as the progress callback: ``progress(n)`` advances the
    reporter by ``n`` steps, and, as an :class:`~agile_rl.training.runners.EpisodeProgress`,
    ``progress.episodes(returns)`` tells it of finished training episodes."""

    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter

    def __call__(self, steps: int, /) -> None:
        self.reporter.advance(steps)

    def episodes(self, returns: Sequence[float], /) -> None:
        self.reporter.episodes(returns)


class _LiveProgress(Progress):
    """rich's progress display, with the latest training episodes' returns under the bar."""

    def __init__(self, *columns: ProgressColumn, recent: RecentReturns, **options: Any) -> None:
        self.recent = recent  # before rich's set-up, which draws the display once
        super().__init__(*columns, **options)

    def get_renderables(self) -> Iterable[RenderableType]:
        yield self.make_tasks_table(self.tasks)
        if self.recent.text:
            yield Text(self.recent.text, style="dim", no_wrap=True, overflow="ellipsis")

    def stop(self) -> None:
        """Stop, leaving nothing behind: the display is transient, and (unlike rich's own
        ``stop``) no blank line is printed in its place in a log."""
        self.live.stop()


class _StepsPerSecond(TextColumn):
    def __init__(self) -> None:
        super().__init__("")

    def render(self, task: Any) -> Any:
        speed = task.finished_speed or task.speed
        unit = rate(task.fields.get("unit", ENV_STEPS))
        return super().render(task) if speed is None else f"{speed:,.0f} {unit}"


class _Steps(ProgressColumn):
    """Steps done of all: ``12,345/409,600``."""

    def render(self, task: Task) -> Text:
        total = "?" if task.total is None else f"{task.total:,.0f}"
        return Text(f"{task.completed:,.0f}/{total}")


class _Eta(ProgressColumn):
    """``ETA 0:03:12``, blank until there is a speed to estimate it from."""

    max_refresh = 0.5

    def render(self, task: Task) -> Text:
        left = task.time_remaining
        return Text("" if left is None else f"ETA {datetime.timedelta(seconds=int(left))}")


def _bar_columns(width: int) -> list[ProgressColumn]:
    """The live bar's columns; the bar takes the width the others leave."""
    columns: list[ProgressColumn] = [
        TextColumn("{task.description}", style="bold", markup=False),
        BarColumn(bar_width=None, table_column=Column(ratio=1)),
        _Steps(),
        _StepsPerSecond(),
    ]
    if width >= WIDE:
        columns.append(TimeElapsedColumn())
    return [*columns, _Eta()]


class RichReporter:
    """A live progress bar saying what the run does, with the latest training episodes'
    returns under it, plus a table after each generation. The bar is live only: it is gone
    once the run ends (or fails), before the summary, and never written to a file or pipe."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=False)
        self.recent = RecentReturns()
        columns = _bar_columns(self.console.width)
        self.progress = _LiveProgress(
            *columns, recent=self.recent, console=self.console, expand=True, transient=True
        )
        self.task: TaskID | None = None
        self.doing = "starting"
        self.unit = ENV_STEPS

    def phase(self, text: str) -> None:
        self.doing = text
        if self.task is None:  # not yet live: building can still fail with an error
            self.console.print(Text(printable(text), style="dim"))
        else:
            self.progress.update(self.task, description=text)

    def start(
        self, total: int, done: int, title: str, unit: str = ENV_STEPS, members: int = 1
    ) -> None:
        self.unit = unit
        line = headline(title, total, unit, members)
        self.console.print(Text(printable(line), style="bold"))
        self.progress.start()
        atexit.register(self.progress.stop)  # an error must not leave the cursor hidden
        self.task = self.progress.add_task(self.doing, total=total, completed=done, unit=unit)

    def advance(self, steps: int) -> None:
        if self.task is not None:
            self.progress.advance(self.task, steps)

    def episodes(self, returns: Sequence[float]) -> None:
        self.recent.add(returns)

    def note(self, message: str) -> None:
        self.console.print(Text(printable(message, keep_newlines=True)))

    def generation(self, report: GenerationReport) -> None:
        self.console.print(generation_table(report, self.console.width, self.unit))

    def finish(self, summary: dict[str, Any]) -> None:
        self.progress.stop()
        self.console.print(Text(printable(_summary_lines(summary), keep_newlines=True)))


def generation_table(report: GenerationReport, width: int, unit: str = ENV_STEPS) -> Group:
    """A generation's title, its table (one line per member: cells too long for ``width``
    columns end in an ellipsis; the network shows from :data:`WIDE` columns on) and what the
    member numbers mean."""
    title = (
        f"generation {report.generation} | {report.global_steps:,} {unit} in all | "
        f"{report.steps_per_second:,.0f} {rate(unit)}"
    )
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for name in ("member", "fitness", "last 3"):  # never narrowed
        table.add_column(name, justify="right", no_wrap=True)
    texts = ["mutation", "hyperparameters", *(["network"] if width >= WIDE else [])]
    for name in texts:  # narrowed to fit, each cell still one line
        table.add_column(_line(name))
    best = report.best.index
    for row in report.members:
        cells = [row.mutation, _format_hps(row.hyperparameters), row.arch][: len(texts)]
        table.add_row(
            f"{row.index}{' *' if row.index == best else ''}", f"{row.fitness:.1f}",
            f"{row.recent:.1f}", *(_line(cell) for cell in cells),
        )  # fmt: skip
    caption = Text(f"{MEMBER_IDS}; * best", style="dim", no_wrap=True, overflow="ellipsis")
    return Group(Text(title, style="bold", no_wrap=True, overflow="ellipsis"), table, caption)


def _line(text: str) -> Text:
    return Text(text, no_wrap=True, overflow="ellipsis")


class LogReporter:
    """Plain lines (``--quiet``, logs, CI): what the run does until its first generation ends,
    then one line per generation, and at most every ``heartbeat`` seconds a line of how far it
    has come."""

    def __init__(self, stream: Any = None, heartbeat: float = 15.0) -> None:
        self.stream = stream or sys.stdout
        self.heartbeat = heartbeat
        self.doing = "starting"
        self.total = self.done = 0
        self.unit = ENV_STEPS
        self.reported = False  # a generation's line has been printed
        self.recent = RecentReturns()
        self._since = (time.monotonic(), 0)  # when the last line was printed, steps done then

    def _print(self, line: str) -> None:
        print(printable(line, keep_newlines=True), file=self.stream, flush=True)
        self._since = (time.monotonic(), self.done)

    def phase(self, text: str) -> None:
        self.doing = text
        if not self.reported:
            self._print(text)

    def start(
        self, total: int, done: int, title: str, unit: str = ENV_STEPS, members: int = 1
    ) -> None:
        self.total, self.done, self.unit = total, done, unit
        self._print(f"{headline(title, total, unit, members, done)}; {MEMBER_IDS}")

    def advance(self, steps: int) -> None:
        self.done += steps
        when, done = self._since
        seconds = time.monotonic() - when
        if seconds >= self.heartbeat:
            speed = (self.done - done) / seconds
            returns = f"; {self.recent.text}" if self.recent.text else ""
            self._print(f"  {self.doing}: {self.done:,}/{self.total:,} {self.unit}, "
                        f"{speed:,.0f} {rate(self.unit)}{returns}")  # fmt: skip

    def episodes(self, returns: Sequence[float]) -> None:
        self.recent.add(returns)

    def note(self, message: str) -> None:
        self._print(message)

    def generation(self, report: GenerationReport) -> None:
        best = report.best
        self.reported = True
        self.done = report.global_steps
        self._print(
            f"generation {report.generation}: {report.global_steps:,} {self.unit} in all, "
            f"best fitness {best.fitness:.1f} (member {best.index}), "
            f"{report.steps_per_second:,.0f} {rate(self.unit)}"
        )

    def finish(self, summary: dict[str, Any]) -> None:
        self._print(_summary_lines(summary))


def _format_hps(values: dict[str, float | int]) -> str:
    """``lr=8.12e-5 batch_size=204``: three significant digits, short exponents."""
    return " ".join(f"{name}={_number(value)}" for name, value in values.items())


def _number(value: float | int) -> str:
    if isinstance(value, int):
        return str(value)
    return f"{value:.3g}".replace("e-0", "e-").replace("e+0", "e+")


def _summary_lines(summary: dict[str, Any]) -> str:
    best, speed = summary["best_fitness"], summary["steps_per_second"]
    unit = summary.get("step_unit", ENV_STEPS)
    per_member = summary.get("steps_per_member")
    lines = [
        "summary",
        f"  best fitness     {best:.2f} (member {summary['best_member']})"
        if best is not None
        else "  best fitness     none yet (no generation finished)",
        f"  {unit:<17}{summary['global_steps']:,} in all"
        + (f" ({per_member:,} per member)" if per_member is not None else "")
        + f", {summary['wall_seconds']:.1f} s"
        + (f", {speed:,.0f} {rate(unit)}" if speed is not None else ""),
        f"  generations      {summary['generations']}",
        *_elite_lines(summary.get("elite")),
    ]
    target = summary.get("target_score")
    if target is not None:
        reached = summary.get("target_reached_at")
        where = (
            f"reached in generation {reached['generation']}, at {reached['global_steps']:,} "
            f"{unit} in all"
            if reached
            else "not reached"
        )
        lines.append(f"  target {target:g}     {where}")
        if summary.get("stopped_early"):
            lines.append("  stopped early    the best lineage's mean of its last 3 evaluations "
                         "reached the target")  # fmt: skip
    if summary.get("interrupted"):
        lines.append("  interrupted      the checkpoint of the last whole generation is kept")
    lines.append(f"  run folder       {summary['run_dir']}")
    return "\n".join(lines + [f"  {label:<17}{command}" for label, command in next_steps(summary)])


def _elite_lines(elite: dict[str, Any] | None) -> list[str]:
    """The elite chosen by scoring the best members again (see ``--elite-top``)."""
    if not elite:
        return []
    interval = (
        f" (95% interval {elite['low']:.2f} to {elite['high']:.2f})"
        if elite.get("low") is not None and elite.get("high") is not None
        else ""
    )
    others = ", ".join(str(c["member"]) for c in elite["candidates"][1:])
    return [
        f"  elite            member {elite['member']}: {elite['score']:.2f}{interval} on "
        f"{elite['episodes']} fresh episodes",
        f"                   {ordinal(elite['training_rank'])} of {elite['population']} by its "
        f"last training fitness ({elite['training_fitness']:.2f})"
        + (f"; also scored: {others}" if others else ""),
    ]


def next_steps(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """What to run after a run that ended with ``summary``, with its run folder: score the
    best member (once a generation has finished), continue, and ``agile report`` when the
    command line has that command."""
    folder = summary["run_dir"]
    quoted, manifest = shlex.quote(folder), shlex.quote(str(Path(folder) / "manifest.yaml"))
    resume = f"agile train --resume {quoted}"
    steps = []
    if summary["best_fitness"] is not None:
        steps.append(("evaluate", f"agile evaluate {quoted}"))
    if summary.get("interrupted"):
        steps.append(("continue", resume))
    elif not summary.get("stopped_early"):
        steps.append(("train longer", f"raise training.max_steps in {manifest}, then {resume}"))
    elif summary.get("target_reached"):
        steps.append(("train on", f"raise training.target_score in {manifest}, then {resume}"))
    if _has_command("report"):
        steps.append(("report", f"agile report {quoted}"))
    return steps


def _has_command(name: str) -> bool:
    """Whether the ``agile`` command line running now has the command ``name`` (False when
    training from Python)."""
    context = click.get_current_context(silent=True)
    if context is None:
        return False
    root = context.find_root()
    group = root.command
    return isinstance(group, click.Group) and group.get_command(root, name) is not None
