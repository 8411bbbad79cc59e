"""The gridworld builder: maps, validation through the builder key, and training on it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agile_cli import EnvironmentNotFoundError
from agile_gridworld.builder import GridWorldBuilder
from agile_gridworld.spec import GridWorldSpec

MAPS = Path(__file__).resolve().parents[1] / "gridworlds"
CORRIDOR = {"builder": "gridworld", "name": "corridor", "directory": str(MAPS), "num_envs": 2}


def test_walking_right_reaches_the_goal() -> None:
    env = GridWorldBuilder().build(
        GridWorldSpec(**{k: v for k, v in CORRIDOR.items() if k != "builder"})
    )
    env.reset(seed=0)
    for _ in range(6):
        _, rewards, terminated, _, _ = env.step(np.ones(2, dtype=np.int64))
    assert terminated.all() and np.allclose(rewards, 0.99)
    env.close()


def test_bad_maps_are_reported(tmp_path) -> None:
    (tmp_path / "bad.txt").write_text("#S#\n#..G\n")
    spec = GridWorldSpec(name="bad", directory=str(tmp_path))
    with pytest.raises(EnvironmentNotFoundError, match="rows differ in length"):
        GridWorldBuilder().check(spec)
    with pytest.raises(EnvironmentNotFoundError, match="no grid-world map"):
        GridWorldBuilder().check(GridWorldSpec(name="missing", directory=str(tmp_path)))


def test_manifest_selects_the_builder(agile_cli, tmp_path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(
        f"algorithm: {{name: PPO}}\nenvironment: {{builder: gridworld, name: corridor, "
        f"directory: {MAPS}, num_env: 2}}\n"
    )
    result = agile_cli("validate", str(manifest))
    assert result.exit_code == 2
    assert "environment.num_env: unknown field (did you mean 'num_envs'?)" in result.output
    manifest.write_text(manifest.read_text().replace("num_env:", "num_envs:"))
    assert agile_cli("validate", "--check-env", str(manifest)).exit_code == 0


def test_ppo_trains_on_a_grid_world(agile_smoke_train) -> None:
    result = agile_smoke_train("PPO", environment=CORRIDOR)
    assert result.summary["generations"] == 2
    assert all(np.isfinite(result.fitnesses))
