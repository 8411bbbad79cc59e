"""Cold-start cost of `agile validate`: whole-process wall time and peak memory.

Runs the real command in fresh processes and prints the median wall time, the peak resident
memory, and both as ratios against AgileRL's figures on this kind of machine (3.2 s and
329 MiB to validate its LunarLander dqn.yaml, measured on a 2-core machine of this kind).

    python benchmarks/validate_cold_start.py [MANIFEST] [--runs 9]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MANIFEST = ROOT / "configs" / "training" / "dqn" / "lunar_lander.yaml"
REFERENCE_SECONDS = 3.2
REFERENCE_MIB = 329.0


def run_once(command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one run of ``command``."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {process.stderr.read().decode()}")
    return elapsed, usage.ru_maxrss / 1024  # ru_maxrss is KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifest", nargs="?", type=Path, default=DEFAULT_MANIFEST)
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    agile = shutil.which("agile") or sys.exit("agile is not on PATH: pip install -e . first")
    command = [agile, "validate", str(args.manifest)]
    run_once(command)  # warm the file-system cache
    results = [run_once(command) for _ in range(args.runs)]
    seconds = statistics.median(r[0] for r in results)
    peak = max(r[1] for r in results)
    print(f"command:      {' '.join(command)}")
    print(f"runs:         {args.runs}")
    print(f"median wall:  {seconds:.3f} s  ({REFERENCE_SECONDS / seconds:.1f}x faster than 3.2 s)")
    print(f"peak RSS:     {peak:.1f} MiB ({REFERENCE_MIB / peak:.1f}x less than 329 MiB)")


if __name__ == "__main__":
    main()
