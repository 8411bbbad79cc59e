"""mpe2's speaker-listener and simple spread as arrays: the same episodes as mpe2's own copies,
bit for bit, and chosen only where their dynamics are written."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import numpy as np
import pytest

from agile_cli import TrainingError
from agile_pettingzoo.builder import PettingZooBuilder
from agile_pettingzoo.mpe import MPEVectorEnv, world_for
from agile_pettingzoo.spec import PettingZooEnvSpec
from agile_pettingzoo.vector import SyncParallelVectorEnv

pytest.importorskip("mpe2")

LISTENER = "mpe2.simple_speaker_listener_v4"
SPREAD = "mpe2.simple_spread_v3"


def both(name: str, config: dict[str, Any], copies: int) -> tuple[Any, Any]:
    """mpe2's own copies stepped one by one, and the array version of the same."""
    make = importlib.import_module(name).parallel_env
    world = world_for(name, config)
    assert world is not None
    reference = SyncParallelVectorEnv(lambda: make(**config), copies)
    return reference, MPEVectorEnv(world, make(**config), copies)


def random_actions(env: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Discrete actions in range; Box actions partly outside it (both sides clip them)."""
    actions = {}
    for agent, space in env.single_action_spaces.items():
        if hasattr(space, "n"):
            actions[agent] = rng.integers(space.n, size=env.num_envs)
        else:
            shape = (env.num_envs, *space.shape)
            actions[agent] = rng.uniform(-0.2, 1.2, size=shape).astype(np.float32)
    return actions


def assert_same(expected: dict[str, np.ndarray], got: dict[str, np.ndarray], what: str) -> None:
    assert expected.keys() == got.keys()
    for agent in expected:
        assert got[agent].dtype == expected[agent].dtype, (what, agent)
        np.testing.assert_array_equal(got[agent], expected[agent], err_msg=f"{what}, {agent}")


CASES = [
    (LISTENER, {"max_cycles": 25, "continuous_actions": False}),
    (LISTENER, {"max_cycles": 7, "continuous_actions": True}),
    (SPREAD, {"N": 3, "local_ratio": 0.5, "max_cycles": 25, "continuous_actions": False}),
    (SPREAD, {"N": 4, "local_ratio": 0.3, "max_cycles": 11, "continuous_actions": True}),
    (SPREAD, {"N": 1, "terminate_on_success": True, "max_cycles": 100}),
]


@pytest.mark.parametrize(("name", "config"), CASES, ids=lambda case: str(case))
def test_every_step_equals_mpe2s_own_copies_bit_for_bit(name, config) -> None:
    reference, fast = both(name, config, copies=16 if "terminate_on_success" in config else 6)
    assert_same(reference.reset(seed=5)[0], fast.reset(seed=5)[0], "reset")
    rng = np.random.default_rng(0)
    ended = {"terminated": 0, "truncated": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # mpe2 warns about each clipped Box action
        for step in range(240):
            actions = random_actions(reference, rng)
            expected, got = reference.step(actions), fast.step(actions)
            for index, what in enumerate(("observations", "rewards", *ended)):
                assert_same(expected[index], got[index], f"step {step}, {what}")
            for index, what in ((2, "terminated"), (3, "truncated")):
                ended[what] += int(next(iter(expected[index].values())).sum())
    assert ended["truncated"] > 0  # autoreset was exercised
    if config.get("terminate_on_success"):
        assert ended["terminated"] > 0


def test_unseeded_resets_continue_each_copys_generator_as_mpe2_does() -> None:
    reference, fast = both(SPREAD, {}, copies=3)
    reference.reset(seed=9)
    fast.reset(seed=9)
    assert_same(reference.reset()[0], fast.reset()[0], "second reset")


def test_collisions_push_agents_apart_and_cost_reward() -> None:
    _, fast = both(SPREAD, {"N": 2, "local_ratio": 1.0}, copies=1)
    fast.reset(seed=0)
    fast.world.position[0] = [[0.0, 0.0], [0.1, 0.0]]  # closer than their sizes (0.15 each)
    _, rewards, *_ = fast.step({"agent_0": np.array([0]), "agent_1": np.array([0])})
    assert rewards["agent_0"][0] == rewards["agent_1"][0] == -1.0
    assert fast.world.velocity[0, 0, 0] < 0 < fast.world.velocity[0, 1, 0]


def test_an_action_out_of_range_is_refused_naming_the_agent() -> None:
    _, fast = both(LISTENER, {}, copies=2)
    fast.reset(seed=0)
    with pytest.raises(TrainingError, match=r"listener_0.*Discrete\(5\)"):
        fast.step({"speaker_0": np.array([0, 1]), "listener_0": np.array([0, 5])})


@pytest.mark.parametrize(
    ("name", "config", "vectorised"),
    [
        (LISTENER, {"max_cycles": 25}, True),
        ("pettingzoo.mpe.simple_spread_v3", {"N": 2, "curriculum": False}, True),
        (SPREAD, {"curriculum": True}, False),
        (SPREAD, {"num_agent_neighbors": 1}, False),
        (LISTENER, {"render_mode": "rgb_array"}, False),
        ("mpe2.simple_adversary_v3", {}, False),
    ],
)
def test_the_builder_vectorises_only_what_is_written_here(name, config, vectorised) -> None:
    spec = PettingZooEnvSpec(name=name, num_envs=2, sync=True, config=config)
    env = PettingZooBuilder().build(spec, seed=0)
    try:
        assert isinstance(env, MPEVectorEnv) is vectorised
    finally:
        env.close()


def test_vectorised_false_steps_mpe2s_own_copies() -> None:
    spec = PettingZooEnvSpec(name=LISTENER, num_envs=2, sync=True, vectorised=False)
    env = PettingZooBuilder().build(spec, seed=0)
    assert isinstance(env, SyncParallelVectorEnv)
    env.close()
