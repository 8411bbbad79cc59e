"""The Gymnasium environment builder, and training on image / Dict observations."""

from __future__ import annotations

import numpy as np
import pytest

from agile_cli import EnvironmentNotFoundError, LocalTrainer
from agile_gymnasium.builder import GymBuilder
from agile_gymnasium.spec import GymEnvSpec

from .conftest import MINIMAL, ROOT

TOY = {"path": str(ROOT / "tests" / "envs"), "entrypoint": "toy.py:make_dict_reach"}


def test_entrypoint_config_and_wrappers_are_applied() -> None:
    spec = GymEnvSpec(
        name="reach", num_envs=2, sync=True, config={"length": 3},
        wrappers=[("toy:ScaleReward", {"factor": 10.0})], **TOY,
    )  # fmt: skip
    env = GymBuilder().build(spec, seed=0)
    env.reset(seed=0)
    totals = np.zeros(2)
    for _ in range(3):
        _, rewards, _, truncated, _ = env.step(np.zeros(2, dtype=np.int64))
        totals += rewards
    assert truncated.all()  # config reached the constructor: episodes of 3 steps
    assert set(np.unique(totals)) <= {0.0, 10.0, 20.0, 30.0}  # wrapper scaled by 10
    env.close()


def test_registered_ids_take_config_too() -> None:
    env = GymBuilder().build(
        GymEnvSpec(name="CartPole-v1", num_envs=2, config={"max_episode_steps": 5})
    )
    env.reset(seed=0)
    for _ in range(5):
        *_, truncated, _ = env.step(np.zeros(2, dtype=np.int64))
    assert truncated.all()
    env.close()


def test_async_environments_step_in_subprocesses() -> None:
    spec = GymEnvSpec(name="Pendulum-v1", num_envs=2)
    env = GymBuilder().build(spec, seed=1)
    assert type(env).__name__ == "AsyncVectorEnv"
    obs, *_ = env.step(np.zeros((2, 1), dtype=np.float32))
    assert obs.shape == (2, 3)
    env.close()


def test_missing_package_gives_the_install_hint() -> None:
    spec = GymEnvSpec(name="needy", entrypoint="toy.py:needs_missing_package", path=TOY["path"])
    with pytest.raises(EnvironmentNotFoundError) as excinfo:
        GymBuilder().check(spec)
    assert "needs a package that is not installed" in excinfo.value.message
    assert 'pip install "gymnasium[box2d]"' in excinfo.value.hint


def test_unknown_module_names_the_module() -> None:
    spec = GymEnvSpec(name="x", entrypoint="no_such_module_here:make")
    with pytest.raises(EnvironmentNotFoundError, match="cannot import 'no_such_module_here'"):
        GymBuilder().check(spec)


@pytest.mark.parametrize("algorithm", ["DQN", "PPO"])
def test_training_on_dict_observations_with_images(algorithm, tmp_path) -> None:
    trainer = LocalTrainer(
        algorithm,
        {"name": "reach", "num_envs": 2, "sync": True, **TOY},
        training={"max_steps": 96, "evo_steps": 48, "pop_size": 2},
        mutation={"probabilities": {"no_mut": 0, "arch_mut": 1, "params_mut": 0, "rl_hp_mut": 0}},
        tournament={},
        replay_buffer={"max_size": 500} if algorithm == "DQN" else None,
        network={"latent_dim": 16, "head_config": {"hidden_size": [16]}},
        device="cpu",
    )
    population, fitnesses = trainer.train(verbose=False, run_dir=tmp_path / "run")
    assert all(np.isfinite(fitnesses))
    assert population[0].arch.encoder.kind == "multiinput"
    assert any(m.record.mutation != "none" for m in population)


def test_training_on_box_actions_with_ppo(tmp_path) -> None:
    trainer = LocalTrainer(
        "PPO", {"name": "Pendulum-v1", "num_envs": 2, "sync": True},
        training={"max_steps": 128, "evo_steps": 64, "pop_size": 2},
        mutation={}, tournament={}, device="cpu",
    )  # fmt: skip
    population, fitnesses = trainer.train(verbose=False, run_dir=tmp_path / "run")
    assert all(np.isfinite(fitnesses))
    actions = population[0].act(np.zeros((5, 3), np.float32), explore=True)
    assert actions.shape == (5, 1) and np.all(np.abs(actions) <= 2.0)


BAD = str(ROOT / "tests" / "envs")
RETURNED = [
    ("bad.py:make", "an int (42)", "return an environment"),
    ("bad.py:make_class", "the class CartPoleEnv", "return an instance of it"),
    ("bad.py:make_pair", "a tuple", "return the environment alone"),
]


@pytest.mark.parametrize(("entrypoint", "returned", "hint"), RETURNED)
def test_an_entrypoint_that_returns_no_environment_says_what_it_returned(
    entrypoint, returned, hint
) -> None:
    spec = GymEnvSpec(name="bad", entrypoint=entrypoint, path=BAD, num_envs=2, sync=True)
    for attempt in (GymBuilder().check, lambda s: GymBuilder().build(s, seed=0)):  # and to train
        with pytest.raises(EnvironmentNotFoundError) as excinfo:
            attempt(spec)
        message = excinfo.value.message
        assert message.startswith(f"environment.entrypoint: {entrypoint} returned {returned}")
        assert message.endswith(", not a gymnasium.Env")
        assert hint in excinfo.value.hint


def test_check_env_names_what_a_module_entrypoint_returned(run, write, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    path = write(
        "m.yaml", MINIMAL.replace("CartPole-v1", "bad") + "  entrypoint: tests.envs.bad:make\n"
    )
    result = run("validate", "--check-env", str(path))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert (
        "  environment.entrypoint: tests.envs.bad:make returned an int (42), "
        "not a gymnasium.Env (return an environment, e.g. gymnasium.make(...) or an instance "
        "of your Env class)" in result.output.splitlines()
    )


def test_a_pettingzoo_entrypoint_that_returns_no_environment() -> None:
    from agile_pettingzoo.builder import PettingZooBuilder
    from agile_pettingzoo.spec import PettingZooEnvSpec

    spec = PettingZooEnvSpec(name="bad", entrypoint="bad.py:make", path=BAD, sync=True)
    for attempt in (PettingZooBuilder().check, lambda s: PettingZooBuilder().build(s, seed=0)):
        with pytest.raises(EnvironmentNotFoundError) as excinfo:
            attempt(spec)
        assert excinfo.value.message == (
            "environment.entrypoint: bad.py:make returned an int (42), not a PettingZoo ParallelEnv"
        )
    a_class = PettingZooEnvSpec(name="cp", entrypoint="bad.py:make_class", path=BAD, sync=True)
    with pytest.raises(EnvironmentNotFoundError, match="returned the class CartPoleEnv, not a"):
        PettingZooBuilder().check(a_class)


def test_a_bandit_entrypoint_that_returns_no_environment(run, write) -> None:
    # the bandit builder has no separate check: --check-env builds, as training does
    text = (
        "algorithm: {name: NeuralUCB}\n"
        f"environment: {{name: b, entrypoint: 'bad.py:make', path: {BAD}}}\n"
    )
    result = run("validate", "--check-env", str(write("b.yaml", text)))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert (
        "environment.entrypoint: bad.py:make returned an int (42), not a bandit environment"
        in result.output
    )
