"""`--member` on a run folder's elite.pt, which holds one member: the error names the population
checkpoint that holds every member, or the members it holds."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from agile_cli.cli import cli
from agile_cli.training import checkpoint

MANIFEST = """\
algorithm: {name: DQN, batch_size: 16}
environment: {name: CartPole-v1, num_envs: 2}
training: {max_steps: 64, evo_steps: 64, pop_size: 2}
mutation: {}
tournament_selection: {}
"""

Run = Callable[..., Result]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny finished run: one generation of two members."""
    base = tmp_path_factory.mktemp("trained")
    (base / "m.yaml").write_text(MANIFEST, encoding="utf-8")
    args = ["train", str(base / "m.yaml"), "--quiet", "--device", "cpu", "--run-dir",
            str(base / "run")]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return base / "run"


def _members(run: Path) -> tuple[int, list[int]]:
    """The elite's index, and the indices the population checkpoint holds."""
    elite = checkpoint.load(run / "elite.pt")["member"]["index"]
    population = checkpoint.load(run / "checkpoints" / "latest.pt")["members"]
    return elite, sorted(saved["index"] for saved in population)


def _refusal(run: Run, *args: str) -> str:
    result = run("evaluate", *args, "--episodes", "1")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return " ".join(result.output.split())


def test_another_member_of_the_run_is_in_the_population_checkpoint(run: Run, trained: Path) -> None:
    elite, held = _members(trained)
    other = next(index for index in held if index != elite)
    said = _refusal(run, str(trained), "--member", str(other))
    latest = trained / "checkpoints" / "latest.pt"
    assert f"elite.pt holds member {elite} only" in said
    assert "the population checkpoint holds every member" in said
    assert f"give it instead: {latest} --member {other}" in said
    assert run("evaluate", str(latest), "--member", str(other), "--episodes", "1").exit_code == 0


def test_a_member_the_population_lacks_lists_the_members(run: Run, trained: Path) -> None:
    elite, held = _members(trained)
    missing = max(held) + 7
    said = _refusal(run, str(trained / "elite.pt"), "--member", str(missing))
    assert f"elite.pt holds member {elite} only, and " in said
    assert f"latest.pt has no member {missing} (members: {', '.join(map(str, held))})" in said


def test_without_a_population_checkpoint_it_says_what_holds_every_member(
    run: Run, trained: Path, tmp_path: Path
) -> None:
    shutil.copy(trained / "elite.pt", tmp_path / "elite.pt")
    elite, _ = _members(trained)
    said = _refusal(run, str(tmp_path / "elite.pt"), "--member", str(elite + 1))
    assert f"holds member {elite} only; a population checkpoint holds every member" in said
    assert f"(give a population checkpoint (checkpoints/*.pt) with --member {elite + 1})" in said
