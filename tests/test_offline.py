"""Offline RL: the HDF5 environment builder, CQN, the offline runner and ``agile dataset``."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_cli import EnvironmentNotFoundError
from agile_cli.testing import smoke_train, tiny_manifest, tiny_population
from agile_cqn.algorithm import conservative_penalty
from agile_offline.builder import OfflineBuilder
from agile_offline.dataset import transitions_from_columns
from agile_offline.runner import OfflineRunner
from agile_offline.spec import OfflineEnvSpec
from agile_rl.runtime.buffers import ReplayBuffer, Transitions
from tests.envs.toy_offline import toy_offline_environment, write_cartpole_dataset

h5py = pytest.importorskip("h5py")

CARTPOLE = {"name": "CartPole-v1", "num_envs": 2, "sync": True}


def _spec(path) -> OfflineEnvSpec:
    return OfflineEnvSpec(**CARTPOLE, dataset_path=str(path))


def test_builder_attaches_the_dataset(tmp_path) -> None:
    env = OfflineBuilder().build(_spec(write_cartpole_dataset(tmp_path / "d.h5")), seed=0)
    data = env.load_dataset()
    env.close()
    # 200 rows in episodes of 20 without next_observations: every row but the last, which
    # is kept because it is terminal; next observations are the following rows.
    assert len(data) == 200
    assert data.obs.shape == data.next_obs.shape == (200, 4)
    with h5py.File(tmp_path / "d.h5") as file:
        np.testing.assert_allclose(data.next_obs[:-1], file["observations"][1:])
    assert data.terminated.sum() == 10


def test_timeouts_without_next_observations_drop_the_boundary_step() -> None:
    columns = {
        "observations": np.arange(6, dtype=np.float32).reshape(6, 1),
        "actions": np.zeros(6), "rewards": np.ones(6),
        "terminals": np.array([0, 0, 1, 0, 0, 0]), "timeouts": np.array([0, 1, 0, 0, 0, 0]),
    }  # fmt: skip
    data = transitions_from_columns(columns, spaces.Discrete(2))
    # step 1 timed out (obs 2 starts the next episode); step 5 has no next observation
    assert data.obs[:, 0].tolist() == [0, 2, 3, 4]
    assert data.next_obs[:, 0].tolist() == [1, 3, 4, 5]
    assert data.terminated.tolist() == [0, 1, 0, 0]


def test_shape_mismatch_is_a_clear_error(tmp_path) -> None:
    path = tmp_path / "bad.h5"
    with h5py.File(path, "w") as file:
        for name, shape in (("observations", (5, 3)), ("actions", (5,)), ("rewards", (5,)),
                            ("terminals", (5,))):  # fmt: skip
            file.create_dataset(name, data=np.zeros(shape))
    with pytest.raises(EnvironmentNotFoundError) as error:
        OfflineBuilder().check(_spec(path))
    assert error.value.message == (
        "environment.dataset_path: observations have shape (N, 3) but CartPole-v1 observes (4,)"
    )


def test_missing_file_and_dataset_are_clear_errors(tmp_path) -> None:
    with pytest.raises(EnvironmentNotFoundError, match="no file"):
        OfflineBuilder().check(_spec(tmp_path / "absent.h5"))
    with h5py.File(tmp_path / "partial.h5", "w") as file:
        file.create_dataset("observations", data=np.zeros((3, 4)))
    with pytest.raises(EnvironmentNotFoundError, match="no dataset 'actions', 'rewards'"):
        OfflineBuilder().check(_spec(tmp_path / "partial.h5"))


@pytest.mark.parametrize("sources", ["", "  minari_dataset_id: x\n  dataset_path: d.h5\n"])
def test_exactly_one_dataset_source_through_the_cli(run, write, sources) -> None:
    path = write("m.yaml", f"algorithm:\n  name: CQN\nenvironment:\n  name: CartPole-v1\n{sources}")
    result = run("validate", str(path))
    assert result.exit_code == 2
    assert (
        "environment.dataset_path: give exactly one of minari_dataset_id or dataset_path"
        in result.output
    )


def test_remote_is_refused(run, write) -> None:
    manifest = "algorithm:\n  name: CQN\nenvironment:\n  name: CartPole-v1\n"
    path = write("m.yaml", manifest + "  minari_dataset_id: x\n  remote: true\n")
    result = run("validate", str(path))
    assert result.exit_code == 2
    assert "environment.remote: agile does not download datasets" in result.output


def test_check_env_opens_the_dataset(run, write, tmp_path) -> None:
    manifest = "algorithm:\n  name: CQN\nenvironment:\n  name: CartPole-v1\n"
    path = write("m.yaml", manifest + f"  dataset_path: {tmp_path / 'absent.h5'}\n")
    assert run("validate", str(path)).exit_code == 0
    result = run("validate", "--check-env", str(path))
    assert result.exit_code == 2
    assert "no file" in result.output


def _member(**options):
    manifest = tiny_manifest(
        "CQN", environment=toy_offline_environment(), algorithm_options=options
    )
    return tiny_population(manifest, size=1)[0]


def _batch(obs, actions, rewards, next_obs, terminated) -> Transitions:
    size = len(rewards)
    return Transitions(
        obs=torch.tensor(obs, dtype=torch.float32), actions=torch.tensor(actions),
        rewards=torch.tensor(rewards, dtype=torch.float32),
        next_obs=torch.tensor(next_obs, dtype=torch.float32),
        terminated=torch.tensor(terminated, dtype=torch.float32),
        discounts=torch.full((size,), 0.99), weights=torch.ones(size),
        indices=torch.arange(size),
    )  # fmt: skip


def test_conservative_penalty_by_hand() -> None:
    q_values = torch.tensor([[[1.0, 2.0], [0.0, 0.0], [9.0, 9.0]]])
    q_taken = torch.tensor([[1.0, 0.0, 9.0]])
    rows = torch.tensor([[1.0, 1.0, 0.0]])  # the third row is not the member's
    by_hand = ((math.log(math.e + math.e**2) - 1.0) + (math.log(2.0) - 0.0)) / 2
    assert conservative_penalty(q_values, q_taken, rows).item() == pytest.approx(by_hand)


@pytest.mark.parametrize("double", [False, True])
def test_cqn_loss_is_td_plus_alpha_times_the_penalty(double) -> None:
    member = _member(double=double, cql_alpha=0.5, tau=1.0)
    rng = np.random.default_rng(0)
    obs, next_obs = rng.normal(size=(8, 4)), rng.normal(size=(8, 4))
    actions, rewards = rng.integers(0, 2, size=8), rng.normal(size=8)
    terminated = np.array([0, 1] * 4)
    batch = _batch(obs, actions, rewards, next_obs, terminated)
    # A target different from the online network, so the double target differs from max.
    with torch.no_grad():
        for parameter in member.networks["target"].parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5)
        q = member.networks["q"](batch.obs)["q"]
        next_target = member.networks["target"](batch.next_obs)["q"]
        if double:
            choice = member.networks["q"](batch.next_obs)["q"].argmax(dim=1, keepdim=True)
            next_value = next_target.gather(1, choice).squeeze(1)
            assert not torch.equal(next_value, next_target.max(dim=1).values)
        else:
            next_value = next_target.max(dim=1).values
    taken = q.gather(1, batch.actions.view(-1, 1)).squeeze(1)
    target = batch.rewards + member.spec.gamma * (1 - batch.terminated) * next_value
    td = torch.nn.functional.smooth_l1_loss(taken, target)
    penalty = (torch.logsumexp(q, dim=1) - taken).mean()
    assert member.learn(batch).loss == pytest.approx(float(td + 0.5 * penalty), rel=1e-5)


def test_cqn_refuses_continuous_actions() -> None:
    from agile_cli import TrainingError

    environment = {**toy_offline_environment(), "name": "Pendulum-v1"}
    with pytest.raises((TrainingError, EnvironmentNotFoundError)):
        tiny_population(tiny_manifest("CQN", environment=environment), size=1)


class _Counting:
    def __init__(self, env) -> None:
        self.env, self.loads = env, 0
        self.num_envs = env.num_envs

    def load_dataset(self):
        self.loads += 1
        return self.env.load_dataset()


def test_runner_fills_the_buffer_once_and_takes_steps_updates(tmp_path) -> None:
    env = OfflineBuilder().build(_spec(write_cartpole_dataset(tmp_path / "d.h5")), seed=0)
    counting = _Counting(env)
    buffer = ReplayBuffer(1000, env.single_observation_space, env.single_action_space, gamma=0.99)
    runner = OfflineRunner(counting, buffer)
    member = _member()
    reported: list[int] = []
    for _ in range(2):
        [stats] = runner.train_population([member], 150, reported.append)
        assert stats.steps == len(stats.losses) == 150
    env.close()
    assert counting.loads == 1 and len(buffer) == 200
    assert member.record.steps == 300 and sum(reported) == 300


def test_runner_keeps_the_latest_transitions_when_the_buffer_is_small(tmp_path) -> None:
    env = OfflineBuilder().build(_spec(write_cartpole_dataset(tmp_path / "d.h5")), seed=0)
    buffer = ReplayBuffer(50, env.single_observation_space, env.single_action_space, gamma=0.99)
    with pytest.warns(UserWarning, match="holds 50 of the dataset's 200"):
        assert OfflineRunner(env, buffer).fill() == 50
    env.close()


def test_collect_then_train_cqn(run, tmp_path) -> None:
    dqn = tiny_manifest("DQN", training={"max_steps": 128, "evo_steps": 64, "pop_size": 2})
    smoke_train(dqn, tmp_path / "dqn")
    out = tmp_path / "data.h5"
    result = run("dataset", "collect", str(tmp_path / "dqn"), "--episodes", "3",
                 "--epsilon", "0.3", "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "of 3 episodes" in result.output and "mean return" in result.output
    with h5py.File(out) as file:
        rows = file["rewards"].shape[0]
        assert file["observations"].shape == file["next_observations"].shape == (rows, 4)
        ends = file["terminals"][()] | file["timeouts"][()]
        assert ends.sum() == 3 and ends[-1]
    environment = {**CARTPOLE, "dataset_path": str(out)}
    cqn = tiny_manifest("CQN", environment=environment, training={
        "max_steps": 40, "evo_steps": 20, "pop_size": 2})  # fmt: skip
    outcome = smoke_train(cqn, tmp_path / "cqn")
    assert all(member.record.steps == 40 for member in outcome.population)


def test_collect_usage_errors(run, tmp_path) -> None:
    result = run("dataset", "collect", str(tmp_path / "absent"), "--episodes", "1",
                 "--out", str(tmp_path / "o.h5"))  # fmt: skip
    assert result.exit_code == 2
    assert "Traceback" not in result.output


class _FakeEpisode:
    def __init__(self, length: int, terminal: bool) -> None:
        self.observations = np.arange((length + 1) * 4, dtype=np.float32).reshape(-1, 4)
        self.actions = np.zeros(length, dtype=np.int64)
        self.rewards = np.ones(length)
        self.terminations = np.array([False] * (length - 1) + [terminal])


class _FakeMinari:
    """What agile uses of minari: list_local_datasets and load_dataset(...).iterate_episodes."""

    @staticmethod
    def list_local_datasets() -> dict:
        return {"cartpole/fake-v0": {}}

    @staticmethod
    def load_dataset(dataset_id: str):
        class Dataset:
            def iterate_episodes(self):
                return iter([_FakeEpisode(3, True), _FakeEpisode(2, False)])

        return Dataset()


def test_minari_dataset_from_the_local_root(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "minari", _FakeMinari)
    env = OfflineBuilder().build(
        OfflineEnvSpec(**CARTPOLE, minari_dataset_id="cartpole/fake-v0"), seed=0
    )
    data = env.load_dataset()
    env.close()
    assert len(data) == 5  # every step of both episodes: Minari stores each next observation
    np.testing.assert_array_equal(data.next_obs[0], data.obs[1])
    assert data.terminated.tolist() == [0, 0, 1, 0, 0]
    spec = OfflineEnvSpec(**CARTPOLE, minari_dataset_id="cartpole/absent-v0")
    with pytest.raises(EnvironmentNotFoundError, match="no local Minari dataset") as error:
        OfflineBuilder().build(spec, seed=0)
    assert "minari download cartpole/absent-v0" in (error.value.hint or "")


def test_minari_not_installed_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "minari", None)
    spec = OfflineEnvSpec(**CARTPOLE, minari_dataset_id="cartpole/fake-v0")
    with pytest.raises(EnvironmentNotFoundError, match="Minari is not installed") as error:
        OfflineBuilder().check(spec)
    assert "pip install minari" in (error.value.hint or "")


def _write_minari_dataset(dataset_id: str, episodes: int) -> int:
    """A real Minari dataset of random CartPole episodes in the local Minari root (built from
    whole episodes, which needs no jax); returns its number of steps."""
    import gymnasium as gym

    minari = pytest.importorskip("minari")
    from minari.data_collector.episode_buffer import EpisodeBuffer

    env = gym.make("CartPole-v1")
    env.action_space.seed(0)
    buffers = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=episode)
        columns: dict[str, list] = {"obs": [obs], "actions": [], "rewards": [], "te": [], "tr": []}
        done = False
        while not done:
            action = env.action_space.sample()
            obs, reward, terminated, truncated, _ = env.step(action)
            step = (obs, action, reward, terminated, truncated)
            for key, value in zip(columns, step, strict=True):
                columns[key].append(value)
            done = terminated or truncated
        buffers.append(EpisodeBuffer(
            id=episode, observations=np.array(columns["obs"]),
            actions=np.array(columns["actions"]), rewards=np.array(columns["rewards"]),
            terminations=np.array(columns["te"]), truncations=np.array(columns["tr"]), infos={},
        ))  # fmt: skip
    dataset = minari.create_dataset_from_buffers(dataset_id, buffers, env="CartPole-v1")
    return int(dataset.total_steps)


def test_a_real_local_minari_dataset_trains_cqn(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    steps = _write_minari_dataset("cartpole/random-v0", episodes=5)
    environment = {**CARTPOLE, "minari_dataset_id": "cartpole/random-v0"}
    env = OfflineBuilder().build(OfflineEnvSpec(**environment), seed=0)
    data = env.load_dataset()
    env.close()
    assert len(data) == steps
    assert data.terminated.sum() == 5  # random CartPole episodes end by falling over
    np.testing.assert_array_equal(data.next_obs[:-1][data.terminated[:-1] == 0],
                                  data.obs[1:][data.terminated[:-1] == 0])  # fmt: skip
    result = smoke_train(tiny_manifest("CQN", environment=environment), tmp_path / "run")
    assert all(np.isfinite(result.fitnesses))


def _declare(path, rows: int, **dtypes) -> None:
    """An HDF5 file declaring ``rows`` CartPole steps without writing them: it stays tiny."""
    layout = {"observations": ((rows, 4), "f4"), "actions": ((rows,), "i8"),
              "rewards": ((rows,), "f4"), "terminals": ((rows,), "bool")}  # fmt: skip
    with h5py.File(path, "w") as file:
        for name, (shape, dtype) in layout.items():
            file.create_dataset(name, shape=shape, dtype=dtypes.get(name, dtype))


@pytest.fixture
def eight_gib(monkeypatch):
    """This machine has 8 GiB available, whatever it really has."""
    from agile_cli import memory

    monkeypatch.setattr(memory, "available_memory", lambda: 8 * 2**30)


@pytest.fixture
def no_loading(monkeypatch):
    """Reading a dataset's rows fails the test: the checks must refuse before loading."""
    import agile_offline.dataset

    def refuse(*args, **kwargs):
        raise AssertionError("the dataset was loaded")

    monkeypatch.setattr(agile_offline.dataset, "read_hdf5", refuse)
    monkeypatch.setattr(agile_offline.dataset, "transitions_from_columns", refuse)


