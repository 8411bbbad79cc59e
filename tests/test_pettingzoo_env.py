"""The PettingZoo builder: batched outputs, autoreset, absent agents, seeding, workers, errors."""

from __future__ import annotations

import logging
import multiprocessing
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from gymnasium import spaces
from pydantic import Field

from agile_cli import AlgorithmSpec, EnvironmentNotFoundError, TrainingError, hookimpl
from agile_pettingzoo import builder as builder_module
from agile_pettingzoo.builder import PettingZooBuilder
from agile_pettingzoo.spec import PettingZooEnvSpec
from agile_pettingzoo.vector import SubprocessParallelVectorEnv, SyncParallelVectorEnv

from .envs.toy_parallel import LISTENER, SPEAKER, ToyParallel

ENVS = Path(__file__).parent / "envs"
MODES = pytest.mark.parametrize("sync", [True, False], ids=["sync", "subprocess"])


def toy_spec(num_envs: int = 3, sync: bool = True, **config: Any) -> PettingZooEnvSpec:
    return PettingZooEnvSpec(
        name="toy", entrypoint="toy_parallel.py:ToyParallel", path=str(ENVS),
        num_envs=num_envs, sync=sync, config={"length": 3, **config},
    )  # fmt: skip


def actions(num_envs: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        SPEAKER: rng.integers(3, size=num_envs),
        LISTENER: rng.uniform(-1, 1, (num_envs, 2)).astype(np.float32),
    }


def rollout(envs: Any, seed: int, steps: int) -> list[tuple[Any, ...]]:
    rng = np.random.default_rng(123)
    trajectory = [envs.reset(seed=seed)[0]]
    trajectory += [envs.step(actions(envs.num_envs, rng))[:4] for _ in range(steps)]
    return trajectory


def assert_same(first: Any, second: Any) -> None:
    assert len(first) == len(second)
    for a, b in zip(first, second, strict=True):
        for part_a, part_b in zip(a if isinstance(a, tuple) else (a,),
                                  b if isinstance(b, tuple) else (b,), strict=True):  # fmt: skip
            assert part_a.keys() == part_b.keys()
            for agent in part_a:
                np.testing.assert_array_equal(part_a[agent], part_b[agent])


@MODES
def test_every_output_has_every_agent_batched_over_copies(sync) -> None:
    with PettingZooBuilder().build(toy_spec(sync=sync), seed=0) as envs:
        assert isinstance(envs, SyncParallelVectorEnv if sync else SubprocessParallelVectorEnv)
        assert envs.num_envs == 3 and envs.agents == [SPEAKER, LISTENER]
        assert envs.single_observation_spaces[LISTENER].shape == (5,)
        assert envs.single_action_spaces[SPEAKER].n == 3
        observations, _ = envs.reset(seed=1)
        stepped = envs.step(actions(3, np.random.default_rng(0)))
    for obs in (observations, stepped[0]):
        assert {a: (o.shape, o.dtype) for a, o in obs.items()} == {
            SPEAKER: ((3, 3), np.float32), LISTENER: ((3, 5), np.float32),
        }  # fmt: skip
    for part, dtype in zip(stepped[1:4], (np.float32, bool, bool), strict=True):
        assert {a: (v.shape, v.dtype) for a, v in part.items()} == {
            SPEAKER: ((3,), dtype), LISTENER: ((3,), dtype),
        }  # fmt: skip


def test_the_step_after_an_episode_ends_resets_that_copy_without_stepping_it() -> None:
    with PettingZooBuilder().build(toy_spec(num_envs=2, length=2), seed=0) as envs:
        rng = np.random.default_rng(0)
        envs.step(actions(2, rng))
        _, rewards, terminated, truncated, _ = envs.step(actions(2, rng))
        assert all(truncated[a].all() and not terminated[a].any() for a in envs.agents)
        assert rewards[LISTENER].all()
        calls = [(env.step_calls, env.reset_calls) for env in envs.envs]
        obs, rewards, terminated, truncated, _ = envs.step(actions(2, rng))
        assert [(env.step_calls, env.reset_calls) for env in envs.envs] == [
            (steps, resets + 1) for steps, resets in calls
        ]
        for agent in envs.agents:
            assert (obs[agent][:, 0] == 0).all()  # the first observation: step count 0
            assert not rewards[agent].any()
            assert not terminated[agent].any() and not truncated[agent].any()
        obs = envs.step(actions(2, rng))[0]
        assert (obs[SPEAKER][:, 0] == 1).all()  # stepping again


