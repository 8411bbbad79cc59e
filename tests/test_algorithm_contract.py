"""The algorithm contract: hyperparameters in the member's own spec, what the runners pass a
member and read from it, the named policy network, one type of learn result, and learned
parameters that are not networks."""

from __future__ import annotations

import copy
import io
from typing import Any

import numpy as np
import pytest
import torch

from agile_cli import TrainingError, hookimpl
from agile_cli.testing import check_conformance, lost_attributes, tiny_manifest, tiny_population
from agile_cli.training import setup
from agile_dqn.algorithm import DQN
from agile_dqn.spec import DQNSpec
from agile_ppo.algorithm import PPO
from agile_ppo.spec import PPOSpec
from agile_rl import LearnResult, OnPolicyAlgorithm, QLearning
from agile_rl.runtime.buffers import PrioritizedReplayBuffer, ReplayBuffer, Transitions
from agile_rl.runtime.solo import one_member
from agile_rl.training.on_policy import OnPolicyRunner
from agile_rl.training.runners import budget_progress, learned_loss


class TemperatureDQN(DQN):
    """DQN with a learned temperature that is not a network, trained by its own optimizer."""

    def build(self) -> None:
        super().build()
        self.add_parameter("log_alpha", torch.zeros(1))
        self.add_optimizer("alpha", (), "lr", parameters=("log_alpha",))

    def learn(self, batch: Any) -> LearnResult:
        log_alpha = self.learned_parameters["log_alpha"]
        self.gradient_step("alpha", (log_alpha * (batch.rewards.mean() + 1.0)).sum())
        return super().learn(batch)


class ResettingTemperatureDQN(TemperatureDQN):
    """Forgets its learned temperature whenever a checkpoint loads."""

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        with torch.no_grad():
            self.learned_parameters["log_alpha"].zero_()


class ProbeFirstDQN(DQN):
    """Builds another network before its Q-network and does not name its policy."""

    policy_network = None

    def build(self) -> None:
        self.add_network("probe", {"x": 1})
        super().build()


class FloatPPO(PPO):
    """Returns a bare float from learn, as on-policy plugins did before the first release."""

    def learn(self, rollout: Any, last_obs: Any) -> Any:
        return super().learn(rollout, last_obs).loss


class Unfinished(QLearning):
    """The Q-learning frame without an update: no group learner, no act, no learn."""


class UnfinishedOnPolicy(OnPolicyAlgorithm):
    """An on-policy class with networks but no group learner and no step or update."""

    def build(self) -> None:
        self.add_network("actor", {"policy": 2})
        self.add_optimizer("actor", ("actor",), "lr")


class Variants:
    @hookimpl
    def agile_register_algorithms(self, register: Any) -> None:
        for cls in (TemperatureDQN, ResettingTemperatureDQN, Unfinished):
            register(
                name=cls.__name__, spec=DQNSpec, family="off_policy",
                implementation=f"{__name__}:{cls.__name__}",
            )  # fmt: skip
        register(
            name="UnfinishedOnPolicy", spec=PPOSpec, family="on_policy",
            implementation=f"{__name__}:UnfinishedOnPolicy",
        )  # fmt: skip


@pytest.fixture
def registry(agile_host: Any) -> Any:
    host = agile_host(Variants())
    assert all(info.status == "loaded" for info in host.plugins), host.plugins
    return host.registry


def _twin(member: Any, cls: type, **spec: Any) -> Any:
    """A fresh member of ``cls`` in ``member``'s setting."""
    return cls(
        member.spec.model_copy(update=spec), observation_space=member.observation_space,
        action_space=member.action_space, arch=member.arch, context=member.context,
    )  # fmt: skip


def _batch(size: int = 8, discounts: torch.Tensor | None = None) -> Transitions:
    generator = torch.Generator().manual_seed(0)
    return Transitions(
        obs=torch.randn(size, 4, generator=generator),
        actions=torch.randint(0, 2, (size,), generator=generator),
        rewards=torch.rand(size, generator=generator),
        next_obs=torch.randn(size, 4, generator=generator),
        terminated=torch.zeros(size),
        discounts=discounts,
        weights=torch.ones(size),
        indices=torch.arange(size),
    )


def _through_bytes(state: dict[str, Any]) -> dict[str, Any]:
    data = io.BytesIO()
    torch.save(state, data)
    data.seek(0)
    return torch.load(data, weights_only=False)


# -- hyperparameters ---------------------------------------------------------------------------


def test_each_member_mutates_its_own_spec_and_its_optimizer_follows() -> None:
    manifest = tiny_manifest("DQN")
    first, second = tiny_population(manifest)
    first.set_hyperparameter("lr", 0.005)
    assert first.spec.lr == first.hyperparameters()["lr"] == 0.005
    assert second.spec.lr == manifest.algorithm.lr != 0.005
    assert [g["lr"] for g in first.optimizers["q"].param_groups] == [0.005]
    assert "lr" not in vars(first)  # hyperparameters are no longer copied onto the member
    assert first.clone(7).spec.lr == 0.005