HUGE = (
    "declares 400,000,000 rows, which need 28.7 GiB to load (77 B a row, read and converted "
    "to transitions), more than the 8.0 GiB this machine has available"
)


def test_a_tiny_file_declaring_huge_datasets_is_refused_by_check_env(
    run, write, tmp_path, eight_gib, no_loading
) -> None:
    path = tmp_path / "huge.h5"
    _declare(path, 400_000_000)
    assert path.stat().st_size < 64_000  # declared, not stored
    with pytest.raises(EnvironmentNotFoundError) as excinfo:
        OfflineBuilder().check(_spec(path))
    assert excinfo.value.message == f"environment.dataset_path: {path} {HUGE}"
    assert excinfo.value.hint == "use a smaller dataset, or a machine with more memory"
    manifest = write("m.yaml", f"algorithm: {{name: CQN}}\nenvironment:\n  name: CartPole-v1\n"
                     f"  dataset_path: {path}\n")  # fmt: skip
    result = run("validate", "--check-env", str(manifest))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"  environment.dataset_path: {path} {HUGE}" in result.output


def test_a_huge_dataset_is_refused_before_training_loads_it(
    run, write, tmp_path, eight_gib, no_loading
) -> None:
    path = tmp_path / "huge.h5"
    _declare(path, 400_000_000)
    with pytest.raises(EnvironmentNotFoundError, match="declares 400,000,000 rows"):
        OfflineBuilder().build(_spec(path), seed=0)
    text = (
        "algorithm: {name: CQN}\n"
        f"environment: {{name: CartPole-v1, num_envs: 2, sync: true, dataset_path: {path}}}\n"
        "training: {max_steps: 100, evo_steps: 50}\n"
    )
    run_dir = tmp_path / "run"
    result = run("train", str(write("m.yaml", text)), "--device", "cpu", "--run-dir", str(run_dir))
    assert result.exit_code == 2, result.output
    assert HUGE in result.output and not run_dir.exists()


