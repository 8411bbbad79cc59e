"""Checkpoints of every layout agile wrote load, score and resume: each fixture under
tests/fixtures/checkpoints was written by the commit its name gives (see the README there)."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest
import torch

from agile_cli import MemberRecord, TrainingError
from agile_cli.training import checkpoint
from agile_cli.training.loop import RUN_SHAPING_OPTIONS, LoopState

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints"
RUNS = sorted(FIXTURES.glob("layout*"))
FILES = sorted(path for run in RUNS for path in run.rglob("*.pt"))


def _layout_in_name(run: Path) -> int:
    """The layout a fixture's folder is named for: ``layout<N>_<algorithm>_<commit>``."""
    return int(run.name.split("_")[0].removeprefix("layout"))


def _name(path: Path) -> str:
    return str(path.relative_to(FIXTURES))


def test_every_earlier_layout_has_a_fixture_and_reads_as_its_own() -> None:
    """A layout added to checkpoint.LAYOUTS without a fixture of the one before fails here."""
    assert {_layout_in_name(run) for run in RUNS} == set(range(1, checkpoint.CURRENT_LAYOUT))
    for path in FILES:
        raw = torch.load(path, map_location="cpu", weights_only=True)
        expected = _layout_in_name(_run_of(path))
        if raw.get("kind") == checkpoint.MEMBER and 3 <= expected <= 6:
            expected = 3  # layouts 3 to 6 differ in population entries only
        assert checkpoint.layout_of(raw) == expected, _name(path)


@pytest.mark.parametrize("path", FILES, ids=_name)
def test_a_fixture_loads_in_the_current_layout(path: Path) -> None:
    state = checkpoint.load(path, kind=(checkpoint.POPULATION, checkpoint.MEMBER))
    assert state["format"] == checkpoint.FORMAT_VERSION
    assert checkpoint.layout_of(state) == checkpoint.CURRENT_LAYOUT
    assert state["environment"] == "CartPole-v1" and state["algorithm"] in ("DQN", "PPO")
    assert "code_seal" in state and isinstance(state["run_seed"], int)
    saved = [*state.get("members", []), state.get("elite"), state.get("member")]
    records = [member["record"] for member in saved if member is not None]
    assert records and all(set(r) == set(_fields(MemberRecord)) for r in records)
    if state["kind"] == checkpoint.POPULATION:
        assert set(state["state"]) == set(_fields(LoopState))
        assert state["run_seed"] == state["state"]["seed"]
        assert isinstance(state["selection"]["next_index"], int) and "next_index" not in state
        assert set(state["run_options"]) == set(RUN_SHAPING_OPTIONS)


def test_the_run_options_a_file_shows_are_kept_and_the_others_left_to_the_command() -> None:
    with_buffer = checkpoint.load(FIXTURES / "layout2_dqn_b5978ad" / "checkpoints" / "latest.pt")
    assert with_buffer["run_options"] == {
        "checkpoint_steps": None, "checkpoint_buffer": True, "per_member": None, "threads": None,
        "device": None, "elite_top": None, "elite_episodes": None, "compile": None,
    }  # fmt: skip
    without = checkpoint.load(FIXTURES / "layout4_ppo_86c5a90" / "checkpoints" / "latest.pt")
    assert without["run_options"]["checkpoint_buffer"] is False


@pytest.mark.parametrize("path", FILES, ids=_name)
def test_agile_evaluate_scores_a_fixture(run, tmp_path, path: Path) -> None:
    folder = _run_of(path)
    copy = _copy(folder, tmp_path)
    result = run("evaluate", str(copy / path.relative_to(folder)), "--episodes", "2")
    assert result.exit_code == 0, result.output
    assert re.search(r"member \d+ on CartPole-v1: mean return [\d.]+ ", result.output)


@pytest.mark.parametrize("folder", RUNS, ids=lambda run: run.name)
def test_resume_continues_a_fixture_for_one_generation(run, tmp_path, folder: Path) -> None:
    copy = _copy(folder, tmp_path)
    before = checkpoint.load(copy / "checkpoints" / "latest.pt")["state"]
    manifest = copy / "manifest.yaml"
    text = manifest.read_text(encoding="utf-8")
    steps = int(re.search(r"^  max_steps: (\d+)$", text, re.MULTILINE).group(1))
    evo_steps = int(re.search(r"^  evo_steps: (\d+)$", text, re.MULTILINE).group(1))
    more = text.replace(f"  max_steps: {steps}\n", f"  max_steps: {steps + evo_steps}\n")
    manifest.write_text(more, encoding="utf-8")
    result = run("train", "--resume", str(copy), "--quiet")
    assert result.exit_code == 0, result.output
    after = checkpoint.load(copy / "checkpoints" / "latest.pt")
    assert after["state"]["generation"] == before["generation"] + 1
    assert after["state"]["steps_per_member"] == steps + evo_steps
    # the lineage records the generation trained since (layouts before 8 had none before it)
    trained = [m["record"]["lineage"][-1]["generation"] for m in after["members"]]
    assert trained == [before["generation"] + 1] * len(after["members"])
    assert (after["buffer"] is not None) == after["run_options"]["checkpoint_buffer"]


def test_a_file_whose_entries_no_agile_wrote_is_refused_without_a_traceback(tmp_path) -> None:
    state = torch.load(FIXTURES / "layout5_dqn_34a0010" / "checkpoints" / "latest.pt",
                       weights_only=True)  # fmt: skip
    state["run_options"] = "all of them"
    torch.save(state, tmp_path / "latest.pt")
    with pytest.raises(TrainingError, match=r"its entries are not those of layout 5"):
        checkpoint.load(tmp_path / "latest.pt")


class _Opaque:
    """Any class: a format 1 file could name one, to be built by unpickling."""


def test_a_format_one_file_of_python_objects_is_refused_naming_the_agile_that_reads_it(
    tmp_path,
) -> None:
    path = tmp_path / "latest.pt"
    torch.save({"format": 1, "members": [], "extra": _Opaque()}, path)
    with pytest.raises(TrainingError) as refused:
        checkpoint.load(path)
    first, last = checkpoint.LAYOUTS[0].first, checkpoint.LAYOUTS[0].last
    assert f"format 1 (written by agile at commits {first} to {last})" in refused.value.message
    assert "Python classes" in refused.value.message
    assert f"agile checked out at commit {last}" in (refused.value.hint or "")


def _run_of(path: Path) -> Path:
    """The fixture's run folder that holds ``path``."""
    return next(run for run in RUNS if run in path.parents)


def _copy(folder: Path, tmp_path: Path) -> Path:
    """A copy of a fixture's run folder to read or resume (fixtures are never written)."""
    return Path(shutil.copytree(folder, tmp_path / folder.name))


def _fields(cls: type) -> list[str]:
    return [field.name for field in dataclasses.fields(cls)]
