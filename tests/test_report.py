"""`agile report`: what it draws comes from metrics.jsonl, seeds of one manifest are grouped,
and the page and figures are written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result

from agile_cli.cli import cli
from agile_cli.report.curves import group_curve, run_series, trajectories
from agile_cli.report.runs import find_runs, group_runs, load_run

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
    page = tmp_path / "out" / "report.html"
    written = _invoke("report", str(runs / "a"), str(runs / "b"), "--out", str(page))
    assert written.exit_code == 0, written.output
    text = page.read_text()
    assert text.count("data:image/png;base64,") == 3 and "<script" not in text
    for name in ("curves", "lineage", "hyperparameters"):
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