@MODES
def test_an_agent_that_left_reports_terminated_zero_reward_and_its_last_observation(sync) -> None:
    spec = toy_spec(num_envs=2, sync=sync, speaker_leaves_at=1)
    with PettingZooBuilder().build(spec, seed=0) as envs:
        rng = np.random.default_rng(0)
        first = envs.step(actions(2, rng))
        assert first[2][SPEAKER].all() and not first[2][LISTENER].any()
        assert first[1][SPEAKER].all()  # its last reward is real
        for step in (2, 3):
            obs, rewards, terminated, truncated, _ = envs.step(actions(2, rng))
            np.testing.assert_array_equal(obs[SPEAKER], first[0][SPEAKER])
            assert not rewards[SPEAKER].any() and terminated[SPEAKER].all()
            assert (obs[LISTENER][:, 0] == step).all() and rewards[LISTENER].all()
            if sync:  # its action was not passed on
                assert all(list(env.last_actions) == [LISTENER] for env in envs.envs)
        assert truncated[LISTENER].all()
        obs, _, terminated, _, _ = envs.step(actions(2, rng))
        assert not terminated[SPEAKER].any() and (obs[SPEAKER][:, 0] == 0).all()


def test_an_agent_that_has_not_appeared_reports_terminated_and_zeros() -> None:
    with PettingZooBuilder().build(toy_spec(num_envs=2, speaker_joins_at=2), seed=0) as envs:
        rng = np.random.default_rng(0)
        obs, _ = envs.reset()
        for _ in range(2):
            assert not obs[SPEAKER].any()
            obs, rewards, terminated, _, _ = envs.step(actions(2, rng))
            assert not obs[SPEAKER].any() and not rewards[SPEAKER].any()
            assert terminated[SPEAKER].all() and not terminated[LISTENER].any()
            obs, _, terminated, _, _ = envs.step(actions(2, rng))  # it appears
            assert (obs[SPEAKER][:, 0] == 2).all() and not terminated[SPEAKER].any()
            envs.step(actions(2, rng))  # the episode ends (length 3)
            obs, _, terminated, truncated, _ = envs.step(actions(2, rng))  # the reset step
            assert terminated[SPEAKER].all() and not terminated[LISTENER].any()
            assert not truncated[SPEAKER].any() and not truncated[LISTENER].any()


def test_seeds_reproduce_and_subprocesses_match_this_process() -> None:
    factory = PettingZooBuilder.make_factory(toy_spec())
    with SyncParallelVectorEnv(factory, 3) as envs:
        reference = rollout(envs, seed=7, steps=8)  # crosses two autoresets
        assert_same(rollout(envs, seed=7, steps=8), reference)
        other = rollout(envs, seed=8, steps=0)[0]
    assert not np.array_equal(other[LISTENER], reference[0][LISTENER])
    np.testing.assert_array_equal(other[LISTENER][:2], reference[0][LISTENER][1:])  # seed + i
    with SubprocessParallelVectorEnv(factory, 3, workers=2) as envs:
        assert_same(rollout(envs, seed=7, steps=8), reference)


def test_spawned_workers_make_their_own_copies() -> None:
    factory = PettingZooBuilder.make_factory(toy_spec(num_envs=2))
    with SyncParallelVectorEnv(factory, 2) as envs:
        reference = rollout(envs, seed=3, steps=4)
    with SubprocessParallelVectorEnv(factory, 2, workers=2, context="spawn") as envs:
        assert_same(rollout(envs, seed=3, steps=4), reference)


