"""Resident members without Ray: workers (the plain class Ray wraps) hold their members between
generations, the driver's stand-ins replay selection and mutation exactly as the workers do,
and positions are placed where their sources are held."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch

from agile_cli import MemberRecord, MutationSpec, TrainingManifest
from agile_cli.evolution.mutation import Mutator
from agile_cli.helpers import installed_registry
from agile_ray.resident import Holder, Instruction, Standin, payload_bytes, standin_of
from agile_ray.runner import place
from agile_ray.worker import MemberWorker

MANIFEST = {
    "algorithm": {"name": "DQN", "batch_size": 16, "learn_step": 4},
    "environment": {"name": "CartPole-v1", "num_envs": 2, "sync": True},
    "training": {"max_steps": 400, "evo_steps": 200, "pop_size": 4, "learning_delay": 50,
                 "eval_steps": 50},
    "mutation": {"rand_seed": 3, "probabilities": {"no_mut": 0.0, "arch_mut": 0.4,
                 "params_mut": 0.3, "rl_hp_mut": 0.3}},
}  # fmt: skip


class LocalHolder(Holder):
    """The runner's side of stand-ins, over workers in this process."""

    def __init__(self, workers: list[MemberWorker], mutation: MutationSpec | None) -> None:
        self.workers, self.mutation = workers, mutation
        self.template: Any = None
        self.where: dict[int, int] = {}

    def fetch(self, index: int, steps: int) -> dict[str, Any]:
        return self.workers[self.where[index]].export([index])[index]


@pytest.fixture(scope="module")
def two_workers() -> tuple[list[MemberWorker], LocalHolder, list[Standin]]:
    """Two workers of two members each, after one generation from fresh members."""
    registry = installed_registry()
    manifest = TrainingManifest.get_validated(MANIFEST, registry=registry)
    options = {"seed": 1, "members": 2, "threads": 1, "registry": registry}
    workers = [MemberWorker(manifest.to_dict(), {**options, "slot": k}) for k in (0, 1)]
    holder = LocalHolder(workers, manifest.mutation)
    fresh = [workers[0].trainer.template.clone(i) for i in range(4)]
    holder.template = fresh[0].clone(0)
    standins = []
    for slot, worker in enumerate(workers):
        chunk = fresh[2 * slot : 2 * slot + 2]
        instructions = [Instruction(m.index, state=m.state_dict()) for m in chunk]
        trained, _, received = worker.train(instructions, 200, 1, 50)
        assert received == payload_bytes([i.state for i in instructions]) > 0
        for member, account in zip(chunk, trained, strict=True):
            holder.where[account.index] = slot
            standins.append(standin_of(account, member.record, holder))
    return workers, holder, standins


def _tensors_equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_tensors_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_tensors_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_workers_hold_their_members_and_report_what_the_driver_shows(two_workers) -> None:
    workers, holder, standins = two_workers
    assert sorted(workers[0].held) == [0, 1] and sorted(workers[1].held) == [2, 3]
    for standin in standins:
        held = workers[holder.where[standin.index]].held[standin.index]
        assert standin.record.steps == held.record.steps == 200
        assert standin.describe_network() == held.describe_network()
        assert standin.hyperparameters() == held.hyperparameters()
        assert standin.architecture() == held.architecture()


def test_a_copy_mutated_on_the_driver_is_the_member_its_worker_makes(two_workers) -> None:
    """Selection and mutation act on stand-ins; the state the driver makes of each (for its
    checkpoint) equals the member a worker makes from the same instruction, bit for bit."""
    workers, holder, standins = two_workers
    mutator = Mutator(holder.mutation, holder.template.spec, np.random.default_rng(7))
    children = [standins[3].clone(10), standins[0].clone(11), standins[3].clone(12)]
    for kind, child in zip(("architecture", "parameters", "rl_hp"), children, strict=True):
        child.record.mutation = mutator.apply(child, kind)
    for child in children:
        made = child.state_dict()
        worker = workers[0]
        exported = workers[1].export([3])
        members, labels = worker._make([child.instruction()], exported)
        member = members[0]
        # a checkpoint records what the worker's replay does, not a placeholder
        if labels[0] is not None:  # a network mutation (rl_hp is labelled on the driver)
            assert child.record.mutation == labels[0]
        assert "applied in its worker" not in child.record.mutation
        assert made["index"] == member.index == child.index
        assert made["arch"] == member.state_dict()["arch"]
        assert _tensors_equal(made["networks"], member.state_dict()["networks"])
        assert _tensors_equal(made["optimizers"], member.state_dict()["optimizers"])
        assert made["hyperparameters"] == member.hyperparameters() == child.hyperparameters()
        assert made["record"] == dataclasses.asdict(child.record)
    assert children[0].state_dict()["arch"] != standins[3].architecture()  # it did grow


@pytest.mark.parametrize(
    ("sources", "where", "sizes", "expected"),
    [
        # members that go on stay; copies go to their source's slot while it has room
        ([(0, 0), (5, 1), (6, 1), (7, 0)], {0: 0, 1: 1}, [2, 2], [[0, 3], [1, 2]]),
        # a winner copied more often than its slot holds: the rest fill other slots
        ([(4, 0), (5, 0), (6, 0), (7, 0)], {0: 0, 1: 1}, [2, 2], [[0, 1], [2, 3]]),
        # a member that goes on keeps its place before a copy of another takes it
        ([(9, 1), (1, 1), (8, 0), (0, 0)], {0: 0, 1: 1}, [2, 2], [[2, 3], [0, 1]]),
        # whole states (a resume) fill the slots in order
        ([(0, None), (1, None), (2, None)], {}, [2, 1], [[0, 1], [2]]),
    ],
)
def test_place_keeps_states_on_the_workers_that_hold_them(sources, where, sizes, expected) -> None:
    instructions = [
        Instruction(index, held=held, state=None if held is not None else {"index": index})
        for index, held in sources
    ]
    assert place(instructions, where, sizes) == expected


def test_a_standin_loaded_from_a_checkpoint_state_starts_from_it(two_workers) -> None:
    _, _, standins = two_workers
    state = standins[1].state_dict()
    other = standins[2].clone(2)
    other.load_state_dict(state)
    assert other.index == standins[1].index and other.held is None and other.ops == ()
    assert other.record == MemberRecord(**state["record"])
    assert other.instruction().state is state


def test_a_worker_trains_copies_of_its_own_members_and_of_another_workers(two_workers) -> None:
    """(Last: it replaces what the first worker holds.)"""
    workers, _, standins = two_workers
    child, stranger = standins[0].clone(20), standins[2].clone(21)
    exported = workers[1].export([2])
    instructions = [child.instruction(), stranger.instruction()]
    trained, _, received = workers[0].train(instructions, 100, 1, 50, exported)
    assert [account.index for account in trained] == [20, 21]
    assert sorted(workers[0].held) == [20, 21]
    assert received == payload_bytes(exported) > 0  # only the stranger's state came in
    assert all(account.steps == 300 for account in trained)
