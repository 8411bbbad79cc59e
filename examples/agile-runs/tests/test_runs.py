"""`agile runs` lists run folders from their summaries."""

from __future__ import annotations

import json


def _run(folder, name, **summary) -> None:
    (folder / name).mkdir(parents=True)
    (folder / name / "summary.json").write_text(json.dumps(summary))


def test_lists_runs_with_their_outcome(agile_cli, tmp_path) -> None:
    _run(tmp_path, "a", algorithm="PPO", environment="CartPole-v1", best_fitness=500.0,
         global_steps=163840, target_score=475, target_reached=True)  # fmt: skip
    _run(tmp_path, "b", algorithm="DQN", environment="CartPole-v1", best_fitness=120.5,
         global_steps=40000, target_score=None)  # fmt: skip
    (tmp_path / "not-a-run").mkdir()
    result = agile_cli("runs", str(tmp_path))
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].split() == ["RUN", "ALGORITHM", "ENVIRONMENT", "BEST", "STEPS", "TARGET"]
    assert any(line.split() == ["a", "PPO", "CartPole-v1", "500.0", "163,840", "reached"]
               for line in lines)  # fmt: skip
    assert any(line.split()[:4] == ["b", "DQN", "CartPole-v1", "120.5"] for line in lines)
    rows = json.loads(agile_cli("runs", str(tmp_path), "--json").output)
    assert {row["run"] for row in rows} == {"a", "b"}


def test_empty_folder(agile_cli, tmp_path) -> None:
    assert "no runs in" in agile_cli("runs", str(tmp_path)).output


def test_listed_in_agile_plugins(agile_cli) -> None:
    output = agile_cli("plugins").output
    assert "agile-runs" in output and "command:runs" in output
