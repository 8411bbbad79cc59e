"""Nothing agile writes or deletes leaves the run folder, and nothing it did not write is
deleted: links planted in a run folder are refused with a sentence naming them (the file
they point to is left as it was), and a folder of someone else's files is never emptied,
with or without --overwrite."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from agile_cli.training.run_folder import MARK

MANIFEST = """\
algorithm: {name: DQN, batch_size: 16}
environment: {name: CartPole-v1, num_envs: 2}
training: {max_steps: 128, evo_steps: 64, pop_size: 2}
mutation: {}
tournament_selection: {}
"""
QUIET = ("--quiet", "--device", "cpu")


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from click.testing import CliRunner

    from agile_cli.cli import cli

    base = tmp_path_factory.mktemp("links")
    (base / "m.yaml").write_text(MANIFEST, encoding="utf-8")
    args = ["train", str(base / "m.yaml"), *QUIET, "--run-dir", str(base / "run")]
    assert CliRunner().invoke(cli, args).exit_code == 0
    return base


@pytest.fixture
def resumable(finished: Path, tmp_path: Path) -> Path:
    """A copy of the finished run with a larger budget, so that --resume trains on."""
    run_dir = Path(shutil.copytree(finished / "run", tmp_path / "run"))
    manifest = run_dir / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace("max_steps: 128", "max_steps: 192"))
    return run_dir


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file of the user's outside the run folder, which a link points to."""
    path = tmp_path / "precious.txt"
    path.write_text("keep me\n")
    return path


@pytest.mark.parametrize(
    "name", [".agile.lock", "command.txt", "metrics.jsonl", "summary.json", "provenance.json"]
)
def test_resume_writes_nothing_through_a_link(run, resumable, outside, name) -> None:
    (resumable / name).unlink(missing_ok=True)
    (resumable / name).symlink_to(outside)
    result = run("train", "--resume", str(resumable), *QUIET)
    assert result.exit_code == 2, result.output
    assert f"{resumable / name} is a symbolic link (to {outside})" in result.output
    assert outside.read_text() == "keep me\n"


def test_a_new_run_writes_nothing_through_the_lock(run, finished, tmp_path, outside) -> None:
    target = tmp_path / "fresh"
    target.mkdir()
    (target / ".agile.lock").symlink_to(outside)
    result = run("train", str(finished / "m.yaml"), *QUIET, "--run-dir", str(target))
    assert result.exit_code == 2, result.output
    assert "is a symbolic link" in result.output
    assert outside.read_text() == "keep me\n"


def test_a_link_inside_the_elite_folder_is_refused(run, resumable, outside) -> None:
    (resumable / "elite").mkdir()
    (resumable / "elite" / "adapter_model.safetensors").symlink_to(outside)
    result = run("train", "--resume", str(resumable), *QUIET)
    assert result.exit_code == 2 and "adapter_model.safetensors is a symbolic link" in (
        result.output
    )
    assert outside.read_text() == "keep me\n"


def test_dangling_temporary_links_create_nothing_outside(run, resumable, tmp_path) -> None:
    for name in (".summary.json.tmp", ".provenance.json.tmp", ".metrics.jsonl.tmp"):
        (resumable / name).symlink_to(tmp_path / f"created-{name}")
    result = run("train", "--resume", str(resumable), *QUIET)
    assert result.exit_code == 0, result.output
    assert not list(tmp_path.glob("created-*"))
    assert not [p for p in resumable.iterdir() if p.is_symlink()]


def _checkpoints_elsewhere(run_dir: Path, tmp_path: Path) -> Path:
    """Replace the run's checkpoints folder with a link to another folder that holds files
    named like agile's temporary files."""
    elsewhere = tmp_path / "elsewhere"
    shutil.move(run_dir / "checkpoints", elsewhere)
    for name in (".data.pt.1", ".notes.tmp"):
        (elsewhere / name).write_text("someone's")
    (run_dir / "checkpoints").symlink_to(elsewhere)
    return elsewhere


