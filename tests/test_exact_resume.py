"""A run killed with SIGKILL and resumed with ``agile train --resume`` trains exactly as the
run that was never killed.

Each case trains one tiny evolving population twice with ``agile train`` in a subprocess, as
a user would from a shell: once uninterrupted, and at the same time once killed (SIGKILL: no
handler runs, nothing is saved on the way out) and resumed until it completes. Two kills land
at moments drawn from a seed fixed per case: one at a random moment of a random generation,
one while ``checkpoints/latest.pt`` is half-written. Every generation's metrics record
(fitnesses, hyperparameters, architectures, mutations, lineage), the summary and the final
checkpoints (every member's weights, optimizer and generators, the elite, the evolution's
generators, the replay buffer) must be equal to the last bit, timings aside.

What a user must pass for that: ``--checkpoint-buffer`` for off-policy algorithms (DQN,
MADDPG), whose shared replay buffer a resumed run otherwise refills from empty. ``--resume``
alone keeps the seed and the options that shape the run (device, threads, buffer, snapshots,
the elite's scoring).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from agile_cli.testing import TIMING_FIELDS
from agile_cli.training import checkpoint
from tests.test_reproducibility import _differences

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL and SIGSTOP are POSIX")

#: The run options of every case: what ``agile train`` needs to repeat a run.
RUN_OPTIONS = ("--seed", "5", "--device", "cpu", "--threads", "1")
#: What ``--resume`` is told: nothing, it keeps the seed and the options that shape the run.
RESUME_OPTIONS: tuple[str, ...] = ()
#: The longest one session of ``agile train`` may take before the test gives up on it.
SESSION_LIMIT = 120.0
#: How often the test looks at the run folder while it waits for a moment to kill.
POLL = 0.001
#: The temporary files of ``checkpoints/latest.pt``, a snapshot and ``elite.pt`` while they
#: are written.
LATEST_BEING_WRITTEN = ".latest.pt.*.tmp"
SNAPSHOT_BEING_WRITTEN = ".step_*.pt.*.tmp"
ELITE_BEING_WRITTEN = ".elite.pt.*.tmp"
#: What the final population checkpoints must hold alike (and their counters, timings aside).
COMPARED = ("members", "elite", "buffer", "mutation_rng", "selection_rng", "selection")

TINY_NETWORK = {"latent_dim": 16, "encoder_config": {"hidden_size": [16]},
                "head_config": {"hidden_size": [16]}}  # fmt: skip
CARTPOLE = {"name": "CartPole-v1", "num_envs": 2, "sync": True}
PPO = {"name": "PPO", "batch_size": 32, "learn_step": 64, "update_epochs": 2}
SPEAKER_LISTENER = {"name": "mpe2.simple_speaker_listener_v4", "num_envs": 2, "sync": True,
                    "config": {"max_cycles": 25, "continuous_actions": False}}  # fmt: skip


@dataclass(frozen=True)
class Kill:
    """When to SIGKILL a session: once the run has logged ``after`` generations, either a
    ``fraction`` of a generation's duration later, or (``mid_write``) while it writes
    ``checkpoints/latest.pt``."""

    after: int
    fraction: float = 0.0
    mid_write: bool = False


@dataclass(frozen=True)
class Case:
    """A tiny run to kill: its manifest, the generations it trains, the options it needs, and
    where it is killed when not at the moments :func:`_kills` draws."""

    manifest: dict[str, Any]
    generations: int
    options: tuple[str, ...] = ()
    kills: tuple[Kill, ...] = ()


def _rl(algorithm: dict[str, Any], environment: dict[str, Any], rates: tuple[str, ...],
        **training: Any) -> dict[str, Any]:  # fmt: skip
    """A two-member population of tiny networks evolving its learning ``rates``."""
    return {
        "algorithm": algorithm,
        "environment": environment,
        "training": {"pop_size": 2, "eval_steps": 50, **training},
        "network": TINY_NETWORK,
        "mutation": {"rl_hp_selection": {rate: {"min": 1e-4, "max": 1e-2} for rate in rates}},
        "tournament_selection": {"tournament_size": 2, "elitism": True},
    }


RL_CASES = {
    "off-policy DQN": Case(
        _rl({"name": "DQN", "batch_size": 16, "learn_step": 4}, CARTPOLE, ("lr",),
            max_steps=500, evo_steps=100, learning_delay=0),
        generations=5, options=("--checkpoint-buffer",),
    ),
    # --resume keeps --compile on (a run-shaping option); killed once, while a checkpoint is
    # written, as the first generation's compilation leaves no fair share of a generation to
    # sleep (each session compiles: the kinds of kill are the cases' above)
    "off-policy DQN, compiled": Case(
        _rl({"name": "DQN", "batch_size": 16, "learn_step": 4}, CARTPOLE, ("lr",),
            max_steps=300, evo_steps=100, learning_delay=0),
        generations=3, options=("--checkpoint-buffer", "--compile", "on"),
        kills=(Kill(1, mid_write=True),),
    ),
    "on-policy PPO": Case(
        _rl(PPO, CARTPOLE, ("lr",), max_steps=640, evo_steps=128), generations=5,
    ),
    "multi-agent MADDPG": Case(
        _rl({"name": "MADDPG", "batch_size": 16, "learn_step": 4}, SPEAKER_LISTENER,
            ("lr_actor", "lr_critic"), max_steps=300, evo_steps=60, learning_delay=0),
        generations=5, options=("--checkpoint-buffer",),
    ),
}  # fmt: skip


def _kills(name: str, generations: int) -> list[Kill]:
    """Two kills drawn from a seed fixed by the case's name (so that a failure repeats): one
    at a random moment of a random generation, one while the checkpoint after a random
    generation is written; in the order of their generations."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    during = Kill(int(rng.integers(1, generations - 1)), fraction=float(rng.uniform()))
    writing = Kill(int(rng.integers(0, generations - 1)), mid_write=True)
    return sorted([during, writing], key=lambda kill: kill.after)


