"""What a person sees while training: the live bar, the generation table, --quiet's lines and
the summary's next commands."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import pytest
from rich.console import Console

from agile_cli.models.run_options import LocalRunOptions
from agile_cli.testing import installed_host, tiny_manifest
from agile_cli.training.loop import EvolutionLoop
from agile_cli.training.progress import (
    GenerationReport,
    LogReporter,
    MemberRow,
    RecentReturns,
    RichReporter,
    RunnerProgress,
    generation_table,
    next_steps,
)

ROWS = [
    MemberRow(8, 487.25, 402.1, "add_node(network=encoder,layer=0,nodes=16)",
              {"lr": 8.12345e-5, "batch_size": 204, "learn_step": 1024, "ent_coef": 0.0123},
              "mlp[64, 80] -> 64 -> mlp[64]"),
    MemberRow(3, 500.0, 499.3, "none", {"lr": 0.001, "batch_size": 256, "learn_step": 1024,
              "ent_coef": 0.0}, "mlp[64] -> 64 -> mlp[64]"),
    MemberRow(11, -123.456, -200.0, "lr=0.0008", {"lr": 0.0008, "batch_size": 512,
              "learn_step": 2048, "ent_coef": 0.01}, "mlp[64] -> 64 -> mlp[64]"),
]  # fmt: skip
# As a CartPole PPO run shows them: two evolving hyperparameters.
TYPICAL = [
    MemberRow(index, 480.0 + index, 470.5, mutation, {"lr": lr, "batch_size": size},
              "mlp[64] -> 64 -> mlp[64]")
    for index, mutation, lr, size in [(0, "lr=0.0008", 0.0008, 256), (5, "batch_size=204",
                                      0.001, 204), (6, "none", 0.001, 256)]
]  # fmt: skip


def _render(rows: list[MemberRow], width: int) -> list[str]:
    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(generation_table(GenerationReport(12, 1_234_567, 2_345.6, rows), width))
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue().splitlines()


def test_the_table_fits_80_columns_one_line_per_member() -> None:
    lines = _render(ROWS, 80)
    assert max(len(line) for line in lines) <= 80
    assert len(lines) == 3 + len(ROWS) + 1  # title, header, rule, members, caption
    header = lines[1].split()
    assert header == ["member", "fitness", "last", "3", "mutation", "hyperparameters"]
    ids = [line.split()[0] for line in lines[3:-1]]
    assert ids == ["8", "3", "11"] and lines[4].split()[:2] == ["3", "*"]  # 500.0 is the best
    assert "mlp[" not in "\n".join(lines)  # no room for the network at 80 columns
    assert "copies made by selection get new ids" in lines[-1] and "* best" in lines[-1]


def test_at_120_columns_everything_shows() -> None:
    lines = _render(TYPICAL, 120)
    text = "\n".join(lines)
    assert max(len(line) for line in lines) <= 120 and "…" not in text
    assert lines[1].split()[-1] == "network" and len(lines) == 3 + len(TYPICAL) + 1
    cells = "485.0 470.5 batch_size=204 lr=0.001 batch_size=204 mlp[64] -> 64 -> mlp[64]"
    assert lines[4].split()[1:] == cells.split()


def test_hyperparameters_are_compact() -> None:
    row = _render(ROWS[:1], 200)[3]
    assert "lr=8.12e-5 batch_size=204 learn_step=1024 ent_coef=0.0123" in row


def _bar(width: int, returns: Sequence[float] = ()) -> tuple[list[str], RichReporter]:
    """What the reporter printed, then what its live display shows (after ``returns``)."""
    console = Console(width=width, file=io.StringIO(), color_system=None)
    reporter = RichReporter(console)
    reporter.phase("building 4 members")
    reporter.start(4_096_000, 0, "PPO on CartPole-v1", "env steps", 4)
    reporter.phase("generation 12: evaluating")
    for _ in range(3):
        reporter.advance(123_456)
    RunnerProgress(reporter).episodes(returns)  # as a runner's progress callback does
    console.print(reporter.progress.get_renderable())
    reporter.progress.stop()
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue().splitlines(), reporter


@pytest.mark.parametrize("width", [80, 120])
def test_the_bar_says_what_happens_from_the_start(width: int) -> None:
    lines, reporter = _bar(width)
    assert lines[:2] == [
        "building 4 members",
        "PPO on CartPole-v1: 4,096,000 env steps in all (1,024,000 per member)",
    ]
    assert len(lines) == 3 and lines[-1].startswith("generation 12: evaluating")
    assert "370,368/4,096,000" in lines[-1] and max(len(line) for line in lines) <= width
    assert reporter.progress.tasks[0].completed == 3 * 123_456


@pytest.mark.parametrize("width", [80, 120])
def test_recent_episode_returns_show_under_the_bar(width: int) -> None:
    returns = [-5000.0] * 5 + [float(n) for n in range(100, 120)] + [math.nan]
    lines, _ = _bar(width, returns)
    assert lines[-2].startswith("generation 12: evaluating") and len(lines) == 4
    # The last 20 finished episodes (a NaN return is left out), to a readable precision.
    assert lines[-1] == "training episodes, last 20: return mean 109.5 (min 100.0, max 119.0)"
    assert max(len(line) for line in lines) <= width


def test_recent_returns_read_at_any_scale() -> None:
    recent = RecentReturns()
    recent.add([0.25, 0.5])
    assert recent.text == "training episodes, last 2: return mean 0.375 (min 0.25, max 0.5)"
    recent.add([9.0, 44.0])
    assert recent.text.endswith("last 4: return mean 13.4 (min 0.25, max 44.0)")
    recent.add([-12_345.67] * 20)
    assert recent.text.endswith("mean -12,345.7 (min -12,345.7, max -12,345.7)")


def _finished(console: Console) -> str:
    """What ``console`` holds once a run with a live bar has ended."""
    reporter = RichReporter(console)
    reporter.start(1_000, 0, "DQN on CartPole-v1")
    reporter.phase("generation 5: evaluating")
    reporter.advance(1_000)
    reporter.episodes([20.0, 30.0])
    reporter.progress.refresh()
    reporter.finish(_summary())
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue()


def test_no_progress_line_is_left_in_a_log() -> None:
    text = _finished(Console(width=100, file=io.StringIO(), color_system=None))
    assert text.splitlines()[0] == "DQN on CartPole-v1: 1,000 env steps in all"
    assert text.splitlines()[1] == "summary" and "evaluating" not in text and "ETA" not in text
    assert "training episodes" not in text


def test_in_a_terminal_the_bar_is_erased_before_the_summary() -> None:
    console = Console(width=100, file=io.StringIO(), force_terminal=True, color_system=None)
    text = _finished(console)
    bar = text.rindex("generation 5: evaluating")
    between = text[bar : text.index("summary")]
    assert between.count("\x1b[2K") >= 2  # both lines of the live display are erased


def _quiet(heartbeat: float) -> tuple[io.StringIO, LogReporter]:
    stream = io.StringIO()
    reporter = LogReporter(stream, heartbeat=heartbeat)
    reporter.phase("building 2 members")
    reporter.start(1_000, 0, "DQN on CartPole-v1")
    reporter.phase("generation 1: training")
    reporter.advance(100)
    return stream, reporter


def test_quiet_says_what_happens_until_the_first_generation_ends() -> None:
    stream, reporter = _quiet(heartbeat=3600)
    reporter.phase("generation 1: evaluating")
    reporter.generation(GenerationReport(1, 200, 50.0, TYPICAL))
    reporter.phase("generation 2: training")  # from now on, one line per generation
    reporter.advance(100)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "building 2 members"
    assert lines[1].startswith("DQN on CartPole-v1: 0/1,000 env steps in all; member: an id;")
    assert lines[2:4] == ["generation 1: training", "generation 1: evaluating"]
    assert lines[4] == (
        "generation 1: 200 env steps in all, best fitness 486.0 (member 6), 50 steps/s"
    )
    assert len(lines) == 5


def test_quiet_counts_steps_during_a_generation() -> None:
    stream, reporter = _quiet(heartbeat=0)
    reporter.advance(150)
    lines = stream.getvalue().splitlines()
    assert lines[-2].startswith("  generation 1: training: 100/1,000 env steps, ")
    assert lines[-1].startswith("  generation 1: training: 250/1,000 env steps, ")
    assert lines[-1].endswith(" steps/s")  # no episode has finished yet


def test_quiet_heartbeat_says_what_recent_episodes_returned() -> None:
    stream, reporter = _quiet(heartbeat=0)
    RunnerProgress(reporter).episodes([9.5, 10.5, 500.0])
    reporter.advance(150)
    line = stream.getvalue().splitlines()[-1]
    assert line.startswith("  generation 1: training: 250/1,000 env steps, ")
    assert line.endswith(" steps/s; training episodes, last 3: return mean 173.3 "
                         "(min 9.5, max 500.0)")  # fmt: skip


def test_every_count_says_what_it_counts_and_over_whom() -> None:
    stream = io.StringIO()
    reporter = LogReporter(stream, heartbeat=0)
    reporter.start(640, 0, "GRPO on digits", "prompts", 2)
    reporter.phase("generation 1: training")
    reporter.advance(64)
    reporter.generation(GenerationReport(1, 128, 4.0, TYPICAL))
    reporter.finish(_summary(global_steps=640, steps_per_member=320, step_unit="prompts",
                             target_score=0.9, target_reached_at={"generation": 3,
                             "global_steps": 384, "wall_seconds": 9.0}))  # fmt: skip
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("GRPO on digits: 0/640 prompts in all (320 per member); ")
    assert lines[2].startswith("  generation 1: training: 64/640 prompts, ")
    assert lines[2].endswith(" prompts/s")
    assert lines[3].startswith("generation 1: 128 prompts in all, best fitness")
    assert lines[3].endswith(", 4 prompts/s")
    assert "  prompts          640 in all (320 per member), 2.0 s, 500 prompts/s" in lines
    assert "  target 0.9     reached in generation 3, at 384 prompts in all" in lines


def _summary(**changes: Any) -> dict[str, Any]:
    return {"best_fitness": 500.0, "best_member": 8, "global_steps": 1_000, "wall_seconds": 2.0,
            "steps_per_second": 500.0, "generations": 2, "target_score": None,
            "target_reached": False, "stopped_early": False, "interrupted": False,
            "run_dir": "runs/my run", **changes}  # fmt: skip


def test_the_summary_names_the_next_commands() -> None:
    manifest = "'runs/my run/manifest.yaml'"
    assert next_steps(_summary()) == [
        ("evaluate", "agile evaluate 'runs/my run'"),
        ("train longer", f"raise training.max_steps in {manifest}, then agile train --resume "
                         "'runs/my run'"),
    ]  # fmt: skip
    target = next_steps(_summary(stopped_early=True, target_reached=True, target_score=475))
    assert target[1] == ("train on", f"raise training.target_score in {manifest}, then agile "
                                     "train --resume 'runs/my run'")  # fmt: skip
    stopped = _summary(interrupted=True, best_fitness=None, best_member=None)
    assert next_steps(stopped) == [("continue", "agile train --resume 'runs/my run'")]


def _group(*names: str) -> click.Group:
    group = click.Group("agile")
    for name in names:
        group.add_command(click.Command(name))
    return group


def test_agile_report_is_named_only_when_the_command_exists() -> None:
    with click.Context(_group("train", "evaluate")):
        assert "report" not in dict(next_steps(_summary()))
    with click.Context(_group("train", "evaluate", "report")):
        assert dict(next_steps(_summary()))["report"] == "agile report 'runs/my run'"


class Recording(LogReporter):
    """Remembers every call, in order."""

    def __init__(self) -> None:
        super().__init__(io.StringIO())
        self.calls: list[tuple[str, Any]] = []

    def phase(self, text: str) -> None:
        self.calls.append(("phase", text))

    def advance(self, steps: int) -> None:
        self.calls.append(("advance", steps))

    def generation(self, report: GenerationReport) -> None:
        self.calls.append(("generation", report.generation))


@pytest.mark.parametrize("algorithm", ["DQN", "PPO"])
def test_a_batched_run_reports_steps_as_they_are_done(algorithm: str, tmp_path: Path) -> None:
    manifest = tiny_manifest(algorithm, training={"max_steps": 64, "evo_steps": 64,
                                                  "pop_size": 2})  # fmt: skip
    reporter = Recording()
    options = LocalRunOptions(device="cpu", run_dir=tmp_path / "run")
    loop = EvolutionLoop(manifest, installed_host().registry, options, reporter)
    loop.run()
    calls = reporter.calls
    assert calls[0] == ("phase", "building 2 members")
    training = calls.index(("phase", "generation 1: training"))
    evaluating = calls.index(("phase", "generation 1: evaluating"))
    steps = [n for kind, n in calls[training:evaluating] if kind == "advance"]
    assert steps == [4] * 32  # every vector step of 2 members x 2 environments
    assert calls[evaluating + 1] == ("generation", 1)


def test_quiet_cli_run_ends_with_the_next_commands(run: Any, tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text("algorithm: {name: DQN, batch_size: 16}\n"
                        "environment: {name: CartPole-v1, num_envs: 2, sync: true}\n"
                        "training: {max_steps: 64, evo_steps: 64, pop_size: 2}\n")  # fmt: skip
    folder = tmp_path / "cli-run"
    result = run("train", str(manifest), "--quiet", "--device", "cpu", "--run-dir", str(folder))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines.index("building 2 members") < lines.index("generation 1: training")
    assert f"  evaluate         agile evaluate {folder}" in lines
    assert any(line.endswith(f"then agile train --resume {folder}") for line in lines)
    assert any(line.endswith(f"agile report {folder}") for line in lines)
