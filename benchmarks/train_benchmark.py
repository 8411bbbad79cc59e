"""Training benchmark: whole-process wall time, env steps/s, time to target and peak memory.

Runs ``agile train MANIFEST --quiet --seed S`` in a fresh process per seed and reads the run
folder it leaves. For each seed it prints env steps per second (summed over the population),
the global env steps and seconds at which the best member's fitness first reached the
manifest's ``target_score``, and the peak resident memory of the process; then the medians
and how many seeds reached the target.

    python benchmarks/train_benchmark.py configs/training/dqn/cartpole.yaml --seeds 1 2 3

With ``--profile`` it also trains one more time (first seed, in this process) under cProfile
and reports where the time goes: acting, stepping the environments, storing and sampling
experience, learning, evaluating and evolving, as shares of the training wall time (the
evaluation share includes its own acting and stepping, which the first two also count).

With ``--populations 4 8 16`` it also trains the manifest once per population size (first
seed, ``training.pop_size`` replaced) and reports, for each, env steps/s, the median wall time
of a generation, and how many groups each generation had: members that act and learn as one
computation (with ``--per-member``, every member is a group of one).
``--generations G`` trains each size for G generations (no early stop);
``--compare-per-member`` trains each size both ways and prints the ratios. Without
``--seeds``, ``--populations`` runs only that sweep. Flags after ``--`` go to every
``agile train``; on a GPU machine, one command measures what stacking buys there:

    python benchmarks/train_benchmark.py configs/training/dqn/cartpole.yaml \
        --populations 4 16 64 --generations 2 --compare-per-member -- --device cuda
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def run_seed(manifest: Path, seed: int, workdir: Path, extra: list[str]) -> dict[str, Any]:
    """Train once; return the measurements of that run."""
    agile = shutil.which("agile") or sys.exit("agile is not on PATH: pip install -e . first")
    run_dir = workdir / f"seed-{seed}"
    command = [agile, "train", str(manifest), "--quiet", "--seed", str(seed),
               "--run-dir", str(run_dir), *extra]  # fmt: skip
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"seed {seed} failed:\n{process.stderr.read().decode()}")
    summary = json.loads((run_dir / "summary.json").read_text())
    reached = summary.get("target_reached_at") or {}
    return {
        "seed": seed,
        "process_seconds": wall,
        "steps_per_second": summary["steps_per_second"],
        "global_steps": summary["global_steps"],
        "best_fitness": summary["best_fitness"],
        "target_steps": reached.get("global_steps"),
        "target_seconds": reached.get("wall_seconds"),
        "peak_mib": usage.ru_maxrss / 1024,
    }


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def report(rows: list[dict[str, Any]]) -> None:
    print(f"{'seed':>4} {'steps/s':>9} {'steps':>9} {'best':>7} {'target@steps':>13} "
          f"{'target@s':>9} {'process s':>10} {'peak MiB':>9}")  # fmt: skip
    for r in rows:
        print(f"{r['seed']:>4} {r['steps_per_second']:>9,.0f} {r['global_steps']:>9,} "
              f"{r['best_fitness']:>7.1f} {_fmt(r['target_steps'], ',d'):>13} "
              f"{_fmt(r['target_seconds'], '.1f'):>9} {r['process_seconds']:>10.1f} "
              f"{r['peak_mib']:>9.0f}")  # fmt: skip
    reached = [r for r in rows if r["target_steps"] is not None]
    print(f"median steps/s {statistics.median(r['steps_per_second'] for r in rows):,.0f}; "
          f"peak memory {max(r['peak_mib'] for r in rows):.0f} MiB; "
          f"target reached in {len(reached)} of {len(rows)} seeds", end="")  # fmt: skip
    if reached:
        print(f", median at {statistics.median(r['target_steps'] for r in reached):,.0f} steps"
              f" / {statistics.median(r['target_seconds'] for r in reached):.1f} s")  # fmt: skip
    else:
        print()


# Phase -> functions whose cumulative time counts for it (matched on "file:function"). Groups
# act, sample and learn together; a member alone calls its own act and learn inside the
# runner's. No two functions of a phase call each other.
PHASES = {
    "act (policy forward)": ("runners.py:_act", "on_policy.py:_policy_steps",
                             "multi_agent_on_policy.py:_policy_steps"),
    "environment step": ("vector_env.py:step", "sync_vector_env.py:step",
                         "async_vector_env.py:step", "cartpole.py:step",
                         "multi_agent.py:step"),
    "store / sample experience": ("runners.py:store", "buffers.py:sample_stacked",
                                  "buffers.py:sample", "rollout.py:add", "rollout.py:finish"),
    "learn (gradient steps)": ("algorithm.py:learn", "algorithm.py:learn_batch",
                               "group.py:learn_batch", "group.py:learn_rollouts"),
    "evaluate": ("runners.py:evaluate_population",),
    "select + mutate": ("loop.py:_evolve",),
    "checkpoints": ("loop.py:_save_checkpoint",),
}  # fmt: skip


def profile_phases(manifest: Path, seed: int, workdir: Path) -> dict[str, float]:
    """Seconds per phase of one training run (profiled, so somewhat slower than real)."""
    import cProfile
    import pstats

    from agile_cli import LocalTrainer

    trainer = LocalTrainer.from_manifest(manifest, device="cpu")
    profiler = cProfile.Profile()
    profiler.enable()
    trainer.train(verbose=False, run_dir=workdir / "profiled", seed=seed)
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    keyed = {f"{Path(file).name}:{function}": row[3] for (file, _, function), row in stats.items()}
    phases = PHASES
    totals = dict.fromkeys(phases, 0.0)
    whole = keyed.get("loop.py:run", 0.0)
    for key, cumulative in keyed.items():
        for phase, names in phases.items():
            if key in names:
                totals[phase] += cumulative
    return {"total": whole, **totals}


def report_phases(phases: dict[str, float]) -> None:
    total = phases.pop("total") or 1.0
    print(f"where the time goes (profiled run, {total:.1f} s):")
    for phase, seconds in phases.items():
        print(f"  {phase:<28} {seconds:7.1f} s  {100 * seconds / total:5.1f}%")


def population_rows(
    manifest: Path,
    sizes: list[int],
    seed: int,
    workdir: Path,
    extra: list[str],
    generations: int | None = None,
) -> list[dict[str, Any]]:
    """One run per population size (``generations`` generations of it, or the whole
    manifest): speed, generation wall time, groups."""
    import yaml

    content = yaml.safe_load(manifest.read_text())
    training = content.setdefault("training", {})
    if generations is not None:  # the early stop would cut some sizes short
        training["max_steps"] = generations * int(training.get("evo_steps", 10_000))
        training.pop("target_score", None)
    rows = []
    for size in sizes:
        training["pop_size"] = size
        name = f"pop-{size}{'-per-member' if '--per-member' in extra else ''}"
        sized = workdir / f"{name}.yaml"
        sized.write_text(yaml.safe_dump(content))
        run = run_seed(sized, seed, workdir / name, extra)
        records = [json.loads(line) for line in
                   (workdir / name / f"seed-{seed}" / "metrics.jsonl").open()]  # fmt: skip
        ends = [0.0] + [record["wall_seconds"] for record in records]
        walls = [later - earlier for earlier, later in itertools.pairwise(ends)]
        groups = [_groups(record) for record in records]
        rows.append({"size": size, "steps_per_second": run["steps_per_second"],
                     "generation_seconds": statistics.median(walls), "groups": groups,
                     "peak_mib": run["peak_mib"]})  # fmt: skip
    return rows


def _groups(record: dict[str, Any]) -> int:
    """A generation's groups: the batched population's (members that act and learn as one
    computation), else the number of distinct architectures."""
    if "groups" in record:
        return len(record["groups"])
    return len({member["arch"] for member in record["members"]})


def report_populations(rows: list[dict[str, Any]], title: str = "") -> None:
    if title:
        print(title)
    first = rows[0]["generation_seconds"]
    print(f"{'pop':>4} {'steps/s':>9} {'s/generation':>13} {'x pop ' + str(rows[0]['size']):>9} "
          f"{'peak MiB':>9}  groups per generation")  # fmt: skip
    for r in rows:
        print(f"{r['size']:>4} {r['steps_per_second']:>9,.0f} {r['generation_seconds']:>13.2f} "
              f"{r['generation_seconds'] / first:>9.2f} {r['peak_mib']:>9.0f}  "
              f"{' '.join(map(str, r['groups']))}")  # fmt: skip


def compare_populations(args: argparse.Namespace, workdir: Path) -> None:
    """The population sizes as the flags say, stacked (and as groups of one, to compare)."""
    sizes, seed = args.populations, (args.seeds or [1])[0]
    batched = population_rows(args.manifest, sizes, seed, workdir, args.extra, args.generations)
    report_populations(batched, "members stacked:" if args.compare_per_member else "")
    if not args.compare_per_member:
        return
    alone = population_rows(args.manifest, sizes, seed, workdir, [*args.extra, "--per-member"],
                            args.generations)  # fmt: skip
    report_populations(alone, "each member a group of one (--per-member):")
    print(
        f"{'pop':>4} {'steps/s stacked / per member':>30} {'s/generation per member / stacked':>35}"
    )
    for one, other in zip(batched, alone, strict=True):
        speed = one["steps_per_second"] / other["steps_per_second"]
        wall = other["generation_seconds"] / one["generation_seconds"]
        print(f"{one['size']:>4} {speed:>30.2f} {wall:>35.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifest", type=Path)
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        help="Seeds to train (default 1 2 3; with --populations and no --seeds: "
        "only the population sweep, with seed 1).",
    )
    parser.add_argument("--keep", type=Path, help="Keep the run folders here.")
    parser.add_argument("--profile", action="store_true", help="Also report where time goes.")
    parser.add_argument("--populations", type=int, nargs="+", default=[],
                        help="Also train once per population size (e.g. 4 8 16).")  # fmt: skip
    parser.add_argument(
        "--generations", type=int, help="With --populations: train this many generations per size."
    )
    parser.add_argument(
        "--compare-per-member",
        action="store_true",
        help="With --populations: also train each size with --per-member and report the ratios.",
    )
    parser.add_argument("extra", nargs="*", help="More `agile train` flags, after --.")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)  # argparse loses `--` after nargs="+"
    args = parser.parse_args(argv[:cut])
    args.extra = [*args.extra, *argv[cut + 1 :]]
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="agile-bench-"))
    seeds = args.seeds or [1, 2, 3]
    if not args.populations or args.seeds:
        report([run_seed(args.manifest, seed, workdir, args.extra) for seed in seeds])
    if args.profile:
        report_phases(profile_phases(args.manifest, seeds[0], workdir))
    if args.populations:
        compare_populations(args, workdir)
    if args.keep is None:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