@dataclass
class Session:
    """One ``agile train`` process, its output kept in a file."""

    process: subprocess.Popen[bytes]
    log: Path

    def said(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-3000:]

    def running(self) -> bool:
        return self.process.poll() is None

    def pause(self) -> bool:
        """SIGSTOP the process and wait until it has stopped; False when it ended instead."""
        self.process.send_signal(signal.SIGSTOP)  # sends nothing to a process already reaped
        if self.process.returncode is not None:
            return False
        _, status = os.waitpid(self.process.pid, os.WUNTRACED)
        if os.WIFSTOPPED(status):
            return True
        self.process.returncode = os.waitstatus_to_exitcode(status)
        return False

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


#: The processes the running test started.
_STARTED: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def _no_process_outlives_its_test() -> Iterator[None]:
    """A failing test leaves no ``agile train`` behind, running or stopped."""
    yield
    while _STARTED:
        process = _STARTED.pop()
        if process.poll() is None:
            process.kill()
            process.wait()


def _start(where: Path, *args: str) -> Session:
    """Start ``agile train ARGS`` in ``where``."""
    log = where / f"session-{len(list(where.glob('session-*.log')))}.log"
    env = {**os.environ, "WANDB_MODE": "disabled"}
    with log.open("wb") as stream:
        process = subprocess.Popen(
            [sys.executable, "-m", "agile_cli", "train", *args, "--quiet"],
            cwd=where, env=env, stdout=stream, stderr=subprocess.STDOUT,
        )  # fmt: skip
    _STARTED.append(process)
    return Session(process, log)


def _finish(session: Session) -> None:
    """Wait for the session; it must complete."""
    try:
        code = session.process.wait(timeout=SESSION_LIMIT)
    except subprocess.TimeoutExpired:
        session.kill()
        pytest.fail(f"agile train ran past {SESSION_LIMIT:.0f} s:\n{session.said()}")
    assert code == 0, f"agile train exited with {code}:\n{session.said()}"


def _wait_for(session: Session, moment: Callable[[], bool]) -> bool:
    """Wait until ``moment()`` holds (True) or the session ends (False)."""
    deadline = time.monotonic() + SESSION_LIMIT
    while session.running():
        if moment():
            return True
        if time.monotonic() > deadline:
            session.kill()
            pytest.fail(f"agile train ran past {SESSION_LIMIT:.0f} s:\n{session.said()}")
        time.sleep(POLL)
    return False


