"""A run's elite is chosen by scoring its best members again on fresh evaluation seeds, and
`agile evaluate RUN --top K` repeats that scoring on demand."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result

from agile_cli.cli import cli
from agile_cli.member import MemberRecord
from agile_cli.training import checkpoint, reevaluation
from agile_cli.training.reevaluation import Reevaluated

MANIFEST = """\
algorithm: {name: DQN, batch_size: 16}
environment: {name: CartPole-v1, num_envs: 2}
training: {max_steps: 128, evo_steps: 64, pop_size: 3}
mutation: {}
tournament_selection: {}
"""

Run = Callable[..., Result]


def _train(base: Path, *flags: str) -> Path:
    (base / "m.yaml").write_text(MANIFEST, encoding="utf-8")
    args = ["train", str(base / "m.yaml"), "--quiet", "--device", "cpu", "--run-dir",
            str(base / "run"), *flags]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return base / "run"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two generations of three members; the best two scored again on four episodes."""
    return _train(tmp_path_factory.mktemp("robust"), "--elite-top", "2", "--elite-episodes", "4")


def _summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text(encoding="utf-8"))


def test_the_summary_names_the_elite_scored_again_with_an_interval(trained: Path) -> None:
    elite = _summary(trained)["elite"]
    scores = [candidate["score"] for candidate in elite["candidates"]]
    assert len(scores) == 2 and scores == sorted(scores, reverse=True)
    assert elite["member"] == elite["candidates"][0]["member"]
    assert elite["episodes"] == 4 and elite["population"] == 3
    assert elite["low"] <= elite["score"] <= elite["high"]
    assert {c["training_rank"] for c in elite["candidates"]} == {1, 2}


def test_elite_pt_holds_the_winner_of_the_second_scoring(trained: Path) -> None:
    saved = checkpoint.load(trained / "elite.pt")["member"]
    assert saved["index"] == _summary(trained)["elite"]["member"]


def test_evaluate_top_repeats_the_runs_own_figures(run: Run, trained: Path) -> None:
    result = run("evaluate", str(trained), "--top", "2", "--episodes", "4")
    assert result.exit_code == 0, result.output
    elite = _summary(trained)["elite"]
    assert f"seed {elite['seed']}" in result.output
    for candidate in elite["candidates"]:
        row = rf"^\s+{candidate['member']}\s+{candidate['training_rank']}\s+\S+\s+"
        assert re.search(row + rf"{candidate['score']:.2f}\s", result.output, re.M), result.output
    assert f"best: member {elite['member']}" in result.output


def test_evaluate_top_refuses_what_holds_one_member_or_one_agent(run: Run, trained: Path) -> None:
    on_elite = run("evaluate", str(trained / "elite.pt"), "--top", "2")
    assert on_elite.exit_code == 2 and "holds one member, not a population" in on_elite.output
    with_member = run("evaluate", str(trained), "--top", "2", "--member", "0")
    assert with_member.exit_code == 2 and "--top cannot be used with --member" in with_member.output
    assert "Traceback" not in on_elite.output + with_member.output


def test_elite_top_zero_keeps_the_best_of_the_last_evaluation(tmp_path: Path) -> None:
    run = _train(tmp_path, "--elite-top", "0")
    summary = _summary(run)
    assert "elite" not in summary
    assert checkpoint.load(run / "elite.pt")["member"]["index"] == summary["best_member"]


def test_the_winner_of_the_second_scoring_becomes_the_elite_not_the_training_best(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def last_ranked_wins(ranked, manifest, registry, episodes, seed):  # type: ignore[no-untyped-def]
        rank, member = ranked[-1]
        return [Reevaluated(member.index, rank, member.record.fitness[-1], 1e6, 1e6, 1e6, [1e6])]

    monkeypatch.setattr(reevaluation, "reevaluate", last_ranked_wins)
    run = _train(tmp_path)
    summary = _summary(run)
    assert summary["elite"]["training_rank"] == 3
    assert summary["elite"]["member"] != summary["best_member"]
    assert checkpoint.load(run / "elite.pt")["member"]["index"] == summary["elite"]["member"]


def test_top_members_rank_by_latest_fitness_and_leave_out_the_unscored() -> None:
    class Stub:
        def __init__(self, index: int, fitness: list[float]) -> None:
            self.index, self.record = index, MemberRecord(fitness=fitness)

    members = [Stub(0, [5.0, 1.0]), Stub(1, []), Stub(2, [0.0, 3.0]), Stub(3, [2.0])]
    ranked = reevaluation.top_members(members, 2)  # type: ignore[arg-type]
    assert [(rank, member.index) for rank, member in ranked] == [(1, 2), (2, 3)]


def test_the_interval_brackets_the_mean_and_narrows_with_more_episodes() -> None:
    rng = np.random.default_rng(0)
    few, many = rng.normal(100, 20, 8), rng.normal(100, 20, 200)
    low, high = reevaluation.mean_interval(few)  # type: ignore[misc]
    assert low < few.mean() < high
    wide_low, wide_high = reevaluation.mean_interval(many)  # type: ignore[misc]
    assert wide_high - wide_low < high - low
    assert reevaluation.mean_interval(few) == (low, high)  # the same figures every time
    assert reevaluation.mean_interval([3.0]) is None


def test_fresh_seeds_are_not_the_training_or_scoring_seeds() -> None:
    from agile_cli.runner import reset_seed
    from agile_cli.training.setup import seeds

    class Stub:  # a member of the run of seed 1234
        index, record = 0, MemberRecord()

        class context:
            seed = seeds(1234)["members"]

    seed = reevaluation.evaluation_seed(1234)
    used = {reset_seed([Stub()], purpose) for purpose in ("train", "score")}  # type: ignore[list-item]
    assert seed not in used and seed == reevaluation.evaluation_seed(1234)


def test_resume_keeps_the_elites_scoring_and_the_device_unless_given_again() -> None:
    from agile_cli.models.run_options import LocalRunOptions
    from agile_cli.training.trainer import _keep_run_options

    saved = {"elite_top": 2, "elite_episodes": 5, "device": "cpu", "threads": 1}
    kept, notes = _keep_run_options(saved, LocalRunOptions())
    assert (kept.elite_top, kept.elite_episodes, kept.device, kept.threads) == (2, 5, "cpu", 1)
    assert notes == []
    again, notes = _keep_run_options(saved, LocalRunOptions(elite_episodes=40, device="auto"))
    assert (again.elite_episodes, again.device, again.elite_top) == (40, "auto", 2)
    assert "resuming with --elite-episodes 40 (the run started with 5)" in notes
