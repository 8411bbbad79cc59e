"""``algorithm.share_encoders`` for DDPG and TD3: the critics read the actor's encoder (the
target critics the target actor's) at every step, through learning, architecture mutations,
checkpoints and clones; such members stack (a stacked critic reads the stacked actors'
encoders), equal to each member alone in ``test_batched``."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from agile_cli.evolution.mutation import Mutator
from agile_cli.manifest import TrainingManifest
from agile_cli.testing import installed_host, smoke_train, tiny_manifest, tiny_population
from agile_rl.runtime.algorithms.deterministic import (
    DeterministicActorCritic,
    SharedEncoderCritic,
)
from agile_rl.runtime.buffers import Transitions
from agile_rl.runtime.group import group_members

PENDULUM = {"name": "Pendulum-v1", "num_envs": 2, "sync": True}
NAMES = ["DDPG", "TD3"]

#: The shape of the reference implementation's DDPG and TD3 manifests that set it.
REFERENCE_MANIFEST = """\
algorithm:
  name: {name}
  batch_size: 64
  lr_actor: 0.0001
  lr_critic: 0.001
  learn_step: 1
  gamma: 0.99
  tau: 0.005
  policy_freq: 2
  O_U_noise: true
  expl_noise: 0.1
  vect_noise_dim: 1
  mean_noise: 0.0
  theta: 0.15
  dt: 0.01
  share_encoders: true
environment:
  name: Pendulum-v1
  num_envs: 1
training:
  max_steps: 1000
  evo_steps: 500
  pop_size: 2
network:
  latent_dim: 16
  encoder_config: {{hidden_size: [16]}}
  head_config: {{hidden_size: [16]}}
"""


def _manifest(name: str, **options: Any) -> Any:
    options = {"share_encoders": True, **options}
    return tiny_manifest(name, environment=PENDULUM, algorithm_options=options)


def _members(name: str, size: int = 1, **options: Any) -> list[DeterministicActorCritic]:
    return tiny_population(_manifest(name, **options), size=size)


def _batch(size: int = 8, seed: int = 0) -> Transitions:
    generator = torch.Generator().manual_seed(seed)
    return Transitions(
        obs=torch.rand(size, 3, generator=generator) * 2 - 1,
        actions=torch.rand(size, 1, generator=generator) * 4 - 2,
        rewards=torch.rand(size, generator=generator),
        next_obs=torch.rand(size, 3, generator=generator) * 2 - 1,
        terminated=torch.zeros(size),
        discounts=None,
        weights=torch.ones(size),
        indices=torch.arange(size),
    )


def _obs(size: int = 8) -> torch.Tensor:
    return torch.rand(size, 3, generator=torch.Generator().manual_seed(1)) * 2 - 1


def _encoder(member: DeterministicActorCritic, network: str = "actor") -> list[torch.Tensor]:
    """The values of a network's encoder parameters."""
    encoder = member.networks[network].encoder
    return [p.detach().clone() for p in encoder.parameters()]


def _heads(member: DeterministicActorCritic, network: str) -> dict[str, torch.Tensor]:
    """A copy of a network's state."""
    return {key: value.clone() for key, value in member.networks[network].state_dict().items()}


def _same(one: list[torch.Tensor], two: list[torch.Tensor]) -> bool:
    return len(one) == len(two) and all(torch.equal(a, b) for a, b in zip(one, two, strict=True))


def _perturb_encoder(member: DeterministicActorCritic, network: str = "actor") -> None:
    with torch.no_grad():
        for parameter in member.networks[network].encoder.parameters():
            parameter.add_(0.5)


def _q_by_hand(member: DeterministicActorCritic, critic: str, actor: str) -> torch.Tensor:
    """Q(s, a) of ``critic``'s heads on ``actor``'s latent."""
    obs, actions = _obs(), torch.full((8, 1), 0.3)
    latent = member.networks[actor].latent(obs)
    return member.networks[critic].head("q", torch.cat([actions, latent], dim=-1)).squeeze(-1)


def _q(member: DeterministicActorCritic, critic: str) -> torch.Tensor:
    actions = torch.full((1, 8, 1), 0.3)
    return member.solo_learner().q_values(critic, _obs().unsqueeze(0), actions)[0]


