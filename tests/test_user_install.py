"""A user installs agile and the example plugin with pip, then uses them from the shell."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

MANIFEST = """\
algorithm: {name: REINFORCE, learn_step: 64}
environment: {name: CartPole-v1, num_envs: 4}
training: {max_steps: 2048, evo_steps: 256, pop_size: 2}
mutation: {}
tournament_selection: {}
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """agile-cli and agile-reinforce pip-installed from their folders, as a user would."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
         str(target), str(ROOT), str(ROOT / "examples" / "agile-reinforce")],
        check=True, capture_output=True,
    )  # fmt: skip
    return target


def _agile(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site), "WANDB_MODE": "disabled"}
    return subprocess.run(
        [sys.executable, "-m", "agile_cli", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_installed_plugin_is_listed_validated_trained_and_resumed(site, tmp_path) -> None:
    where = _agile(site, tmp_path, "plugins", "--json")
    assert where.returncode == 0, where.stderr
    rows = {row["name"]: row for row in json.loads(where.stdout)}
    assert rows["reinforce"]["distribution"] == "agile-reinforce"
    assert rows["reinforce"]["version"] == "0.1.0"
    assert rows["reinforce"]["contributes"] == ["algorithm:REINFORCE"]
    _check_installed_copies_are_used(site, tmp_path)

    manifest = tmp_path / "m.yaml"
    manifest.write_text(MANIFEST)
    assert _agile(site, tmp_path, "validate", str(manifest)).returncode == 0
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(MANIFEST.replace("learn_step: 64", "learn_stp: 64"))
    invalid = _agile(site, tmp_path, "validate", str(wrong))
    assert invalid.returncode == 2
    assert "algorithm.learn_stp: unknown field (did you mean 'learn_step'?)" in invalid.stdout

    run_dir = tmp_path / "run"
    _interrupted_training(site, tmp_path, manifest, run_dir)
    resumed = _agile(site, tmp_path, "train", "--resume", str(run_dir), "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps_per_member"] == 2048 and not summary["interrupted"]
    assert len((run_dir / "command.txt").read_text().splitlines()) == 2


def _check_installed_copies_are_used(site: Path, cwd: Path) -> None:
    code = "import agile_cli, agile_reinforce; print(agile_cli.__file__, agile_reinforce.__file__)"
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert out.stdout.count(str(site)) == 2, out.stdout  # the installed copies, not the repo


def _interrupted_training(site: Path, cwd: Path, manifest: Path, run_dir: Path) -> None:
    """Start training, press Ctrl-C after the first generation, check the checkpoint."""
    env = {**os.environ, "PYTHONPATH": str(site), "WANDB_MODE": "disabled"}
    command = [sys.executable, "-m", "agile_cli", "train", str(manifest), "--quiet",
               "--device", "cpu", "--run-dir", str(run_dir)]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, text=True, preexec_fn=_hear_ctrl_c
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("generation 1:"):
            process.send_signal(signal.SIGINT)
            break
    rest = process.communicate(timeout=120)[0]
    assert process.returncode == 130, rest
    assert rest.count("agile train --resume") == 1, rest  # in the summary, once
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"] and summary["steps_per_member"] < 2048


def _hear_ctrl_c() -> None:
    """Let the child hear SIGINT even when the tests run in a background job, whose children
    inherit SIGINT ignored (Python then keeps ignoring it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