def test_hyperparameters_are_read_from_the_spec_only() -> None:
    member = tiny_population(tiny_manifest("DQN"), size=1)[0]
    member.set_hyperparameter("gamma", 0.5)
    assert member.spec.gamma == 0.5 and copy.deepcopy(member).spec.gamma == 0.5
    assert not hasattr(member, "gamma")  # the pre-release self.<field> spelling is gone


# -- what the runners pass and read ------------------------------------------------------------


def test_one_step_batches_discount_with_the_members_mutated_gamma() -> None:
    member = tiny_population(tiny_manifest("DQN"), size=1)[0]
    member.set_hyperparameter("gamma", 0.5)
    batch = _batch()
    with torch.no_grad():
        next_value = member.networks["target"](batch.next_obs)["q"].max(dim=1).values
    learner = member.solo_learner()
    _, _, one_step = learner.td_terms(one_member(batch))
    torch.testing.assert_close(one_step[0], batch.rewards + 0.5 * next_value)
    discounts = torch.full((8,), 0.25)
    _, _, n_step = learner.td_terms(one_member(batch._replace(discounts=discounts)))
    torch.testing.assert_close(n_step[0], batch.rewards + 0.25 * next_value)


def test_a_buffer_holds_n_step_returns_once_rows_come_with_discounts() -> None:
    from gymnasium import spaces

    observations, actions = spaces.Box(-1, 1, (2,)), spaces.Discrete(2)
    buffer = ReplayBuffer(8, observations, actions, gamma=0.9)
    rows = (np.zeros((2, 2), np.float32), np.zeros(2), np.ones(2), np.zeros((2, 2)), np.zeros(2))
    buffer.add(*rows)
    assert buffer.sample(4, torch.Generator()).discounts is None
    buffer.add(*rows, discounts=np.array([0.81, 0.729]))
    assert buffer.sample(4, torch.Generator()).discounts is not None
    state = buffer.state_dict()
    del state["n_step"]  # a checkpoint made before buffers recorded it
    restored = ReplayBuffer(8, observations, actions, gamma=0.9)
    restored.load_state_dict(state)
    assert restored.n_step


def test_the_runner_passes_progress_and_samples_with_the_importance_exponent(
    monkeypatch: pytest.MonkeyPatch, agile_host: Any
) -> None:
    manifest = tiny_manifest("DQN", replay_buffer={"max_size": 1000, "per_buffer": True})
    member = tiny_population(manifest, size=1)[0]
    env = setup.build_environment(manifest, agile_host().registry, seed=0)
    try:
        buffer = setup.build_buffer(manifest, env, torch.device("cpu"))
        assert isinstance(buffer, PrioritizedReplayBuffer)
        runner = setup.build_runner(manifest, env, buffer)
        asked: list[float] = []
        sampled: list[float] = []
        exponent, sample = member.importance_exponent, buffer.sample_stacked

        def importance_exponent(progress: float) -> float:
            asked.append(progress)
            assert progress == budget_progress(member)
            return exponent(progress)

        def spy(sizes: list[int], generators: list[torch.Generator], betas: list[float]) -> Any:
            sampled.append(betas[0])
            return sample(sizes, generators, betas)

        monkeypatch.setattr(member, "importance_exponent", importance_exponent)
        monkeypatch.setattr(buffer, "sample_stacked", spy)
        member.record.steps = manifest.training.max_steps // 2
        runner.train_population([member], 64, lambda _steps: None)
    finally:
        env.close()
    assert asked and all(0.5 <= p <= 1.0 for p in asked)
    assert sampled == [pytest.approx(0.4 + 0.6 * p) for p in asked]


def test_the_default_importance_exponent_anneals() -> None:
    member = tiny_population(tiny_manifest("DQN"), size=1)[0]
    assert [member.importance_exponent(p) for p in (0.0, 0.5, 1.0)] == pytest.approx(
        [0.4, 0.7, 1.0]
    )


def test_learn_gives_its_loss_in_a_learn_result_and_nothing_else() -> None:
    assert learned_loss(LearnResult(1.5)) == 1.5
    with pytest.raises(TrainingError, match=r"learn\(\) returned float, not agile_rl"):
        learned_loss(2.0)  # type: ignore[arg-type]


def test_an_algorithm_without_an_update_is_named_before_training(registry: Any) -> None:
    refusals = {
        "Unfinished": "names no group_learner and implements no act or learn",
        "UnfinishedOnPolicy": "implements no act or policy_step or learn",
    }
    for name, refusal in refusals.items():
        manifest = tiny_manifest(name, registry=registry)
        with pytest.raises(TrainingError, match=refusal):  # as the members are built
            tiny_population(manifest, registry, size=1)


def test_the_on_policy_runner_refuses_a_bare_float_from_learn_saying_why(agile_host: Any) -> None:
    manifest = tiny_manifest("PPO", algorithm_options={"learn_step": 32})
    member = _twin(tiny_population(manifest, size=1)[0], FloatPPO)
    env = setup.build_environment(manifest, agile_host().registry, seed=0)
    try:
        with pytest.raises(TrainingError, match="LearnResult") as caught:
            OnPolicyRunner(env).train_population([member], 64, lambda _steps: None)
    finally:
        env.close()
    assert "return LearnResult(loss=...)" in str(caught.value.hint)