def test_datasets_must_agree_in_rows_and_hold_numbers(tmp_path) -> None:
    short = tmp_path / "short.h5"
    write_cartpole_dataset(short, rows=10)
    with h5py.File(short, "a") as file:
        del file["rewards"]
        file.create_dataset("rewards", data=np.ones(5, dtype=np.float32))
    with pytest.raises(EnvironmentNotFoundError) as excinfo:
        OfflineBuilder().check(_spec(short))
    assert excinfo.value.message == (
        "environment.dataset_path: rewards has 5 rows but observations has 10"
    )
    for name, dtype in (("strings.h5", h5py.string_dtype()), ("vlen.h5", h5py.vlen_dtype("f4"))):
        _declare(tmp_path / name, 10, rewards=dtype)
        with pytest.raises(EnvironmentNotFoundError) as excinfo:
            OfflineBuilder().check(_spec(tmp_path / name))
        assert excinfo.value.message == (
            "environment.dataset_path: rewards has dtype object, not a numeric one"
        )
    with h5py.File(tmp_path / "group.h5", "w") as file:
        file.create_dataset("observations", data=np.zeros((3, 4), np.float32))
        file.create_group("actions")
        file.create_dataset("rewards", data=np.zeros(3))
        file.create_dataset("terminals", data=1.0)
    with pytest.raises(EnvironmentNotFoundError, match="actions is not an array of rows"):
        OfflineBuilder().check(_spec(tmp_path / "group.h5"))


