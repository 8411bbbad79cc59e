"""Seconds from launching ``agile train MANIFEST`` to its first environment step.

Each run starts a fresh Python process that runs the ``agile`` command's entry point with
gymnasium's vector environments' ``step`` wrapped: the first call prints the wall clock and
ends the process. The time counts the interpreter's start, imports, validation, building the
population and environments and resetting them: what a user waits for before training
begins. Prints each run and the median.

    python benchmarks/first_step.py configs/training/dqn/cartpole.yaml --runs 5 -- --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BOOTSTRAP = """
import os, sys, time
import gymnasium.vector
from gymnasium.envs.classic_control import cartpole

def first_step(step):
    def wrapped(self, actions):
        print(f"FIRST-STEP {time.time():.6f}", flush=True)
        os._exit(0)
    return wrapped

for cls in (gymnasium.vector.SyncVectorEnv, gymnasium.vector.AsyncVectorEnv,
            cartpole.CartPoleVectorEnv):
    cls.step = first_step(cls.step)
from agile_cli.cli import main
sys.argv = ["agile", *sys.argv[1:]]
main()
"""


def one_run(manifest: Path, extra: list[str]) -> float:
    with tempfile.TemporaryDirectory() as scratch:
        command = [sys.executable, "-c", BOOTSTRAP, "train", str(manifest), "--quiet",
                   "--run-dir", str(Path(scratch) / "run"), *extra]  # fmt: skip
        start = time.time()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    marks = [line for line in done.stdout.splitlines() if line.startswith("FIRST-STEP")]
    if not marks:
        sys.exit(f"no environment step was taken:\n{done.stdout}\n{done.stderr}")
    return float(marks[0].split()[1]) - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifest", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])  # flags after -- go to agile train
    seconds = [one_run(args.manifest, argv[cut + 1 :]) for _ in range(args.runs)]
    for index, value in enumerate(seconds, 1):
        print(f"run {index}: {value:.2f} s to the first environment step")
    print(f"median {statistics.median(seconds):.2f} s")


if __name__ == "__main__":
    main()