def assert_tied(member: DeterministicActorCritic) -> None:
    """Every critic is heads only and reads the actor's encoder (targets the target actor's),
    and its optimizer trains exactly its own parameters."""
    for name in member.critics:
        for critic, actor in ((name, "actor"), (f"{name}_target", "actor_target")):
            network = member.networks[critic]
            assert isinstance(network, SharedEncoderCritic)
            assert network.borrowed.owner is member.networks[actor]
            assert all(key.startswith("heads.") for key, _ in network.named_parameters())
            torch.testing.assert_close(
                network.latent(_obs()), member.networks[actor].latent(_obs())
            )
            torch.testing.assert_close(_q(member, critic), _q_by_hand(member, critic, actor))
        trained = {id(p) for group in member.optimizers[name].param_groups for p in group["params"]}
        assert trained == {id(p) for p in member.networks[name].parameters()}


# -- (1) validation and schema -----------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_share_encoders_validates(name: str) -> None:
    assert _manifest(name).algorithm.share_encoders is True
    assert tiny_manifest(name, environment=PENDULUM).algorithm.share_encoders is False


@pytest.mark.parametrize("name", NAMES)
def test_the_reference_manifests_shape_validates(name: str, tmp_path: Path) -> None:
    path = tmp_path / f"{name.lower()}.yaml"
    path.write_text(REFERENCE_MANIFEST.format(name=name))
    manifest = TrainingManifest.get_validated(path, registry=installed_host().registry)
    assert manifest.algorithm_name == name and manifest.algorithm.share_encoders is True


def test_the_schema_describes_the_tie() -> None:
    spec = installed_host().registry.algorithms["DDPG"].spec
    description = spec.model_json_schema()["properties"]["share_encoders"]["description"]
    assert "actor's" in description and "target actor" in description
    assert "must be false" not in description


# -- (2) construction --------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_the_critics_read_the_actors_current_encoder(name: str) -> None:
    [member] = _members(name)
    assert_tied(member)
    before = {critic: _q(member, critic) for critic in member.critics}
    _perturb_encoder(member)
    for critic in member.critics:
        assert not torch.allclose(_q(member, critic), before[critic])
        torch.testing.assert_close(_q(member, critic), _q_by_hand(member, critic, "actor"))
    target = f"{member.critics[0]}_target"
    before_target = _q(member, target)
    _perturb_encoder(member, "actor_target")
    assert not torch.allclose(_q(member, target), before_target)
    assert_tied(member)


def test_without_share_encoders_the_critics_have_their_own() -> None:
    [member] = tiny_population(tiny_manifest("DDPG", environment=PENDULUM), size=1)
    assert not isinstance(member.networks["critic"], SharedEncoderCritic)
    before = _q(member, "critic")
    _perturb_encoder(member)
    torch.testing.assert_close(_q(member, "critic"), before)


# -- (3) learning ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_the_critic_loss_leaves_the_encoder_alone(name: str) -> None:
    [member] = _members(name, policy_freq=2)
    encoder, critic_heads = _encoder(member), _heads(member, member.critics[0])
    member.learn(_batch())  # learn call 1: critics only
    assert _same(_encoder(member), encoder)
    moved = _heads(member, member.critics[0])
    assert any(not torch.equal(moved[key], value) for key, value in critic_heads.items())
    target_encoder = _encoder(member, "actor_target")
    member.learn(_batch(seed=1))  # learn call 2: the actor moves, and the targets follow
    assert not _same(_encoder(member), encoder)
    assert not _same(_encoder(member, "actor_target"), target_encoder)
    assert_tied(member)


def test_the_actor_loss_reaches_the_encoder_through_the_policy_only() -> None:
    [member] = _members("DDPG")
    obs, actor, critic = _obs(), member.networks["actor"], member.networks["critic"]
    parameters = list(actor.encoder.parameters())

    def encoder_gradient(latent_of_critic: torch.Tensor) -> list[torch.Tensor]:
        actions = member.solo_learner().policy_actions("actor", obs.unsqueeze(0))[0]
        q = critic.head("q", torch.cat([actions, latent_of_critic], dim=-1))
        return list(torch.autograd.grad(-q.mean(), parameters))

    detached = encoder_gradient(actor.latent(obs).detach())
    through = encoder_gradient(actor.latent(obs))  # what a critic owning the encoder would give
    assert not all(torch.allclose(a, b) for a, b in zip(detached, through, strict=True))
    member.solo_learner().update_actor(
        "critic", obs.unsqueeze(0), torch.ones(1, 8), torch.ones(1, dtype=torch.bool)
    )
    state = member.optimizers["actor"].state
    for parameter, expected in zip(parameters, detached, strict=True):
        # Adam's first moment after one step: (1 - beta1) * gradient
        torch.testing.assert_close(state[parameter]["exp_avg"] / 0.1, expected)


