"""The reference's neuron-level mutation operators (agilerl 2.58): architecture mutations that
keep the network's function, and dormant-neuron resets before a parameter mutation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from agile_cli.evolution.mutation import Mutator
from agile_cli.models import MutationSpec
from agile_cli.testing import smoke_train, tiny_manifest, tiny_population
from agile_rl.nn.neurons import (
    GradientSums,
    dormant_units,
    keep_function,
    network_units,
    reset_dormant,
)

NO_NORMS = {
    "encoder_config": {"hidden_size": [32], "layer_norm": False},
    "head_config": {"hidden_size": [32], "layer_norm": False},
}
PENDULUM = {"name": "Pendulum-v1", "num_envs": 2, "sync": True}
ONLY_PARAMETERS = {"probabilities": {"no_mut": 0, "arch_mut": 0, "params_mut": 1, "rl_hp_mut": 0}}


def _q(member, obs: torch.Tensor) -> torch.Tensor:
    return member.networks["q"](obs)["q"].detach()


def test_added_nodes_and_layers_leave_the_outputs_as_they_were() -> None:
    member = tiny_population(tiny_manifest("DQN", network=NO_NORMS), size=1)[0]
    mutator = Mutator(MutationSpec(), member.spec, np.random.default_rng(0))
    obs = torch.randn(64, 4)
    kept = set()
    for _ in range(60):
        before = _q(member, obs)
        label = mutator.apply(member, "architecture")
        if label.endswith("same function"):
            kept.add(label.split("(")[0])
            torch.testing.assert_close(_q(member, obs), before, rtol=0, atol=1e-6)
    assert kept >= {"encoder.add_node", "latent.add_node", "head.add_node", "head.add_layer"}


def test_new_nodes_learn_from_the_first_gradient_step() -> None:
    member = tiny_population(tiny_manifest("DQN", network=NO_NORMS), size=1)[0]
    member.set_architecture(member.arch.apply("encoder.add_node", np.random.default_rng(1))[0])
    old = member.networks["q"]
    widened = member.arch.apply("encoder.add_node", np.random.default_rng(2))[0]
    assert widened != member.arch
    member.set_architecture(widened)
    assert keep_function(old, member.networks["q"]) == "same function"
    member.networks["q"](torch.randn(32, 4))["q"].pow(2).sum().backward()
    reader = member.networks["q"].encoder.out.weight
    start = old.encoder.out.weight.shape[1]
    assert torch.all(reader[:, start:] == 0)
    assert reader.grad[:, start:].abs().sum() > 0


def test_with_layer_norms_new_capacity_stays_random_and_the_label_says_why() -> None:
    member = tiny_population(tiny_manifest("DQN"), size=1)[0]
    mutator = Mutator(MutationSpec(), member.spec, np.random.default_rng(0))
    labels = [mutator.apply(member, "architecture") for _ in range(20)]
    grown = [label for label in labels if ".add_" in label]
    assert grown and all(", random: a layer norm" in label for label in grown)


def test_preserve_function_false_initialises_new_capacity_randomly() -> None:
    member = tiny_population(tiny_manifest("DQN", network=NO_NORMS), size=1)[0]
    mutator = Mutator(MutationSpec(preserve_function=False), member.spec, np.random.default_rng(0))
    obs = torch.randn(64, 4)
    changed = []
    for _ in range(30):
        before = _q(member, obs)
        label = mutator.apply(member, "architecture")
        assert "same function" not in label
        if ".add_" in label:
            changed.append(not torch.allclose(_q(member, obs), before, atol=1e-6))
    assert changed and all(changed)


def test_dormant_units_are_those_far_below_their_layers_mean() -> None:
    assert dormant_units(torch.tensor([1.0, 1.0, 0.001, 2.0]), 0.01) == [2]
    assert dormant_units(torch.tensor([1.0, float("nan"), 1.0]), 0.01) == [1]
    assert dormant_units(torch.zeros(3), 0.01) == [0, 1, 2]  # nothing reached the layer


def test_a_reset_rewrites_only_the_dormant_units_and_clears_their_adam_moments() -> None:
    member = tiny_population(tiny_manifest("DQN", network=NO_NORMS), size=1)[0]
    network = member.networks["q"]
    member.networks["q"](torch.randn(32, 4))["q"].sum().backward()
    member.optimizers["q"].step()
    layer, reader = network.encoder.layers[0], network.encoder.out
    before = layer.weight.detach().clone(), reader.weight.detach().clone()
    scores = torch.ones(32)
    scores[[3, 7]] = 0.0
    member.neuron_scores = {"q": {"encoder.layers.0": scores}}
    assert member.reset_dormant(0.01, np.random.default_rng(0)) == 2
    changed_rows = (layer.weight != before[0]).any(dim=1).nonzero().flatten().tolist()
    changed_columns = (reader.weight != before[1]).any(dim=0).nonzero().flatten().tolist()
    assert changed_rows == [3, 7] and changed_columns == [3, 7]
    assert torch.all(layer.bias[[3, 7]] == 0)
    live = before[1][:, [i for i in range(32) if i not in (3, 7)]].norm(dim=0).median()
    torch.testing.assert_close(reader.weight[:, [3, 7]].norm(dim=0), 0.02 * live.expand(2))
    moments = member.optimizers["q"].state[layer.weight]
    assert torch.all(moments["exp_avg"][[3, 7]] == 0) and moments["exp_avg"][0].abs().sum() > 0


def test_every_unit_of_a_network_is_found_with_its_readers() -> None:
    member = tiny_population(tiny_manifest("DQN", network=NO_NORMS), size=1)[0]
    units = {u.producer: u.consumers for u in network_units(member.networks["q"])}
    assert units == {
        "encoder.layers.0": (("encoder.out", 0),),
        "encoder.out": (("heads.q.layers.0", 0),),
        "heads.q.layers.0": (("heads.q.out", 0),),
    }
    count, _ = reset_dormant(member.networks["q"], {}, 0.01, np.random.default_rng(0))
    assert count == 0  # no scores, nothing reset


def test_inactive_members_gradients_are_not_counted() -> None:
    sums = GradientSums()
    sums.active = torch.tensor([True, False])
    sums.add("layer", torch.ones(2, 5, 3))
    sums.active = torch.tensor([True, True])
    sums.add("layer", 3 * torch.ones(2, 5, 3))
    torch.testing.assert_close(sums.scores(0)["layer"], torch.full((3,), 2.0))
    torch.testing.assert_close(sums.scores(1)["layer"], torch.full((3,), 3.0))
    assert sums.scores(1, {"layer": 2})["layer"].shape == (2,)


@pytest.mark.parametrize("algorithm", ["DQN", "TD3"])
def test_a_stacked_group_measures_what_its_members_measure_alone(
    algorithm: str, tmp_path: Path
) -> None:
    environment = PENDULUM if algorithm == "TD3" else None
    training = {"max_steps": 256, "evo_steps": 128, "pop_size": 3}
    manifest = tiny_manifest(
        algorithm, mutation=ONLY_PARAMETERS, training=training, environment=environment
    )
    grouped = smoke_train(manifest, tmp_path / "grouped", seed=1)
    alone = smoke_train(manifest, tmp_path / "alone", seed=1, per_member=True)
    for together, single in zip(grouped.population, alone.population, strict=True):
        assert together.neuron_scores.keys() == set(together.trained_networks)
        for name, scores in together.neuron_scores.items():
            assert scores.keys() == single.neuron_scores[name].keys() and scores
            for producer, score in scores.items():
                torch.testing.assert_close(score, single.neuron_scores[name][producer])
    labels = [entry["mutation"] for m in grouped.population for entry in m.record.lineage]
    assert any("dormant neuron" in label for label in labels)


def test_scores_travel_with_a_member_through_its_state() -> None:
    manifest = tiny_manifest("DQN", mutation=ONLY_PARAMETERS)
    first, second = tiny_population(manifest, size=2)
    first.neuron_scores = {"q": {"encoder.layers.0": torch.rand(64)}}
    second.load_state_dict(first.state_dict())
    torch.testing.assert_close(second.neuron_scores, first.neuron_scores)
    state = first.state_dict()
    del state["neuron_scores"]  # a checkpoint written before the resets
    second.load_state_dict(state)
    assert second.neuron_scores == {}
    state["neuron_scores"] = {"q": {"encoder.out": [1.0], "encoder.layers.0": torch.ones(64)},
                              "target": "not scores"}  # fmt: skip
    second.load_state_dict(state)  # what is not a score is left out, not a traceback
    assert list(second.neuron_scores) == ["q"]
    assert list(second.neuron_scores["q"]) == ["encoder.layers.0"]


def test_only_members_whose_parameters_may_mutate_measure_their_neurons() -> None:
    no_threshold = {"dormant_threshold": None, **ONLY_PARAMETERS}
    no_parameters = {"probabilities": {"params_mut": 0}}
    for mutation, measures in (
        (ONLY_PARAMETERS, True),
        (no_threshold, False),
        (no_parameters, False),
    ):
        member = tiny_population(tiny_manifest("DQN", mutation=mutation), size=1)[0]
        assert member.measures_neurons is measures


def test_rainbow_resets_no_neurons_unless_its_manifest_asks() -> None:
    left_out = tiny_manifest("RainbowDQN", mutation=ONLY_PARAMETERS)
    assert left_out.mutation.dormant_threshold is None
    assert not tiny_population(left_out, size=1)[0].measures_neurons
    asked = tiny_manifest("RainbowDQN", mutation={"dormant_threshold": 0.02, **ONLY_PARAMETERS})
    assert asked.mutation.dormant_threshold == 0.02
    assert tiny_population(asked, size=1)[0].measures_neurons
    # the other algorithms keep the reference's default
    assert tiny_manifest("DQN", mutation=ONLY_PARAMETERS).mutation.dormant_threshold == 0.01


def test_a_recipe_replays_an_addition_that_kept_the_function_as_it_was_kept() -> None:
    from agile_cli.models.recipe import RecipeStep

    step = RecipeStep(generation=2, mutation="encoder.add_node(layer=0,nodes=8), same function")
    assert step.kept_function
    assert not RecipeStep(generation=2, mutation="encoder.add_node(layer=0,nodes=8)").kept_function
    obs = torch.randn(64, 4)
    for keep in (True, False):
        member = tiny_population(tiny_manifest("DQN", network=NO_NORMS), size=1)[0]
        wider = member.arch.apply("encoder.add_node", np.random.default_rng(1))[0]
        before = _q(member, obs)
        member.adopt_architecture(wider.to_dict(), keep_function=keep)
        assert member.arch == wider
        assert torch.allclose(_q(member, obs), before, atol=1e-6) is keep


def test_a_ray_worker_replays_a_recipes_architecture_as_the_driver_recorded_it() -> None:
    from agile_ray.resident import replay

    member = tiny_population(tiny_manifest("DQN", network=NO_NORMS), size=1)[0]
    wider = member.arch.apply("encoder.add_node", np.random.default_rng(1))[0]
    obs = torch.randn(64, 4)
    before = _q(member, obs)
    replayed, _ = replay(member, (("adopt", wider.to_dict(), True),), None)
    assert replayed.arch == wider
    torch.testing.assert_close(_q(replayed, obs), before, rtol=0, atol=1e-6)