def _logged(run: Path) -> list[dict[str, Any]]:
    """The generations the run has logged so far (a line being written is not one yet)."""
    try:
        text = (run / "metrics.jsonl").read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


def _temporary_files(run: Path, pattern: str = ".*.tmp") -> list[str]:
    """The temporary files of atomic writes in the run folder (``pattern``: of which files)."""
    folders = [folder for folder in (run, run / "checkpoints") if folder.is_dir()]
    return [p.name for folder in folders for p in folder.iterdir() if p.match(pattern)]


def _kill(session: Session, run: Path, kill: Kill) -> bool:
    """SIGKILL the session at ``kill``'s moment; False when the run completed first."""
    if not _wait_for(session, lambda: len(_logged(run)) >= kill.after):
        return False
    if kill.mid_write:
        return _kill_mid_write(session, run, LATEST_BEING_WRITTEN)
    if kill.fraction:
        record = _logged(run)[kill.after - 1]
        time.sleep(kill.fraction * record["wall_seconds"] / record["generation"])
    if not session.running():
        return False
    session.kill()
    return True


def _kill_mid_write(session: Session, run: Path, pattern: str) -> bool:
    """SIGKILL the session while it writes the file whose temporary file matches
    ``pattern``: stopped the moment a new one appears (not one that an earlier kill left), it
    is killed if the file is still there, else let go on to the next write. False when the run
    completed first."""
    left = set(_temporary_files(run, pattern))

    def writing() -> bool:
        return bool(set(_temporary_files(run, pattern)) - left)

    while _wait_for(session, writing):
        if not session.pause():
            return False
        if writing():
            session.kill()
            return True
        session.process.send_signal(signal.SIGCONT)
    return False


def _resume(where: Path, run: Path, options: tuple[str, ...]) -> Session:
    """What a user does after a kill: ``agile train --resume RUN``. A run killed before its
    first checkpoint has nothing to resume: ``--resume`` refuses, naming the command that
    starts it again (``agile train RUN/manifest.yaml --run-dir RUN``), which the user runs
    with the run's ``options`` (the refusal does not repeat them)."""
    if (run / "checkpoints" / "latest.pt").is_file():
        return _start(where, "--resume", str(run), *RESUME_OPTIONS)
    return _start(where, str(run / "manifest.yaml"), "--run-dir", str(run), *options)


def _train_killed(where: Path, options: tuple[str, ...], kills: list[Kill]) -> int:
    """Train ``where/manifest.yaml`` into ``where/killed`` with ``options``, killing it at
    each of ``kills`` and resuming it each time as a user would, until it completes; returns
    how many kills landed."""
    run, landed = where / "killed", 0
    session = _start(where, str(where / "manifest.yaml"), "--run-dir", str(run), *options)
    for kill in kills:
        if not _kill(session, run, kill):
            break
        landed += 1
        session = _resume(where, run, options)
    _finish(session)
    return landed


def _records(run: Path) -> list[dict[str, Any]]:
    """The run's metrics records without timings."""
    return [{k: v for k, v in record.items() if k not in TIMING_FIELDS} for record in _logged(run)]


def _summary(run: Path) -> dict[str, Any]:
    """The run's ``summary.json`` without timings and the run's own folder."""
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    return {k: v for k, v in summary.items() if k not in (*TIMING_FIELDS, "run_dir")}


def _assert_same_checkpoints(whole: Path, killed: Path) -> None:
    """The two runs' population checkpoints (the latest and any snapshots) and elites are
    equal, timings aside."""
    names = sorted(path.name for path in (whole / "checkpoints").glob("*.pt"))
    assert sorted(path.name for path in (killed / "checkpoints").glob("*.pt")) == names
    for name in names:
        one, two = (checkpoint.load(run / "checkpoints" / name) for run in (whole, killed))
        differences = {entry: _differences(one[entry], two[entry]) for entry in COMPARED}
        differences["state"] = _differences(_counters(one), _counters(two))
        assert {entry: paths for entry, paths in differences.items() if paths} == {}, name
    elites = (checkpoint.load(run / "elite.pt")["member"] for run in (whole, killed))
    assert _differences(*elites) == []