# -- the policy network ------------------------------------------------------------------------


@pytest.mark.parametrize(("share", "name"), [(True, "actor_critic"), (False, "actor")])
def test_ppo_names_its_policy_network(share: bool, name: str) -> None:
    options = {"share_encoders": share}
    member = tiny_population(tiny_manifest("PPO", algorithm_options=options), size=1)[0]
    assert member.policy is member.networks[name]
    assert member.policies == [member.networks[name]]


def test_without_a_named_policy_network_the_first_one_built_is_the_policy() -> None:
    dqn = tiny_population(tiny_manifest("DQN"), size=1)[0]
    assert dqn.policy is dqn.networks["q"]
    member = _twin(dqn, ProbeFirstDQN)
    assert member.policy is member.networks["probe"]


# -- learned parameters ------------------------------------------------------------------------


def _temperature_member(registry: Any, algorithm: str = "TemperatureDQN") -> tuple[Any, Any]:
    manifest = tiny_manifest(algorithm, registry=registry)
    return tuple(tiny_population(manifest, registry, size=2))  # type: ignore[return-value]


def test_a_learned_parameter_is_optimised_on_the_members_device(registry: Any) -> None:
    member, _ = _temperature_member(registry)
    log_alpha = member.learned_parameters["log_alpha"]
    assert isinstance(log_alpha, torch.nn.Parameter) and log_alpha.device == member.device
    assert any(p is log_alpha for p in member.parameters())
    member.learn(_batch())
    assert log_alpha.item() < 0.0  # its loss grows with it: one Adam step moved it down
    assert member.optimizers["alpha"].state[log_alpha]["step"] == 1


def test_a_learned_parameter_survives_checkpoints_clones_and_architecture_changes(
    registry: Any,
) -> None:
    member, twin = _temperature_member(registry)
    member.learn(_batch())
    learned = member.learned_parameters["log_alpha"].detach().clone()
    twin.load_state_dict(_through_bytes(member.state_dict()))
    torch.testing.assert_close(twin.learned_parameters["log_alpha"].detach(), learned)
    restored_state = twin.optimizers["alpha"].state[twin.learned_parameters["log_alpha"]]
    torch.testing.assert_close(restored_state["exp_avg"], _adam(member)["exp_avg"])

    clone = member.clone(5)
    clone.learn(_batch())
    torch.testing.assert_close(member.learned_parameters["log_alpha"].detach(), learned)
    assert not torch.equal(clone.learned_parameters["log_alpha"].detach(), learned)

    before = {key: value.clone() for key, value in _adam(member).items()}
    member.set_architecture(member.arch.with_activation("Tanh"))
    torch.testing.assert_close(member.learned_parameters["log_alpha"].detach(), learned)
    for key, value in _adam(member).items():
        torch.testing.assert_close(value, before[key])


def _adam(member: Any) -> dict[str, torch.Tensor]:
    """The alpha optimizer's state of the learned temperature."""
    return member.optimizers["alpha"].state[member.learned_parameters["log_alpha"]]


def test_a_checkpoint_without_learned_parameters_still_loads(registry: Any) -> None:
    member, twin = _temperature_member(registry)
    state = member.state_dict()
    del state["parameters"]  # made before members had learned parameters
    twin.load_state_dict(state)
    assert twin.learned_parameters["log_alpha"].item() == 0.0


def test_a_member_with_a_learned_temperature_conforms(registry: Any, tmp_path: Any) -> None:
    check_conformance("TemperatureDQN", tmp_path, registry=registry)


def test_the_conformance_kit_compares_learned_parameters(registry: Any) -> None:
    member, twin = _temperature_member(registry, "ResettingTemperatureDQN")
    member.learn(_batch())
    twin.load_state_dict(_through_bytes(member.state_dict()))
    problems = lost_attributes(member, twin)
    assert problems == [
        "checkpoint round trip changed a learned parameter (add_parameter): the core restores "
        "them, so do not reset them in set_architecture() or load_extra_state()"
    ]


def test_a_state_loads_in_place_unless_its_architecture_differs() -> None:
    member, other = tiny_population(tiny_manifest("DQN"), size=2)
    networks = dict(other.networks)
    other.load_state_dict(_through_bytes(member.state_dict()))
    for name, network in other.networks.items():
        assert network is networks[name]  # the same architecture: no rebuild
        for key, value in network.state_dict().items():
            assert torch.equal(value, member.networks[name].state_dict()[key])
    member.set_architecture(member.arch.with_activation("Tanh"))
    other.load_state_dict(_through_bytes(member.state_dict()))
    assert other.arch == member.arch
    for name, network in other.networks.items():
        assert network is not networks[name]
        for key, value in network.state_dict().items():
            assert torch.equal(value, member.networks[name].state_dict()[key])
