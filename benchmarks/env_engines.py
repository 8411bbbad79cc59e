"""The environment engines side by side: gymnasium's (agile's default) against EnvPool's
(``environment.engine: envpool``), on HalfCheetah-v5 and on Breakout with the standard Atari
preprocessing, the same number of copies each way.

Each measurement runs in a fresh process, so that its wall time and memory are its own:

- **stepping**: the vector ``gym_vector_env`` builds, stepped with random actions (drawn
  before the clock starts) for ``--seconds``: env steps per second (each copy's step counts
  one), the seconds a build and a seeded reset take (EnvPool makes its pool again at a seeded
  reset), and the resident memory of the process and the copies' subprocesses at the end.
  HalfCheetah runs gymnasium's copies both in this process (``sync: true``, as the shipped
  manifests have it) and in subprocesses (agile's default without ``sync``);
- **training**: ``agile train`` on the shipped PPO manifest of each task, shortened, with
  ``--elite-top 0`` (no end-of-run scoring): the run's env steps per second (``summary.json``),
  the process's wall seconds and its peak resident memory.

    python benchmarks/env_engines.py --num-envs 8 --seconds 10
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHEETAH = {"name": "HalfCheetah-v5"}
BREAKOUT = {"name": "ALE/Breakout-v5", "atari": True}
#: (label, environment section) of each stepping measurement.
STEPPING = [
    ("HalfCheetah-v5, gymnasium, sync", {**CHEETAH, "sync": True}),
    ("HalfCheetah-v5, gymnasium, subprocesses", CHEETAH),
    ("HalfCheetah-v5, envpool", {**CHEETAH, "engine": "envpool"}),
    ("ALE/Breakout-v5 atari, gymnasium (ale-py)", BREAKOUT),
    ("ALE/Breakout-v5 atari, envpool", {**BREAKOUT, "engine": "envpool"}),
]
#: (label, manifest, overrides) of each training measurement; the engine is set on top.
TRAINING = [
    ("PPO HalfCheetah-v5", "configs/training/ppo/halfcheetah.yaml",
     ["training.max_steps=8192", "training.evo_steps=4096"]),
    ("PPO ALE/Breakout-v5", "configs/training/ppo/breakout.yaml",
     ["training.max_steps=2048", "training.evo_steps=1024", "training.eval_steps=500"]),
]  # fmt: skip


def step_rate(environment: dict[str, Any], seconds: float) -> dict[str, float]:
    """In this process: build the vector, time a seeded reset, step it with random actions."""
    from agile_rl import GymnasiumEnvSpec, gym_vector_env

    spec = GymnasiumEnvSpec.model_validate(environment)
    start = time.perf_counter()
    envs = gym_vector_env(spec, seed=0)
    built = time.perf_counter() - start
    try:
        start = time.perf_counter()
        envs.reset(seed=1)
        reseeded = time.perf_counter() - start
        envs.action_space.seed(0)
        actions = [envs.action_space.sample() for _ in range(256)]
        for action in actions[:20]:  # warm-up
            envs.step(action)
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            envs.step(actions[calls % len(actions)])
            calls += 1
        rate = calls * envs.num_envs / (time.perf_counter() - start)
        memory = tree_rss_mib(os.getpid())
    finally:
        envs.close()
    return {"build_s": built, "reseed_s": reseeded, "steps_per_s": rate, "rss_mib": memory}


def tree_rss_mib(pid: int) -> float:
    """The resident memory of process ``pid`` and its descendants, in MiB (Linux's /proc)."""
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        status = Path(f"/proc/{current}/status").read_text()
        total += next(int(line.split()[1]) for line in status.splitlines()
                      if line.startswith("VmRSS:"))  # fmt: skip
        for task in Path(f"/proc/{current}/task").iterdir():
            pending += [int(child) for child in (task / "children").read_text().split()]
    return total / 1024


def measured(command: list[str], **kwargs: Any) -> tuple[str, float, float]:
    """Run ``command``; its stdout, wall seconds and peak resident memory (MiB, the process
    itself: not subprocesses it started)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, **kwargs)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        if process.returncode != 0:
            sys.exit(f"{' '.join(command)} failed:\n{err.read().decode()[-3000:]}")
        return out.read().decode(), wall, usage.ru_maxrss / 1024


def stepping(num_envs: int, seconds: float) -> None:
    print(f"\nStepping {num_envs} copies with random actions ({seconds:.0f} s each)")
    print(f"{'environment, engine':<44} {'env steps/s':>12} {'build s':>8} {'reseed s':>9} "
          f"{'RSS MiB':>8} {'process s':>10}")  # fmt: skip
    for label, environment in STEPPING:
        child = [sys.executable, __file__, "--child", json.dumps({**environment,
                 "num_envs": num_envs}), "--seconds", str(seconds)]  # fmt: skip
        out, wall, _ = measured(child)
        row = json.loads(out.strip().splitlines()[-1])
        print(f"{label:<44} {row['steps_per_s']:>12,.0f} {row['build_s']:>8.2f} "
              f"{row['reseed_s']:>9.2f} {row['rss_mib']:>8,.0f} {wall:>10.1f}")  # fmt: skip


def training(num_envs: int) -> None:
    agile = shutil.which("agile") or sys.exit("agile is not on PATH: pip install -e . first")
    print(f"\nShort training runs ({num_envs} copies per member, seed 1, --elite-top 0)")
    print(f"{'manifest, engine':<36} {'env steps/s':>12} {'steps':>8} {'process s':>10} "
          f"{'peak MiB':>9}")  # fmt: skip
    for label, manifest, overrides in TRAINING:
        for engine in ("gymnasium", "envpool"):
            with tempfile.TemporaryDirectory() as folder:
                sets = [*overrides, f"environment.num_envs={num_envs}",
                        f"environment.engine={engine}"]  # fmt: skip
                command = [agile, "train", str(ROOT / manifest), "--quiet", "--seed", "1",
                           "--elite-top", "0", "--run-dir", f"{folder}/run",
                           *(part for item in sets for part in ("--set", item))]  # fmt: skip
                _, wall, peak = measured(command, cwd=folder)
                summary = json.loads(Path(folder, "run", "summary.json").read_text())
            print(f"{label + ', ' + engine:<36} {summary['steps_per_second']:>12,.0f} "
                  f"{summary['global_steps']:>8,} {wall:>10.1f} {peak:>9,.0f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=8, help="Copies, each way.")
    parser.add_argument("--seconds", type=float, default=10.0, help="Stepping time per row.")
    parser.add_argument("--skip-training", action="store_true", help="Stepping only.")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one stepping row, in this process
    args = parser.parse_args()
    if args.child:
        print(json.dumps(step_rate(json.loads(args.child), args.seconds)))
        return
    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} at the start")
    stepping(args.num_envs, args.seconds)
    if not args.skip_training:
        training(args.num_envs)


if __name__ == "__main__":
    main()
