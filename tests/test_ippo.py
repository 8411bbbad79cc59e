"""IPPO and the multi-agent on-policy runner: per-agent advantages worked out by hand,
parameter sharing, action distributions, a learning step, acting in every action space, and
smoke training with checkpoints and resume on a toy PettingZoo environment."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch.distributions import Bernoulli, Categorical, Independent, Normal

from agile_cli import FieldError, ManifestError
from agile_cli.environment import MultiAgentVectorEnv
from agile_cli.testing import check_conformance, installed_host, smoke_train, tiny_manifest
from agile_ippo.distributions import action_head
from agile_rl.nn.arch import arch_from_spec
from agile_rl.runtime.agent import AgentContext
from agile_rl.runtime.rollout import RolloutBatch
from agile_rl.runtime.team_env import TeamEnv
from agile_rl.training.multi_agent_on_policy import (
    GroupRows,
    MultiAgentOnPolicyRunner,
    TeamRollout,
)

TOY = {"name": "toy", "entrypoint": "tests.envs.toy_parallel:ToyParallel", "num_envs": 2,
       "sync": True, "config": {"length": 6, "speaker_leaves_at": 4}}  # fmt: skip
BOX3 = spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
TRIO = {f"agent_{i}": BOX3 for i in range(3)}


def _member(observations, actions, num_envs: int = 2, network=None, **options):
    """An IPPO member built directly on these spaces."""
    sections = {"network": network} if network else {}
    manifest = tiny_manifest("IPPO", environment=TOY, algorithm_options=options, **sections)
    context = AgentContext(torch.device("cpu"), num_envs, manifest.training,
                           network=manifest.network)  # fmt: skip
    cls = installed_host().registry.algorithms["IPPO"].load()
    return cls(
        manifest.algorithm,
        observation_spaces=observations,
        action_spaces=actions,
        arch=arch_from_spec(manifest.network, next(iter(observations.values()))),
        context=context,
    )


def _obs(spaces_by_agent, num_envs: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        agent: rng.uniform(-1, 1, (num_envs, *space.shape)).astype(np.float32)
        for agent, space in spaces_by_agent.items()
    }


# -- per-agent advantages through the runner ---------------------------------------------------


class _Scripted(MultiAgentVectorEnv):
    """One copy, two agents of one group, playing back a fixed script of per-agent steps."""

    def __init__(self, script) -> None:
        self.num_envs = 1
        self.agents = ["agent_0", "agent_1"]
        self.single_observation_spaces = dict.fromkeys(self.agents, BOX3)
        self.single_action_spaces = dict.fromkeys(self.agents, spaces.Discrete(2))
        self.script = list(script)
        self.t = 0

    def reset(self, *, seed=None):
        return {agent: np.zeros((1, 3), np.float32) for agent in self.agents}, {}

    def step(self, actions):
        rewards, terminated, truncated = self.script[self.t]
        self.t += 1

        def batch(values, dtype):
            return {a: np.array([v], dtype) for a, v in zip(self.agents, values, strict=True)}

        obs = {agent: np.full((1, 3), self.t, np.float32) for agent in self.agents}
        return obs, batch(rewards, float), batch(terminated, bool), batch(truncated, bool), {}

    def close(self) -> None:
        pass


def test_advantages_are_per_agent_and_bootstrap_only_through_truncation(monkeypatch) -> None:
    # agent_0 is rewarded 1, then 3 and terminates; it is absent (terminated, reward 0) while
    # agent_1 plays on, rewarded 2, 1, 2, until it is truncated; the fourth step only resets.
    script = [
        ((1.0, 2.0), (False, False), (False, False)),
        ((3.0, 1.0), (True, False), (False, False)),
        ((0.0, 2.0), (True, False), (False, True)),
        ((0.0, 0.0), (False, False), (False, False)),
    ]
    member = _member(dict.fromkeys(["agent_0", "agent_1"], BOX3),
                     dict.fromkeys(["agent_0", "agent_1"], spaces.Discrete(2)),
                     num_envs=1, gamma=0.5, gae_lambda=0.5, learn_step=4)  # fmt: skip
    # Every value estimate is 1 for agent_0's rows and 2 for agent_1's (rows are agent-major;
    # the member alone is a group of one).
    import agile_ippo.algorithm as ippo

    monkeypatch.setattr(
        ippo.IPPOGroup, "_values", lambda self, group, obs: torch.tensor([[1.0, 2.0]])
    )
    batches = []

    def record(learner, batch, counts):
        batches.append(RolloutBatch(*(field[0, : int(counts[0])] for field in batch)))
        return lambda epoch, epochs: []  # no minibatches: nothing learns

    monkeypatch.setattr(ippo, "row_minibatches", record)
    runner = MultiAgentOnPolicyRunner(TeamEnv(_Scripted(script)))
    [stats] = runner.train_population([member], 4, lambda n: None)

    # agent_0: A1 = 3 - 1 = 2 (terminated: no bootstrap); A0 = (1 + 0.5 * 1 - 1) + 0.25 * A1.
    # agent_1: A2 = 2 + 0.5 * 2 - 2 = 1 (truncated: bootstraps from the next value, 2);
    #          A1 = (1 + 0.5 * 2 - 2) + 0.25 * A2 = 0.25; A0 = (2 + 1 - 2) + 0.25 * A1.
    # agent_0's third step (it had left) and the reset step are left out.
    (batch,) = batches
    expected = torch.tensor([1.0, 1.0625, 2.0, 0.25, 1.0])  # [t0: a0, a1], [t1: a0, a1], [t2: a1]
    torch.testing.assert_close(batch.advantages, expected)
    values = torch.tensor([1.0, 2.0, 1.0, 2.0, 2.0])
    torch.testing.assert_close(batch.returns, expected + values)
    assert stats.episode_returns == [9.0]  # the team's return: 3 + 4 + 2
    assert stats.steps == member.record.steps == 4


def test_a_learn_step_changes_the_weights_and_keeps_their_shapes() -> None:
    member = _member(TRIO, dict.fromkeys(TRIO, spaces.Discrete(4)), num_envs=2,
                     batch_size=4, update_epochs=2)  # fmt: skip
    before = {
        name: p.detach().clone() for name, p in member.networks["actor.agent"].named_parameters()
    }
    rollout = TeamRollout(member.groups)
    for t in range(3):
        obs = member.obs_tensor(_obs(TRIO, 2, seed=t))
        _, records = member.policy_step(obs)
        rows = np.full(6, float(t))
        flags = np.zeros(6, dtype=bool)
        rollout.add(obs, records, GroupRows(
            {"agent": rows}, {"agent": flags}, {"agent": flags}, {"agent": ~flags}
        ))  # fmt: skip
    result = member.learn(rollout, member.obs_tensor(_obs(TRIO, 2, seed=9)))
    assert np.isfinite(result.loss)
    after = dict(member.networks["actor.agent"].named_parameters())
    assert {n: p.shape for n, p in after.items()} == {n: p.shape for n, p in before.items()}
    assert any(not torch.equal(before[n], after[n]) for n in before)


# -- parameter sharing -------------------------------------------------------------------------


def test_alike_agents_share_one_actor_and_one_critic() -> None:
    member = _member(TRIO, dict.fromkeys(TRIO, spaces.Discrete(5)))
    assert member.groups == {"agent": ["agent_0", "agent_1", "agent_2"]}
    assert sorted(member.networks) == ["actor.agent", "critic.agent"]
    assert member.policies == [member.networks["actor.agent"]]
    same = dict.fromkeys(TRIO, np.array([[0.1, -0.2, 0.3]] * 2, np.float32))
    actions = member.act(same, explore=False)
    assert actions["agent_0"].tolist() == actions["agent_1"].tolist() == actions["agent_2"].tolist()


def test_agents_that_differ_get_networks_of_their_own() -> None:
    observations = {"walker_0": BOX3, "walker_1": spaces.Box(-1, 1, (4,), np.float32),
                    "scout_0": BOX3}  # fmt: skip
    actions = {"walker_0": spaces.Discrete(2), "walker_1": spaces.Discrete(2),
               "scout_0": spaces.Box(-1, 1, (2,), np.float32)}  # fmt: skip
    member = _member(observations, actions)
    assert member.groups == {"walker_0": ["walker_0"], "walker_1": ["walker_1"],
                             "scout": ["scout_0"]}  # fmt: skip
    assert sorted(member.networks) == [
        "actor.scout", "actor.walker_0", "actor.walker_1", "critic.scout", "critic.walker_0",
        "critic.walker_1", "log_std.scout",
    ]  # fmt: skip
    assert len(member.optimizers) == 3


# -- acting ------------------------------------------------------------------------------------

ACTION_SPACES = {
    "discrete_0": spaces.Discrete(3, start=1),
    "box_0": spaces.Box(-0.5, 0.5, (2,), np.float32),
    "multi_0": spaces.MultiDiscrete([2, 3]),
    "binary_0": spaces.MultiBinary(3),
}


@pytest.mark.parametrize("explore", [True, False])
def test_each_agent_acts_in_its_own_space(explore) -> None:
    observations = dict.fromkeys(ACTION_SPACES, BOX3)
    member = _member(observations, ACTION_SPACES, num_envs=5)
    actions = member.act(_obs(observations, 5), explore=explore)
    for agent, space in ACTION_SPACES.items():
        assert actions[agent].shape == (5, *space.shape), agent
        assert actions[agent].dtype == space.dtype, agent
        assert all(space.contains(action) for action in actions[agent]), agent


def test_squashed_box_actions_stay_inside_the_bounds() -> None:
    space = spaces.Box(np.array([0.0, -3.0], np.float32), np.array([1.0, 3.0], np.float32))
    member = _member({"a_0": BOX3}, {"a_0": space}, network={"squash_output": True},
                     num_envs=64, action_std_init=2.0)  # fmt: skip
    actions = member.act(_obs({"a_0": BOX3}, 64), explore=True)["a_0"]
    assert (actions >= space.low).all() and (actions <= space.high).all()
    assert len(np.unique(actions[:, 0])) > 32  # tanh keeps them spread, not piled on a bound


def test_action_batch_size_splits_the_forward_pass_only() -> None:
    whole = _member(TRIO, dict.fromkeys(TRIO, spaces.Discrete(5)), num_envs=7)
    split = _member(TRIO, dict.fromkeys(TRIO, spaces.Discrete(5)), num_envs=7,
                    action_batch_size=4)  # fmt: skip
    obs = _obs(TRIO, 7)
    for agent, action in whole.act(obs, explore=False).items():
        np.testing.assert_array_equal(action, split.act(obs, explore=False)[agent])


def test_dict_observations_are_batched_key_by_key() -> None:
    observed = spaces.Dict({"pos": spaces.Box(-1, 1, (2,), np.float32), "id": spaces.Discrete(3)})
    pair = ("a_0", "a_1")
    member = _member(dict.fromkeys(pair, observed), dict.fromkeys(pair, spaces.Discrete(2)), 3)
    obs = {
        "a_0": {"pos": np.zeros((3, 2), np.float32), "id": np.array([0, 1, 2])},
        "a_1": {"pos": np.ones((3, 2), np.float32), "id": np.array([2, 2, 2])},
    }
    batched = member.obs_tensor(obs)["a"]
    assert batched["id"].argmax(-1).tolist() == [0, 1, 2, 2, 2, 2]  # a_0's rows, then a_1's
    assert batched["pos"][:, 0].tolist() == [0.0] * 3 + [1.0] * 3
    assert member.act(obs, explore=True)["a_1"].shape == (3,)


@pytest.mark.parametrize(
    ("space", "reference"),
    [
        (spaces.Discrete(4), lambda out, log_std: Categorical(logits=out)),
        (spaces.Box(-1, 1, (3,)),
         lambda out, log_std: Independent(Normal(out, log_std.exp()), 1)),
        (spaces.MultiBinary(3), lambda out, log_std: Independent(Bernoulli(logits=out), 1)),
    ],
)  # fmt: skip
def test_action_heads_score_like_torch_distributions(space, reference) -> None:
    head = action_head(space)
    generator = torch.Generator().manual_seed(0)
    out = torch.randn(6, head.width, generator=generator)
    log_std = torch.tensor([-0.5, 0.0, 0.3])
    actions, log_probs = head.sample(out, log_std, generator)
    expected = reference(out, log_std)
    torch.testing.assert_close(log_probs, expected.log_prob(actions))
    scored, entropy = head.evaluate(out, log_std, actions)
    torch.testing.assert_close(scored, log_probs)
    torch.testing.assert_close(entropy, expected.entropy())


def test_multi_discrete_scores_are_sums_over_entries() -> None:
    head = action_head(spaces.MultiDiscrete([2, 3]))
    out = torch.randn(4, 5, generator=torch.Generator().manual_seed(1))
    actions = torch.tensor([[0, 2], [1, 0], [1, 1], [0, 0]])
    parts = Categorical(logits=out[:, :2]), Categorical(logits=out[:, 2:])
    log_probs, entropy = head.evaluate(out, None, actions)
    torch.testing.assert_close(
        log_probs, sum(p.log_prob(actions[:, i]) for i, p in enumerate(parts))
    )
    torch.testing.assert_close(entropy, parts[0].entropy() + parts[1].entropy())


# -- the manifest ------------------------------------------------------------------------------


def test_torch_compiler_is_refused_with_a_hint() -> None:
    with pytest.raises(ManifestError) as raised:
        tiny_manifest("IPPO", environment=TOY, algorithm_options={"torch_compiler": "default"})
    assert FieldError("algorithm.torch_compiler", "torch.compile is not available yet",
                      "remove it or set it to null") in raised.value.errors  # fmt: skip


# -- training end to end ---------------------------------------------------------------------


def test_a_team_of_unlike_agents_trains_evolves_and_resumes(tmp_path) -> None:
    evolving = {"mutation": {"rl_hp_selection": {"lr": {"min": 1e-4, "max": 1e-2}}},
                "tournament_selection": {"tournament_size": 2}}  # fmt: skip
    result = smoke_train(tiny_manifest("IPPO", environment=TOY, **evolving), tmp_path / "run")
    assert result.summary["generations"] == 2
    assert all(np.isfinite(m.record.fitness).all() for m in result.population)
    check_conformance("IPPO", tmp_path, environment=TOY)


# -- a population of teams acts and learns as one computation --------------------------------


def _population(**hyperparameters: list) -> list:
    from agile_cli.testing import tiny_population

    manifest = tiny_manifest("IPPO", environment=TOY, training={"pop_size": 3})
    members = tiny_population(manifest, size=3)
    for index, member in enumerate(members):
        for name, values in hyperparameters.items():
            member.set_hyperparameter(name, values[index])
    return members


def _rollout(member, steps: int, seed: int) -> TeamRollout:
    """A team rollout of ``member``'s own policy on random observations and rewards."""
    rng = np.random.default_rng(seed)
    rollout = TeamRollout(member.groups)
    for t in range(steps):
        obs = member.obs_tensor(_obs(member.observation_spaces, 2, seed=seed * 100 + t))
        _, records = member.policy_step(obs)
        rows = {group: len(agents) * 2 for group, agents in member.groups.items()}
        rollout.add(obs, records, GroupRows(
            {g: rng.normal(size=n) for g, n in rows.items()},
            {g: rng.random(n) < 0.1 for g, n in rows.items()},
            {g: np.zeros(n, dtype=bool) for g, n in rows.items()},
            {g: rng.random(n) < 0.9 for g, n in rows.items()},
        ))  # fmt: skip
    return rollout


