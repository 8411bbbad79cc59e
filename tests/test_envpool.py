"""EnvPool as the optional engine (``environment.engine: envpool``): the field validates without
importing EnvPool and names the field of each mistake; a MuJoCo task trains and evaluates from
the command line; seeded resets repeat exactly, copy ``i`` from ``seed + i``, with next-step
autoreset; an Atari game reports its score and gives the learner its clipped rewards and lost
lives; and a run interrupted and resumed equals the run that was not."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from .conftest import small_breakout
from .test_lazy_registry import imported_by

HAS_ENVPOOL = importlib.util.find_spec("envpool") is not None
needs_envpool = pytest.mark.skipif(not HAS_ENVPOOL, reason="the envpool extra is not installed")
needs_ale = pytest.mark.skipif(
    importlib.util.find_spec("ale_py") is None, reason="the atari extra is not installed"
)

CHEETAH = {"name": "HalfCheetah-v5", "num_envs": 4, "engine": "envpool"}
BREAKOUT = {"name": "ALE/Breakout-v5", "num_envs": 4, "engine": "envpool", "atari": True}


def _write(tmp_path: Path, environment: dict[str, Any]) -> Path:
    manifest = {"algorithm": {"name": "PPO"}, "environment": environment}
    path = tmp_path / "envpool.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return path


def _said(result: Any) -> str:
    return " ".join(result.output.split())


def _envs(environment: dict[str, Any], seed: int | None) -> Any:
    from agile_rl import GymnasiumEnvSpec, gym_vector_env

    return gym_vector_env(GymnasiumEnvSpec.model_validate(environment), seed=seed)


# -- the field -----------------------------------------------------------------------------------


def test_the_engine_is_gymnasium_unless_envpool_is_asked_for() -> None:
    from agile_rl import GymnasiumEnvSpec

    assert GymnasiumEnvSpec.model_validate({"name": "HalfCheetah-v5"}).engine == "gymnasium"
    assert GymnasiumEnvSpec.model_validate(CHEETAH).engine == "envpool"


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"engine": "pool"}, "environment.engine", "'gymnasium' or 'envpool'"),
        ({"entrypoint": "my_env.py:make"}, "environment.entrypoint", "cannot be combined with "
         "engine envpool"),
        ({"wrappers": ["gymnasium.wrappers:ClipReward"]}, "environment.wrappers", "cannot be "
         "combined with engine envpool"),
        ({"name": "ALE/Breakout-v5"}, "environment.atari", "must be set for an Atari game"),
        ({"config": {"num_envs": 8}}, "environment.config.num_envs", "is agile's to set"),
        ({"config": {"seed": 3}}, "environment.config.seed", "the run's --seed sets it"),
    ],
)  # fmt: skip
def test_mistakes_name_their_field(
    run: Any, tmp_path: Path, changes: dict[str, Any], field: str, words: str
) -> None:
    result = run("validate", str(_write(tmp_path, {**CHEETAH, **changes})))
    assert result.exit_code == 2, result.output
    assert f"{field}: " in _said(result) and words in _said(result)


def test_validating_imports_no_environment_library(tmp_path: Path) -> None:
    loaded = imported_by("validate", str(_write(tmp_path, BREAKOUT)))
    assert not loaded & {"envpool", "torch", "gymnasium", "ale_py"}


def test_without_envpool_one_sentence_says_how_to_install_it(
    run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "envpool", None)  # import envpool fails
    result = run("validate", "--check-env", str(_write(tmp_path, CHEETAH)))
    assert result.exit_code == 2, result.output
    said = _said(result)
    assert "environment.engine: envpool is not installed" in said
    assert 'pip install -e ".[envpool]"' in said


@needs_envpool
@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"name": "HalfCheeta-v5"}, "environment.name", "has no task 'HalfCheeta-v5' (did you "
         "mean 'HalfCheetah-v5'?)"),
        ({"name": "Breakout-v5"}, "environment.name", "is an Atari game (name it "
         "'ALE/Breakout-v5', with atari)"),
        ({"config": {"reset_noise": 0.1}}, "environment.config.reset_noise", "is not an option "
         "of EnvPool's HalfCheetah-v5 (did you mean 'reset_noise_scale'?)"),
    ],
)  # fmt: skip
def test_check_env_names_the_field_envpool_refuses(
    run: Any, tmp_path: Path, changes: dict[str, Any], field: str, words: str
) -> None:
    result = run("validate", "--check-env", str(_write(tmp_path, {**CHEETAH, **changes})))
    assert result.exit_code == 2, result.output
    assert f"{field}: " in _said(result) and words in _said(result)


# -- the vector ----------------------------------------------------------------------------------


@needs_envpool
def test_a_seed_repeats_the_episodes_copy_by_copy() -> None:
    envs = _envs(CHEETAH, seed=5)
    try:
        assert envs.single_observation_space.shape == (17,)
        assert envs.single_action_space.dtype == np.float32  # as gymnasium's HalfCheetah
        actions = np.random.default_rng(0).uniform(-1, 1, (20, 4, 6)).astype(np.float32)

        def play(seed: int | None) -> list[np.ndarray]:
            first, _ = envs.reset(seed=seed)
            return [first, *(envs.step(action)[0] for action in actions)]

        five, again, six, unseeded = play(5), play(5), play(6), play(None)
        for mine, same in zip(five, again, strict=True):
            np.testing.assert_array_equal(mine, same)  # a seed repeats exactly
        np.testing.assert_array_equal(six[0][:3], five[0][1:])  # copy i from seed + i
        assert not np.array_equal(six[0], five[0])
        assert not np.array_equal(unseeded[0], five[0])  # no seed: the copies go on
    finally:
        envs.close()


@needs_envpool
def test_an_episode_ends_and_the_next_step_resets_the_copy() -> None:
    envs = _envs({**CHEETAH, "config": {"max_episode_steps": 3}}, seed=0)
    try:
        zero = np.zeros((4, 6), dtype=np.float32)
        steps = [envs.step(zero) for _ in range(5)]
        truncated = np.array([step[3] for step in steps])
        assert truncated[:, 0].tolist() == [False, False, True, False, False]  # a time limit
        assert not np.array([step[2] for step in steps]).any()
        reset = steps[3]  # next-step autoreset: the reset's observation, no reward
        assert (reset[1] == 0).all() and (reset[4]["elapsed_step"] == 0).all()
    finally:
        envs.close()


@needs_envpool
@needs_ale
def test_an_atari_game_reports_its_score_and_the_learner_its_signals() -> None:
    envs = _envs({**BREAKOUT, "name": "ALE/SpaceInvaders-v5",
                  "atari": {"episodic_life": True}}, seed=0)  # fmt: skip
    try:
        assert envs.single_observation_space.shape == (4, 84, 84)
        rng = np.random.default_rng(0)
        steps = [envs.step(rng.integers(0, 6, size=4)) for _ in range(400)]
        rewards = np.array([step[1] for step in steps])
        assert rewards.max() >= 5  # an invader scores 5 to 30: the score as played
        learning = np.array([step[4]["learning_rewards"] for step in steps])
        np.testing.assert_array_equal(learning, np.sign(rewards))
        terminated = np.array([step[2] for step in steps])
        lost = np.array([step[4]["learning_terminated"] for step in steps])
        assert (lost & ~terminated).any() and (lost >= terminated).all()
        frame = envs.render()[0]  # what agile evaluate --video draws: what the agent sees
        assert frame.shape == (168, 168, 3) and frame.dtype == np.uint8
    finally:
        envs.close()


@needs_envpool
@needs_ale
def test_breakout_starts_each_game_and_life_for_a_policy_that_never_fires() -> None:
    envs = _envs({**BREAKOUT, "num_envs": 8}, seed=0)
    try:
        first = envs.last_obs  # the build's reset, with seed 0
        again, _ = envs.reset(seed=0)
        np.testing.assert_array_equal(first, again)
        noop = np.zeros(8, dtype=np.int64)
        ended = np.zeros(8, dtype=bool)
        for _ in range(300):
            _, _, terminated, truncated, _ = envs.step(noop)
            ended |= terminated | truncated
        # FIRE as each episode's first step and after each lost life: EnvPool's own FIRE after
        # a reset is lost to sticky actions in about a third of games, which then never start
        assert ended.all()
    finally:
        envs.close()


@needs_envpool
@needs_ale
def test_colour_frames_are_laid_out_as_ale_pys() -> None:
    """Without no-ops, sticky actions or FIRE, both engines play the same game: the same
    pixels but for resizing's rounding, in the same layout."""
    atari = {"grayscale": False, "noop_max": 0, "fire_reset": False}
    environment = {**BREAKOUT, "num_envs": 1, "atari": atari,
                   "config": {"repeat_action_probability": 0.0}}  # fmt: skip
    seen = []
    for engine in ("envpool", "gymnasium"):
        envs = _envs({**environment, "engine": engine}, seed=0)
        try:
            assert envs.single_observation_space.shape == (4, 84, 84, 3)
            seen.append([envs.step(np.zeros(1, dtype=np.int64))[0] for _ in range(4)][-1])
            assert envs.render()[0].shape == (168, 168, 3)
        finally:
            envs.close()
    assert np.abs(seen[0].astype(int) - seen[1]).mean() < 0.1  # laid out otherwise: about 40


