"""Training episodes' returns reach the live display as they finish: every core runner tells the
loop's progress callback (an ``EpisodeProgress``) of each episode it records, and a runner that
only calls ``progress(n)``, as plugins written before do, still trains (showing no returns)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from agile_cli.models.run_options import LocalRunOptions
from agile_cli.testing import installed_host, tiny_manifest
from agile_cli.training.loop import EvolutionLoop
from agile_cli.training.progress import LogReporter
from agile_rl.training.runners import EpisodeProgress, GenerationStats, Progress, Runner

TEAM = {"name": "toy", "entrypoint": "tests.envs.toy_parallel:ToyParallel", "num_envs": 2,
        "sync": True, "config": {"length": 6, "speaker_leaves_at": 4}}  # fmt: skip
TABLE = {"name": "toy", "features": np.array([[0.0, 1.0], [1.0, 0.0]] * 8),
         "targets": np.array(["a", "b"] * 8)}  # fmt: skip
ONE_GENERATION = {"max_steps": 64, "evo_steps": 64, "pop_size": 2}


class Listening(LogReporter):
    """A quiet reporter that keeps the returns it is told of and the lines it prints."""

    def __init__(self) -> None:
        super().__init__(io.StringIO(), heartbeat=0)
        self.returns: list[float] = []

    def episodes(self, returns: Sequence[float]) -> None:
        super().episodes(returns)
        self.returns += returns

    def lines(self) -> list[str]:
        assert isinstance(self.stream, io.StringIO)
        return self.stream.getvalue().splitlines()


def _train(manifest: Any, folder: Path, *, per_member: bool, **extra: Any) -> Any:
    reporter = Listening()
    options = LocalRunOptions(device="cpu", run_dir=folder, per_member=per_member)
    loop = EvolutionLoop(manifest, installed_host().registry, options, reporter, **extra)
    result = loop.run()
    return reporter, result, loop


@pytest.mark.parametrize(
    ("algorithm", "environment", "per_member", "runner"),
    [
        ("DQN", None, True, "OffPolicyRunner"),
        ("DQN", None, False, "OffPolicyRunner"),
        ("PPO", None, True, "OnPolicyRunner"),
        ("PPO", None, False, "OnPolicyRunner"),
        ("IPPO", TEAM, True, "MultiAgentOnPolicyRunner"),
        ("NeuralUCB", TABLE, True, "BanditRunner"),
    ],
)
def test_every_core_runner_reports_each_episode_as_it_finishes(
    algorithm: str, environment: Any, per_member: bool, runner: str, tmp_path: Path
) -> None:
    # Bandit members play their episodes in lockstep: shorter ones than the generation finish
    # while it trains.
    training = {**ONE_GENERATION, "episode_steps": 16} if runner == "BanditRunner" else None
    manifest = tiny_manifest(
        algorithm, environment=environment, training=training or ONE_GENERATION
    )
    reporter, result, loop = _train(manifest, tmp_path / "run", per_member=per_member)
    assert type(loop.runner).__name__ == runner
    recorded = [value for member in result.population for value in member.record.episode_returns]
    assert recorded and sorted(reporter.returns) == sorted(recorded)
    heartbeats = [line for line in reporter.lines() if "env steps, " in line]
    assert any("steps/s; training episodes, last " in line for line in heartbeats)


class StepsOnly(Runner[Any]):
    """A runner as plugins wrote them before episodes were reported: ``progress(n)`` only."""

    def __init__(self) -> None:
        super().__init__(env=None)

    def train_population(
        self, members: list[Any], steps: int, progress: Progress
    ) -> list[GenerationStats]:
        for member in members:
            member.record.steps += steps
            progress(steps)
        return [GenerationStats(steps=steps, episode_returns=[1.0, 2.0]) for _ in members]

    def evaluate_population(
        self, members: list[Any], rounds: int, max_steps: int | None
    ) -> list[float]:
        return [0.0 for _ in members]


def test_a_runner_that_only_counts_steps_still_trains(tmp_path: Path) -> None:
    manifest = tiny_manifest("DQN", training=ONE_GENERATION)
    reporter, result, _ = _train(manifest, tmp_path / "run", per_member=True,
                                 runner=lambda *_: StepsOnly())  # fmt: skip
    assert result.summary["global_steps"] == 128 and reporter.returns == []
    assert [m.record.episode_returns for m in result.population] == [[1.0, 2.0]] * 2
    assert not any("training episodes" in line for line in reporter.lines())


class Counting:
    """An ``EpisodeProgress``: counts steps, keeps returns."""

    def __init__(self) -> None:
        self.steps = 0
        self.returns: list[float] = []

    def __call__(self, steps: int, /) -> None:
        self.steps += steps

    def episodes(self, returns: Sequence[float], /) -> None:
        self.returns += returns


def test_stats_tell_only_a_callback_that_listens_for_episodes() -> None:
    counting, steps = Counting(), []
    assert isinstance(counting, EpisodeProgress) and not isinstance(steps.append, EpisodeProgress)
    stats = GenerationStats()
    stats.add_episodes(np.array([1.5, 2.5]), counting)
    stats.add_episodes([3.0], steps.append)  # a plain progress(n): told nothing
    stats.add_episodes([], counting)
    assert stats.episode_returns == [1.5, 2.5, 3.0] and counting.returns == [1.5, 2.5]
    assert steps == [] and all(type(value) is float for value in stats.episode_returns)


def test_the_llm_runner_reports_each_batch_mean_reward() -> None:
    from agile_llm.runner import LLMRunner

    rewards = iter([np.array([1.0, 0.0]), None, np.array([0.5, 0.5])])

    class Member(SimpleNamespace):
        @classmethod
        def train_group(cls, members: list[Any], rows: Any, env: Any) -> list[float]:
            for member in members:  # GRPO sets it; SFT and DPO leave it None
                member.last_rewards = next(rewards)
            return [0.1] * len(members)

    member = Member(spec=SimpleNamespace(batch_size=2), record=SimpleNamespace(steps=0),
                    last_rewards=None, shared=SimpleNamespace(adapters=None))  # fmt: skip
    env = SimpleNamespace(rows_at=lambda start, size: list(range(start, start + size)))
    counting = Counting()
    runner = LLMRunner(env, epochs=None, eval_rows=None)  # type: ignore[arg-type]
    [stats] = runner.train_population([member], 6, counting)  # type: ignore[list-item]
    assert counting.steps == 6 and counting.returns == [0.5, 0.5] == stats.episode_returns
