"""The same seed gives the same run, for every registered algorithm.

Each algorithm trains a tiny evolving population (two members, two generations, mutation and
tournament selection on) with two seeds, whose metrics records - each generation's fitnesses,
hyperparameters, architectures and mutations - must differ; that one seed gives equal records
is the conformance kit's check (tests/test_training.py), stacked and member by member. A newly
registered algorithm is covered without a change here; one that no toy environment suits fails
rather than being skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.distributions import Bernoulli, Beta, Categorical, Independent, Normal

from agile_cli import TrainingManifest
from agile_cli.models.run_options import LocalRunOptions
from agile_cli.testing import (
    TIMING_FIELDS,
    installed_host,
    interrupt_after,
    seeded_metrics,
    smoke_train,
    tiny_manifest,
)
from agile_cli.training import checkpoint
from agile_cli.training.loop import EvolutionLoop
from agile_cli.training.progress import LogReporter
from agile_cli.training.trainer import resume_local
from agile_rl.nn.sampling import sample
from tests.test_training import _evolving, _toy_environment

_REGISTRY = installed_host().registry
ALGORITHMS = sorted(name for name, e in _REGISTRY.algorithms.items() if e.family != "llm")
LLM_ALGORITHMS = sorted(name for name, e in _REGISTRY.algorithms.items() if e.family == "llm")
# Short generations and evaluations: bandit fitness otherwise plays 500 steps per member.
BUDGET = {"max_steps": 64, "evo_steps": 32, "pop_size": 2, "eval_steps": 32}
# Randomness the registry's algorithms on their toy environments do not reach: Gaussian
# policies, and dropout between stacked LSTM layers.
LSTM_ENCODER = {"arch": "lstm", "hidden_state_size": 16, "num_layers": 2, "dropout": 0.25}
VARIANTS = {
    "recurrent PPO with dropout": {
        "algorithm_options": {"recurrent": True, "max_seq_len": 4},
        "network": {
            "latent_dim": 16,
            "encoder_config": LSTM_ENCODER,
            "head_config": {"hidden_size": [16]},
        },
    },
    "PPO on Box actions": {"environment": {"name": "Pendulum-v1", "num_envs": 2, "sync": True}},
}


def _assert_seed_fixes_the_run(manifest: Any, folder: Path, *, again: bool = True) -> None:
    """Two runs with one seed log the same metrics, and a run with another seed others; with
    ``again`` False, only the latter (the conformance kit checked the former)."""
    first = seeded_metrics(manifest, folder / "first", seed=7)
    if again:
        assert seeded_metrics(manifest, folder / "again", seed=7) == first
    other = seeded_metrics(manifest, folder / "other", seed=8)
    assert len(first) == 2  # both generations logged
    assert other != first


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_seed_fixes_the_whole_run(algorithm, tmp_path) -> None:
    manifest = tiny_manifest(
        algorithm, environment=_toy_environment(algorithm), training=BUDGET,
        **_evolving(algorithm),
    )  # fmt: skip
    # the same seed twice: tests/test_training.py's conformance checks, on both paths
    _assert_seed_fixes_the_run(manifest, tmp_path, again=False)


def _train_records(
    manifest: Any, run_dir: Path, *, cut_after: int | None = None, per_member: bool = False
) -> list[Any]:
    """Train ``manifest`` (seed 7, the buffer in every checkpoint) into ``run_dir``, as
    ``agile train`` would; with ``cut_after``, interrupt it once that many generations have
    finished and resume it from its checkpoint. Returns its metrics records without timings."""
    registry = installed_host().registry
    options = LocalRunOptions(device="cpu", run_dir=run_dir, seed=7, checkpoint_buffer=True,
                         per_member=per_member)  # fmt: skip
    loop = EvolutionLoop(manifest, registry, options, LogReporter())
    if cut_after is not None:
        interrupt_after(loop, members_trained=cut_after * manifest.training.pop_size)
    loop.run()
    if cut_after is not None:  # the resume command keeps the run's options by itself
        resume_local(run_dir, registry, LocalRunOptions(device="cpu"), verbose=False)
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING_FIELDS} for line in lines]


def _differences(one: Any, two: Any, path: str = "") -> list[str]:
    """Where two checkpoint entries differ, as paths (none: equal to the last bit)."""
    if isinstance(one, dict) and isinstance(two, dict):
        if one.keys() != two.keys():
            return [f"{path} keys"]
        return [d for k in one for d in _differences(one[k], two[k], f"{path}.{k}")]
    if isinstance(one, list | tuple) and isinstance(two, list | tuple):
        if len(one) != len(two):
            return [f"{path} length"]
        return [
            d
            for i, pair in enumerate(zip(one, two, strict=True))
            for d in _differences(*pair, f"{path}[{i}]")
        ]
    if isinstance(one, torch.Tensor) and isinstance(two, torch.Tensor):
        return [] if torch.equal(one, two) else [path]
    if isinstance(one, np.ndarray) and isinstance(two, np.ndarray):
        return [] if np.array_equal(one, two) else [path]
    return [] if type(one) is type(two) and one == two else [path]


RESUMED = [*((name, False) for name in ALGORITHMS), ("DQN", True), ("PPO", True),
           ("MADDPG", True)]  # fmt: skip


@pytest.mark.parametrize(("algorithm", "per_member"), RESUMED)
def test_a_resumed_run_equals_the_uninterrupted_run(algorithm, per_member, tmp_path) -> None:
    """Interrupted after generation 1 and resumed, a run trains exactly as the run that was
    never interrupted: every generation's fitnesses, hyperparameters, architectures,
    mutations and lineage, and at the end every member's weights, optimizer and generators."""
    manifest = tiny_manifest(
        algorithm, environment=_toy_environment(algorithm), **_evolving(algorithm),
        training={**BUDGET, "max_steps": 128},
    )  # fmt: skip
    whole = _train_records(manifest, tmp_path / "whole", per_member=per_member)
    resumed = _train_records(manifest, tmp_path / "cut", cut_after=1, per_member=per_member)
    assert len(whole) == 4
    assert resumed == whole
    ends = [
        checkpoint.load(tmp_path / run / "checkpoints" / "latest.pt") for run in ("whole", "cut")
    ]
    assert _differences(ends[0]["members"], ends[1]["members"]) == []
    assert _differences(ends[0]["buffer"], ends[1]["buffer"]) == []