# -- from the command line -------------------------------------------------------------------

PPO_CHEETAH = Path(__file__).parent.parent / "configs" / "training" / "ppo" / "halfcheetah.yaml"
SHORT = ["algorithm.learn_step=64", "training.evo_steps=128", "training.max_steps=256",
         "algorithm.update_epochs=1", "network.latent_dim=32", "environment.num_envs=2",
         "training.eval_steps=100", "environment.engine=envpool"]  # fmt: skip


@needs_envpool
def test_a_population_trains_and_evaluates_on_envpools_halfcheetah(
    run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    sets = [part for item in SHORT for part in ("--set", item)]
    checked = run("validate", "--check-env", str(PPO_CHEETAH), *sets)
    assert checked.exit_code == 0, checked.output
    result = run("train", str(PPO_CHEETAH), *sets, "--quiet", "--seed", "1",
                 "--elite-top", "0", "--run-dir", "run")  # fmt: skip
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [record["steps_per_member"] for record in records] == [128, 256]
    kept = yaml.safe_load((tmp_path / "run" / "manifest.yaml").read_text())
    assert kept["environment"]["engine"] == "envpool"
    scored = run("evaluate", "run", "--episodes", "2", "--device", "cpu")
    assert scored.exit_code == 0, scored.output
    assert "PPO member" in scored.output and "over 2 episodes" in scored.output


@needs_envpool
@needs_ale
def test_a_population_trains_on_envpools_breakout(run: Any, tmp_path: Path) -> None:
    path = small_breakout(BREAKOUT, tmp_path / "breakout.yaml")
    result = run("train", str(path), "--quiet", "--elite-top", "0", "--run-dir",
                 str(tmp_path / "run"))  # fmt: skip
    assert result.exit_code == 0, result.output
    [record] = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert record["steps_per_member"] == 128


@needs_envpool
@pytest.mark.parametrize(
    ("algorithm", "environment"),
    [("PPO", {**CHEETAH, "num_envs": 2}),
     ("DQN", {"name": "CartPole-v1", "num_envs": 2, "engine": "envpool"})],
)  # fmt: skip
def test_a_resumed_run_equals_the_uninterrupted_run(
    algorithm: str, environment: dict[str, Any], tmp_path: Path
) -> None:
    """As tests/test_reproducibility.py checks it on gymnasium's vectors: interrupted after
    its first generation and resumed, the run reseeds EnvPool's copies as the whole run did."""
    from agile_cli.testing import tiny_manifest
    from agile_cli.training import checkpoint
    from tests.test_reproducibility import BUDGET, _differences, _train_records
    from tests.test_training import _evolving

    manifest = tiny_manifest(algorithm, environment=environment, **_evolving(algorithm),
                             training={**BUDGET, "max_steps": 128})  # fmt: skip
    whole = _train_records(manifest, tmp_path / "whole")
    resumed = _train_records(manifest, tmp_path / "cut", cut_after=1)
    assert len(whole) == 4 and resumed == whole
    ends = [checkpoint.load(tmp_path / run / "checkpoints" / "latest.pt")
            for run in ("whole", "cut")]  # fmt: skip
    assert _differences(ends[0]["members"], ends[1]["members"]) == []
