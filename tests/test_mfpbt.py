"""Multi-frequency PBT: the section, the plan on hand-set fitness, the frequencies, and a resume
in the middle of a slow subpopulation's cycle."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agile_cli import ManifestError, TrainingManifest
from agile_cli.models.run_options import LocalRunOptions
from agile_cli.testing import (
    TINY_SECTIONS,
    TOY_ENVIRONMENT,
    installed_host,
    interrupt_after,
    tiny_manifest,
    tiny_population,
)
from agile_cli.training.loop import EvolutionLoop
from agile_cli.training.progress import LogReporter
from agile_cli.training.trainer import resume_local
from agile_mfpbt.selection import Clone, Migration, MultiFrequencySelection, plan_subpopulation
from agile_mfpbt.spec import Layout, MultiFrequencySpec

REFERENCE_SECTION = {  # as the reference's own MF-PBT manifests write it
    "strategy": "multi_frequency",
    "n_subpopulations": 2,
    "n_winners": 2,
    "n_survivors": 0,
    "n_open_for_migration": 2,
    "n_losers": 4,
    "evolution_frequency_ratios": [1, 5],
}


def _manifest(pop_size: int, section: dict, **training: int) -> TrainingManifest:
    data = {
        "algorithm": {"name": "DQN", "batch_size": 16},
        "environment": dict(TOY_ENVIRONMENT),
        "training": {"max_steps": 128, "evo_steps": 64, "pop_size": pop_size, **training},
        "network": TINY_SECTIONS["network"],
        "mutation": {},
        "selection_strategy": section,
    }
    return TrainingManifest.get_validated(data, registry=installed_host().registry)


def _errors(pop_size: int, section: dict) -> dict[str, str]:
    with pytest.raises(ManifestError) as caught:
        _manifest(pop_size, section)
    return {error.path: error.message for error in caught.value.errors}


def test_the_reference_section_validates_and_defaults_resolve_against_the_population() -> None:
    given = _manifest(16, REFERENCE_SECTION).tournament_selection
    assert isinstance(given, MultiFrequencySpec)
    assert given.layout(16) == Layout(2, 8, (1, 5), 2, 0, 2, 4)
    resolved = _manifest(24, {"strategy": "multi_frequency", "n_subpopulations": 3})
    section = resolved.to_dict()["selection_strategy"]
    # subpopulations of 8: round(8/4) = 2 winners and open slots, 0 survivors, 4 losers
    assert section["n_winners"] == 2 and section["n_open_for_migration"] == 2
    assert section["n_survivors"] == 0 and section["n_losers"] == 4
    assert section["evolution_frequency_ratios"] == [1, 5, 10]
    assert "tournament_selection" not in resolved.to_dict()


@pytest.mark.parametrize(
    ("pop_size", "change", "path", "said"),
    [
        (4, {}, "training.pop_size", "subpopulations of 3 or more"),
        (9, {}, "training.pop_size", "do not split into 2"),
        (16, {"n_losers": 3}, "selection_strategy", "must add up to the 8 members"),
        (8, {"n_winners": 3, "n_losers": None}, "selection_strategy.n_losers", "at least 1 loser"),
        (16, {"evolution_frequency_ratios": [5, 1]},
         "selection_strategy.evolution_frequency_ratios", "strictly increasing"),
        (16, {"evolution_frequency_ratios": [1, 5, 10]}, "selection_strategy", "one per subpop"),
        (16, {"tournament_size": 2}, "selection_strategy.tournament_size", "unknown field"),
    ],
)  # fmt: skip
def test_layouts_that_cannot_work_are_refused_at_their_field(pop_size, change, path, said) -> None:
    section = {**REFERENCE_SECTION, **change}
    errors = _errors(pop_size, {k: v for k, v in section.items() if v is not None})
    assert path in errors and said in errors[path], errors


def test_a_misspelled_strategy_is_named_with_the_registered_ones() -> None:
    with pytest.raises(ManifestError) as caught:
        _manifest(16, {**REFERENCE_SECTION, "strategy": "multi_frequncy"})
    (error,) = caught.value.errors
    assert error.path == "selection_strategy.strategy"
    assert "did you mean 'multi_frequency'" in (error.hint or "")


LAYOUT = Layout(subpopulations=2, size=4, ratios=(1, 5), winners=1, survivors=1,
                open_for_migration=1, losers=1)  # fmt: skip


def test_the_plan_brackets_clones_and_migrates_by_fitness() -> None:
    #          subpopulation 0 (evolves every time)  subpopulation 1 (every fifth time)
    fitness = [3.0, 9.0, 1.0, 5.0,                    8.0, 2.0, 7.0, 4.0]  # fmt: skip
    clones, migrations, leader = plan_subpopulation(LAYOUT, 0, fitness, np.random.default_rng(0))
    # ranked 1 (9), 3 (5), 0 (3), 2 (1): winner 1, survivor 3, open 0, loser 2
    assert leader == 1
    assert clones == [Clone(position=2, source=1)]
    # the best outside, 4 (8.0), beats the open slot's 3.0 and comes from a slower
    # subpopulation: it migrates whole
    assert migrations == [Migration(position=0, source=4, weights_only=False)]
    clones, migrations, leader = plan_subpopulation(LAYOUT, 1, fitness, np.random.default_rng(0))
    # ranked 4 (8), 6 (7), 7 (4), 5 (2): winner 4, survivor 6, open 7, loser 5
    assert leader == 4
    assert clones == [Clone(position=5, source=4)]
    # 1 (9.0) of the faster subpopulation beats 4.0: it brings its networks only
    assert migrations == [Migration(position=7, source=1, weights_only=True)]


def test_an_open_slot_that_is_not_worse_keeps_its_member_and_the_candidate_waits() -> None:
    layout = Layout(2, 4, (1, 5), winners=1, survivors=0, open_for_migration=2, losers=1)
    fitness = [10.0, 6.0, 2.0, 0.0, 5.0, 1.0, 1.0, 1.0]
    migrations = plan_subpopulation(layout, 0, fitness, np.random.default_rng(0)).migrations
    # open slots 1 (6.0) and 2 (2.0): 6.0 >= the best outside (5.0) stays; 5.0 then takes 2
    assert migrations == [Migration(position=2, source=4, weights_only=False)]
    fitness[2] = 5.5  # now both open slots are at least as good as anyone outside
    assert plan_subpopulation(layout, 0, fitness, np.random.default_rng(0))[1] == []


def test_losers_take_clones_of_winners_drawn_at_random() -> None:
    layout = Layout(2, 8, (1, 5), winners=2, survivors=0, open_for_migration=2, losers=4)
    fitness = [float(value) for value in range(16)][::-1]
    sources = {
        clone.source
        for seed in range(20)
        for clone in plan_subpopulation(layout, 0, fitness, np.random.default_rng(seed))[0]
    }
    assert sources == {0, 1}  # both winners, and only them


def _population(size: int, fitness: list[float]) -> list:
    population = tiny_population(tiny_manifest("DQN"), size=size)
    for member, value in zip(population, fitness, strict=True):
        member.record.fitness.append(value)
    return population


def test_subpopulations_evolve_at_their_own_frequencies() -> None:
    layout = Layout(2, 3, (1, 3), winners=1, survivors=0, open_for_migration=1, losers=1)
    selection = MultiFrequencySelection(layout)
    population = _population(6, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    rng = np.random.default_rng(0)
    evolved = []
    for _ in range(7):
        before = list(population)
        outcome = selection.select(population, rng)
        evolved.append(selection.last["evolved"])
        population = outcome.population
        for member, value in zip(population, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], strict=True):
            member.record.fitness.append(value)
        if 1 not in evolved[-1]:  # the slow subpopulation is left exactly as it was
            assert population[3:] == before[3:]
        # only the losers' slots (the worst of each evolved subpopulation) take clones
        assert outcome.to_mutate == [3 * k for k in evolved[-1]]
    assert evolved == [[0], [0], [0, 1], [0], [0], [0, 1], [0]]


def test_only_clones_are_mutated_and_weights_only_migrants_take_the_leaders_hyperparameters(
) -> None:  # fmt: skip
    layout = Layout(2, 3, (1, 5), winners=1, survivors=0, open_for_migration=1, losers=1)
    population = _population(6, [9.0, 1.0, 0.0, 5.0, 4.0, 3.0])
    population[3].set_hyperparameter("lr", 0.5)  # the slow subpopulation's leader
    selection = MultiFrequencySelection(layout)
    for _ in range(4):  # bring the slow subpopulation to its turn
        selection.select(population, np.random.default_rng(0))
    outcome = selection.select(population, np.random.default_rng(0))
    assert selection.last["evolved"] == [0, 1]
    assert outcome.to_mutate == [2, 5]  # each subpopulation's loser, replaced by a clone
    assert outcome.elite.index == population[0].index
    migrant = outcome.population[4]  # the slow subpopulation's open slot
    assert migrant.record.parent == population[0].index  # the best of the fast one
    assert migrant.hyperparameters()["lr"] == 0.5
    assert migrant.record.mutation.endswith("(weights)")
    assert outcome.population[3] is population[3] and population[3].record.mutation == "none"


RESUMED = {"strategy": "multi_frequency", "n_subpopulations": 2,
           "evolution_frequency_ratios": [1, 3]}  # fmt: skip


def _selections(run_dir) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["selection"] for line in lines]


def test_a_resume_in_the_middle_of_the_slow_cycle_keeps_its_count(tmp_path) -> None:
    manifest = _manifest(6, RESUMED, max_steps=64 * 5)
    run_dir = tmp_path / "run"
    registry = installed_host().registry
    loop = EvolutionLoop(manifest, registry, LocalRunOptions(device="cpu", run_dir=run_dir),
                         LogReporter())  # fmt: skip
    interrupt_after(loop, members_trained=2 * 6)  # Ctrl-C as the third generation starts
    assert loop.run().interrupted
    resumed = resume_local(run_dir, registry, LocalRunOptions(device="cpu"), verbose=False)
    assert resumed.summary["generations"] == 5
    selections = _selections(run_dir)
    # the selection that made each generation's population: the slow subpopulation's turn
    # comes every third one, across the resume (which took place with counters [0, 2])
    assert [s["evolved"] for s in selections] == [[], [0], [0], [0, 1], [0]]
    slow = [s["subpopulations"][1] for s in selections]
    assert slow[0] == slow[1] == slow[2] != slow[3] == slow[4]
    assert selections[2]["counters"] == [0, 2] and selections[3]["counters"] == [0, 0]