def test_a_checkpoints_link_is_neither_followed_nor_emptied(run, resumable, tmp_path) -> None:
    elsewhere = _checkpoints_elsewhere(resumable, tmp_path)
    before = sorted(p.name for p in elsewhere.iterdir())
    resumed = run("train", "--resume", str(resumable), *QUIET)
    assert resumed.exit_code == 2 and f"{resumable / 'checkpoints'} is a symbolic link" in (
        resumed.output
    )
    files = sorted(p.name for p in resumable.iterdir())
    replaced = run("train", str(resumable / "manifest.yaml"), *QUIET, "--run-dir",
                   str(resumable), "--overwrite")  # fmt: skip
    assert replaced.exit_code == 2 and "is a symbolic link" in replaced.output
    assert sorted(p.name for p in elsewhere.iterdir()) == before
    assert sorted(p.name for p in resumable.iterdir()) == files


def test_a_fifo_lock_is_a_sentence(run, resumable) -> None:
    (resumable / ".agile.lock").unlink()
    os.mkfifo(resumable / ".agile.lock")
    result = run("train", "--resume", str(resumable), *QUIET)
    assert result.exit_code == 2, result.output
    assert ".agile.lock is not a regular file" in result.output


def test_recipe_and_export_write_nothing_through_a_link(run, finished, outside, tmp_path):
    run_dir = Path(shutil.copytree(finished / "run", tmp_path / "run"))
    (run_dir / "recipe.yaml").symlink_to(outside)
    recipe = run("recipe", str(run_dir))
    assert recipe.exit_code == 2 and "recipe.yaml is a symbolic link" in recipe.output
    assert outside.read_text() == "keep me\n"
    (run_dir / "elite.ts").symlink_to(tmp_path / "created.ts")
    exported = run("export", str(run_dir), "--format", "torchscript")
    assert exported.exit_code == 2 and "elite.ts is a symbolic link" in exported.output
    assert not (tmp_path / "created.ts").exists()


def _strangers_folder(target: Path) -> list[str]:
    """A folder holding files named like a run's, beside folders of someone else's."""
    target.mkdir()
    (target / "manifest.yaml").write_text("algorithm: {name: DQN}\n")
    (target / "summary.json").write_text("{}\n")
    for name in ("wandb", "tensorboard", "elite"):
        (target / name).mkdir()
        (target / name / "data.bin").write_text("someone's")
    return sorted(str(p.relative_to(target)) for p in target.rglob("*"))


@pytest.mark.parametrize("extra", [(), ("--overwrite",)])
def test_a_strangers_folder_is_never_emptied(run, finished, tmp_path, extra) -> None:
    target = tmp_path / "theirs"
    before = _strangers_folder(target)
    result = run("train", str(finished / "m.yaml"), *QUIET, "--run-dir", str(target), *extra)
    assert result.exit_code == 2, result.output
    assert "holds files agile did not write (elite, tensorboard, wandb)" in result.output
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*")) == before
    assert (target / "manifest.yaml").read_text() == "algorithm: {name: DQN}\n"


def test_an_unmarked_run_is_replaced_only_with_overwrite(run, finished, tmp_path) -> None:
    """A run folder of an agile from before the mark (its file names alone) is agile's to
    replace when asked to, and only then."""
    target = Path(shutil.copytree(finished / "run", tmp_path / "old"))
    (target / MARK).unlink()

    def train(*extra: str) -> Any:
        return run("train", str(finished / "m.yaml"), *QUIET, "--run-dir", str(target), *extra)

    refused = train()
    assert refused.exit_code == 2 and "already holds a run" in refused.output
    replaced = train("--overwrite")
    assert replaced.exit_code == 0, replaced.output
    assert (target / MARK).is_file()


def test_an_unstarted_run_of_agiles_own_is_taken_without_overwrite(run, finished, tmp_path):
    target = tmp_path / "unstarted"
    (target / "checkpoints").mkdir(parents=True)
    (target / "manifest.yaml").write_text(MANIFEST)
    (target / "wandb").mkdir()
    refused = run("train", str(finished / "m.yaml"), *QUIET, "--run-dir", str(target))
    assert refused.exit_code == 2 and "agile did not write (wandb)" in refused.output
    (target / MARK).write_text('{"agile": "0.1.0"}\n')
    taken = run("train", str(finished / "m.yaml"), *QUIET, "--run-dir", str(target))
    assert taken.exit_code == 0, taken.output
    assert not (target / "wandb").exists()


def test_a_run_dir_that_is_a_dangling_link_is_a_sentence(run, finished, tmp_path) -> None:
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    result = run("train", str(finished / "m.yaml"), *QUIET, "--run-dir", str(tmp_path / "dangling"))
    assert result.exit_code == 2
    assert f"is a symbolic link (to {tmp_path / 'nowhere'}), which does not exist" in result.output