# -- a population learning together ---------------------------------------------------------------


def _offline_population(tmp_path, together: bool):
    """Three CQN members of different batch sizes, learning rates and penalties, trained for a
    generation of 30 gradient steps by the offline runner, stacked or each a group of one."""
    from agile_cli.testing import installed_host
    from agile_cli.training import setup

    tmp_path.mkdir()
    manifest = tiny_manifest(
        "CQN",
        environment={**CARTPOLE, "dataset_path": str(write_cartpole_dataset(tmp_path / "d.h5"))},
        training={"pop_size": 3},
    )
    members = tiny_population(manifest)
    for member, (size, lr, alpha) in zip(
        members, [(16, 1e-3, 1.0), (24, 3e-3, 0.5), (8, 1e-3, 2.0)], strict=True
    ):
        member.set_hyperparameter("batch_size", size)
        member.set_hyperparameter("lr", lr)
        member.set_hyperparameter("cql_alpha", alpha)
    env = setup.build_environment(manifest, installed_host().registry, seed=0, members=3)
    runner = setup.build_runner(
        manifest, env, setup.build_buffer(manifest, env, torch.device("cpu"))
    )
    runner.stack = together
    reported: list[int] = []
    stats = runner.train_population(members, 30, reported.append)
    env.close()
    return members, stats, reported


