"""Exact resume, checked the hard way: runs killed with SIGKILL at random moments, resumed,
and compared with the run that was never interrupted.

For each manifest this trains it once uninterrupted (``agile train M --seed S``), then
``--kills`` times again with the same seed, each time killing the process with SIGKILL at a
random moment after its first generation's checkpoint and continuing it with plain
``agile train --resume RUN`` (no flags: the run's own options, such as
``--checkpoint-buffer``, must hold by themselves); half the trials kill the resumed process a
second time. A trial passes when every generation's metrics record (fitnesses,
hyperparameters, architectures, mutations, lineage; not timings) and every member's final
state in ``checkpoints/latest.pt`` (weights, optimizer moments, generators) equal the
uninterrupted run's, bit for bit.

    python benchmarks/resume_check.py                  # off-policy, on-policy, multi-agent
    python benchmarks/resume_check.py --only dqn --kills 3
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TIMINGS = ("wall_seconds", "steps_per_second")


@dataclass(frozen=True)
class Case:
    manifest: str
    sets: tuple[str, ...]
    flags: tuple[str, ...] = ()


# Budgets cut so that one run takes seconds, over five or six generations.
CASES = {
    "dqn": Case(
        "configs/training/dqn/cartpole.yaml",
        (
            "training.max_steps=6000",
            "training.evo_steps=1000",
            "training.learning_delay=200",
            "training.target_score=null",
        ),
        ("--checkpoint-buffer",),
    ),
    "ppo": Case(
        "configs/training/ppo/cartpole.yaml",
        ("training.max_steps=12288", "training.evo_steps=2048", "training.target_score=null"),
    ),
    "maddpg": Case(
        "configs/training/maddpg/speaker_listener.yaml",
        ("training.max_steps=3000", "training.evo_steps=500", "training.learning_delay=200"),
        ("--checkpoint-buffer",),
    ),
}


def agile(*args: str) -> list[str]:
    return [sys.executable, "-m", "agile_cli", *args]


@dataclass(frozen=True)
class Setting:
    """What every run of a check shares: its ``--seed`` and ``--device``."""

    seed: int
    device: str


def train(case: Case, run_dir: Path, setting: Setting) -> subprocess.Popen[bytes]:
    sets = [part for item in case.sets for part in ("--set", item)]
    options = ["--device", setting.device, "--seed", str(setting.seed), "--run-dir", str(run_dir)]
    command = agile("train", str(ROOT / case.manifest), "--quiet", *options, *case.flags, *sets)
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def resume(run_dir: Path, setting: Setting) -> subprocess.Popen[bytes]:
    command = agile("train", "--resume", str(run_dir), "--quiet", "--device", setting.device)
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def generations(run_dir: Path) -> int:
    metrics = run_dir / "metrics.jsonl"
    return len(metrics.read_text().splitlines()) if metrics.is_file() else 0


def kill_at_random(process: subprocess.Popen[bytes], run_dir: Path, span: float) -> str:
    """SIGKILL ``process`` a random time into ``span`` seconds after its run folder holds a
    finished generation; returns when it died (or that it finished first)."""
    while generations(run_dir) < 1 and process.poll() is None:
        time.sleep(0.02)
    time.sleep(random.uniform(0.0, span))
    if process.poll() is not None:
        return "finished before the kill"
    done = generations(run_dir)
    process.send_signal(signal.SIGKILL)
    process.wait()
    return f"killed after generation {done}"


def finish(process: subprocess.Popen[bytes]) -> None:
    _, err = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"agile exited {process.returncode}: {err.decode()[-2000:]}")


def records(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMINGS} for line in lines]


def same_state(one: Any, two: Any) -> bool:
    import numpy as np
    import torch

    if isinstance(one, dict) and isinstance(two, dict):
        return one.keys() == two.keys() and all(same_state(one[k], two[k]) for k in one)
    if isinstance(one, list | tuple) and isinstance(two, list | tuple):
        return len(one) == len(two) and all(map(same_state, one, two))
    if isinstance(one, torch.Tensor) and isinstance(two, torch.Tensor):
        return torch.equal(one, two)
    if isinstance(one, np.ndarray) and isinstance(two, np.ndarray):
        return bool(np.array_equal(one, two))
    return type(one) is type(two) and bool(one == two)


def final_members(run_dir: Path) -> Any:
    from agile_cli.training import checkpoint

    return checkpoint.load(run_dir / "checkpoints" / "latest.pt")["members"]


def trial(case: Case, base: Path, setting: Setting, span: float, twice: bool) -> tuple[str, Path]:
    run_dir = base / f"trial-{random.getrandbits(32):08x}"
    moments = [kill_at_random(train(case, run_dir, setting), run_dir, span)]
    if twice and not moments[0].startswith("finished"):
        moments.append(kill_at_random(resume(run_dir, setting), run_dir, span / 2))
    if not moments[-1].startswith("finished"):
        finish(resume(run_dir, setting))
    return ", then ".join(moments), run_dir


def timed_reference(case: Case, run_dir: Path, setting: Setting) -> float:
    """Train the uninterrupted run; returns the seconds it trained after its first generation
    (the span in which the trials are killed)."""
    process = train(case, run_dir, setting)
    while generations(run_dir) < 1 and process.poll() is None:
        time.sleep(0.02)
    first = time.perf_counter()
    finish(process)
    return time.perf_counter() - first


def check(name: str, kills: int, setting: Setting, base: Path) -> int:
    case = CASES[name]
    reference = base / f"{name}-whole"
    span = timed_reference(case, reference, setting)
    expected, members = records(reference), final_members(reference)
    print(f"{name}: uninterrupted run, {len(expected)} generations, {span:.1f} s after the "
          "first", flush=True)  # fmt: skip
    failures = 0
    for number in range(kills):
        moment, run_dir = trial(case, base, setting, span=0.9 * span, twice=number % 2 == 1)
        equal = records(run_dir) == expected and same_state(final_members(run_dir), members)
        failures += not equal
        print(f"  trial {number + 1}: {moment}: {'identical' if equal else 'DIFFERS'}", flush=True)
        shutil.rmtree(run_dir)
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=sorted(CASES), default=sorted(CASES))
    parser.add_argument("--kills", type=int, default=5, help="killed runs per manifest")
    parser.add_argument("--seed", type=int, default=1, help="the runs' --seed")
    parser.add_argument("--random-seed", type=int, default=0, help="seed of the kill moments")
    parser.add_argument("--device", default="cpu", help="--device of every run (e.g. cuda)")
    args = parser.parse_args()
    random.seed(args.random_seed)
    base = Path(tempfile.mkdtemp(prefix="agile-resume-check-"))
    try:
        failures = sum(
            check(name, args.kills, Setting(args.seed, args.device), base) for name in args.only
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print("all identical" if not failures else f"{failures} trial(s) differ")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
