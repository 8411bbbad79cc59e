"""The plugin guide's batched algorithm (TinyQ) as a plugin author copies it: it conforms,
trains batched, and a group learns what each member learns alone."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from pydantic import Field

from agile_cli import (
    AlgorithmSpec,
    RegisterAlgorithm,
    TrainingSpec,
    hookimpl,
)
from agile_cli.testing import check_conformance, smoke_train, tiny_manifest, tiny_population
from agile_rl import (
    ClippedObjectiveSpec,
    EpsilonGreedyTraining,
    MemberGroup,
    ReplayBuffer,
    learn_stacked,
)

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"


class TinyQSpec(AlgorithmSpec):
    """The spec the guide describes in words under its TinyQ example."""

    lr: float = Field(default=1e-3, gt=0, le=1, description="Adam learning rate.")
    gamma: float = Field(default=0.99, ge=0, le=1, description="Discount.")
    tau: float = Field(default=0.01, gt=0, le=1, description="Soft update rate.")
    learn_step: int = Field(default=4, ge=1, le=10_000, description="Env steps per update.")
    mutable_hyperparameters: ClassVar[tuple[str, ...]] = ("lr", "batch_size")
    default_mutable: ClassVar[tuple[str, ...]] = ("lr",)
    training_spec: ClassVar[type[TrainingSpec]] = EpsilonGreedyTraining


def _guide_registry(
    folder: Path, monkeypatch: pytest.MonkeyPatch, agile_host: Any, marker: str, name: str,
    spec: type[AlgorithmSpec], family: str,
) -> Any:  # fmt: skip
    """The guide's code block holding ``marker``, written to a module of its own and
    registered as algorithm ``name`` with ``spec`` (described in the guide's words)."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)
    code = next(block for block in blocks if marker in block)
    module = f"guide_{name.lower()}"
    (folder / f"{module}.py").write_text(code, encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))

    class Plugin:
        @hookimpl
        def agile_register_algorithms(self, register: RegisterAlgorithm) -> None:
            register(name=name, spec=spec, family=family, implementation=f"{module}:{name}")

    return agile_host((name.lower(), Plugin())).registry


@pytest.fixture
def registry(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, agile_host: Any
) -> Any:
    """The guide's off-policy example, registered as TinyQ."""
    folder = tmp_path_factory.mktemp("guide")
    return _guide_registry(
        folder, monkeypatch, agile_host, "class TinyQGroup", "TinyQ", TinyQSpec, "off_policy"
    )


def test_the_guide_s_example_conforms(registry: Any, tmp_path: Path) -> None:
    check_conformance("TinyQ", tmp_path, registry=registry)


def test_the_guide_s_example_trains_batched(registry: Any, tmp_path: Path) -> None:
    manifest = tiny_manifest(
        "TinyQ", registry=registry, training={"max_steps": 256, "evo_steps": 128, "pop_size": 3}
    )
    smoke_train(manifest, tmp_path / "run", registry)
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    groups = [json.loads(line)["groups"] for line in lines if "groups" in json.loads(line)]
    assert groups and any(len(group) > 1 for generation in groups for group in generation)


def test_the_guide_s_group_learns_as_each_member_alone(registry: Any) -> None:
    manifest = tiny_manifest("TinyQ", registry=registry, training={"pop_size": 2})
    stacked = tiny_population(manifest, registry)
    alone = [member.clone(member.index) for member in stacked]
    for members in (stacked, alone):
        members[1].set_hyperparameter("batch_size", 11)
        members[1].set_hyperparameter("lr", 3e-3)
    first = stacked[0]
    buffer = ReplayBuffer(256, first.observation_space, first.action_space, gamma=0.99)
    rng = np.random.default_rng(0)
    buffer.add(rng.normal(size=(64, 4)).astype(np.float32), rng.integers(2, size=64),
               rng.normal(size=64), rng.normal(size=(64, 4)).astype(np.float32),
               rng.random(64) < 0.1)  # fmt: skip
    learner = first.group_learner(MemberGroup(stacked))
    for step in range(6):
        active = [True, step % 2 == 0]  # the second member sits out every other step
        learn_stacked(learner, buffer, active)
        for member, on in zip(alone, active, strict=True):
            if on:
                member.learn(buffer.sample(int(member.spec.batch_size), member.generator))
    learner.group.write_back()
    for grouped, single in zip(stacked, alone, strict=True):
        for name in ("q", "target"):
            for a, b in zip(
                grouped.networks[name].parameters(), single.networks[name].parameters(), strict=True
            ):
                assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), name
        assert torch.equal(grouped.generator.get_state(), single.generator.get_state())


def test_the_reproducibility_fixture_works_as_documented(agile_reproducibility: Any) -> None:
    agile_reproducibility("DQN")  # the installed plugins, no registry given


# -- the on-policy example: TinyAC -----------------------------------------------------------


@pytest.fixture
def on_policy_registry(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, agile_host: Any
) -> Any:
    """The guide's on-policy example, registered as TinyAC with the spec the guide names."""
    folder = tmp_path_factory.mktemp("guide_ac")
    return _guide_registry(
        folder, monkeypatch, agile_host, "class TinyACGroup", "TinyAC", ClippedObjectiveSpec,
        "on_policy",
    )  # fmt: skip


def test_the_guide_s_on_policy_example_conforms(on_policy_registry: Any, tmp_path: Path) -> None:
    options = {"learn_step": 16, "batch_size": 8, "update_epochs": 2}
    check_conformance("TinyAC", tmp_path, registry=on_policy_registry, algorithm_options=options)


def test_the_guide_s_on_policy_example_trains_batched(
    on_policy_registry: Any, tmp_path: Path
) -> None:
    manifest = tiny_manifest(
        "TinyAC", registry=on_policy_registry, algorithm_options={"learn_step": 16},
        training={"max_steps": 128, "evo_steps": 64, "pop_size": 3},
    )  # fmt: skip
    result = smoke_train(manifest, tmp_path / "run", on_policy_registry)
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    groups = [json.loads(line)["groups"] for line in lines]
    assert any(len(group) > 1 for generation in groups for group in generation)
    assert all(np.isfinite(result.fitnesses))


def test_the_guide_s_on_policy_group_learns_as_each_member_alone(on_policy_registry: Any) -> None:
    from agile_cli.training import setup
    from tests.test_batched_ppo import learn_rollouts_both_ways

    manifest = tiny_manifest("TinyAC", registry=on_policy_registry, training={"pop_size": 3})
    members = tiny_population(manifest, on_policy_registry)
    for member, (batch_size, lr, epochs) in zip(
        members, ((8, 1e-3, 1), (12, 3e-3, 2), (5, 5e-4, 3)), strict=True
    ):
        member.set_hyperparameter("batch_size", batch_size)
        member.set_hyperparameter("lr", lr)
        member.spec = member.spec.model_copy(update={"update_epochs": epochs})
    env = setup.build_environment(manifest, on_policy_registry, seed=0)
    alone, stacked, losses = learn_rollouts_both_ways(
        members, env, [10, 14, 7], [True, False, True]
    )
    assert losses[1] is None and losses[0] is not None
    for grouped, single in zip(stacked, alone, strict=True):
        for a, b in zip(grouped.parameters(), single.parameters(), strict=True):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
        assert torch.equal(grouped.generator.get_state(), single.generator.get_state())
    assert not any(
        torch.equal(a, b)
        for a, b in zip(stacked[0].parameters(), members[0].parameters(), strict=True)
    )  # it learned
