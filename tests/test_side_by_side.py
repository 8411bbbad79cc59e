"""A builder whose section has no num_envs still gives each member its own rows: its copies,
stepped side by side, behave as one vector environment of all their rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from pydantic import Field

from agile_cli import EnvironmentBuilder, EnvironmentSpec, hookimpl
from agile_cli.testing import smoke_train, tiny_manifest
from agile_rl.runtime.side_by_side import SideBySideEnv


def _vector(count: int) -> gym.vector.SyncVectorEnv:
    return gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * count)


def test_copies_side_by_side_step_as_one_vector_environment_of_their_rows() -> None:
    apart = SideBySideEnv([_vector(2), _vector(1), _vector(2)])
    whole = _vector(5)
    assert apart.num_envs == 5
    assert apart.single_observation_space == whole.single_observation_space
    first, _ = apart.reset(seed=11)
    expected, _ = whole.reset(seed=11)  # row j reset from seed 11 + j, in both
    np.testing.assert_array_equal(first, expected)
    actions = np.random.default_rng(0).integers(0, 2, size=(40, 5))
    for step in actions:
        got = apart.step(step)
        want = whole.step(step)
        for mine, theirs in zip(got[:4], want[:4], strict=True):
            np.testing.assert_array_equal(mine, theirs)
    apart.close()
    whole.close()


class PoleSpec(EnvironmentSpec):
    """CartPole in two copies, with no num_envs to scale."""

    name: str = Field("CartPole-v1", description="Gymnasium id.")


class PoleBuilder(EnvironmentBuilder):
    def build(self, spec: Any, *, seed: int | None = None) -> Any:
        return _vector(2)


class PolePlugin:
    @hookimpl
    def agile_register_environments(self, register: Any) -> None:
        register(name="pole", spec=PoleSpec, families=["off_policy"],
                 implementation=f"{__name__}:PoleBuilder")  # fmt: skip


def test_a_builder_without_num_envs_trains_each_member_in_its_own_copies(
    make_host: Any, tmp_path: Path
) -> None:
    registry = make_host(("pole", PolePlugin())).registry
    manifest = tiny_manifest("DQN", registry=registry,
                             environment={"builder": "pole", "name": "CartPole-v1"})  # fmt: skip
    result = smoke_train(manifest, tmp_path / "run", registry, seed=1)
    assert all(member.record.steps == manifest.training.max_steps for member in result.population)
    assert all(member.context.num_envs == 2 for member in result.population)  # its own copies
    first = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert first["groups"] == [[0, 1]]  # both members stacked, in 2 x 2 rows
