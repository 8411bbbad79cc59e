"""Asynchronous rollouts (training.rollout_mode: async): sampling one iteration ahead by a copy
of the model, its staleness bounded, and the llm replay buffer's settings."""

from __future__ import annotations

import copy
import json
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from agile_cli import TrainingManifest
from agile_llm.algorithms import _informative
from agile_llm.asynchronous import Generator, Pipeline
from agile_llm.runner import Rollouts

from .llm_rows import LORA

#: A rubric whose rewards differ between completions, so that a group's advantages do too.
VARIED = (
    "def exact(completion, answer, question):\n    return float(sum(map(ord, completion)) % 7)\n"
)


def _content(tiny: Path, data: Path, **training: Any) -> dict[str, Any]:
    return {
        "algorithm": {
            "name": "GRPO",
            "batch_size": 2,
            "group_size": 2,
            "lr": 0.01,
            "temperature": 1.0,
            "max_output_tokens": 3,
            "gradient_checkpointing": False,
        },
        "environment": {
            "dataset": str(data),
            "prompt_template": {"user_0": "{question}="},
            "rubric_file_path": str(data.parent / "reward.py"),
            "rubric_name": "exact",
            "max_reward": 1.0,
        },
        "training": {
            "max_steps": 8,
            "evo_steps": 2,
            "pop_size": 2,
            "eval_rows": 3,
            "rollout_mode": "async",
            "rollout_engines_per_agent": 1,
            **training,
        },
        "replay_buffer": {"kind": "llm", "max_rollout_version_lag": 1},
        "network": {
            "pretrained_model_name_or_path": str(tiny),
            "max_context_length": 16,
            "lora_config": LORA,
        },
    }


@pytest.mark.parametrize(
    ("lag", "interval", "expected"),
    [(None, None, Rollouts(True, 1, True)), (3, 2, Rollouts(True, 2, True)),
     (1, 4, Rollouts(True, 1, True)), (0, 4, Rollouts(True, 1, False))],
)  # fmt: skip
def test_the_sync_interval_never_exceeds_the_lag_allowed(
    tiny: Path, data: Path, lag: int | None, interval: int | None, expected: Rollouts
) -> None:
    content = _content(tiny, data, weight_sync_interval=interval)
    content["replay_buffer"]["max_rollout_version_lag"] = lag
    assert Rollouts.of(TrainingManifest.get_validated(content)) == expected
    content["training"]["rollout_mode"] = "colocated"
    assert Rollouts.of(TrainingManifest.get_validated(content)) == Rollouts()


class _Copyable:
    """A stand-in for the adapters a generator copies: it only counts syncs."""

    def __init__(self) -> None:
        self.names: list[str] = []


@pytest.mark.parametrize(("interval", "overlap", "lags"),
                         [(1, True, [0, 1, 1, 1, 1]), (2, True, [0, 1, 2, 1, 2]),
                          (1, False, [0, 0, 0, 0, 0])])  # fmt: skip
