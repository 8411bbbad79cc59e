"""The shipped MuJoCo manifests (SAC, TD3 and PPO on HalfCheetah, Hopper, Walker2d and Ant):
each validates and names its environment, and each algorithm's trains a short population run
from the command line as the README shows (the ``mujoco`` extra, which the tests install)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mujoco")

CONFIGS = Path(__file__).parent.parent / "configs" / "training"
TASKS = {"halfcheetah": "HalfCheetah-v5", "hopper": "Hopper-v5", "walker2d": "Walker2d-v5",
         "ant": "Ant-v5"}  # fmt: skip
ALGORITHMS = ("sac", "td3", "ppo")
MANIFESTS = [CONFIGS / algorithm / f"{task}.yaml" for algorithm in ALGORITHMS for task in TASKS]


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: f"{path.parent.name}/{path.stem}")
def test_every_mujoco_manifest_validates(run: Any, path: Path) -> None:
    result = run("validate", str(path))
    assert result.exit_code == 0, result.output
    assert f"{path.parent.name.upper()} on {TASKS[path.stem]}, pop 4" in result.output


# Short: a few hundred steps per member, learning from the start, small batches.
SHORT = {
    "sac": ["training.learning_delay=0", "training.evo_steps=200", "algorithm.batch_size=32"],
    "td3": ["training.learning_delay=0", "training.evo_steps=200", "algorithm.batch_size=32"],
    "ppo": ["algorithm.learn_step=128", "training.evo_steps=256", "algorithm.update_epochs=1"],
}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_each_algorithm_trains_a_population_on_halfcheetah(
    run: Any, algorithm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = CONFIGS / algorithm / "halfcheetah.yaml"
    [steps] = [int(item.split("=")[1]) for item in SHORT[algorithm] if "evo_steps" in item]
    overrides = [*SHORT[algorithm], f"training.max_steps={steps * 2}",
                 "network.latent_dim=64", "environment.num_envs=2"]  # fmt: skip
    sets = [part for item in overrides for part in ("--set", item)]
    result = run("train", str(path), *sets, "--quiet", "--seed", "1", "--run-dir",
                 str(tmp_path / "run"))  # fmt: skip
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert len(records) == 2  # two generations, with a selection between them
    assert records[-1]["steps_per_member"] == steps * 2
    groups = records[-1]["groups"]
    assert any(len(group) > 1 for group in groups)  # the population trains side by side
    # MuJoCo's warnings (mujoco 4 has one for HalfCheetah's model) go to Python's, not to a
    # log file in the working directory
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()