def test_a_worker_error_surfaces_in_the_parent_and_closes_the_vector() -> None:
    envs = PettingZooBuilder().build(toy_spec(num_envs=2, sync=False, fail_at=2), seed=0)
    rng = np.random.default_rng(0)
    envs.step(actions(2, rng))
    with pytest.raises(TrainingError, match=r"worker 0 \(copies 0-0\) failed at step: "
                       r"RuntimeError: toy failure at step 2") as caught:  # fmt: skip
        envs.step(actions(2, rng))
    assert "toy_parallel.py" in str(caught.value.__cause__)  # the worker's traceback
    assert caught.value.hint and "sync: true" in caught.value.hint
    assert not _workers_alive()
    with pytest.raises(TrainingError, match="closed"):
        envs.step(actions(2, rng))
    envs.close()
    envs.close()


def test_a_worker_that_cannot_build_its_copies_says_why() -> None:
    def broken() -> Any:
        raise ValueError("no copy for you")

    with pytest.raises(TrainingError, match="failed at start: ValueError: no copy for you"):
        SubprocessParallelVectorEnv(broken, 2, context="fork")
    assert not _workers_alive()


def test_close_ends_the_workers_and_can_be_called_twice() -> None:
    envs = PettingZooBuilder().build(toy_spec(num_envs=2, sync=False), seed=0)
    assert _workers_alive()
    envs.close()
    envs.close()
    assert not _workers_alive()


