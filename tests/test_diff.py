"""``agile diff``: two runs' differing settings and provenance, and their results side by side."""

from __future__ import annotations

import json
from pathlib import Path

from agile_cli.testing import smoke_train, tiny_manifest


def _two_runs(tmp_path: Path) -> tuple[Path, Path]:
    first = tiny_manifest("DQN")
    second = tiny_manifest("DQN", algorithm_options={"lr": 0.003})
    smoke_train(first, tmp_path / "a", seed=1)
    smoke_train(second, tmp_path / "b", seed=2)
    return tmp_path / "a", tmp_path / "b"


def test_diff_names_the_settings_seeds_and_results_of_two_runs(tmp_path, run) -> None:
    a, b = _two_runs(tmp_path)
    shown = run("diff", str(a), str(b))
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert any(line.split()[:3] == ["algorithm.lr", "0.0001", "0.003"] for line in lines), lines
    assert any(line.split()[:3] == ["seed", "1", "2"] for line in lines), lines
    assert "settings (manifest.yaml): 1 differ" in lines
    assert any(line.strip().startswith("best fitness") for line in lines)
    report = json.loads(run("diff", str(a), str(b), "--json").output)
    assert report["settings"] == {"algorithm.lr": [0.0001, 0.003]}
    assert report["provenance"]["seed"] == [1, 2]
    summaries = [json.loads((p / "summary.json").read_text()) for p in (a, b)]
    assert report["results"]["best_fitness"] == [s["best_fitness"] for s in summaries]


def test_a_run_against_itself_differs_in_nothing(tmp_path, run) -> None:
    a, _ = _two_runs(tmp_path)
    lines = run("diff", str(a), str(a)).output.splitlines()
    assert "settings (manifest.yaml): the same" in lines
    assert "provenance (provenance.json): the same" in lines


def test_a_folder_without_a_run_is_refused_with_how_to_fix_it(tmp_path, run) -> None:
    a, _ = _two_runs(tmp_path)
    (tmp_path / "empty").mkdir()
    refused = run("diff", str(a), str(tmp_path / "empty"))
    assert refused.exit_code == 2
    assert "is not a run folder (no manifest.yaml)" in refused.output
    assert "Traceback" not in refused.output


def test_diff_sets_the_elites_scored_again_side_by_side(tmp_path, run) -> None:
    a, b = _two_runs(tmp_path)
    for folder, score in ((a, 12.5), (b, 30.0)):
        summary = json.loads((folder / "summary.json").read_text())
        summary["elite"] = {"member": 3, "score": score, "low": score - 2, "high": score + 2,
                            "episodes": 30, "candidates": [{"member": 3}]}  # fmt: skip
        (folder / "summary.json").write_text(json.dumps(summary))
    lines = run("diff", str(a), str(b)).output.splitlines()
    row = next(line for line in lines if line.strip().startswith("elite scored again"))
    assert "12.5 (member 3; 95% interval 10.5 to 14.5)" in row and "30 (member 3;" in row
    report = json.loads(run("diff", str(a), str(b), "--json").output)
    assert [elite["score"] for elite in report["results"]["elite"]] == [12.5, 30.0]
    assert "candidates" not in report["results"]["elite"][0]
