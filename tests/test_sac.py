"""SAC: the squashed Gaussian's log-probabilities, the soft target, the temperature, acting in
both kinds of action space, the conformance kit and smoke training. Batched-equals-alone is in
``test_batched.py``."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.distributions import Normal, TransformedDistribution
from torch.distributions.transforms import TanhTransform

from agile_cli import ManifestError
from agile_cli.testing import check_conformance, smoke_train, tiny_manifest, tiny_population
from agile_rl.runtime.buffers import Transitions
from agile_rl.runtime.solo import one_member
from agile_sac.algorithm import SACGroup

PENDULUM = {"name": "Pendulum-v1", "num_envs": 2, "sync": True}


def _member(discrete: bool = False, **options):
    environment = None if discrete else PENDULUM
    manifest = tiny_manifest("SAC", environment=environment, algorithm_options=options)
    return tiny_population(manifest, size=1)[0]


def _batch(size: int, width: int, actions: torch.Tensor, **columns) -> Transitions:
    generator = torch.Generator().manual_seed(0)
    values = {
        "obs": torch.rand(size, width, generator=generator),
        "actions": actions,
        "rewards": torch.ones(size),
        "next_obs": torch.rand(size, width, generator=generator),
        "terminated": torch.zeros(size),
        "discounts": None,
        "weights": torch.ones(size),
        "indices": torch.arange(size),
    }
    values.update(columns)
    return Transitions(**values)


def test_squashed_log_probabilities_are_the_tanh_gaussians() -> None:
    member = _member()
    learner = member.solo_learner()
    generator = torch.Generator().manual_seed(0)
    out = {"mean": torch.randn(1, 256, 1, generator=generator),
           "log_std": torch.randn(1, 256, 1, generator=generator)}  # fmt: skip
    actions, log_probs = learner._squashed(out, [256])
    low, high = -5.0, 2.0
    log_std = low + 0.5 * (high - low) * (torch.tanh(out["log_std"]) + 1.0)
    reference = TransformedDistribution(Normal(out["mean"], log_std.exp()), [TanhTransform()])
    # away from the bounds, where inverting tanh in float32 loses the sample
    inside = actions.abs().squeeze(-1) < 0.99
    assert inside.sum() > 200
    expected = reference.log_prob(actions).sum(-1)
    torch.testing.assert_close(log_probs[inside], expected[inside], rtol=1e-3, atol=1e-3)
    assert torch.isfinite(log_probs).all()  # at the bounds too: computed from the pre-tanh sample


def test_the_soft_target_subtracts_the_temperature_times_the_log_probability(monkeypatch) -> None:
    member = _member(gamma=0.5, alpha=0.25, auto_alpha=False)

    def fixed_policy(self, out, counts):
        size = out["mean"].shape[1]
        return torch.zeros(1, size, 1), torch.full((1, size), 2.0)

    def fixed_q(self, network, obs, actions):
        if network.endswith("_target"):
            return torch.full(actions.shape[:2], 3.0 if network.startswith("critic_1") else 4.0)
        return torch.zeros(actions.shape[:2], requires_grad=True)

    monkeypatch.setattr(SACGroup, "_squashed", fixed_policy)
    monkeypatch.setattr(SACGroup, "q_values", fixed_q)
    terminated = torch.tensor([0.0, 1.0])
    batch = _batch(2, 3, torch.zeros(2, 1), terminated=terminated)
    learner = member.solo_learner()
    _, priorities = learner.learn_batch(
        one_member(batch), torch.ones(1, 2), torch.ones(1, dtype=torch.bool)
    )
    # min(3, 4) - 0.25 * 2 = 2.5; r + 0.5 * 2.5 where the episode goes on, r where it ended
    torch.testing.assert_close(priorities[0], torch.tensor([2.25, 1.0]) + 1e-6)


@pytest.mark.parametrize("discrete", [False, True])
def test_the_temperature_moves_towards_the_target_entropy(discrete: bool) -> None:
    member = _member(discrete, target_entropy=-50.0, lr_alpha=0.1, alpha=0.5)
    width, size = (4, 32) if discrete else (3, 32)
    actions = torch.zeros(size, dtype=torch.long) if discrete else torch.zeros(size, 1)
    batch = _batch(size, width, actions)
    for _ in range(5):
        member.learn(batch)
    assert member.alpha < 0.5  # entropy far above a target of -50: less weight on it
    fixed = _member(discrete, auto_alpha=False, alpha=0.5)
    fixed.learn(batch)
    assert fixed.alpha == pytest.approx(0.5) and "alpha" not in fixed.optimizers


def test_default_target_entropies() -> None:
    assert _member().target_entropy == -1.0  # Pendulum: one action dimension
    assert _member(True).target_entropy == pytest.approx(0.89 * math.log(2))  # CartPole


def test_box_actions_explore_within_the_bounds_and_greedy_ones_are_the_mean() -> None:
    member = _member()
    obs = np.random.default_rng(0).normal(size=(200, 3)).astype(np.float32)
    explored = member.act(obs, explore=True)
    assert explored.shape == (200, 1) and np.abs(explored).max() <= 2.0
    greedy = member.act(obs, explore=False)
    np.testing.assert_array_equal(greedy, member.act(obs, explore=False))
    with torch.no_grad():
        mean = member.networks["actor"](member.obs_tensor(obs))["mean"]
    np.testing.assert_allclose(greedy, 2.0 * torch.tanh(mean).numpy(), rtol=1e-5, atol=1e-6)
    assert not np.allclose(explored, greedy)


def test_discrete_actions_sample_the_policy_and_greedy_ones_are_its_argmax() -> None:
    member = _member(discrete=True)
    obs = np.random.default_rng(0).normal(size=(500, 4)).astype(np.float32)
    with torch.no_grad():
        logits = member.networks["actor"](member.obs_tensor(obs))["logits"]
    greedy = member.act(obs, explore=False)
    np.testing.assert_array_equal(greedy, logits.argmax(dim=-1).numpy())
    explored = member.act(obs, explore=True)
    assert set(np.unique(explored)) == {0, 1} and (explored != greedy).any()


def test_conforms_with_box_actions(tmp_path) -> None:
    """(With discrete actions, as every algorithm does: tests/test_training.py.)"""
    check_conformance("SAC", tmp_path, environment=PENDULUM)


@pytest.mark.parametrize("replay", [{}, {"per_buffer": True, "n_step_buffer": True}])
def test_smoke_trains_from_every_buffer_kind(replay, tmp_path) -> None:
    manifest = tiny_manifest("SAC", environment=PENDULUM,
                             replay_buffer={"max_size": 1000, **replay})  # fmt: skip
    result = smoke_train(manifest, tmp_path / "run")
    assert result.summary["generations"] == 2
    assert all(np.isfinite(result.fitnesses))
    assert all(m.learn_counter > 0 and m.alpha != 1.0 for m in result.population)


def test_a_non_positive_temperature_is_refused_at_its_field() -> None:
    with pytest.raises(ManifestError) as caught:
        tiny_manifest("SAC", environment=PENDULUM, algorithm_options={"alpha": 0})
    assert [error.path for error in caught.value.errors] == ["algorithm.alpha"]
