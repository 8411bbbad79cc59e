"""The plugin's own tests, written with agile's testing kit (installed with agile)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from agile_reinforce.algorithm import REINFORCEGroup
from agile_rl import MemberGroup, Rollout

ENVS = 2  # each member's sub-environments in these tests
RTOL, ATOL = 1e-4, 1e-5  # float rounding: stacked products add up in another order
#: Three members that learn differently: each value is one member's.
HYPERPARAMETERS: dict[str, list[Any]] = {
    "lr": [1e-3, 3e-3, 5e-4],
    "gamma": [0.9, 0.99, 0.95],
    "vf_coef": [0.5, 1.0, 0.25],
    "ent_coef": [0.01, 0.0, 0.05],
    "max_grad_norm": [0.5, 0.0, 2.0],
    "normalize_advantages": [True, False, True],
}


def test_conforms(agile_conformance) -> None:
    agile_conformance("REINFORCE")


def test_trains_and_evolves(agile_smoke_train) -> None:
    result = agile_smoke_train("REINFORCE")
    assert result.summary["generations"] == 2
    assert all(np.isfinite(result.fitnesses))


def test_population_trains_stacked(agile_smoke_train) -> None:
    result = agile_smoke_train("REINFORCE")
    first = json.loads((result.run_dir / "metrics.jsonl").read_text().splitlines()[0])
    assert any(len(group) > 1 for group in first["groups"])


def test_validation_names_the_field(agile_cli, tmp_path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(
        "algorithm: {name: REINFORCE, gama: 0.9}\nenvironment: {name: CartPole-v1}\n"
    )
    result = agile_cli("validate", str(manifest))
    assert result.exit_code == 2
    assert "algorithm.gama: unknown field (did you mean 'gamma'?)" in result.output


def test_greedy_actions_are_valid(agile_population) -> None:
    member = agile_population("REINFORCE", size=1)[0]
    actions = member.act(np.zeros((3, 4), np.float32), explore=False)
    assert actions.shape == (3,) and set(actions) <= {0, 1}


# -- a group computes what each member computes alone -------------------------------------------


def _members(agile_population) -> list[Any]:
    """Three members, each with its own weights and hyperparameters."""
    training = {"max_steps": 128, "evo_steps": 64, "pop_size": 3}
    members = agile_population("REINFORCE", size=3, training=training)
    for index, member in enumerate(members):
        for name, values in HYPERPARAMETERS.items():
            member.set_hyperparameter(name, values[index])
    return members


def _twins(members: list[Any]) -> tuple[list[Any], list[Any]]:
    """Two copies of ``members``: the same weights, optimizer states and random streams."""
    return [m.clone(m.index) for m in members], [m.clone(m.index) for m in members]


def _observations(rows: int, seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.as_tensor(rng.normal(size=(rows, 4)), dtype=torch.float32)


def _rollout(member: Any, length: int, seed: int) -> Rollout:
    """``length`` steps of ``member`` acting on random observations, with random rewards and
    episode ends, some steps only resetting their environment (left out of learning)."""
    rng = np.random.default_rng(seed)
    rollout = Rollout()
    for step in range(length):
        obs = _observations(ENVS, seed * 100 + step)
        _, record = member.policy_step(obs)
        terminated, truncated = rng.random(ENVS) < 0.15, rng.random(ENVS) < 0.05
        valid = rng.random(ENVS) > 0.1
        rollout.add(obs, record, rng.normal(size=ENVS), terminated, truncated, valid)
    return rollout


def _own_rows(tensor: Any, row: int) -> Any:
    return tensor[row * ENVS : (row + 1) * ENVS]


def _weights(member: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in member.networks["policy"].named_parameters()}


def test_group_acts_as_each_member_alone(agile_population) -> None:
    alone, stacked = _twins(_members(agile_population))
    group = REINFORCEGroup(MemberGroup(stacked))
    obs = _observations(len(alone) * ENVS, seed=0)
    for _ in range(2):  # the random streams move on alike
        actions, record = group.policy_step(obs)
        for row, member in enumerate(alone):
            own_actions, own_record = member.policy_step(_own_rows(obs, row))
            np.testing.assert_array_equal(_own_rows(actions, row), own_actions)
            for mine, theirs in zip(own_record[:3], record[:3], strict=True):
                torch.testing.assert_close(theirs[row], mine, rtol=RTOL, atol=ATOL)
    for explore in (True, False):
        acted = group.act(obs.numpy(), explore=explore)
        own = [m.act(_own_rows(obs, i).numpy(), explore=explore) for i, m in enumerate(alone)]
        np.testing.assert_array_equal(acted, np.concatenate(own))
    for mine, theirs in zip(alone, stacked, strict=True):
        assert mine.generator.get_state().equal(theirs.generator.get_state())


def _assert_same_member(mine: Any, theirs: Any) -> None:
    """The same weights, Adam states and random stream, within float tolerance."""
    other = _weights(theirs)
    for name, weight in _weights(mine).items():
        torch.testing.assert_close(other[name], weight, rtol=RTOL, atol=ATOL)
    own_state = mine.optimizers["policy"].state_dict()["state"]
    their_state = theirs.optimizers["policy"].state_dict()["state"]
    assert own_state.keys() == their_state.keys()
    for key, state in own_state.items():
        for field in ("step", "exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(their_state[key][field], state[field], rtol=RTOL, atol=ATOL)
    assert mine.generator.get_state().equal(theirs.generator.get_state())


def test_group_learns_as_each_member_alone(agile_population) -> None:
    members = _members(agile_population)
    before = [_weights(member) for member in members]
    alone, stacked = _twins(members)
    group = MemberGroup(stacked)
    learner = REINFORCEGroup(group)
    # Two updates, so that each member's gradient clipping shows (Adam's first step does not
    # depend on the gradient's scale); in the second, the second member has no rollout.
    updates: list[list[int | None]] = [[12, 8, 10], [6, None, 9]]  # rollout lengths
    for update, lengths in enumerate(updates):
        rollouts = [
            None if length is None else _rollout(member, length, seed=10 * update + index)
            for index, (member, length) in enumerate(zip(members, lengths, strict=True))
        ]
        last_obs = _observations(len(members) * ENVS, seed=99 + update)
        own = [
            None if rollout is None else m.learn(rollout, _own_rows(last_obs, i)).loss
            for i, (m, rollout) in enumerate(zip(alone, rollouts, strict=True))
        ]
        losses = learner.learn_rollouts(rollouts, last_obs)
        assert [loss is None for loss in losses] == [length is None for length in lengths]
        learned = [loss for loss in losses if loss is not None]
        expected = [loss for loss in own if loss is not None]
        np.testing.assert_allclose(learned, expected, rtol=RTOL, atol=ATOL)
    group.write_back()
    for mine, theirs, weights in zip(alone, stacked, before, strict=True):
        _assert_same_member(mine, theirs)
        after = _weights(mine)
        assert any(not after[name].equal(weight) for name, weight in weights.items())
