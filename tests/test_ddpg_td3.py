"""DDPG and TD3: their targets on hand-checkable cases, the policy delay, smoothing and
exploration noise, action scaling, learning-rate mutation, checkpoints and smoke training."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agile_cli import FieldError, ManifestError, TrainingError
from agile_cli.evolution.mutation import Mutator
from agile_cli.testing import (
    installed_host,
    smoke_train,
    tiny_manifest,
    tiny_population,
)
from agile_rl.nn.arch import arch_from_spec
from agile_rl.runtime.agent import AgentContext
from agile_rl.runtime.buffers import Transitions

PENDULUM = {"name": "Pendulum-v1", "num_envs": 2, "sync": True}
OBSERVATIONS = spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)


def _member(name: str, action_space: spaces.Space | None = None, num_envs: int = 2, **options):
    """A member built directly on the given action space (Box(-2, 2) by default)."""
    manifest = tiny_manifest(name, environment=PENDULUM, algorithm_options=options)
    context = AgentContext(torch.device("cpu"), num_envs, manifest.training,
                           network=manifest.network)  # fmt: skip
    cls = installed_host().registry.algorithms[name].load()
    return cls(
        manifest.algorithm,
        observation_space=OBSERVATIONS,
        action_space=action_space or spaces.Box(-2.0, 2.0, (1,), dtype=np.float32),
        arch=arch_from_spec(manifest.network, OBSERVATIONS),
        context=context,
    )


def _batch(size: int = 2, actions: torch.Tensor | None = None, **columns) -> Transitions:
    """A batch of random observations; the other columns from ``columns`` or defaults."""
    generator = torch.Generator().manual_seed(0)
    values = {
        "obs": torch.rand(size, 3, generator=generator) * 2 - 1,
        "actions": actions if actions is not None else torch.rand(size, 1, generator=generator),
        "rewards": torch.ones(size),
        "next_obs": torch.rand(size, 3, generator=generator) * 2 - 1,
        "terminated": torch.zeros(size),
        "discounts": None,  # a one-step buffer's
        "weights": torch.ones(size),
        "indices": torch.arange(size),
    }
    values.update(columns)
    return Transitions(**values)


def _fix_targets(member, monkeypatch, fixed: dict[str, list[float]]) -> dict[str, torch.Tensor]:
    """Make the named (target) critics of the member's update return fixed values; record the
    actions they got, and those every critic got."""
    learner = type(member).group_learner
    real = learner.q_values
    seen: dict[str, torch.Tensor] = {}

    def q_values(self, network, obs, actions):
        seen[network] = actions[0].detach().clone()
        if network in fixed:
            return torch.tensor([fixed[network]])
        return real(self, network, obs, actions)

    monkeypatch.setattr(learner, "q_values", q_values)
    return seen


def _q(member, network: str, obs, unit: torch.Tensor) -> torch.Tensor:
    """Q(s, a) of the member's critic ``network``, ``[B]``."""
    obs = member.obs_tensor(obs).unsqueeze(0)
    return member.solo_learner().q_values(network, obs, unit.unsqueeze(0))[0]


def _policy(member, network: str, obs) -> torch.Tensor:
    """The member's deterministic policy ``network`` on ``obs``, in [-1, 1]."""
    return member.solo_learner().policy_actions(network, member.obs_tensor(obs).unsqueeze(0))[0]


# -- targets -----------------------------------------------------------------------------------


