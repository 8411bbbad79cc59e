"""Atari games by their ``ALE/`` ids: registered for the user when ale-py is installed (gymnasium
1.x registers them only after ``gym.register_envs(ale_py)``), one sentence saying how to install
it when it is not, and stepped in gymnasium's vectors, which seed each copy; with
``environment.atari``, the standard preprocessing in ale-py's vector environment, the game's
score reported and the learner's view (clipped rewards, lost lives) kept apart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from .conftest import small_breakout

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


# -- the standard preprocessing (environment.atari) --------------------------------------------

PREPROCESSED = {"name": "ALE/Breakout-v5", "num_envs": 4, "atari": True}


def _atari_envs(seed: int, name: str = "ALE/Breakout-v5", **atari: Any) -> Any:
    from agile_rl import GymnasiumEnvSpec, gym_vector_env

    environment = {**PREPROCESSED, "name": name, "atari": atari or True}
    spec = GymnasiumEnvSpec.model_validate(environment)
    return gym_vector_env(spec, seed=seed)


def test_atari_true_is_the_standard_pipeline() -> None:
    from agile_rl import GymnasiumEnvSpec

    atari = GymnasiumEnvSpec.model_validate(PREPROCESSED).atari
    assert atari is not None
    sizes = (atari.noop_max, atari.frame_skip, atari.screen_size, atari.frame_stack)
    assert sizes == (30, 4, 84, 4)
    assert atari.grayscale and atari.clip_rewards and atari.fire_reset and not atari.episodic_life
    off = GymnasiumEnvSpec.model_validate({**PREPROCESSED, "atari": False})
    assert off.atari is None


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"name": "CartPole-v1"}, "environment.atari", "needs an ALE/...-v5 game"),
        ({"wrappers": ["gymnasium.wrappers:ClipReward"]}, "environment.wrappers", "cannot be "
         "combined with atari"),
        ({"config": {"obs_type": "ram"}}, "environment.config.obs_type", "is not an option"),
        ({"config": {"repeat_action_probability": "high"}},
         "environment.config.repeat_action_probability", "must be a number in [0, 1]"),
        ({"atari": {"frame_stack": 0}}, "environment.atari.frame_stack", "greater than or equal"),
    ],
)  # fmt: skip
def test_atari_mistakes_name_their_field(
    run: Any, tmp_path: Path, changes: dict[str, Any], field: str, words: str
) -> None:
    manifest = {"algorithm": {"name": "PPO"}, "environment": {**PREPROCESSED, **changes}}
    path = tmp_path / "atari.yaml"
    path.write_text(yaml.safe_dump(manifest))
    result = run("validate", str(path))
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert f"{field}: " in said and words in said


def test_the_reference_form_leaves_atari_out_and_says_so(run: Any, tmp_path: Path) -> None:
    path = tmp_path / "atari.yaml"
    path.write_text(yaml.safe_dump({"algorithm": {"name": "PPO"}, "environment": PREPROCESSED}))
    result = run("validate", "--reference", str(path))
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "note: environment.atari:" in said and "agilerl 2.58 has no such field" in said
    assert '"atari"' not in result.output


def test_rom_names_follow_the_ids() -> None:
    from agile_rl.runtime.atari import game_of

    assert game_of("ALE/SpaceInvaders-v5") == "space_invaders"
    assert game_of("ALE/Pong-v5") == "pong"
    assert game_of("ALE/MontezumaRevenge-v5") == "montezuma_revenge"


def _play(envs: Any, steps: int, seed: int = 0) -> list[tuple[Any, ...]]:
    actions = np.random.default_rng(seed)
    return [envs.step(actions.integers(0, 4, size=envs.num_envs)) for _ in range(steps)]


def test_preprocessed_copies_are_seeded_one_by_one_and_replay_exactly() -> None:
    first, again, other = _atari_envs(5), _atari_envs(5), _atari_envs(6)
    try:
        assert first.single_observation_space.shape == (4, 84, 84)
        assert first.single_observation_space.dtype == np.uint8
        ours, theirs = (_play(envs, 40) for envs in (first, again))
        for mine, same in zip(ours, theirs, strict=True):
            np.testing.assert_array_equal(mine[0], same[0])
        # seed 6 starts copy i as seed 5 starts copy i + 1 (no-op starts included)
        starts = [envs.reset(seed=seed)[0] for envs, seed in ((first, 5), (other, 6))]
        np.testing.assert_array_equal(starts[1][:3], starts[0][1:])
    finally:
        for envs in (first, again, other):
            envs.close()


def test_the_game_score_is_reported_and_the_learner_sees_clipped_rewards_and_lost_lives() -> None:
    envs = _atari_envs(0, name="ALE/SpaceInvaders-v5", episodic_life=True)
    try:
        steps = _play(envs, 400)
        rewards = np.array([step[1] for step in steps])
        learning = np.array([step[4]["learning_rewards"] for step in steps])
        assert rewards.max() >= 5  # an invader scores 5 to 30: the score as played
        np.testing.assert_array_equal(learning, np.sign(rewards))
        terminated = np.array([step[2] for step in steps])
        lost = np.array([step[4]["learning_terminated"] for step in steps])
        lives = np.array([step[4]["lives"] for step in steps])
        assert (lost & ~terminated).any()  # a life lost: the game goes on
        assert (lost >= terminated).all()  # a game's end ends the learner's episode too
        dropped = np.vstack([np.zeros((1, 4), bool), lives[1:] < lives[:-1]])
        np.testing.assert_array_equal(lost, terminated | dropped)
        frame = envs.render()[0]  # what agile evaluate --video draws: what the agent sees
        assert frame.shape == (168, 168, 3) and frame.dtype == np.uint8
    finally:
        envs.close()


@pytest.mark.parametrize("fire_reset", [True, False])
def test_a_policy_that_never_fires_still_ends_its_games(fire_reset: bool) -> None:
    envs = _atari_envs(0, fire_reset=fire_reset)
    try:
        noop = np.zeros(envs.num_envs, dtype=np.int64)
        ended = np.zeros(envs.num_envs, dtype=bool)
        for _ in range(1500):
            _, _, terminated, truncated, _ = envs.step(noop)
            ended |= terminated | truncated
        # FIRE after each reset and lost life: five lives lost in a few hundred steps; without
        # it Breakout waits for FIRE until its 27,000 steps are up
        assert ended.all() if fire_reset else not ended.any()
    finally:
        envs.close()


def test_a_population_trains_on_preprocessed_breakout(run: Any, tmp_path: Path) -> None:
    path = small_breakout(PREPROCESSED, tmp_path / "breakout.yaml")
    checked = run("validate", "--check-env", str(path))
    assert checked.exit_code == 0, checked.output
    result = run("train", str(path), "--quiet", "--run-dir", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    [record] = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert record["steps_per_member"] == 128