def test_the_pipeline_samples_ahead_within_the_staleness_allowed(
    interval: int, overlap: bool, lags: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    generator = Generator(_Copyable())
    monkeypatch.setattr(generator, "sync", lambda members, version: setattr(
        generator, "version", version))  # fmt: skip
    started = [threading.Event() for _ in range(5)]
    overlapped: list[bool] = []

    def sample(plan: int) -> int:
        started[plan].set()
        return plan

    def learn(plan: int, sampled: int) -> None:
        if plan + 1 < len(started):  # is the next iteration sampling while this one learns?
            overlapped.append(started[plan + 1].wait(timeout=2.0 if overlap else 0.2))

    pipeline = Pipeline(generator, interval, overlap)
    pipeline.run([], list(range(5)), sample, learn)
    pipeline.close()
    assert pipeline.lags == lags
    assert overlapped == [overlap] * 4


def test_an_async_run_trains_from_completions_of_the_copy(
    run: Any, tiny: Path, data: Path, tmp_path: Path
) -> None:
    path = tmp_path / "async.yaml"
    path.write_text(yaml.safe_dump(_content(tiny, data)))
    result = run("train", str(path), "--quiet", "--run-dir", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["generation"] for line in lines] == [1, 2]


def test_the_copy_samples_with_the_adapters_it_was_last_synced_with(tiny: Path, data: Path) -> None:
    from agile_cli.helpers import installed_registry
    from agile_cli.training import setup
    from agile_llm.environment import prepare
    from agile_rl.runtime.agent import AgentContext

    (data.parent / "reward.py").write_text(VARIED)  # rewards that differ: the adapter moves
    registry = installed_registry()
    parsed = TrainingManifest.get_validated(_content(tiny, data), registry=registry)
    env = prepare(setup.build_environment(parsed, registry, seed=0), parsed)
    context = AgentContext(torch.device("cpu"), 1, parsed.training)
    (member,) = setup.build_population(parsed, setup.algorithm_class(parsed, registry), env,
                                       context, size=1)  # fmt: skip
    generator = Generator(member.shared.adapters)
    generator.sync([member], 0)
    before = copy.deepcopy(member.shared.adapters.weights(member.adapter))
    ahead = type(member).sample([member], [env.rows_at(0, 2)], env, generator)
    member.train_step(env.rows_at(0, 2), env)  # the training adapter moves on
    assert generator.adapters.weights(member.adapter).keys() == before.keys()
    assert all(torch.equal(generator.adapters.weights(member.adapter)[k], before[k])
               for k in before)  # fmt: skip
    (rollout,) = type(member).rollouts([member], [env.rows_at(0, 2)], env, ahead)
    assert rollout is not None and torch.equal(rollout["old"], ahead.old[0])
    generator.sync([member], 1)
    assert not all(torch.equal(generator.adapters.weights(member.adapter)[k], before[k])
                   for k in before)  # fmt: skip


def test_uninformative_groups_are_dropped() -> None:
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.5])
    rollout = {"advantage": torch.arange(6.0), "ids": torch.arange(6).unsqueeze(1)}
    kept = _informative(rollout, rewards, 2)
    assert kept is not None and kept["advantage"].tolist() == [2.0, 3.0]  # the one that differs
    assert _informative(rollout, torch.ones(6), 2) is None


def test_group_replay_without_asynchronous_rollouts_is_refused_here(tiny: Path, data: Path) -> None:
    content = _content(tiny, data, rollout_mode="colocated")
    content["replay_buffer"] = {**content["replay_buffer"], "group_replay_max_age": 2}
    manifest = TrainingManifest.get_validated(content)
    refused = {e.path for e in manifest.algorithm.local_training_errors(manifest)}
    assert refused == {"replay_buffer.group_replay_max_age"}


def test_llmppo_learns_from_completions_the_copy_sampled(
    run: Any, tiny: Path, data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its values are measured as it learns; the log-probabilities at sampling are the
    copy's."""
    import yaml

    from agile_llm.ppo import LLMPPO

    given: list[bool] = []
    original = LLMPPO.passes.__func__  # type: ignore[attr-defined]

    def passes(cls: Any, members: Any, sequences: Any, sampled: Any = None) -> Any:
        given.append(sampled is not None)
        return original(cls, members, sequences, sampled)

    monkeypatch.setattr(LLMPPO, "passes", classmethod(passes))
    content = _content(tiny, data)
    content["algorithm"].pop("group_size")
    content["algorithm"]["lr_actor"] = content["algorithm"].pop("lr")
    content["algorithm"]["name"] = "LLMPPO"
    path = tmp_path / "ppo.yaml"
    path.write_text(yaml.safe_dump(content))
    result = run("train", str(path), "--quiet", "--run-dir", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    assert given and all(given)  # every iteration's rollout, sampled ahead by the copy
