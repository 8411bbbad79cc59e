"""Selection and mutation of a small real population."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agile_cli import TrainingManifest
from agile_cli.evolution.mutation import Mutator, hyperparameter_ranges
from agile_cli.evolution.selection import TournamentSelection
from agile_cli.models import MutationSpec
from agile_cli.testing import tiny_manifest, tiny_population


def _with_fitness(population, values):
    for member, value in zip(population, values, strict=True):
        member.record.fitness.append(value)
    return population


def test_elitism_keeps_a_copy_of_the_best_in_slot_zero() -> None:
    population = _with_fitness(tiny_population(tiny_manifest("DQN"), size=4), [1.0, 9.0, 3.0, 2.0])
    outcome = TournamentSelection(tournament_size=2, elitism=True).select(
        population, np.random.default_rng(0)
    )
    assert outcome.elite.index == 1 and outcome.population[0].index == 1
    assert outcome.population[0] is not population[1]
    for a, b in zip(outcome.population[0].policy.parameters(), population[1].policy.parameters(),
                    strict=True):  # fmt: skip
        assert torch.equal(a, b)
    new = [m.index for m in outcome.population[1:]]
    assert len(set(new)) == 3 and min(new) > 3  # fresh indices
    assert all(m.record.parent in {0, 1, 2, 3} for m in outcome.population[1:])


def test_tournaments_favour_the_fitter() -> None:
    rng = np.random.default_rng(1)
    population = _with_fitness(tiny_population(tiny_manifest("DQN"), size=4), [0.0, 1.0, 2.0, 10.0])
    selection = TournamentSelection(tournament_size=3, elitism=False)
    parents = []
    for _ in range(50):
        parents += [m.record.parent for m in selection.select(population, rng).population]
    counts = np.bincount(parents, minlength=4)
    assert counts[3] > counts[2] > counts[0]


def test_every_mutation_kind_leaves_a_working_member() -> None:
    population = tiny_population(tiny_manifest("DQN"), size=1)
    member = population[0]
    spec = MutationSpec(rl_hp_selection={"lr": {"min": 1e-5, "max": 1e-2}})
    mutator = Mutator(spec, member.spec, np.random.default_rng(0))
    obs = np.zeros((3, 4), dtype=np.float32)
    for kind in ("architecture", "parameters", "activation", "rl_hp"):
        for _ in range(5):
            label = mutator.apply(member, kind)
            assert label != ""
            assert member.act(obs, explore=False).shape == (3,)
    assert 1e-5 <= member.spec.lr <= 1e-2
    assert member.optimizers["q"].param_groups[0]["lr"] == member.spec.lr


def test_parameter_mutation_changes_only_some_weights() -> None:
    member = tiny_population(tiny_manifest("DQN"), size=1)[0]
    before = [p.detach().clone() for p in member.policy.parameters()]
    mutator = Mutator(MutationSpec(), member.spec, np.random.default_rng(3))
    mutator.apply(member, "parameters")
    after = list(member.policy.parameters())
    changed = [not torch.equal(a, b) for a, b in zip(before, after, strict=True)]
    assert any(changed) and not all(changed)


def test_learning_rate_mutation_keeps_optimizer_state() -> None:
    member = tiny_population(tiny_manifest("DQN"), size=1)[0]
    loss = sum(p.sum() for p in member.networks["q"].parameters())
    loss.backward()
    member.optimizers["q"].step()
    state_before = {
        k: v["exp_avg"].clone() for k, v in enumerate(member.optimizers["q"].state.values())
    }
    member.set_hyperparameter("lr", 0.005)
    state_after = list(member.optimizers["q"].state.values())
    assert member.optimizers["q"].param_groups[0]["lr"] == 0.005
    assert all(torch.equal(state_before[i], s["exp_avg"]) for i, s in enumerate(state_after))


def test_default_ranges_follow_the_algorithm_values() -> None:
    manifest = TrainingManifest.get_validated(
        {
            "algorithm": {"name": "DQN", "lr": 0.001, "batch_size": 64},
            "environment": {"name": "CartPole-v1"},
        }
    )
    ranges = hyperparameter_ranges(MutationSpec(), manifest.algorithm)
    assert ranges["lr"].low == pytest.approx(1e-4) and ranges["lr"].high == pytest.approx(1e-2)
    assert (ranges["batch_size"].low, ranges["batch_size"].high) == (16, 256)
    assert ranges["batch_size"].integer and not ranges["lr"].integer


def test_mutation_draws_are_seeded() -> None:
    labels = []
    for _ in range(2):
        population = tiny_population(tiny_manifest("DQN"), size=4)
        Mutator(MutationSpec(), population[0].spec, np.random.default_rng(7)).mutate(population)
        labels.append([m.record.mutation for m in population])
    assert labels[0] == labels[1]


def test_architecture_labels_say_what_happened() -> None:
    """A layer mutation of a network at its fewest or most layers adds nodes instead: its label
    must say add_node, never that a layer was removed while the network grew."""
    member = tiny_population(tiny_manifest("DQN"), size=1)[0]
    mutator = Mutator(MutationSpec(), member.spec, np.random.default_rng(0))
    seen = set()
    for _ in range(200):
        depth = len(member.arch.head.hidden_size)
        label = mutator.apply(member, "architecture")
        change = len(member.arch.head.hidden_size) - depth
        seen.add((label.split("(")[0], change))
        if label.startswith("head.remove_layer"):
            assert change == -1, label
        if label.startswith("head.add_layer"):
            assert change == 1, label
        if label.startswith("head.add_node"):
            assert change == 0, label
    assert ("head.add_node", 0) in seen and ("head.remove_layer", -1) in seen
