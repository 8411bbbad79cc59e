"""RainbowDQN: the C51 projection, the dueling head, the target, replay and the spec."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import agile_rainbow.algorithm as rainbow
from agile_cli import ManifestError, TrainingManifest
from agile_cli.testing import check_conformance, tiny_manifest, tiny_population
from agile_rainbow.algorithm import dueling_log_probs, project_distribution
from agile_rl.nn.noisy import mean_weights, noisy_layers
from agile_rl.runtime.buffers import Transitions

REPLAY = {"max_size": 1000, "per_buffer": True, "n_step_buffer": True}


def _member(**options):
    manifest = tiny_manifest("RainbowDQN", algorithm_options=options)
    return tiny_population(manifest, size=1)[0]


def _batch(size: int, **columns: torch.Tensor) -> Transitions:
    generator = torch.Generator().manual_seed(0)
    values = {
        "obs": torch.randn(size, 4, generator=generator),
        "actions": torch.randint(0, 2, (size,), generator=generator),
        "rewards": torch.ones(size),
        "next_obs": torch.randn(size, 4, generator=generator),
        "terminated": torch.zeros(size),
        "discounts": None,  # a one-step buffer's
        "weights": torch.ones(size),
        "indices": torch.arange(size),
    }
    return Transitions(**{**values, **columns})


# -- the C51 projection ------------------------------------------------------------------------


def test_projection_splits_mass_between_neighbouring_atoms_by_hand() -> None:
    support = torch.tensor([0.0, 1.0, 2.0])
    probs = torch.tensor([[0.2, 0.3, 0.5]] * 4)
    rewards = torch.tensor([0.5, 1.25, 3.0, -5.0])
    discounts = torch.tensor([0.5, 0.0, 1.0, 1.0])
    projected = project_distribution(probs, rewards, discounts, support)
    expected = torch.tensor(
        [
            # Tz = 0.5 + 0.5 z = (0.5, 1.0, 1.5): 0.2 halves over atoms 0 and 1, 0.3 lands on
            # atom 1, 0.5 halves over atoms 1 and 2.
            [0.1, 0.1 + 0.3 + 0.25, 0.25],
            # terminal (discount 0): all mass at Tz = 1.25, a quarter of the way to atom 2
            [0.0, 0.75, 0.25],
            # above v_max and below v_min: clipped to the end atoms
            [0.0, 0.0, 1.0],
            [1.0, 0.0, 0.0],
        ]
    )
    torch.testing.assert_close(projected, expected)


def test_projection_keeps_probability_mass() -> None:
    generator = torch.Generator().manual_seed(0)
    probs = torch.rand(64, 51, generator=generator).softmax(dim=1)
    rewards = torch.randn(64, generator=generator) * 50
    discounts = torch.rand(64, generator=generator)
    projected = project_distribution(probs, rewards, discounts, torch.linspace(-10, 10, 51))
    torch.testing.assert_close(projected.sum(dim=1), torch.ones(64))
    assert (projected >= 0).all()


# -- the dueling head --------------------------------------------------------------------------


def test_dueling_head_subtracts_the_mean_advantage_atom_by_atom() -> None:
    generator = torch.Generator().manual_seed(0)
    value = torch.randn(2, 3, generator=generator)  # 3 atoms
    advantage = torch.randn(2, 4 * 3, generator=generator)  # 4 actions
    log_probs = dueling_log_probs(value, advantage)
    assert log_probs.shape == (2, 4, 3)
    torch.testing.assert_close(log_probs.exp().sum(dim=-1), torch.ones(2, 4))
    per_action = advantage.view(2, 4, 3)
    logits = value[:, None, :] + per_action - per_action.mean(dim=1, keepdim=True)
    torch.testing.assert_close(log_probs, logits.log_softmax(dim=-1))
    # A shift shared by every action's advantages is absorbed by the mean.
    shift = torch.randn(2, 1, 3, generator=generator).expand(2, 4, 3).reshape(2, 12)
    torch.testing.assert_close(dueling_log_probs(value, advantage + shift), log_probs)


def test_network_has_a_value_and_an_advantage_head_of_noisy_layers() -> None:
    member = _member(num_atoms=11)
    network = member.networks["q"]
    assert network.head_sizes == {"value": 11, "advantage": 2 * 11}
    assert noisy_layers(network) and not noisy_layers(network.encoder)
    assert member.solo_learner().log_probs("q", torch.zeros(1, 5, 4)).shape == (1, 5, 2, 11)


# -- the target --------------------------------------------------------------------------------


@pytest.fixture
def projection_spy(monkeypatch):
    seen = {}

    def spy(probs, rewards, discounts, support):
        seen.update(probs=probs, rewards=rewards, discounts=discounts)
        return project_distribution(probs, rewards, discounts, support)

    monkeypatch.setattr(rainbow, "project_distribution", spy)
    return seen


@pytest.mark.parametrize("n_step", [True, False])
def test_target_bootstraps_with_n_step_discounts(projection_spy, n_step: bool) -> None:
    member = _member(gamma=0.9)
    discounts = torch.tensor([0.5, 0.25, 0.5]) if n_step else None
    batch = _batch(3, discounts=discounts, terminated=torch.tensor([0.0, 0.0, 1.0]))
    member.learn(batch)
    expected = [0.5, 0.25, 0.0] if n_step else [0.9, 0.9, 0.0]
    torch.testing.assert_close(projection_spy["discounts"], torch.tensor(expected))
    torch.testing.assert_close(projection_spy["rewards"], batch.rewards)


def test_online_network_chooses_the_next_action_and_the_target_scores_it(
    projection_spy, monkeypatch
) -> None:
    member = _member(num_atoms=3)
    size = 2
    online_next = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]).log()  # prefers action 0
    target_next = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]).log()  # prefers action 1
    learner = type(member).group_learner
    real = learner.log_probs
    calls = []

    def log_probs(self, network, obs):
        calls.append(network)
        if network == "target":
            return target_next.expand(1, size, 2, 3)
        if calls.count("q") == 2:  # the online network's pass over next_obs
            return online_next.expand(1, size, 2, 3)
        return real(self, network, obs)

    monkeypatch.setattr(learner, "log_probs", log_probs)
    member.learn(_batch(size))
    chosen = target_next.exp()[0]  # the target's distribution of the online choice, action 0
    torch.testing.assert_close(projection_spy["probs"], chosen.expand(size, 3))


# -- prioritised replay ------------------------------------------------------------------------


def test_importance_weights_reach_the_loss_and_priorities_are_the_cross_entropy() -> None:
    member = _member(prior_eps=1e-3)
    weights = torch.tensor([1.0, 0.5, 0.0, 0.25])
    result = member.learn(_batch(4, weights=weights))
    assert result.priorities.shape == (4,)
    assert (result.priorities > 1e-3).all()
    cross_entropy = result.priorities - 1e-3
    assert result.loss == pytest.approx(float((weights * cross_entropy).mean()), rel=1e-5)
    assert result.loss != pytest.approx(float(cross_entropy.mean()), rel=1e-3)


def test_importance_exponent_anneals_from_beta_to_one() -> None:
    member = _member(beta=0.3)
    assert member.importance_exponent(0.0) == pytest.approx(0.3)
    assert member.importance_exponent(0.5) == pytest.approx(0.65)
    assert member.importance_exponent(1.0) == 1.0


# -- acting and hyperparameters ----------------------------------------------------------------


def test_noisy_exploration_varies_actions_greedy_actions_do_not() -> None:
    member = _member()
    for layer in noisy_layers(member.networks["q"]):  # loud noise, so that actions change
        layer.weight_sigma.data.fill_(3.0)
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    greedy = member.act(obs, explore=False)
    assert all(np.array_equal(member.act(obs, explore=False), greedy) for _ in range(3))
    explored = [member.act(obs, explore=True) for _ in range(3)]
    assert any(not np.array_equal(actions, explored[0]) for actions in explored[1:])
    assert all(layer.training for layer in noisy_layers(member.networks["q"]))
    with torch.no_grad(), mean_weights(member.networks["q"]):
        learner = member.solo_learner()
        mean_q = learner.q_values(learner.log_probs("q", member.obs_tensor(obs).unsqueeze(0)))
    assert np.array_equal(greedy, mean_q[0].argmax(dim=1).numpy())


def test_mutating_noise_std_rescales_every_sigma() -> None:
    member = _member(noise_std=0.5)
    before = [layer.weight_sigma.clone() for layer in noisy_layers(member.networks["target"])]
    member.set_hyperparameter("noise_std", 1.0)
    after = [layer.weight_sigma for layer in noisy_layers(member.networks["target"])]
    assert all(torch.allclose(new, 2 * old) for old, new in zip(before, after, strict=True))
    assert member.spec.noise_std == 1.0 and member.networks["q"].noisy_std == 1.0


def test_conforms_learning_from_both_returns_of_prioritised_n_step_replay(tmp_path) -> None:
    # The default manifest's conformance (tests/test_training.py) covers n-step replay alone.
    options = {"combined_reward": True}
    check_conformance("RainbowDQN", tmp_path, algorithm_options=options, replay_buffer=REPLAY)


# -- the spec ----------------------------------------------------------------------------------


def _errors(algorithm: dict, replay_buffer: dict | None = None) -> list[str]:
    data = {"algorithm": {"name": "RainbowDQN", **algorithm}, "environment": "CartPole-v1"}
    if replay_buffer is not None:
        data["replay_buffer"] = replay_buffer
    with pytest.raises(ManifestError) as caught:
        TrainingManifest.get_validated(data)
    return [f"{error.path}: {error.message}" for error in caught.value.errors]


def test_v_min_must_be_below_v_max() -> None:
    assert _errors({"v_min": 10.0, "v_max": 10.0}) == [
        "algorithm.v_max: must be greater than v_min (10.0)"
    ]
    assert _errors({"v_min": 300}) == ["algorithm.v_max: must be greater than v_min (300.0)"]


def test_algorithm_n_step_must_agree_with_the_buffer() -> None:
    replay = {"n_step_buffer": True, "n_step_buffer_args": {"n_step": 3}}
    assert _errors({"n_step": 5}, replay) == [
        "algorithm.n_step: 5 disagrees with replay_buffer.n_step_buffer_args.n_step (3)"
    ]
    data = {"algorithm": {"name": "RainbowDQN", "n_step": 3}, "environment": "CartPole-v1",
            "replay_buffer": replay}  # fmt: skip
    manifest = TrainingManifest.get_validated(data)
    assert manifest.algorithm.n_step == 3
    assert not [w for w in manifest.warnings if w.startswith("algorithm.n_step")]


def test_rainbow_replays_prioritised_n_step_returns_unless_told_otherwise() -> None:
    plain = {"algorithm": {"name": "RainbowDQN"}, "environment": "CartPole-v1"}
    manifest = TrainingManifest.get_validated(plain)
    replay = manifest.replay_buffer
    assert replay is not None and replay.per_buffer and replay.n_step_buffer
    assert replay.n_step_buffer_args.n_step == 3 and not manifest.warnings
    written = {**plain, "replay_buffer": {"per_buffer": False, "n_step_buffer": False}}
    replay = TrainingManifest.get_validated(written).replay_buffer
    assert replay is not None and not (replay.per_buffer or replay.n_step_buffer)
    dqn = TrainingManifest.get_validated({**plain, "algorithm": {"name": "DQN"}}).replay_buffer
    assert dqn is not None and not (dqn.per_buffer or dqn.n_step_buffer)  # others: unchanged


def test_algorithm_n_step_is_the_length_of_the_default_n_step_buffer() -> None:
    # The reference's own Rainbow manifests write n_step and leave the buffer's flags out.
    for replay in (None, {"max_size": 1000}, {"per_buffer": True}):
        data = {"algorithm": {"name": "RainbowDQN", "n_step": 4}, "environment": "CartPole-v1"}
        if replay is not None:
            data["replay_buffer"] = replay
        manifest = TrainingManifest.get_validated(data)
        assert manifest.replay_buffer is not None
        assert manifest.replay_buffer.n_step_buffer_args.n_step == 4
        assert not [w for w in manifest.warnings if w.startswith("algorithm.n_step")]
    off = {"algorithm": {"name": "RainbowDQN", "n_step": 4}, "environment": "CartPole-v1",
           "replay_buffer": {"n_step_buffer": False}}  # fmt: skip
    (warning,) = [w for w in TrainingManifest.get_validated(off).warnings
                  if w.startswith("algorithm.n_step")]  # fmt: skip
    assert "ignored" in warning and "n_step_buffer_args.n_step: 4" in warning


def test_combined_reward_adds_the_first_steps_loss_to_the_n_step_loss(projection_spy) -> None:
    member = _member(gamma=0.9, combined_reward=True)
    plain = _batch(3, discounts=torch.tensor([0.81, 0.81, 0.9]))
    first = {
        "step_rewards": torch.tensor([2.0, 3.0, 4.0]),
        "step_terminated": torch.zeros(3),
        "step_next_obs": torch.randn(3, 4, generator=torch.Generator().manual_seed(1)),
    }
    twin = member.clone(member.index)
    alone = member.learn(plain).priorities
    projection_spy.clear()
    both = twin.learn(plain._replace(**first)).priorities
    torch.testing.assert_close(projection_spy["rewards"], first["step_rewards"])  # the 1-step
    torch.testing.assert_close(projection_spy["discounts"], torch.full((3,), 0.9))
    assert (both > alone).all()  # a second cross-entropy, non-negative, is added


def test_combined_reward_without_an_n_step_buffer_is_ignored_with_a_warning() -> None:
    data = {"algorithm": {"name": "RainbowDQN", "combined_reward": True},
            "environment": "CartPole-v1", "replay_buffer": {"n_step_buffer": False}}  # fmt: skip
    manifest = TrainingManifest.get_validated(data)
    assert [w for w in manifest.warnings if w.startswith("algorithm.combined_reward: ignored")]
    on = TrainingManifest.get_validated({**data, "replay_buffer": {"n_step_buffer": True}})
    assert not [w for w in on.warnings if "combined_reward" in w]