# -- (4) architecture mutation -----------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_every_architecture_mutation_keeps_the_tie(name: str) -> None:
    [member] = _members(name)
    rng = np.random.default_rng(0)
    for method in member.arch.mutation_methods():
        arch, _ = member.arch.apply(method.name, rng)
        member.set_architecture(arch)
        assert_tied(member)
    member.learn(_batch())
    assert_tied(member)


def test_an_encoder_layer_added_keeps_the_tie_and_the_weights() -> None:
    [member] = _members("TD3")
    encoder = member.arch.encoder
    wider = replace(member.arch, encoder=replace(encoder, hidden_size=(*encoder.hidden_size, 8)))
    heads = _heads(member, "critic_1")
    member.set_architecture(wider)
    assert len(member.networks["actor"].encoder.layers) == len(encoder.hidden_size) + 1
    assert_tied(member)
    rebuilt = member.networks["critic_1"].state_dict()
    assert all(torch.equal(rebuilt[key], value) for key, value in heads.items())


def test_the_mutator_keeps_the_tie() -> None:
    manifest = _manifest("DDPG")
    [member] = tiny_population(manifest, size=1)
    mutator = Mutator(manifest.mutation, manifest.algorithm, np.random.default_rng(3))
    for kind in ("architecture", "parameters", "architecture", "activation", "rl_hp"):
        mutator.apply(member, kind)
        assert_tied(member)


# -- (5) checkpoints and clones ----------------------------------------------------------------


def _through_bytes(state: dict[str, Any]) -> dict[str, Any]:
    data = io.BytesIO()
    torch.save(state, data)
    data.seek(0)
    return torch.load(data, weights_only=False)


@pytest.mark.parametrize("name", NAMES)
def test_a_checkpoint_keeps_the_tie(name: str) -> None:
    member, twin = _members(name, size=2)
    arch, _ = member.arch.apply("encoder.add_node", np.random.default_rng(0))
    member.set_architecture(arch)  # the twin rebuilds for it when it loads
    member.learn(_batch())
    member.learn(_batch(seed=1))
    state = member.state_dict()
    assert not any(key.startswith("encoder.") for key in state["networks"][member.critics[0]])
    twin.load_state_dict(_through_bytes(state))
    assert_tied(twin)
    for critic in (*member.critics, f"{member.critics[0]}_target"):
        torch.testing.assert_close(_q(twin, critic), _q(member, critic))
    _perturb_encoder(twin)  # the twin's critics follow the twin's actor, not the member's
    assert not torch.allclose(_q(twin, member.critics[0]), _q(member, member.critics[0]))
    assert_tied(twin)


@pytest.mark.parametrize("index", [0, 5])
def test_a_clone_reads_its_own_actor(index: int) -> None:
    [member] = _members("TD3")
    twin = member.clone(index)
    assert_tied(twin)
    assert twin.networks["critic_1"].borrowed.owner is not member.networks["actor"]
    before = _q(twin, "critic_1")
    _perturb_encoder(member)
    torch.testing.assert_close(_q(twin, "critic_1"), before)
    twin.learn(_batch())
    assert_tied(twin)
    assert_tied(member)


# -- (6) training ------------------------------------------------------------------------------


def test_members_that_share_encoders_stack_together_but_not_with_members_that_do_not() -> None:
    shared = _members("DDPG", size=2)
    assert group_members(shared) == [[0, 1]]
    own = _members("DDPG", size=1, share_encoders=False)
    assert group_members([*shared, *own]) == [[0, 1], [2]]


def test_ddpg_with_shared_encoders_trains_to_the_end(tmp_path: Path) -> None:
    manifest = _manifest("DDPG")
    result = smoke_train(manifest, tmp_path / "run")
    assert result.summary["generations"] == 2
    assert all(np.isfinite(result.fitnesses))
    for member in result.population:
        assert member.learn_counter > 0
        assert_tied(member)