def test_a_vector_left_open_does_not_keep_the_program_from_exiting() -> None:
    script = (
        "from agile_pettingzoo.builder import PettingZooBuilder\n"
        "from agile_pettingzoo.spec import PettingZooEnvSpec\n"
        "spec = PettingZooEnvSpec(name='toy', entrypoint='toy_parallel.py:ToyParallel', "
        f"path={str(ENVS)!r}, num_envs=2)\n"
        "envs = PettingZooBuilder().build(spec, seed=0)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_workers_end_when_their_parent_is_killed() -> None:
    script = textwrap.dedent(f"""
        import multiprocessing, os, signal
        from agile_pettingzoo.builder import PettingZooBuilder
        from agile_pettingzoo.spec import PettingZooEnvSpec
        spec = PettingZooEnvSpec(name="toy", entrypoint="toy_parallel.py:ToyParallel",
                                 path={str(ENVS)!r}, num_envs=2)
        envs = PettingZooBuilder().build(spec, seed=0)
        print(*[p.pid for p in multiprocessing.active_children()], flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    pids = [int(pid) for pid in done.stdout.split()]
    assert pids, done.stderr
    deadline = time.monotonic() + 10
    while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_running(pid) for pid in pids)


def test_pettingzoo_mpe_names_resolve_to_mpe2_with_a_notice(monkeypatch, caplog) -> None:
    pytest.importorskip("mpe2")
    monkeypatch.setattr(builder_module, "_noticed", set())
    spec = PettingZooEnvSpec(name="pettingzoo.mpe.simple_spread_v3", num_envs=2)
    with caplog.at_level(logging.WARNING):
        assert PettingZooBuilder.make_factory(spec).name == "mpe2.simple_spread_v3"
        PettingZooBuilder().check(spec)
    assert caplog.messages == [
        "notice: pettingzoo.mpe.simple_spread_v3 moved to mpe2.simple_spread_v3 "
        "(PettingZoo 1.25+); using that"
    ]


def test_the_notice_is_one_line_on_stderr() -> None:
    pytest.importorskip("mpe2")
    script = (
        "from agile_pettingzoo.builder import PettingZooBuilder\n"
        "from agile_pettingzoo.spec import PettingZooEnvSpec\n"
        "spec = PettingZooEnvSpec(name='pettingzoo.mpe.simple_speaker_listener_v4')\n"
        "PettingZooBuilder().check(spec)\nPettingZooBuilder().check(spec)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "notice: pettingzoo.mpe.simple_speaker_listener_v4 moved to "
        "mpe2.simple_speaker_listener_v4 (PettingZoo 1.25+); using that"
    ]


@pytest.mark.parametrize(
    ("name", "message", "hint"),
    [
        ("no_such_pkg.some_env_v0", "cannot import 'no_such_pkg.some_env_v0'",
         "install it with `pip install no_such_pkg`"),
        ("json", "module 'json' has no parallel_env", "e.g. mpe2.simple_spread_v3"),
        ("mpe2.simple_spred_v3", "'mpe2' has no module 'simple_spred_v3'",
         "did you mean 'mpe2.simple_spread_v3'?"),
        ("simple_spread_v3", "cannot import 'simple_spread_v3'",
         "did you mean 'mpe2.simple_spread_v3'?"),
        ("CartPole-v1", "'CartPole-v1' is not a Python module path", "environment.entrypoint"),
    ],
)  # fmt: skip
def test_a_name_that_does_not_resolve_says_what_to_do(name, message, hint) -> None:
    if "mpe2" in hint:
        pytest.importorskip("mpe2")
    with pytest.raises(EnvironmentNotFoundError) as caught:
        PettingZooBuilder().check(PettingZooEnvSpec(name=name))
    assert message in caught.value.message
    assert hint in (caught.value.hint or "")


def test_a_missing_mpe2_suggests_installing_it(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "mpe2", None)  # import mpe2 fails as if not installed
    monkeypatch.delitem(sys.modules, "mpe2.simple_spread_v3", raising=False)
    with pytest.raises(EnvironmentNotFoundError) as caught:
        PettingZooBuilder().check(PettingZooEnvSpec(name="mpe2.simple_spread_v3"))
    assert caught.value.hint == (
        'install it with `pip install mpe2` or, in agile\'s folder, `pip install -e ".[mpe]"`'
    )


def test_wrappers_apply_to_a_named_environment() -> None:
    pytest.importorskip("mpe2")
    rewards = []
    for wrappers in ([], [("toy_parallel.py:ScaleRewards", {"factor": 10.0})]):
        spec = PettingZooEnvSpec(
            name="mpe2.simple_spread_v3", num_envs=2, sync=True, path=str(ENVS), wrappers=wrappers
        )
        with PettingZooBuilder().build(spec, seed=0) as envs:
            rewards.append(envs.step({a: np.ones(2, int) for a in envs.agents})[1]["agent_0"])
    assert rewards[0].all()
    np.testing.assert_allclose(rewards[1], 10 * rewards[0], rtol=1e-6)


def test_a_space_that_cannot_be_batched_is_refused_up_front() -> None:
    class DictObservations(ToyParallel):
        def observation_space(self, agent: str) -> spaces.Space:
            return spaces.Dict({"word": spaces.Discrete(3)})

    with pytest.raises(EnvironmentNotFoundError, match="'speaker_0' observes a Dict space"):
        SyncParallelVectorEnv(DictObservations, 2)


class ToyMultiAgentSpec(AlgorithmSpec):
    """A made-up multi-agent algorithm, so that validate picks the PettingZoo builder."""

    gamma: float = Field(0.99, description="Discount factor (the paradigm's runner reads it).")
    mutable_hyperparameters: ClassVar[tuple[str, ...]] = ()


class ToyMultiAgentPlugin:
    @hookimpl
    def agile_register_algorithms(self, register) -> None:
        register(name="ToyMA", spec=ToyMultiAgentSpec, family="multi_agent_off_policy",
                 implementation="x:ToyMA")  # fmt: skip


def test_validate_check_env_reports_a_missing_environment_module(make_host, run, write) -> None:
    host = make_host(("toy-ma", ToyMultiAgentPlugin()))
    missing = write("m.yaml", "algorithm: {name: ToyMA}\nenvironment: {name: no_such_pkg.e_v0}\n")
    assert run("validate", str(missing), host=host).exit_code == 0  # no import without the flag
    result = run("validate", "--check-env", str(missing), host=host)
    assert result.exit_code == 2
    assert (
        "environment: cannot import 'no_such_pkg.e_v0' "
        "(install it with `pip install no_such_pkg`)" in result.output
    )
    toy = write(  # --check-env also builds a member: a real algorithm
        "t.yaml",
        "algorithm: {name: MADDPG}\nenvironment:\n  name: toy\n"
        f"  entrypoint: toy_parallel.py:ToyParallel\n  path: {ENVS}\n",
    )
    result = run("validate", "--check-env", str(toy), host=host)
    assert result.exit_code == 0, result.output


def _workers_alive() -> bool:
    return any(p.name.startswith("agile-env-worker") for p in multiprocessing.active_children())


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"
