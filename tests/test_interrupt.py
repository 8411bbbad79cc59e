"""Ctrl-C (SIGINT) at any moment of start-up ends every command with one line and status 130:
no click `Aborted!`, no traceback, and no run folder left by a run that never started.

Each test runs the real CLI in a subprocess whose plugin, manifest validator or environment
sends SIGINT to its own process, as the user's Ctrl-C would arrive at that moment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

PRESS = """\
import os
import signal
import time


def ctrl_c():
    os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl-C here
    time.sleep(60)
"""

PLUGIN = (
    PRESS
    + """
from pydantic import model_validator

from agile_cli import hookimpl
from agile_dqn.spec import DQNSpec

if os.environ.get("PRESS_AT_IMPORT"):
    ctrl_c()


class StopperSpec(DQNSpec):
    \"\"\"DQN whose spec is interrupted while a manifest naming it validates.\"\"\"

    @model_validator(mode="after")
    def _press(self):
        ctrl_c()
        return self


@hookimpl
def agile_register_algorithms(register):
    register(name="Stopper", spec=StopperSpec, family="off_policy", implementation="x:Y")
"""
)

ENVIRONMENT = (
    PRESS
    + """
def make(**kwargs):
    ctrl_c()
"""
)

MANIFESTS = {
    "dqn.yaml": "algorithm: {name: DQN}\nenvironment: {name: CartPole-v1}\n",
    "stopper.yaml": "algorithm: {name: Stopper}\nenvironment: {name: CartPole-v1}\n",
    "env.yaml": "algorithm: {name: DQN}\n"
    "environment: {name: Stop-v0, entrypoint: 'stop_env.py:make', sync: true, num_envs: 1}\n"
    "training: {max_steps: 64, evo_steps: 64}\n",
}


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A folder with the interrupting plugin (found through its entry point), environment
    and manifests."""
    (tmp_path / "agile_test_stopper.py").write_text(PLUGIN)
    info = tmp_path / "agile_test_stopper-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: agile-test-stopper\nVersion: 1\n")
    (info / "entry_points.txt").write_text("[agile]\nstopper = agile_test_stopper\n")
    (tmp_path / "stop_env.py").write_text(ENVIRONMENT)
    for name, text in MANIFESTS.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def _interrupted(site: Path, *args: str, at_import: bool = False) -> str:
    """Run ``agile ARGS`` in ``site``; check that it ended as Ctrl-C should, and return its
    last line on stderr."""
    controls = ("AGILE_PLUGINS", "AGILE_DISABLE_PLUGINS", "AGILE_STRICT_PLUGINS")
    env = {key: value for key, value in os.environ.items() if key not in controls}
    env["PYTHONPATH"] = str(site)
    if at_import:
        env["PRESS_AT_IMPORT"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "agile_cli", *args],
        cwd=site, env=env, capture_output=True, text=True, timeout=120, preexec_fn=_hear_ctrl_c,
    )  # fmt: skip
    assert done.returncode == 130, done.stderr  # 128 + SIGINT, as documented
    assert "Aborted!" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "warning" not in done.stderr, done.stderr  # the plugin itself loads
    return done.stderr.splitlines()[-1]


def _hear_ctrl_c() -> None:
    """Let the child hear SIGINT even when the tests run in a background job, whose children
    inherit SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(
    "args", [("--help",), ("train", "dqn.yaml"), ("validate", "dqn.yaml"),
             ("evaluate", "dqn.yaml")],
)  # fmt: skip
def test_ctrl_c_while_plugins_load(site: Path, args: tuple[str, ...]) -> None:
    said = _interrupted(site, *args, at_import=True)
    assert said == "interrupted while plugins were loading; nothing was written"


def test_ctrl_c_while_train_validates_the_manifest(site: Path) -> None:
    said = _interrupted(site, "train", "stopper.yaml", "--run-dir", "run")
    assert said == "interrupted before training started; nothing was written"
    assert not (site / "run").exists()
    assert _interrupted(site, "validate", "stopper.yaml") == "interrupted"


def test_ctrl_c_while_train_builds_the_environment(site: Path) -> None:
    said = _interrupted(site, "train", "env.yaml", "--run-dir", "run", "--device", "cpu")
    assert said == (
        "interrupted while the run was set up or closed; agile keeps a run folder only once it "
        "holds a checkpoint"
    )
    assert not (site / "run").exists()
    assert _interrupted(site, "validate", "--check-env", "env.yaml") == "interrupted"