def test_ddpg_target_is_reward_plus_discounted_target_q(monkeypatch) -> None:
    member = _member("DDPG", gamma=0.9)
    seen = _fix_targets(member, monkeypatch, {"critic_target": [2.0, -1.0, 4.0]})
    batch = _batch(3, rewards=torch.tensor([1.0, 0.5, 0.0]),
                   terminated=torch.tensor([0.0, 0.0, 1.0]))  # fmt: skip
    with torch.no_grad():
        q = _q(member, "critic", batch.obs, member.to_unit(batch.actions))
        next_actions = _policy(member, "actor_target", batch.next_obs)
    result = member.learn(batch)
    target = torch.tensor([1.0 + 0.9 * 2.0, 0.5 - 0.9 * 1.0, 0.0])  # no bootstrap when terminated
    torch.testing.assert_close(result.priorities, (q - target).abs() + 1e-6)
    assert result.loss == pytest.approx(float((q - target).pow(2).mean()), rel=1e-5)
    torch.testing.assert_close(seen["critic_target"], next_actions)  # a' = mu'(s'), no noise


def test_ddpg_bootstraps_with_n_step_discounts(monkeypatch) -> None:
    member = _member("DDPG", gamma=0.9)
    _fix_targets(member, monkeypatch, {"critic_target": [2.0, 2.0]})
    batch = _batch(2, discounts=torch.tensor([0.5, 0.25]))
    with torch.no_grad():
        q = _q(member, "critic", batch.obs, member.to_unit(batch.actions))
    result = member.learn(batch)
    torch.testing.assert_close(result.priorities, (q - torch.tensor([2.0, 1.5])).abs() + 1e-6)


def test_td3_target_takes_the_smaller_target_critic(monkeypatch) -> None:
    member = _member("TD3", gamma=0.9, noise_clip=0.05)
    fixed = {"critic_1_target": [3.0, 5.0, 7.0], "critic_2_target": [4.0, 1.0, -2.0]}
    seen = _fix_targets(member, monkeypatch, fixed)
    batch = _batch(3, terminated=torch.tensor([0.0, 0.0, 1.0]))
    with torch.no_grad():
        unit = member.to_unit(batch.actions)
        q_1, q_2 = (_q(member, name, batch.obs, unit) for name in member.critics)
        mu = _policy(member, "actor_target", batch.next_obs)
    result = member.learn(batch)
    target = torch.tensor([1.0 + 0.9 * 3.0, 1.0 + 0.9 * 1.0, 1.0])
    torch.testing.assert_close(result.priorities, (q_1 - target).abs() + 1e-6)
    expected_loss = ((q_1 - target).pow(2) + (q_2 - target).pow(2)).mean()
    assert result.loss == pytest.approx(float(expected_loss), rel=1e-5)
    smoothed = seen["critic_1_target"]
    torch.testing.assert_close(smoothed, seen["critic_2_target"])  # one a' for both critics
    assert not torch.equal(smoothed, mu)  # the target action was smoothed ...
    assert ((smoothed - mu).abs() <= 0.05 + 1e-6).all()  # ... within noise_clip


def test_smoothing_noise_is_clipped_to_noise_clip() -> None:
    member = _member("TD3", policy_noise=1.0, noise_clip=0.3)
    noise = member.smoothing_noise(torch.Size([20_000, 1]))
    assert float(noise.abs().max()) == pytest.approx(0.3)
    assert float((noise.abs() > 0.3 - 1e-6).float().mean()) > 0.7  # P(|N(0,1)| > 0.3) ~ 0.76
    unclipped = _member("TD3", policy_noise=0.2, noise_clip=10.0)
    assert float(unclipped.smoothing_noise(torch.Size([20_000, 1])).std()) == pytest.approx(
        0.2, rel=0.05
    )


# -- policy delay, learning-rate mutation ----------------------------------------------------


@pytest.mark.parametrize("name", ["DDPG", "TD3"])
def test_actor_and_targets_update_every_policy_freq_learn_calls(name) -> None:
    member = _member(name, policy_freq=3)
    batch = _batch(8)

    def snapshot(network):
        return [p.detach().clone() for p in member.parameter_list(network)]

    def moved(network, old):
        return any(not torch.equal(a, b) for a, b in zip(old, snapshot(network), strict=True))

    changed = []
    for _ in range(6):
        before = {n: snapshot(n) for n in ("actor", "actor_target", member.critics[-1])}
        member.learn(batch)
        changed.append({n: moved(n, old) for n, old in before.items()})
    assert [c["actor"] for c in changed] == [False, False, True, False, False, True]
    assert [c["actor_target"] for c in changed] == [False, False, True, False, False, True]
    assert all(c[member.critics[-1]] for c in changed)  # every critic learns every call
    assert member.learn_counter == 6


