"""Cold-start cost of `agile validate`: whole-process wall time and peak memory.

Runs the real command in fresh processes and prints the median wall time, the peak resident
memory, and both as ratios against AgileRL's figures on this kind of machine (3.2 s and
329 MiB to validate its LunarLander dqn.yaml, measured on a 2-core machine of this kind).

    python benchmarks/validate_cold_start.py [MANIFEST] [--runs 9] [--baseline CHECKOUT]

With ``--baseline``, the same command also runs on the code of another checkout of agile (e.g.
``git worktree add /tmp/agile-before HEAD~1``: its core, its plugins/ and its examples/ go first
on PYTHONPATH, with the installed entry points), one run of each in turn, so that both medians
come from one sitting under the same load; the module each imports is printed to show which
code ran.
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


def run_once(command: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one run of ``command``."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        assert process.stderr is not None
        raise SystemExit(f"{' '.join(command)} failed: {process.stderr.read().decode()}")
    return elapsed, usage.ru_maxrss / 1024  # ru_maxrss is KiB on Linux


def agile_command() -> str:
    """The ``agile`` console script: on PATH, else beside this Python (a virtual environment
    that is not activated)."""
    beside = Path(sys.executable).with_name("agile")
    found = shutil.which("agile") or (str(beside) if beside.exists() else None)
    return found or sys.exit("agile is not on PATH: pip install -e . first")


def baseline_environment(checkout: Path) -> dict[str, str]:
    """The environment that runs ``checkout``'s code: its core, plugins and examples first on
    PYTHONPATH."""
    examples = sorted(str(path) for path in (checkout / "examples").glob("*") if path.is_dir())
    paths = [str(checkout), str(checkout / "plugins"), *examples]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def imported_from(env: dict[str, str] | None) -> str:
    """Where ``agile_cli`` is imported from under ``env``."""
    probe = [sys.executable, "-c", "import agile_cli; print(agile_cli.__file__)"]
    done = subprocess.run(probe, env=env, capture_output=True, text=True, check=True, cwd="/")
    return str(Path(done.stdout.strip()).parent)


def report(results: list[tuple[float, float]], indent: str = "") -> float:
    """Print the median wall time and the peak RSS of ``results``; return the median."""
    seconds = statistics.median(r[0] for r in results)
    peak = max(r[1] for r in results)
    faster, less = REFERENCE_SECONDS / seconds, REFERENCE_MIB / peak
    print(f"{indent}median wall:  {seconds:.3f} s  ({faster:.1f}x faster than 3.2 s)")
    print(f"{indent}peak RSS:     {peak:.1f} MiB ({less:.1f}x less than 329 MiB)")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifest", nargs="?", type=Path, default=DEFAULT_MANIFEST)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument(
        "--baseline", type=Path, help="another checkout of agile to time in the same sitting"
    )
    args = parser.parse_args()
    command = [agile_command(), "validate", str(args.manifest.resolve())]
    envs: dict[str, dict[str, str] | None] = {"this tree": None}
    if args.baseline is not None:
        envs = {"baseline": baseline_environment(args.baseline.resolve()), **envs}
    for env in envs.values():
        run_once(command, env)  # warm the file-system cache
    results: dict[str, list[tuple[float, float]]] = {label: [] for label in envs}
    for _ in range(args.runs):  # in turn, so that both see the same load
        for label, env in envs.items():
            results[label].append(run_once(command, env))
    print(f"command:      {' '.join(command)}")
    print(f"runs:         {args.runs}")
    if args.baseline is None:
        report(results["this tree"])
        return
    medians = {}
    for label, env in envs.items():
        print(f"{label + ':':<14}{imported_from(env)}")
        medians[label] = report(results[label], indent="  ")
    ratio = medians["this tree"] / medians["baseline"]
    print(f"ratio:        {ratio:.2f} (this tree's median wall time over the baseline's)")


if __name__ == "__main__":
    main()
