"""Atari games by their ``ALE/`` ids: registered for the user when ale-py is installed (gymnasium
1.x registers them only after ``gym.register_envs(ale_py)``), one sentence saying how to install
it when it is not, and stepped in gymnasium's vectors, which seed each copy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

pytest.importorskip("ale_py")

RAM = {"name": "ALE/Pong-v5", "num_envs": 2, "config": {"obs_type": "ram"}}


def _manifest(tmp_path: Path, **training: Any) -> Path:
    content = {
        "algorithm": {"name": "PPO", "batch_size": 32, "learn_step": 32},
        "environment": RAM,
        "training": {"max_steps": 64, "evo_steps": 64, "pop_size": 2, **training},
    }
    path = tmp_path / "pong.yaml"
    path.write_text(yaml.safe_dump(content))
    return path


def test_an_ale_id_is_found_and_its_copies_are_seeded_one_by_one() -> None:
    from agile_rl import GymnasiumEnvSpec, gym_vector_env

    spec = GymnasiumEnvSpec.model_validate(RAM)
    first = gym_vector_env(spec, seed=3)
    again = gym_vector_env(spec, seed=3)
    try:
        assert type(first).__name__ in ("SyncVectorEnv", "AsyncVectorEnv")  # not ale-py's own
        actions = np.zeros(2, dtype=np.int64)
        for _ in range(5):
            seen = [envs.step(actions)[0] for envs in (first, again)]
            np.testing.assert_array_equal(seen[0], seen[1])  # the same seed, the same game
        assert seen[0].shape == (2, 128)  # the console's RAM, one row per copy
    finally:
        first.close()
        again.close()


def test_a_population_trains_on_an_atari_game(run: Any, tmp_path: Path) -> None:
    checked = run("validate", "--check-env", str(_manifest(tmp_path)))
    assert checked.exit_code == 0, checked.output
    result = run("train", str(_manifest(tmp_path)), "--quiet", "--run-dir", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count("\n") == 1


def test_without_ale_py_one_sentence_says_how_to_install_it() -> None:
    probe = (
        "import sys; sys.modules['ale_py'] = None\n"
        "from agile_cli import EnvironmentNotFoundError\n"
        "from agile_rl.runtime.gym_vector import gym_env_factory\n"
        "from agile_rl import GymnasiumEnvSpec\n"
        "try:\n"
        "    gym_env_factory(GymnasiumEnvSpec.model_validate({'name': 'ALE/Pong-v5'}))\n"
        "except EnvironmentNotFoundError as error:\n"
        "    print(error, '|', error.hint)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert "'ALE/Pong-v5' is an Atari game, and ale-py" in done.stdout, done.stderr
    assert "pip install ale-py" in done.stdout and '".[atari]"' in done.stdout
