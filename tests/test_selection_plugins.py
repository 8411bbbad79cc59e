"""A selection strategy from a third-party plugin (agile_register_selection_strategies):
registered, validated, trained with, and refused when malformed."""

from __future__ import annotations

import json
from typing import Literal

import numpy as np
import pytest

from agile_cli import (
    FieldError,
    RegisterSelection,
    Selection,
    SelectionSpec,
    SelectionStrategy,
    TrainingSpec,
    hookimpl,
)
from agile_cli.helpers import last_fitness
from agile_cli.testing import smoke_train, tiny_manifest
from agile_rl import Algorithm


class HalvingSpec(SelectionSpec):
    strategy: Literal["halving"]

    def check_training(self, training: TrainingSpec, section: str) -> list[FieldError]:
        if training.pop_size % 2:
            return [FieldError("training.pop_size", "must be even to be halved")]
        return []


class Halving(SelectionStrategy):
    """The better half survives; the other half takes mutated copies of it."""

    def __init__(self) -> None:
        super().__init__()
        self.rounds = 0

    def select(self, population: list[Algorithm], rng: np.random.Generator) -> Selection:
        self.rounds += 1
        ranked = sorted(population, key=last_fitness, reverse=True)
        kept = ranked[: len(ranked) // 2]
        copies = [member.clone(self.new_index(population)) for member in kept]
        for member in kept:
            member.record.mutation = "none"
        return Selection(kept[0].clone(kept[0].index), kept + copies,
                         to_mutate=list(range(len(kept), len(population))))  # fmt: skip

    def state_dict(self) -> dict:
        return {**super().state_dict(), "rounds": self.rounds}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.rounds = state["rounds"]

    def metrics(self, population: list[Algorithm]) -> dict:
        return {"rounds": self.rounds}


def halving(spec: HalvingSpec, pop_size: int) -> Halving:
    return Halving()


class HalvingPlugin:
    @hookimpl
    def agile_register_selection_strategies(self, register: RegisterSelection) -> None:
        register(name="halving", spec=HalvingSpec,
                 implementation="tests.test_selection_plugins:halving")  # fmt: skip


def _manifest(registry, pop_size: int = 4, max_steps: int = 192):
    return tiny_manifest(
        "DQN", registry=registry, tournament_selection={"strategy": "halving"},
        training={"max_steps": max_steps, "evo_steps": 64, "pop_size": pop_size},
    )  # fmt: skip


def test_a_plugins_strategy_validates_trains_and_records_its_metrics(agile_host, tmp_path) -> None:
    host = agile_host(("halving", HalvingPlugin()))
    assert host.registry.contributions("halving") == ["selection strategy:halving"]
    result = smoke_train(_manifest(host.registry), tmp_path / "run", host.registry)
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["selection"]["rounds"] for line in lines] == [0, 1, 2]
    last = json.loads(lines[-1])["members"]
    assert sum(row["mutation"] == "none" for row in last) >= 2  # the kept half, unmutated
    assert len(result.population) == 4


def test_its_rules_against_the_population_reach_the_user(agile_host) -> None:
    from agile_cli import ManifestError

    host = agile_host(("halving", HalvingPlugin()))
    with pytest.raises(ManifestError) as caught:
        _manifest(host.registry, pop_size=3)
    assert [(e.path, e.message) for e in caught.value.errors] == [
        ("training.pop_size", "must be even to be halved")
    ]


class Unnamed(SelectionSpec):  # its strategy field does not name it
    pass


class Tournament(SelectionSpec):
    strategy: Literal["tournament"]


@pytest.mark.parametrize(
    ("name", "spec", "said"),
    [
        ("unnamed", Unnamed, "Unnamed.strategy must be Literal['unnamed']"),
        ("tournament", Tournament, "registered by both 'agile_cli' and 'bad'"),
    ],
)
def test_a_malformed_strategy_drops_its_plugin_with_the_reason(agile_host, name, spec, said):
    class Bad:
        @hookimpl
        def agile_register_selection_strategies(self, register: RegisterSelection) -> None:
            register(name=name, spec=spec, implementation="tests.test_selection_plugins:halving")

    host = agile_host(("bad", Bad()))
    (info,) = [info for info in host.plugins if info.name == "bad"]
    assert info.status == "failed" and said in (info.error or "")
