"""A batched population computes what its members would compute one by one.

Stacked networks, the stacked Adam, group learners and the batched runner are compared with
the per-member path on the same inputs and random streams: equal within float tolerance.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest
import torch

from agile_cli.manifest import TrainingManifest
from agile_cli.testing import installed_host, smoke_train, tiny_manifest, tiny_population
from agile_cli.training import setup
from agile_rl.nn.arch import MLPArch, NetworkArch
from agile_rl.nn.modules import EvolvableNetwork
from agile_rl.runtime.buffers import PrioritizedReplayBuffer, ReplayBuffer
from agile_rl.runtime.group import MemberGroup, group_members
from agile_rl.training.runners import OffPolicyRunner

TOLERANCE = dict(rtol=1e-4, atol=1e-5)
#: Whole generations: float rounding moves continuous actions a little, and that compounds.
RUN_TOLERANCE = dict(rtol=1e-3, atol=1e-4)
CONFIGS = Path(__file__).parent.parent / "configs" / "training"


def _arch(
    encoder: tuple[int, ...],
    latent: int,
    head: tuple[int, ...],
    latent_norm: bool = False,
    **mlp: Any,
) -> NetworkArch:
    return NetworkArch(
        encoder=MLPArch(hidden_size=encoder, latent_norm=latent_norm, **mlp), latent_dim=latent,
        min_latent_dim=8, max_latent_dim=128, head=MLPArch(hidden_size=head, **mlp),
    )  # fmt: skip


PENDULUM = {"name": "Pendulum-v1", "num_envs": 2, "sync": True}
CONTINUOUS = ("DDPG", "TD3", "SAC")


def _population(
    algorithm: str,
    archs: list[NetworkArch],
    *,
    discrete: bool = False,
    options: dict[str, Any] | None = None,
    **hyperparameters: list[Any],
) -> list:
    training = {"max_steps": 128, "evo_steps": 64, "pop_size": len(archs)}
    environment = PENDULUM if algorithm in CONTINUOUS and not discrete else None
    manifest = tiny_manifest(
        algorithm, training=training, environment=environment, algorithm_options=options or {}
    )
    members = tiny_population(manifest, size=len(archs))
    for index, (member, arch) in enumerate(zip(members, archs, strict=True)):
        member.set_architecture(arch)
        for name, values in hyperparameters.items():
            member.set_hyperparameter(name, values[index])
    return members


def _filled_buffer(member: Any, rows: int = 400, seed: int = 0) -> ReplayBuffer:
    rng = np.random.default_rng(seed)
    buffer = ReplayBuffer(1000, member.observation_space, member.action_space, gamma=0.99)
    obs = rng.normal(size=(rows, *member.observation_space.shape)).astype(np.float32)
    next_obs = obs + rng.normal(scale=0.1, size=obs.shape).astype(np.float32)
    space = member.action_space  # drawn from rng too: the same batch in every run
    if isinstance(space, gymnasium.spaces.Discrete):
        actions = rng.integers(space.n, size=rows)
    else:
        actions = rng.uniform(space.low, space.high, size=(rows, *space.shape)).astype(np.float32)
    rewards, terminated = rng.normal(size=rows), rng.random(rows) < 0.1
    buffer.add(obs, actions, rewards, next_obs, terminated)
    return buffer


def _assert_same_members(batched_members: list, own: list, tolerance: dict = TOLERANCE) -> None:
    for one, other in zip(batched_members, own, strict=True):
        for name, network in one.networks.items():
            theirs = dict(other.networks[name].named_parameters())
            for parameter_name, parameter in network.named_parameters():
                torch.testing.assert_close(parameter, theirs[parameter_name], **tolerance)
        for name, optimizer in one.optimizers.items():
            mine, theirs = optimizer.state_dict()["state"], other.optimizers[name].state_dict()
            assert mine.keys() == theirs["state"].keys()
            for key, state in mine.items():
                for field in ("step", "exp_avg", "exp_avg_sq"):
                    expected = theirs["state"][key][field]
                    torch.testing.assert_close(state[field], expected, **tolerance)
        assert one.generator.get_state().equal(other.generator.get_state())
        assert one.rng.bit_generator.state == other.rng.bit_generator.state


# -- stacked networks ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layer_norm", "latent_norm"), [(True, False), (False, False), (True, True)]
)
def test_stacked_network_equals_each_member_padded_or_not(
    layer_norm: bool, latent_norm: bool
) -> None:
    norms = {"layer_norm": layer_norm, "latent_norm": latent_norm}
    archs = [_arch((16,), 16, (16,), **norms), _arch((48,), 8, (32,), **norms),
             _arch((16,), 24, (16,), **norms)]  # fmt: skip
    members = _population("DDPG", archs)  # critics read (s, a): the extra head input
    group = MemberGroup(members)
    obs = torch.randn(3, 5, *members[0].observation_space.shape)
    actions = torch.randn(3, 5, 1)
    stacked = group.net("critic")(obs, actions)["q"]
    for row, member in enumerate(members):
        own = member.networks["critic"](obs[row], actions[row])["q"]
        torch.testing.assert_close(stacked[row], own, **TOLERANCE)


def test_parameters_a_loss_does_not_reach_are_left_alone_as_adam_leaves_them() -> None:
    members = _population("DQN", ARCHS[:2])
    obs = torch.randn(2, 6, *members[0].observation_space.shape)
    for member in members:  # a second head that the loss below never reads
        space = member.observation_space
        member.networks["q"] = EvolvableNetwork(member.arch, space, {"q": 2, "unused": 3})
        member.networks["target"] = EvolvableNetwork(member.arch, space, {"q": 2, "unused": 3})
        member.add_optimizer("q", ("q",), "lr")
        member._parameter_lists = {}
    own = [m.clone(m.index) for m in members]
    group = MemberGroup(members)
    for _ in range(3):
        for row, member in enumerate(own):
            member.gradient_step("q", member.networks["q"](obs[row])["q"].pow(2).mean())
        losses = group.net("q")(obs)["q"].pow(2).mean(dim=(1, 2))
        group.gradient_step("q", losses, torch.ones(2, dtype=torch.bool))
    group.write_back()
    for member, twin in zip(members, own, strict=True):
        for (name, mine), theirs in zip(member.networks["q"].named_parameters(),
                                        twin.networks["q"].parameters(), strict=True):  # fmt: skip
            torch.testing.assert_close(mine, theirs, **TOLERANCE, msg=name)


def test_padding_takes_no_gradient_so_members_stay_their_own_size() -> None:
    members = _population("DQN", [_arch((16,), 16, (16,)), _arch((40,), 24, (32,))])
    group = MemberGroup(members)
    obs = torch.randn(2, 7, *members[0].observation_space.shape)
    losses = group.net("q")(obs)["q"].pow(2).mean(dim=(1, 2))
    group.gradient_step("q", losses, torch.ones(2, dtype=torch.bool))
    small = group.net("q").views["encoder.layers.0.weight"][0]
    assert small[16:].abs().sum() == 0  # the small member's padded units are still zero
    group.write_back()
    assert members[0].networks["q"].encoder.layers[0].weight.shape[0] == 16


# -- group learners against members' own learn and act -----------------------------------------


def _learn_both_ways(members: list, active: list[bool], steps: int = 3) -> tuple[list, list]:
    """Train twins of ``members`` ``steps`` times: per member, then as one group."""
    buffer = _filled_buffer(members[0])
    own = [m.clone(m.index) for m in members]
    for _ in range(steps):
        for member, on in zip(own, active, strict=True):
            if on:
                member.learn(buffer.sample(int(member.spec.batch_size), member.generator))
    stacked = [m.clone(m.index) for m in members]
    group = MemberGroup(stacked)
    learner = type(stacked[0]).group_learner(group)
    sizes = [int(m.spec.batch_size) if on else 0 for m, on in zip(stacked, active, strict=True)]
    for _ in range(steps):
        batch, rows = buffer.sample_stacked(sizes, [m.generator for m in stacked])
        learner.learn_batch(batch, rows, torch.tensor(active))
    group.write_back()
    return stacked, own


ARCHS = [_arch((16,), 16, (16,)), _arch((32,), 24, (16,)), _arch((16,), 16, (16,))]


@pytest.mark.parametrize("double", [False, True])
def test_dqn_group_learns_as_each_member_does(double: bool) -> None:
    members = _population("DQN", ARCHS, lr=[1e-3, 3e-3, 5e-4], gamma=[0.9, 0.99, 0.95],
                          batch_size=[16, 24, 8], tau=[0.01, 0.1, 0.5])  # fmt: skip
    for member in members:
        member.spec = member.spec.model_copy(update={"double": double})
    stacked, own = _learn_both_ways(members, [True, True, True])
    _assert_same_members(stacked, own)


def test_inactive_members_are_left_exactly_as_they_were() -> None:
    members = _population("DQN", ARCHS)
    stacked, own = _learn_both_ways(members, [True, False, True])
    _assert_same_members(stacked, own)
    for before, after in zip(members[1].parameters(), stacked[1].parameters(), strict=True):
        assert before.equal(after)


def test_a_group_continues_from_adam_states_members_already_have() -> None:
    members = _population("DQN", ARCHS, batch_size=[16, 16, 16])
    buffer = _filled_buffer(members[0], seed=1)
    for member in members[:2]:  # the third has never stepped: no optimizer state
        member.learn(buffer.sample(16, member.generator))
    stacked, own = _learn_both_ways(members, [True, True, True], steps=2)
    _assert_same_members(stacked, own)


def test_dqn_group_acts_as_each_member_does() -> None:
    members = _population("DQN", ARCHS)
    twins = [m.clone(m.index) for m in members]
    for member in members:
        member.epsilon = 0.5
    for twin in twins:
        twin.epsilon = 0.5
    learner = type(members[0]).group_learner(MemberGroup(twins))
    obs = np.random.default_rng(0).normal(size=(3 * 4, 4)).astype(np.float32)
    for explore in (True, False):
        stacked = learner.act(obs, explore=explore)
        own = np.concatenate([m.act(obs[4 * i : 4 * i + 4], explore=explore)
                              for i, m in enumerate(members)])  # fmt: skip
        np.testing.assert_array_equal(stacked, own)
    assert [m.epsilon for m in twins] == [m.epsilon for m in members]


@pytest.mark.parametrize(
    ("algorithm", "share_encoders"),
    [("DDPG", False), ("TD3", False), ("SAC", False), ("DDPG", True), ("TD3", True)],
)
def test_actor_critic_groups_learn_as_each_member_does(
    algorithm: str, share_encoders: bool
) -> None:
    members = _population(algorithm, ARCHS, lr_actor=[1e-3, 3e-3, 5e-4],
                          lr_critic=[2e-3, 1e-3, 1e-2], batch_size=[16, 24, 8],
                          policy_freq=[1, 2, 3], gamma=[0.9, 0.99, 0.95],
                          options={"share_encoders": True} if share_encoders else None)  # fmt: skip
    assert group_members(members) == [[0, 1, 2]]  # the widths differ: padded
    members[2].learn_counter = 1  # its next delayed actor update comes sooner
    stacked, own = _learn_both_ways(members, [True, True, True], steps=4)
    _assert_same_members(stacked, own)
    assert [m.learn_counter for m in stacked] == [m.learn_counter for m in own]


def test_cqn_group_learns_as_each_member_does() -> None:
    from tests.envs.toy_offline import toy_offline_environment

    training = {"max_steps": 128, "evo_steps": 64, "pop_size": 3}
    manifest = tiny_manifest("CQN", training=training, environment=toy_offline_environment())
    members = tiny_population(manifest, size=3)
    for member, arch, lr, alpha in zip(members, ARCHS, [1e-3, 3e-3, 5e-4], [0.5, 1.0, 2.0],
                                       strict=True):  # fmt: skip
        member.set_architecture(arch)
        member.set_hyperparameter("lr", lr)
        member.spec = member.spec.model_copy(update={"cql_alpha": alpha})
    stacked, own = _learn_both_ways(members, [True, False, True])
    _assert_same_members(stacked, own)


def test_discrete_sac_group_learns_as_each_member_does() -> None:
    members = _population("SAC", ARCHS, discrete=True, lr_actor=[1e-3, 3e-3, 5e-4],
                          lr_alpha=[1e-3, 1e-2, 3e-4], batch_size=[16, 24, 8],
                          policy_freq=[1, 2, 1], tau=[0.01, 0.1, 0.5])  # fmt: skip
    stacked, own = _learn_both_ways(members, [True, False, True], steps=4)
    _assert_same_members(stacked, own)
    assert all(m.alpha != 1.0 for i, m in enumerate(stacked) if i != 1)  # the temperature learns


@pytest.mark.parametrize("discrete", [False, True])
def test_sac_group_acts_as_each_member_does(discrete: bool) -> None:
    members = _population("SAC", ARCHS, discrete=discrete)
    twins = [m.clone(m.index) for m in members]
    learner = type(members[0]).group_learner(MemberGroup(twins))
    width = 4 if discrete else 3
    obs = np.random.default_rng(0).normal(size=(3 * 2, width)).astype(np.float32)
    for explore in (True, True, False):
        stacked = learner.act(obs, explore=explore)
        own = np.concatenate([m.act(obs[2 * i : 2 * i + 2], explore=explore)
                              for i, m in enumerate(members)])  # fmt: skip
        np.testing.assert_allclose(stacked, own, rtol=1e-5, atol=1e-6)
    for twin, member in zip(twins, members, strict=True):  # the same draws from each generator
        assert twin.generator.get_state().equal(member.generator.get_state())


@pytest.mark.parametrize("ou_noise", [False, True])
def test_actor_critic_group_acts_as_each_member_does(ou_noise: bool) -> None:
    members = _population("TD3", ARCHS, expl_noise=[0.1, 0.3, 0.2])
    for member in members:
        member.spec = member.spec.model_copy(update={"O_U_noise": ou_noise})
    twins = [m.clone(m.index) for m in members]
    learner = type(members[0]).group_learner(MemberGroup(twins))
    obs = np.random.default_rng(0).normal(size=(3 * 2, 3)).astype(np.float32)
    for explore in (True, True, False):
        stacked = learner.act(obs, explore=explore)
        own = np.concatenate([m.act(obs[2 * i : 2 * i + 2], explore=explore)
                              for i, m in enumerate(members)])  # fmt: skip
        np.testing.assert_allclose(stacked, own, rtol=1e-5, atol=1e-6)


def test_rainbow_group_learns_and_acts_as_each_member_does() -> None:
    archs = [*ARCHS[:2], _arch((16,), 16, (40,))]  # noisy heads of other widths, padded
    members = _population("RainbowDQN", archs, lr=[1e-3, 3e-3, 5e-4], batch_size=[16, 24, 8],
                          noise_std=[0.5, 0.3, 0.6], prior_eps=[1e-6, 1e-5, 1e-4])  # fmt: skip
    stacked, own = _learn_both_ways(members, [True, False, True])
    _assert_same_members(stacked, own)
    learner = type(stacked[0]).group_learner(MemberGroup(stacked))
    obs = np.random.default_rng(0).normal(size=(3 * 4, 4)).astype(np.float32)
    for explore in (True, False):  # noisy exploration from each member's generator, then mean
        together = learner.act(obs, explore=explore)
        alone = np.concatenate([m.act(obs[4 * i : 4 * i + 4], explore=explore)
                                for i, m in enumerate(own)])  # fmt: skip
        np.testing.assert_array_equal(together, alone)
    _assert_same_members(stacked, own)  # the same draws: the generators still agree


def test_prioritised_batches_give_each_member_its_own_weights_and_priorities() -> None:
    members = _population("DQN", ARCHS[:2], batch_size=[16, 8])
    buffer = PrioritizedReplayBuffer(1000, members[0].observation_space,
                                     members[0].action_space, gamma=0.99)  # fmt: skip
    source = _filled_buffer(members[0])
    batch = source.sample(300, torch.Generator().manual_seed(0))
    buffer.add(batch.obs.numpy(), batch.actions.numpy(), batch.rewards.numpy(),
               batch.next_obs.numpy(), batch.terminated.numpy())  # fmt: skip
    buffer.update_priorities(torch.arange(300), torch.rand(300) + 0.1)
    twins = [m.clone(m.index) for m in members]
    stacked, rows = buffer.sample_stacked([16, 8], [m.generator for m in twins], [0.4, 0.7])
    for row, (member, beta) in enumerate(zip(members, (0.4, 0.7), strict=True)):
        own = buffer.sample(int(member.spec.batch_size), member.generator, beta)
        size = len(own.indices)
        assert rows[row].sum() == size and stacked.indices[row, :size].equal(own.indices)
        torch.testing.assert_close(stacked.weights[row, :size], own.weights)
        torch.testing.assert_close(stacked.obs[row, :size], own.obs)


# -- grouping --------------------------------------------------------------------------------


def test_members_group_by_layout_and_padding_bound() -> None:
    archs = [
        _arch((16,), 16, (16,)),
        _arch((24,), 16, (16,)),  # widths differ: padded into the first group
        _arch((16,), 16, (16, 16)),  # another head depth: its own group
        _arch((4000,), 16, (16,)),  # padding the others to it would cost too much
    ]
    members = _population("DQN", archs, batch_size=[128] * 4)
    assert group_members(members) == [[0, 1], [2], [3]]


def test_mutated_members_pad_to_each_other_where_a_group_costs_less() -> None:
    # The mutations of one generation of the CartPole DQN manifest: member 3 is padded to
    # over 1.5 times its size, yet learns with two others in one call (measured, batch 128,
    # layer norm, one thread: 6.28 ms a step as [[0, 1, 3], [2]], the same as one group of
    # four, 8.1 ms one by one).
    archs = [
        _arch((64,), 64, (128,), layer_norm=True),
        _arch((64,), 72, (64,), layer_norm=True),
        _arch((128,), 64, (64,), layer_norm=True),
        _arch((64,), 64, (64,), layer_norm=True),
    ]
    members = _population("DQN", archs, batch_size=[128] * 4)
    assert group_members(members) == [[0, 1, 3], [2]]
    padded = MemberGroup([members[i] for i in (0, 1, 3)]).networks["q"].flat.shape[1]
    assert padded > 1.5 * sum(p.numel() for p in members[3].networks["q"].parameters())


def test_members_mutated_alike_keep_a_group_of_their_own_where_padding_the_rest_costs_more() -> (
    None
):
    # Sixteen CartPole DQN members, four with a wider encoder and four with a wider latent:
    # one padded group took 15.0 ms a step, these two groups 12.8 ms (measured, one thread);
    # adding members one at a time to the first group that takes them had padded all sixteen.
    manifest = TrainingManifest.get_validated(CONFIGS / "dqn" / "cartpole.yaml",
                                              registry=installed_host().registry)  # fmt: skip
    members = tiny_population(manifest, size=16)
    arch = members[0].arch
    for member in members[8:12]:
        member.set_architecture(_replace(arch, encoder=_replace(arch.encoder, hidden_size=(96,))))
    for member in members[12:]:
        member.set_architecture(_replace(arch, latent_dim=80))
    assert group_members(members) == [[*range(8), *range(12, 16)], [8, 9, 10, 11]]


def test_wide_teams_padded_to_each_other_learn_apart() -> None:
    # MADDPG teams of one generation of the speaker-listener manifest (8 networks each, batch
    # 256), mutated three ways: together they took 36.6 ms a step, one by one 25.4 ms
    # (measured); unmutated twins of them still stack.
    from agile_rl.runtime.group import stacking_cost

    environment = {"name": "mpe2.simple_speaker_listener_v4", "num_envs": 2, "sync": True}
    network = {"latent_dim": 64, "encoder_config": {"hidden_size": [64]},
               "head_config": {"hidden_size": [64]}}  # fmt: skip
    manifest = tiny_manifest("MADDPG", environment=environment, network=network,
                             algorithm_options={"batch_size": 256})  # fmt: skip
    members = tiny_population(manifest, size=4)
    arch = members[0].arch
    members[0].set_architecture(_replace(arch, head=_replace(arch.head, hidden_size=(128,))))
    members[1].set_architecture(_replace(arch, latent_dim=72))
    members[2].set_architecture(_replace(arch, encoder=_replace(arch.encoder, hidden_size=(128,))))
    assert group_members(members[:3]) == [[0], [1], [2]]
    twins = [members[3].clone(index) for index in range(3)]
    assert group_members(twins) == [[0, 1, 2]]
    assert stacking_cost(twins) < 3 * stacking_cost(twins[:1])


def _replace(value: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(value, **changes)


# -- the batched runner ------------------------------------------------------------------------


def _manifest(algorithm: str, evo_steps: int = 96, **options: Any) -> Any:
    training = {"max_steps": 192, "evo_steps": evo_steps, "pop_size": 3, "learning_delay": 0}
    environment = PENDULUM if algorithm in CONTINUOUS else None
    return tiny_manifest(algorithm, training=training, environment=environment, **options)


def _train(algorithm: str, tmp_path: Path, **options: Any) -> Any:
    return smoke_train(_manifest(algorithm, **options), tmp_path / "groups", seed=3)


def assert_batched_equals_alone(
    manifest: Any, tmp_path: Path, seed: int = 3, tolerance: dict = RUN_TOLERANCE
) -> None:
    """Train ``manifest`` with members stacked and with every member a group of one
    (``--per-member``, in the same population environment rows); the runs must group some
    members and end with the same fitnesses and members."""
    grouped = smoke_train(manifest, tmp_path / "groups", seed=seed)
    alone = smoke_train(manifest, tmp_path / "singles", seed=seed, per_member=True)
    groups = [json.loads(line)["groups"] for line in _metrics(grouped)]
    assert any(len(group) > 1 for generation in groups for group in generation)
    np.testing.assert_allclose(grouped.fitnesses, alone.fitnesses, rtol=1e-5)
    _assert_same_members(grouped.population, alone.population, tolerance)


def assert_teams_act_alike(members: list, obs: dict[str, np.ndarray], rows: int) -> None:
    """A group learner over twins of ``members`` (teams) acts on the population's
    observations (``rows`` per member and agent) as each team does alone, exploring or not,
    and leaves every generator where the teams alone leave theirs."""
    twins = [m.clone(m.index) for m in members]
    learner = type(members[0]).group_learner(MemberGroup(twins))
    for explore in (True, False):
        together = learner.act(obs, explore=explore)
        own = [
            {a: v[rows * i : rows * (i + 1)] for a, v in obs.items()} for i in range(len(members))
        ]
        alone = [m.act(mine, explore=explore) for m, mine in zip(members, own, strict=True)]
        for agent in members[0].agents:
            expected = np.concatenate([actions[agent] for actions in alone])
            np.testing.assert_allclose(together[agent], expected, rtol=1e-5, atol=1e-6)
    for twin, member in zip(twins, members, strict=True):
        assert twin.generator.get_state().equal(member.generator.get_state())
        assert twin.rng.bit_generator.state == member.rng.bit_generator.state


def _metrics(result: Any) -> list[str]:
    return (result.run_dir / "metrics.jsonl").read_text().splitlines()


# TD3 in one generation: its updates amplify float rounding (Adam on near-zero gradients), so
# that differences of 1e-7 in one generation grow to 1e-4 in the next, in either direction.
@pytest.mark.parametrize(
    ("algorithm", "evo_steps"), [("DQN", 96), ("RainbowDQN", 96), ("TD3", 192), ("SAC", 192)]
)
def test_batched_generation_equals_members_stepping_alone(
    algorithm: str, evo_steps: int, tmp_path: Path
) -> None:
    # Rainbow with its n-step returns but uniform replay: from one shared prioritised buffer a
    # group samples every member's batch before any of them updates priorities, while members
    # alone update between their samples, so their runs differ by design. It learns from both
    # returns (combined_reward): the first steps the buffer keeps stack too.
    options: dict[str, Any] = {}
    if algorithm == "RainbowDQN":
        options = {"replay_buffer": {"per_buffer": False},
                   "algorithm_options": {"combined_reward": True}}  # fmt: skip
    assert_batched_equals_alone(_manifest(algorithm, evo_steps, **options), tmp_path)


PIXELS = {"name": "bright", "path": str(Path(__file__).parent / "image_envs"),
          "entrypoint": "bright_side.py:make_bright_side", "num_envs": 2, "sync": True}  # fmt: skip
#: Same kernels and strides, channels that differ (padded), as channel mutations leave them.
CNNS = [([8, 8], 16), ([16, 8], 16), ([8, 12], 24)]


def _cnn_network(channels: list[int], latent: int) -> dict[str, Any]:
    encoder = {"channel_size": channels, "kernel_size": [3, 3], "stride_size": [2, 1],
               "layer_norm": False, "min_channel_size": 4}  # fmt: skip
    return {"latent_dim": latent, "min_latent_dim": 8, "encoder_config": encoder,
            "head_config": {"hidden_size": [16]}}  # fmt: skip


@pytest.mark.parametrize("channels_first", [False, True])
def test_stacked_cnn_equals_each_member_padded_or_not(channels_first: bool) -> None:
    environment = {**PIXELS, "config": {"channels_first": channels_first}}
    members = []
    for channels, latent in CNNS:
        manifest = tiny_manifest("DQN", environment=environment,
                                 network=_cnn_network(channels, latent))  # fmt: skip
        members += tiny_population(manifest, size=1)
    group = MemberGroup(members)
    shape = members[0].observation_space.shape
    obs = torch.rand(3, 5, *shape, generator=torch.Generator().manual_seed(0))
    stacked = group.net("q")(obs)["q"]
    for row, member in enumerate(members):
        own = member.networks["q"](obs[row])["q"]
        torch.testing.assert_close(stacked[row], own, **TOLERANCE)


@pytest.mark.parametrize("algorithm", ["DQN", "PPO"])
def test_cnn_members_train_stacked_as_each_member_alone(algorithm: str, tmp_path: Path) -> None:
    training = {"max_steps": 192, "evo_steps": 96, "pop_size": 3, "learning_delay": 0}
    options = {"learn_step": 32} if algorithm == "PPO" else {}
    network = _cnn_network([8, 8], 16)
    manifest = tiny_manifest(algorithm, training=training, environment=PIXELS, network=network,
                             algorithm_options=options)  # fmt: skip
    assert_batched_equals_alone(manifest, tmp_path)


def test_td3_with_shared_encoders_trains_stacked_as_its_members_alone(tmp_path: Path) -> None:
    # The reference's own TD3 manifests set share_encoders.
    options = {"algorithm_options": {"share_encoders": True}}
    assert_batched_equals_alone(_manifest("TD3", 192, **options), tmp_path)


def test_population_environment_gives_each_member_its_own_rows(tmp_path: Path) -> None:
    from agile_cli.testing import installed_host
    from agile_rl.training.runners import GenerationStats

    manifest = tiny_manifest("DQN", training={"pop_size": 3, "max_steps": 128, "evo_steps": 64})
    env = setup.build_environment(manifest, installed_host().registry, 0, members=3)
    obs, _ = env.reset(seed=0)
    assert env.num_envs == 6 and len({tuple(row) for row in obs.round(6)}) == 6  # own seeds
    buffer = ReplayBuffer(10, env.single_observation_space, env.single_action_space, gamma=0.9)
    runner = OffPolicyRunner(env, buffer)
    stats = [GenerationStats() for _ in range(3)]
    members = tiny_population(manifest, size=3)
    assert [len(slot.rows) for slot in runner._slots(members)] == [6]  # one group, 2 rows each
    done = np.array([False, False, True, False, False, True])  # member 1's row 0, member 2's row 1
    runner._episodes(members, stats, np.ones(6, dtype=bool), done, np.array([7.0, 9.0]))
    assert [s.episode_returns for s in stats] == [[], [7.0], [9.0]]
    assert runner._rows([0, 2]).tolist() == [0, 1, 4, 5]
    env.close()
    result = _train("DQN", tmp_path)
    assert _metrics(result) and all(len(m.record.fitness) == 2 for m in result.population)
    assert json.loads(_metrics(result)[0])["groups"] == [[0, 1, 2]]


def test_per_member_switch_makes_every_member_a_group_of_one(tmp_path: Path) -> None:
    manifest = _manifest("DQN")
    for per_member, groups in ((False, [[0, 1, 2]]), (True, [[0], [1], [2]])):
        result = smoke_train(manifest, tmp_path / str(per_member), seed=3, per_member=per_member)
        assert json.loads(_metrics(result)[0])["groups"] == groups
        assert all(m.record.steps == 192 for m in result.population)


def test_members_that_cannot_stack_say_why_in_the_output_and_the_metrics(
    run: Any, tmp_path: Path
) -> None:
    envs = Path(__file__).parent / "envs"
    manifest = {
        "algorithm": {"name": "DQN", "batch_size": 8, "learn_step": 4},
        "environment": {"name": "reach", "path": str(envs), "entrypoint": "toy.py:make_dict_reach",
                        "num_envs": 2, "sync": True},
        "training": {"max_steps": 64, "evo_steps": 32, "pop_size": 2},
    }  # fmt: skip
    path = tmp_path / "reach.yaml"
    path.write_text(json.dumps(manifest))
    result = run("train", str(path), "--run-dir", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    why = "the q network has a multiinput encoder, which does not stack yet"
    said = " ".join(result.output.split())  # as one line, however the terminal wrapped it
    assert said.count(f"members 0, 1 train one by one, not stacked: {why}") == 1
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert len(records) == 2 and all(r["alone"] == {"0": why, "1": why} for r in records)
    assert "alone" not in json.loads(_metrics(_train("DQN", tmp_path))[0])  # MLPs stack


def test_evolvable_networks_train_on_one_thread_whatever_the_machine_has() -> None:
    from agile_cli.training.loop import torch_threads

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert torch_threads(tiny_manifest("DQN")) == 1
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_convolutional_networks_train_on_every_core_torch_would_use(monkeypatch) -> None:
    from agile_cli.training import loop

    monkeypatch.setattr(loop, "available_cpus", lambda: 2)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        images = tiny_manifest("DQN", environment=PIXELS, network=_cnn_network([8, 8], 16))
        assert loop.torch_threads(images) == 2  # torch's own, within the CPUs it may use
        torch.set_num_threads(2)
        assert loop.torch_threads(images, requested=1) == 1  # --threads still decides
    finally:
        torch.set_num_threads(before)


def test_a_busy_machine_is_named_when_more_than_one_thread_would_compete(monkeypatch) -> None:
    from agile_cli.training import loop

    monkeypatch.setattr(loop, "available_cpus", lambda: 2)
    monkeypatch.setattr(loop.os, "getloadavg", lambda: (3.7, 2.0, 1.0))
    note = loop.busy_machine_note(2)
    assert note is not None and "load 3.7 on 2 CPUs" in note and "--threads 1" in note
    assert loop.busy_machine_note(1) is None  # one thread has nobody to wait for
    monkeypatch.setattr(loop.os, "getloadavg", lambda: (0.2, 0.1, 0.0))
    assert loop.busy_machine_note(2) is None


def test_threads_follow_the_cpus_this_process_may_use_and_the_threads_option(
    tmp_path, monkeypatch
) -> None:
    from agile_cli.training import loop

    quota = tmp_path / "cpu.max"
    monkeypatch.setattr(loop.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert loop.available_cpus(tmp_path / "absent") == 4
    quota.write_text("max 100000\n")
    assert loop.available_cpus(quota) == 4
    quota.write_text("150000 100000\n")  # docker --cpus 1.5
    assert loop.available_cpus(quota) == 2
    monkeypatch.setattr(loop.os, "sched_getaffinity", lambda pid: {3})  # taskset -c 3
    assert loop.available_cpus(quota) == 1
    before = torch.get_num_threads()
    try:
        loop.torch_threads(tiny_manifest("DQN"), requested=3)
        assert torch.get_num_threads() == 3
        torch.set_num_threads(2)  # a language model keeps torch's count, capped by the CPUs
        no_network = tiny_manifest("DQN").model_copy(update={"network": None})
        assert loop.torch_threads(no_network) == 1
    finally:
        torch.set_num_threads(before)


def test_a_subclass_that_changes_learning_trains_one_by_one_unless_it_names_a_learner() -> None:
    from agile_dqn.algorithm import DQN, DQNGroup
    from agile_rl.runtime.group import group_learner_of

    class LouderDQN(DQN):  # its own learn: DQNGroup would not do what it does
        def learn(self, batch: Any) -> Any:
            return super().learn(batch)

    class RenamedDQN(DQN):  # nothing a group learner redoes
        def extra_state(self) -> dict[str, Any]:
            return super().extra_state()

    class GroupedLouderDQN(LouderDQN):
        group_learner = DQNGroup

    assert group_learner_of(DQN) is DQNGroup
    assert group_learner_of(LouderDQN) is None
    assert group_learner_of(RenamedDQN) is DQNGroup
    assert group_learner_of(GroupedLouderDQN) is DQNGroup