def test_lr_critic_mutation_reaches_both_td3_critic_optimizers() -> None:
    manifest = tiny_manifest(
        "TD3", environment=PENDULUM,
        mutation={"rl_hp_selection": {"lr_critic": {"min": 1e-5, "max": 1.0}}},
    )  # fmt: skip
    member = tiny_population(manifest, size=1)[0]
    mutator = Mutator(manifest.mutation, manifest.algorithm, np.random.default_rng(0))
    assert mutator.apply(member, "rl_hp").startswith("lr_critic=")
    assert member.spec.lr_critic != 1e-3
    for name in ("critic_1", "critic_2"):
        assert [g["lr"] for g in member.optimizers[name].param_groups] == [member.spec.lr_critic]
    assert member.optimizers["actor"].param_groups[0]["lr"] == 1e-4


# -- acting --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["DDPG", "TD3"])
def test_actions_are_rescaled_into_the_box_and_learned_in_unit_scale(name, monkeypatch) -> None:
    box = spaces.Box(np.array([0, -1], np.float32), np.array([10, 3], np.float32))
    member = _member(name, box, O_U_noise=False, expl_noise=5.0)
    obs = np.random.default_rng(0).uniform(-1, 1, (500, 3)).astype(np.float32)
    explored = member.act(obs, explore=True)
    assert explored.shape == (500, 2) and explored.dtype == np.float32
    assert (explored >= box.low).all() and (explored <= box.high).all()
    assert (explored == box.low).any() and (explored == box.high).any()  # clipped noise
    greedy = member.act(obs, explore=False)
    with torch.no_grad():
        unit = _policy(member, "actor", obs).numpy()
    np.testing.assert_allclose(greedy, box.low + (unit + 1) / 2 * (box.high - box.low), rtol=1e-5)
    # the buffer stores environment actions; learning sees them in [-1, 1] again
    seen = _fix_targets(member, monkeypatch, {})
    member.learn(_batch(2, actions=torch.tensor([[0.0, 3.0], [5.0, 1.0]])))
    critic = member.critics[0]
    torch.testing.assert_close(seen[critic], torch.tensor([[-1.0, 1.0], [0.0, 0.0]]))


def test_pendulum_actions_stay_within_its_bounds() -> None:
    member = tiny_population(tiny_manifest("TD3", environment=PENDULUM), size=1)[0]
    member.set_hyperparameter("expl_noise", 3.0)
    actions = np.concatenate([member.act(np.zeros((2, 3)), explore=True) for _ in range(200)])
    assert actions.min() >= -2.0 and actions.max() <= 2.0 and np.abs(actions).max() > 1.0


def test_gaussian_exploration_noise_statistics() -> None:
    member = _member("DDPG", O_U_noise=False, expl_noise=0.2, mean_noise=0.1)
    noise = member.exploration_noise(20_000)
    assert noise.mean() == pytest.approx(0.1, abs=0.01)
    assert noise.std() == pytest.approx(0.2, rel=0.03)
    following = member.exploration_noise(20_000)
    assert abs(np.corrcoef(noise[:, 0], following[:, 0])[0, 1]) < 0.05  # fresh each step


