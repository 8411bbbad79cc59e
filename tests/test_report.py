"""`agile report`: what it draws comes from metrics.jsonl, seeds of one manifest are grouped,
and the page and figures are written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result

from agile_cli.cli import cli
from agile_report import figures
from agile_report.curves import confidence, group_curve, run_series, trajectories
from agile_report.page import sparkline, terminal_view
from agile_report.runs import Group, find_runs, group_runs, load_run

MANIFEST = """
algorithm: {name: PPO, learn_step: 128, batch_size: 64, update_epochs: 1}
environment: {name: CartPole-v1, num_envs: 2}
training: {max_steps: 768, evo_steps: 256, pop_size: 3, eval_loop: 1, eval_steps: 50}
mutation:
  rl_hp_selection: {lr: {min: 1.0e-4, max: 1.0e-2}}
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two seeds of one manifest and one run of another, trained through the CLI."""
    root = tmp_path_factory.mktemp("runs")
    manifest = root / "ppo.yaml"
    manifest.write_text(MANIFEST, encoding="utf-8")
    for name, extra in (("a", ["--seed", "1"]), ("b", ["--seed", "2"]),
                        ("c", ["--seed", "1", "--set", "algorithm.gamma=0.9"])):  # fmt: skip
        args = ["train", str(manifest), "--quiet", "--run-dir", str(root / name), *extra]
        result = CliRunner().invoke(cli, args, catch_exceptions=False)
        assert result.exit_code == 0, result.output
    return root


def _metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


def test_the_series_are_those_of_metrics_jsonl(runs: Path) -> None:
    run = load_run(runs / "a")
    records = _metrics(runs / "a")
    x, best, mean = run_series(run, "steps")
    assert list(x) == [r["global_steps"] for r in records]
    assert list(best) == [max(m["fitness"] for m in r["members"]) for r in records]
    assert np.allclose(mean, [np.mean([m["fitness"] for m in r["members"]]) for r in records])
    seconds, _, _ = run_series(run, "seconds")
    assert list(seconds) == [r["wall_seconds"] for r in records]
    lr = next(t for t in trajectories(run) if t.name == "lr")
    assert sorted(lr.values) == sorted(m["hyperparameters"]["lr"] for r in records
                                       for m in r["members"])  # fmt: skip
    size = next(t for t in trajectories(run) if t.name.startswith("network size"))
    assert all(m["parameters"] > 0 for r in records for m in r["members"])
    assert len(size.values) == sum(len(r["members"]) for r in records)


def test_lineage_follows_the_parents_metrics_record(runs: Path) -> None:
    run = load_run(runs / "a")
    records = _metrics(runs / "a")
    for k in range(1, len(records)):
        before = [m["index"] for m in records[k - 1]["members"]]
        for slot, source in enumerate(run.lineage(k)):
            member = records[k]["members"][slot]
            expected = member["index"] if member["index"] in before else member["parent"]
            assert source is not None and before[source] == expected


def test_seeds_of_one_manifest_make_one_curve_with_a_band(runs: Path) -> None:
    groups = group_runs([load_run(path) for path in find_runs([runs])])
    assert [len(g.runs) for g in groups] == [2, 1]
    assert "gamma=0.99" in groups[0].label and "gamma=0.9" in groups[1].label
    curve = group_curve(groups[0], "steps")
    bests = [run_series(run, "steps")[1] for run in groups[0].runs]
    assert curve.seeds == 2 and np.allclose(curve.best, np.mean(bests, axis=0))
    assert curve.low is not None and curve.high is not None
    assert np.all(curve.low <= curve.best) and np.all(curve.best <= curve.high)


def test_terminal_view_and_html_page(runs: Path, tmp_path: Path) -> None:
    shown = _invoke("report", str(runs))
    assert shown.exit_code == 0
    assert "(2 seeds)" in shown.output and "final best over 2 seeds" in shown.output
    assert "generations, 2,304 env steps in all, " in shown.output  # what the run's steps count
    page = tmp_path / "out" / "report.html"
    written = _invoke("report", str(runs / "a"), str(runs / "b"), "--out", str(page))
    assert written.exit_code == 0, written.output
    text = page.read_text()
    assert text.count("data:image/png;base64,") == 4 and "<script" not in text
    for name in ("curves", "iqm", "lineage", "hyperparameters"):
        assert (tmp_path / "out" / f"report-{name}.png").read_bytes()[:4] == b"\x89PNG"


def test_mistakes_are_clear(runs: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = _invoke("report", str(empty))
    assert result.exit_code == 2 and "holds no run" in result.output
    result = _invoke("report", str(runs / "a"), "--out", str(tmp_path / "r.pdf"))
    assert result.exit_code == 2 and ".html" in result.output


def _invoke(*args: str) -> Result:
    """The CLI as a user meets it: errors rendered, not raised."""
    return CliRunner().invoke(cli, list(args))


def _write_run(folder: Path, bests: list[float], seed: int, **algorithm: float) -> Path:
    """A run folder as training leaves it: generations of 4 members (the best ``bests[k]``,
    the others 40 apart below it) of 10,240 steps each, in a manifest of 6 generations."""
    folder.mkdir(parents=True)
    manifest = {"algorithm": {"name": "PPO", "gamma": 0.99, **algorithm},
                "environment": {"name": "CartPole-v1"},
                "training": {"max_steps": 61_440, "evo_steps": 10_240, "target_score": 475},
                "mutation": {"rand_seed": seed}}  # fmt: skip
    (folder / "manifest.yaml").write_text(json.dumps(manifest), encoding="utf-8")
    (folder / "summary.json").write_text(json.dumps({"seed": seed}), encoding="utf-8")
    records = [
        {"generation": g, "global_steps": 40_960 * g, "wall_seconds": 10.0 * g + seed,
         "members": [{"index": 4 * g + k, "fitness": best - 40 * k, "parent": None,
                      "hyperparameters": {"lr": 0.001 * (1 + k / 10)}, "parameters": 9_000}
                     for k in range(4)]}
        for g, best in enumerate(bests, start=1)
    ]  # fmt: skip
    lines = "".join(json.dumps(record) + "\n" for record in records)
    (folder / "metrics.jsonl").write_text(lines, encoding="utf-8")
    return folder


@pytest.fixture
def seeds(tmp_path: Path) -> list[Path]:
    """Three seeds of a CartPole manifest near its maximum of 500 (the third stopped early,
    at the target), and two seeds of another gamma."""
    return [
        _write_run(tmp_path / "s1", [60, 220, 480, 500, 500, 500], 1),
        _write_run(tmp_path / "s2", [40, 300, 500, 430, 500, 500], 2),
        _write_run(tmp_path / "s3", [80, 260, 500, 500], 3),
        _write_run(tmp_path / "g1", [50, 150, 300, 420, 480, 495], 1, gamma=0.9),
        _write_run(tmp_path / "g2", [30, 120, 330, 400, 470, 499], 2, gamma=0.9),
    ]


def _groups(paths: list[Path]) -> list[Group]:
    return group_runs([load_run(path) for path in paths])


def test_the_band_stays_within_what_the_seeds_scored(seeds: list[Path]) -> None:
    curve = group_curve(_groups(seeds[:3])[0], "steps")
    bests = np.array([np.interp(curve.x, x, best) for x, best in curve.runs])
    assert curve.low is not None and curve.high is not None
    assert np.max(curve.best + confidence(bests)) > 540  # a t-interval of 3 seeds goes past 500
    assert np.all(curve.high <= bests.max(axis=0)) and np.all(curve.low >= bests.min(axis=0))
    assert np.all(curve.low <= curve.best) and np.all(curve.best <= curve.high)
    assert curve.high.max() == 500


def test_the_mean_stops_with_the_shortest_seed_and_each_seed_runs_on(seeds: list[Path]) -> None:
    curve = group_curve(_groups(seeds[:3])[0], "steps")
    assert curve.x[-1] == 4 * 40_960  # where the third seed stopped: all three have data
    assert [x[-1] for x, _ in curve.runs] == [6 * 40_960, 6 * 40_960, 4 * 40_960]
    assert [list(best) for _, best in curve.runs][2] == [80, 260, 500, 500]


def test_figures_share_the_steps_axis_and_the_legend_covers_no_data(seeds: list[Path]) -> None:
    groups = _groups(seeds)
    curves = figures.curves_figure(groups)
    evolving = figures.hyperparameter_figure(groups)
    assert evolving is not None
    curves.draw_without_rendering()  # lays the figure out
    steps_panels = [curves.axes[0], *(a for a in evolving.axes if a.get_visible())]
    assert {a.get_xlim() for a in steps_panels} == {(0, 6 * 40_960 * 1.03)}
    ends = {line.get_xdata()[-1] for line in curves.axes[0].lines if line.get_color() == "#1f77b4"}
    assert ends == {4 * 40_960, 6 * 40_960}  # the mean to the shortest seed, each seed to its end
    assert all(axes.get_legend() is None for axes in curves.axes)
    (legend,) = curves.legends
    box = legend.get_window_extent()
    assert all(box.y1 < axes.get_window_extent().y0 for axes in curves.axes)  # below them
    assert curves.bbox.contains(box.x0, box.y0) and curves.bbox.contains(box.x1, box.y1)
    names = [text.get_text() for text in legend.get_texts()]
    assert names[:2] == ["gamma=0.99, 3 seeds", "gamma=0.9, 2 seeds"]  # the rest is the title
    assert figures.BAND in names and curves.get_suptitle() == "PPO on CartPole-v1"


def test_sparklines_share_one_scale_and_a_waver_is_no_collapse(seeds: list[Path]) -> None:
    lines = terminal_view(_groups(seeds[:3]))
    assert (
        lines[0] == "sparklines, one scale for every run: best ▁ 40 to █ 500; mean ▁ -20 to █ 440"
    )
    best = [line.split()[1:] for line in lines if line.startswith("  best  ")]
    # (v - 40) / 460 of the height; s3 starts higher than s2 did, and its line says so
    assert best == [["▁▄████", "60", "->", "500"], ["▁▅█▇██", "40", "->", "500"],
                    ["▂▄██", "80", "->", "500"]]  # fmt: skip
    waver = sparkline([499.0, 500.0, 496.0])  # alone: its own scale, at least 10% of 500 tall
    assert waver == "██▇"  # its scale 450 to 500: a 1% dip is a step down, not a fall
    finals, spread = terminal_view(_groups(seeds[3:]))[-3:-1]  # 495 and 499: a t-interval of +/- 25
    assert (
        finals == "  final best over 2 seeds: mean 497, 95% CI 495 to 499 (within the seeds' range)"
    )
    assert spread.startswith("  interquartile mean 497, 95% bootstrap CI 495 to 499")


def test_interquartile_mean_cuts_a_quarter_from_each_end_and_its_interval_is_repeatable() -> None:
    from agile_report.curves import bootstrap_interval, iqm

    assert iqm(np.array([490.0, 495.0, 500.0, 505.0])) == 497.5  # the middle two
    assert iqm(np.array([10.0, 20.0, 30.0])) == 20.0  # a quarter of 3 rounds down: all kept
    assert iqm(np.array([0.0, 100.0, 101.0, 102.0, 103.0, 104.0, 105.0, 1000.0])) == 102.5
    seeds = np.array([420.0, 480.0, 500.0, 500.0, 455.0])
    low, high = bootstrap_interval(seeds)
    assert 420.0 <= low < iqm(seeds) < high <= 500.0
    assert bootstrap_interval(seeds) == (low, high)