# Partial credit, so that sampled completions of one prompt differ in reward and learn.
FIRST_DIGIT_REWARD = """
def exact(completion, answer, question):
    return float(completion[:1] == answer[:1]) + float(completion.strip() == answer)
"""


@pytest.fixture(scope="module")
def tiny_llm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    from agile_llm.tiny import make_tiny_model

    path = tmp_path_factory.mktemp("tiny-llm")
    make_tiny_model(path, steps=40, seed=0)
    return path


@pytest.mark.parametrize("algorithm", LLM_ALGORITHMS)
def test_a_seed_fixes_an_llm_run(algorithm, tiny_llm, tmp_path) -> None:
    from tests.llm_rows import ROWS
    from tests.test_llm_training import manifest

    data = tmp_path / "digits.jsonl"
    data.write_text("".join(f"{json.dumps(row)}\n" for row in ROWS))
    (tmp_path / "reward.py").write_text(FIRST_DIGIT_REWARD)
    content = manifest(algorithm, tiny_llm, data)
    _assert_seed_fixes_the_run(TrainingManifest.get_validated(content), tmp_path)


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_seed_fixes_ppo_variants(variant, tmp_path) -> None:
    sections = {"environment": _toy_environment("PPO"), **VARIANTS[variant]}
    manifest = tiny_manifest("PPO", training=BUDGET, **_evolving("PPO"), **sections)
    _assert_seed_fixes_the_run(manifest, tmp_path)


def test_a_seed_fixes_collected_episodes(tmp_path) -> None:
    from agile_offline.collect import collect_episodes

    smoke_train(tiny_manifest("DQN", training=BUDGET), tmp_path / "dqn", seed=3)
    registry = installed_host().registry

    def collect(seed: int) -> dict[str, np.ndarray]:
        columns, _ = collect_episodes(
            tmp_path / "dqn", registry, episodes=2, member=None, epsilon=0.5, seed=seed,
            device="cpu",
        )  # fmt: skip
        return columns

    first, again, other = collect(5), collect(5), collect(6)
    assert all(np.array_equal(first[name], again[name]) for name in first)
    assert not all(np.array_equal(first[name], other[name]) for name in first)


def _distributions(n: int) -> list[torch.distributions.Distribution]:
    return [
        Categorical(logits=torch.tensor([0.0, 1.0, -1.0]).expand(n, 3)),
        Independent(Normal(torch.full((n, 2), 1.0), torch.full((n, 2), 2.0)), 1),
        Bernoulli(probs=torch.full((n, 2), 0.3)),
    ]


def test_sampling_draws_from_the_given_generator_alone() -> None:
    for distribution in _distributions(64):
        torch.manual_seed(0)
        first = sample(distribution, torch.Generator().manual_seed(1))
        torch.manual_seed(1)  # the global generator plays no part
        assert torch.equal(sample(distribution, torch.Generator().manual_seed(1)), first)
        assert first.shape == distribution.sample().shape


def test_samples_follow_their_distribution() -> None:
    generator = torch.Generator().manual_seed(0)
    categorical, normal, bernoulli = (sample(d, generator) for d in _distributions(20_000))
    frequencies = torch.bincount(categorical, minlength=3) / len(categorical)
    assert torch.allclose(frequencies, torch.tensor([0.0, 1.0, -1.0]).softmax(0), atol=0.02)
    assert torch.allclose(normal.mean(0), torch.ones(2), atol=0.05)
    assert torch.allclose(normal.std(0), torch.full((2,), 2.0), atol=0.05)
    assert torch.allclose(bernoulli.mean(0), torch.full((2,), 0.3), atol=0.02)


def test_sampling_refuses_a_distribution_it_cannot_draw() -> None:
    with pytest.raises(TypeError, match="Beta"):
        sample(Beta(torch.ones(2), torch.ones(2)), torch.Generator())