def test_ornstein_uhlenbeck_noise_statistics() -> None:
    theta, dt, sigma, mu, steps, envs = 1.0, 0.1, 0.3, 0.5, 30, 20_000
    member = _member("DDPG", theta=theta, dt=dt, expl_noise=sigma, mean_noise=mu)
    assert member.ou_noise.shape == (2, 1)
    for _ in range(steps):
        noise = member.exploration_noise(envs)
    assert member.ou_noise.shape == (envs, 1)  # restarted at zero for the new env count
    decay = 1 - theta * dt  # x_k = decay * x_{k-1} + theta * dt * mu + sigma * sqrt(dt) * N
    mean = mu * (1 - decay**steps)
    std = np.sqrt(sigma**2 * dt * (1 - decay ** (2 * steps)) / (1 - decay**2))
    assert noise.mean() == pytest.approx(mean, abs=0.01)
    assert noise.std() == pytest.approx(std, rel=0.03)
    following = member.exploration_noise(envs)
    assert np.corrcoef(noise[:, 0], following[:, 0])[0, 1] > 0.8  # a correlated process


def test_ornstein_uhlenbeck_noise_restarts_where_episodes_start() -> None:
    member = _member("DDPG", num_envs=3)
    for _ in range(5):
        member.exploration_noise(3)
    member.reset_state(np.array([False, True, False]))
    assert (member.ou_noise[1] == 0).all() and (member.ou_noise[[0, 2]] != 0).all()
    member.reset_state()  # after env.reset()
    assert (member.ou_noise == 0).all() and member.ou_noise.shape == (3, 1)


# -- state, validation, training ---------------------------------------------------------------


def test_learn_counter_and_noise_state_survive_a_checkpoint() -> None:
    member, twin = (_member("TD3") for _ in range(2))
    member.learn(_batch(4))
    member.exploration_noise(2)
    twin.load_state_dict(member.state_dict())
    assert twin.learn_counter == 1
    np.testing.assert_array_equal(twin.ou_noise, member.ou_noise)
    np.testing.assert_array_equal(twin.exploration_noise(2), member.exploration_noise(2))


@pytest.mark.parametrize("name", ["DDPG", "TD3"])
@pytest.mark.parametrize("replay", [{}, {"per_buffer": True, "n_step_buffer": True}])
def test_smoke_trains_from_every_buffer_kind(name, replay, tmp_path) -> None:
    manifest = tiny_manifest(name, environment=PENDULUM,
                             replay_buffer={"max_size": 1000, **replay})  # fmt: skip
    result = smoke_train(manifest, tmp_path / "run")
    assert result.summary["generations"] == 2
    assert all(np.isfinite(result.fitnesses))
    assert all(m.learn_counter > 0 for m in result.population)
    assert all(m.context.replay_buffer.n_step_buffer == bool(replay) for m in result.population)


@pytest.mark.parametrize("name", ["DDPG", "TD3"])
def test_discrete_actions_are_refused_with_a_clear_message(name) -> None:
    with pytest.raises(TrainingError, match=r"needs a Box \(continuous\) action space.*Discrete"):
        tiny_population(tiny_manifest(name), size=1)  # CartPole


def _errors(name: str, **options) -> list[FieldError]:
    with pytest.raises(ManifestError) as caught:
        tiny_manifest(name, environment=PENDULUM, algorithm_options=options)
    return caught.value.errors


def test_a_wrong_vect_noise_dim_is_refused() -> None:
    [error] = _errors("DDPG", vect_noise_dim=3)
    assert error.path == "algorithm.vect_noise_dim" and "environment.num_envs (2)" in error.message
    tiny_manifest("DDPG", environment=PENDULUM, algorithm_options={"vect_noise_dim": 2})


def test_td3_defaults_differ_from_ddpg_only_where_the_papers_do() -> None:
    ddpg = tiny_manifest("DDPG", environment=PENDULUM).algorithm
    td3 = tiny_manifest("TD3", environment=PENDULUM).algorithm
    assert (ddpg.tau, td3.tau) == (5e-3, 5e-3)  # DDPG's 1e-3 did not learn Pendulum (#19)
    assert (td3.policy_noise, td3.noise_clip) == (0.2, 0.5)
    assert (ddpg.lr_actor, ddpg.lr_critic, ddpg.policy_freq, ddpg.learn_step) == (1e-4, 1e-3, 2, 5)