def test_a_group_of_teams_learns_as_each_team_does_alone() -> None:
    import copy

    from agile_rl.runtime.group import MemberGroup
    from tests.test_batched import _assert_same_members

    members = _population(lr=[1e-3, 3e-3, 5e-4], batch_size=[4, 6, 3], update_epochs=[2, 1, 3],
                          clip_coef=[0.2, 0.1, 0.3], learn_step=[8, 8, 8])  # fmt: skip
    rollouts = [_rollout(member, 5, seed) for seed, member in enumerate(members)]
    last = [m.obs_tensor(_obs(m.observation_spaces, 2, seed=50)) for m in members]
    learning = [True, False, True]
    own = [m.clone(m.index) for m in members]
    stacked = [m.clone(m.index) for m in members]
    alone = [m.learn(copy.deepcopy(r), o).loss if on else None
             for m, r, o, on in zip(own, rollouts, last, learning, strict=True)]  # fmt: skip
    learner = type(members[0]).group_learner(MemberGroup(stacked))
    taken = [copy.deepcopy(r) if on else None for r, on in zip(rollouts, learning, strict=True)]
    following = [o if on else None for o, on in zip(last, learning, strict=True)]
    together = learner.learn_rollouts(taken, following)
    learner.group.write_back()
    _assert_same_members(stacked, own)
    assert together[1] is None
    np.testing.assert_allclose([together[0], together[2]], [alone[0], alone[2]], rtol=1e-4)
    for before, after in zip(members[1].parameters(), stacked[1].parameters(), strict=True):
        assert before.equal(after)  # the team that did not learn is left as it was


def test_a_group_of_teams_acts_as_each_team_does_alone() -> None:
    from tests.test_batched import assert_teams_act_alike

    members = _population()
    assert_teams_act_alike(members, _obs(members[0].observation_spaces, 3 * 2, seed=1), 2)


def test_a_batched_generation_of_teams_equals_teams_stepping_alone(tmp_path) -> None:
    from tests.test_batched import assert_batched_equals_alone

    training = {"max_steps": 64, "evo_steps": 32, "pop_size": 3}
    manifest = tiny_manifest("IPPO", environment=TOY, training=training,
                             algorithm_options={"learn_step": 8, "batch_size": 8})  # fmt: skip
    assert_batched_equals_alone(manifest, tmp_path)