def _counters(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state["state"].items() if k not in TIMING_FIELDS}


def _assert_killed_run_equals_whole_run(name: str, case: Case, where: Path) -> None:
    """Train ``case`` whole and, at the same time, killed and resumed; compare the two."""
    (where / "manifest.yaml").write_text(yaml.safe_dump(case.manifest), encoding="utf-8")
    options = (*RUN_OPTIONS, *case.options)
    kills = list(case.kills) or _kills(name, case.generations)
    whole = _start(where, "manifest.yaml", "--run-dir", str(where / "whole"), *options)
    landed = _train_killed(where, options, kills)
    _finish(whole)
    assert landed == len(kills), f"the run completed before kill {landed + 1} of {kills}"
    assert _temporary_files(where / "killed") == []  # a resumed run removes the torn files
    whole_records = _records(where / "whole")
    assert len(whole_records) == case.generations
    assert _records(where / "killed") == whole_records
    assert _summary(where / "killed") == _summary(where / "whole")
    _assert_same_checkpoints(where / "whole", where / "killed")


@pytest.mark.parametrize("name", RL_CASES)
def test_a_killed_and_resumed_run_equals_the_uninterrupted_run(name: str, tmp_path: Path) -> None:
    _assert_killed_run_equals_whole_run(name, RL_CASES[name], tmp_path)


def test_a_killed_and_resumed_llm_run_equals_the_uninterrupted_run(
    tiny: Path, data: Path, tmp_path: Path
) -> None:
    """GRPO: sampled completions, rewards and the adapters of a tiny local language model."""
    from tests.test_llm_training import manifest

    content = manifest("GRPO", tiny, data)
    content["training"].update(max_steps=32)
    _assert_killed_run_equals_whole_run("GRPO", Case(content, generations=4), tmp_path)


#: Two generations of the PPO case, for the runs killed once.
SHORT_PPO = Case(_rl(PPO, CARTPOLE, ("lr",), max_steps=256, evo_steps=128), generations=2)


def _kill_once_and_resume(where: Path, options: tuple[str, ...], after: int, pattern: str) -> Path:
    """Train :data:`SHORT_PPO` into ``where/killed`` with ``options``, kill it while it writes
    a file (``pattern``: its temporary file's) once it has logged ``after`` generations, and
    resume it to its end; returns the run folder."""
    manifest = where / "manifest.yaml"
    manifest.write_text(yaml.safe_dump(SHORT_PPO.manifest), encoding="utf-8")
    run = where / "killed"
    session = _start(where, str(manifest), "--run-dir", str(run), *options)
    assert _wait_for(session, lambda: len(_logged(run)) >= after)
    assert _kill_mid_write(session, run, pattern)
    _finish(_resume(where, run, options))
    return run


def test_a_snapshot_a_kill_cut_short_is_written_when_the_run_resumes(tmp_path: Path) -> None:
    """Killed while it writes ``checkpoints/step_N.pt`` (``--checkpoint-steps``), a run
    resumed to its end holds every snapshot the uninterrupted run holds."""
    options = (*RUN_OPTIONS, "--checkpoint-steps", "128")  # a snapshot after each generation
    run = _kill_once_and_resume(tmp_path, options, 0, SNAPSHOT_BEING_WRITTEN)
    snapshots = sorted(path.name for path in (run / "checkpoints").glob("step_*.pt"))
    assert snapshots == ["step_128.pt", "step_256.pt"]


def test_a_run_killed_after_its_last_checkpoint_completes_when_resumed(tmp_path: Path) -> None:
    """Killed after its last generation's checkpoint, while it writes its final elite, a run
    completes on ``--resume``: it writes its elite and its summary."""
    run = _kill_once_and_resume(tmp_path, RUN_OPTIONS, SHORT_PPO.generations, ELITE_BEING_WRITTEN)
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    assert summary["generations"] == SHORT_PPO.generations and not summary["interrupted"]