def test_offline_members_learn_together_as_each_does_alone(tmp_path) -> None:
    together, stats, reported = _offline_population(tmp_path / "a", together=True)
    alone, alone_stats, _ = _offline_population(tmp_path / "b", together=False)
    assert sum(reported) == 3 * 30
    for grouped, single, s, t in zip(together, alone, stats, alone_stats, strict=True):
        assert grouped.record.steps == single.record.steps == s.steps == 30
        assert np.allclose(s.losses, t.losses, rtol=1e-4, atol=1e-6)
        for name, network in grouped.networks.items():
            for (key, value), other in zip(
                network.state_dict().items(),
                single.networks[name].state_dict().values(),
                strict=True,
            ):
                assert torch.allclose(value, other, rtol=1e-4, atol=1e-6), (name, key)


def test_offline_members_that_stack_form_one_group() -> None:
    from agile_rl import learning_groups

    members = tiny_population(tiny_manifest("CQN", environment=toy_offline_environment(),
                                            training={"pop_size": 3}))  # fmt: skip
    from agile_cqn.algorithm import CQNGroup

    groups = learning_groups(members, "off_policy")
    assert [positions for positions, _ in groups] == [[0, 1, 2]]
    assert isinstance(groups[0][1], CQNGroup)


def test_a_group_learner_returning_no_pair_is_named(tmp_path) -> None:
    from agile_cli import TrainingError
    from agile_cqn.algorithm import CQNGroup
    from agile_rl import MemberGroup, learn_stacked

    class Lossy(CQNGroup):
        def learn_batch(self, batch, rows, active):  # the losses alone, not (losses, priorities)
            return super().learn_batch(batch, rows, active)[0]

    env = OfflineBuilder().build(_spec(write_cartpole_dataset(tmp_path / "d.h5")), seed=0)
    buffer = ReplayBuffer(1000, env.single_observation_space, env.single_action_space, gamma=0.99)
    OfflineRunner(env, buffer).fill()
    env.close()
    members = tiny_population(tiny_manifest("CQN", environment=toy_offline_environment(),
                                            training={"pop_size": 2}))  # fmt: skip
    with pytest.raises(TrainingError, match=r"Lossy\.learn_batch returned Tensor") as refused:
        learn_stacked(Lossy(MemberGroup(members)), buffer, [True, True])
    assert "return losses, None" in str(refused.value.hint)
