"""The ray backend against the local one: speed, learning, Ray's cost per generation, faults.

Needs ``pip install -e ".[ray]"``. Every run is ``agile train MANIFEST --quiet`` in a fresh
process, never two at once; with ``--backend ray`` and no address, each run starts (and stops)
a Ray instance of its own on this machine, so its start-up is in the process time.

    python benchmarks/ray_backend.py compare configs/training/dqn/cartpole.yaml \\
        configs/training/ppo/cartpole.yaml [--pop 8] [--seeds 1] [--max-steps N] \\
        [--backends local ray ray-shared ray-async]
    python benchmarks/ray_backend.py sweep configs/training/dqn/cartpole.yaml \\
        [--pops 4 8 16] [--hidden 64 256 1024]
    python benchmarks/ray_backend.py scale configs/training/dqn/cartpole.yaml \\
        [--pops 16 64 256 1024] [--workers 16] [--evo-steps 64] [--checkpoint-every G]
    python benchmarks/ray_backend.py fault configs/training/dqn/cartpole.yaml [--pop 8]
    python benchmarks/ray_backend.py slow configs/training/dqn/cartpole.yaml --pop 4 \\
        --evo-steps 4000 [--factor 2]
    python benchmarks/ray_backend.py curves RUN_DIR... [--every 40000] [--upto 400000]

* ``compare``: for each manifest (population ``--pop``), the local backend and then the ray
  backend, with the manifest's own budget and early stop: env steps/s, whole-process seconds,
  best fitness and the global steps at which the target was first reached; and from the ray
  run's ``metrics.jsonl``, per generation after the first (whose time includes the workers'
  start-up), the median driver-side overhead (the generation's wall time on the driver less
  the slowest worker's own time: moving and (de)serialising member states, Ray's scheduling)
  and the member-state bytes sent and returned.
* ``sweep``: the ray backend for two short generations (``--evo-steps``, default 1,000 per
  member) of each population size and hidden width (``network`` of one hidden layer of that
  width in the encoder and the head, and that latent width), reporting the second
  generation's overhead and bytes: the data of the scaling model in the closing note.
* ``scale``: a large cluster simulated on this machine: ``--workers`` Ray workers sharing its
  CPUs (fractions of a CPU each), tiny members (one hidden layer of 16, one environment,
  ``--evo-steps`` per generation), tournament selection and mutation as the manifest has them;
  per population, the median over the generations after the first of the generation's wall
  time, the slowest worker's own time, the driver's time outside it and its share, and the
  member-state bytes the driver sent, the workers copied between them, the driver fetched
  (checkpoints, the elite) and, before resident members, the workers returned.
* ``slow``: two workers, one of them ``--factor`` times slower (as on a slower node):
  the other worker's members' env steps per second, with synchronous generations and with
  ``--async`` (:func:`slow`).
* ``curves``: the best fitness against global steps of run folders (``compare --keep``).
* ``fault``: a ray run of ``--pop`` members, one worker per member; once a worker is training,
  ``kill -9`` of its process; reports whether the run completed with every member, the
  generations and the worker deaths the metrics recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml


def _agile() -> str:
    return shutil.which("agile") or sys.exit("agile is not on PATH: pip install -e '.[ray]'")


def _sized(manifest: Path, workdir: Path, name: str, **changes: Any) -> Path:
    """A copy of ``manifest`` with ``section__key=value`` changes (None: the key removed)."""
    data = yaml.safe_load(manifest.read_text())
    for dotted, value in changes.items():
        section, _, key = dotted.partition("__")
        if value is None:
            data.setdefault(section, {}).pop(key, None)
        else:
            data.setdefault(section, {})[key] = value
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def train(
    manifest: Path, run_dir: Path, *flags: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """One ``agile train``; the summary, the process seconds and the metrics."""
    command = [_agile(), "train", str(manifest), "--quiet", "--run-dir", str(run_dir), *flags]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"summary": summary, "seconds": seconds, "metrics": [json.loads(x) for x in lines]}


def ray_costs(metrics: list[dict[str, Any]]) -> dict[str, float]:
    """Median overhead and bytes per generation after the first, and the first's overhead."""
    later = [m["ray"] for m in metrics[1:]] or [metrics[0]["ray"]]
    return {
        "first_overhead": metrics[0]["ray"]["overhead_seconds"],
        "overhead": statistics.median(r["overhead_seconds"] for r in later),
        "generation": statistics.median(r["wall_seconds"] for r in later),
        "sent": statistics.median(r["bytes_sent"] + r.get("bytes_copied", 0) for r in later),
        "returned": statistics.median(
            r.get("bytes_returned", 0) + r.get("bytes_fetched", 0) for r in later
        ),
    }


#: What ``compare --backends`` runs: the backends, and the ray backend's ways to evolve.
BACKENDS = {
    "local": ["--backend", "local"],
    "ray": ["--backend", "ray"],
    "ray-shared": ["--backend", "ray", "--share-experience"],
    "ray-async": ["--backend", "ray", "--async"],
}


def compare(args: argparse.Namespace, workdir: Path) -> None:
    print(f"{'manifest':<36} {'backend':<10} {'seed':>4} {'steps/s':>8} {'process s':>9} "
          f"{'best':>6} {'target@steps':>12}  ray per generation")  # fmt: skip
    for manifest in args.manifests:
        for seed in args.seeds:
            changes: dict[str, Any] = {"training__pop_size": args.pop}
            if args.max_steps is not None:
                changes["training__max_steps"] = args.max_steps
            sized = _sized(manifest, workdir, f"{manifest.parent.name}-{seed}", **changes)
            for backend in args.backends:
                run = train(sized, workdir / f"{manifest.parent.name}-{backend}-{seed}",
                            *BACKENDS[backend], "--seed", str(seed))  # fmt: skip
                _compare_row(manifest, backend, seed, run)


def _compare_row(manifest: Path, backend: str, seed: int, run: dict[str, Any]) -> None:
    summary = run["summary"]
    reached = (summary.get("target_reached_at") or {}).get("global_steps")
    costs = ""
    if backend in ("ray", "ray-shared"):
        c = ray_costs(run["metrics"])
        costs = (f"overhead {c['overhead']:.2f} s of {c['generation']:.1f} s (first "
                 f"{c['first_overhead']:.1f} s), to workers {c['sent'] / 1e6:.2f} MB, to the "
                 f"driver {c['returned'] / 1e6:.2f} MB")  # fmt: skip
    name = f"{manifest.parent.name}/{manifest.name}"
    print(f"{name:<36} {backend:<10} {seed:>4} {summary['steps_per_second']:>8,.0f} "
          f"{run['seconds']:>9.1f} {summary['best_fitness']:>6.1f} "
          f"{reached if reached is not None else '-':>12}  {costs}", flush=True)  # fmt: skip


def sweep(args: argparse.Namespace, workdir: Path) -> None:
    manifest, evo = args.manifests[0], args.evo_steps
    print(f"{'pop':>4} {'hidden':>6} {'MB per member':>13} {'generation s':>12} "
          f"{'overhead s':>10} {'to workers MB':>8} {'to driver MB':>11}")  # fmt: skip
    for hidden in args.hidden:
        for pop in args.pops:
            mlp = {"hidden_size": [hidden], "max_mlp_nodes": max(hidden, 256)}
            network = {"latent_dim": hidden, "max_latent_dim": max(hidden, 128),
                       "encoder_config": mlp, "head_config": mlp}  # fmt: skip
            sized = _sized(manifest, workdir, f"sweep-{pop}-{hidden}", training__pop_size=pop,
                           training__evo_steps=evo, training__max_steps=2 * evo,
                           training__learning_delay=0, training__target_score=None)  # fmt: skip
            content = yaml.safe_load(sized.read_text())
            content["network"] = network
            sized.write_text(yaml.safe_dump(content))
            run = train(sized, workdir / f"sweep-{pop}-{hidden}", "--backend", "ray")
            first, last = run["metrics"][0]["ray"], run["metrics"][-1]["ray"]
            to_workers = last["bytes_sent"] + last.get("bytes_copied", 0)
            to_driver = last.get("bytes_returned", 0) + last.get("bytes_fetched", 0)
            print(f"{pop:>4} {hidden:>6} {first['bytes_sent'] / pop / 1e6:>13.2f} "
                  f"{last['wall_seconds']:>12.2f} {last['overhead_seconds']:>10.3f} "
                  f"{to_workers / 1e6:>8.1f} {to_driver / 1e6:>11.1f}", flush=True)  # fmt: skip


def scale(args: argparse.Namespace, workdir: Path) -> None:
    """A large cluster simulated on this machine: ``--workers`` Ray workers sharing its CPUs,
    tiny members (one hidden layer of 16), short generations, populations of ``--pops``."""
    manifest = args.manifests[0]
    print(f"{'pop':>5} {'workers':>7} {'generation s':>12} {'slowest worker s':>16} "
          f"{'driver s':>8} {'outside':>7} {'sent MB':>8} {'copied MB':>9} "
          f"{'fetched MB':>10} {'returned MB':>11}")  # fmt: skip
    tiny = {"hidden_size": [16], "min_mlp_nodes": 4}
    network = {"latent_dim": 16, "min_latent_dim": 4, "encoder_config": tiny, "head_config": tiny}
    for pop in args.pops:
        workers = min(args.workers, pop)
        sized = _sized(manifest, workdir, f"scale-{pop}", training__pop_size=pop,
                       training__evo_steps=args.evo_steps, training__max_steps=3 * args.evo_steps,
                       training__learning_delay=0, training__target_score=None,
                       training__eval_steps=20, environment__num_envs=1)  # fmt: skip
        content = yaml.safe_load(sized.read_text())
        content["network"] = network
        sized.write_text(yaml.safe_dump(content))
        flags = ["--backend", "ray", "--members-per-worker", str(-(-pop // workers))]
        if args.checkpoint_every is not None:
            flags += ["--checkpoint-every", str(args.checkpoint_every)]
        run = train(sized, workdir / f"scale-{pop}", *flags)
        later = [m["ray"] for m in run["metrics"][1:]]

        def median(key: str, rows: list[dict[str, Any]] = later) -> float:
            return statistics.median(float(row.get(key, 0)) for row in rows)

        outside = median("overhead_seconds") / median("wall_seconds")
        print(f"{pop:>5} {workers:>7} {median('wall_seconds'):>12.2f} "
              f"{median('worker_seconds'):>16.2f} {median('overhead_seconds'):>8.2f} "
              f"{outside:>7.0%} {median('bytes_sent') / 1e6:>8.2f} "
              f"{median('bytes_copied') / 1e6:>9.2f} {median('bytes_fetched') / 1e6:>10.2f} "
              f"{median('bytes_returned') / 1e6:>11.2f}", flush=True)  # fmt: skip


def fault(args: argparse.Namespace, workdir: Path) -> None:
    manifest = _sized(args.manifests[0], workdir, "fault", training__pop_size=args.pop,
                      training__target_score=None,
                      training__max_steps=args.max_steps or 20_000)  # fmt: skip
    run_dir = workdir / "fault"
    command = [_agile(), "train", str(manifest), "--quiet", "--run-dir", str(run_dir),
               "--backend", "ray", "--members-per-worker", "1"]  # fmt: skip
    driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    victim = None
    deadline = time.monotonic() + 300
    while victim is None and time.monotonic() < deadline and driver.poll() is None:
        found = subprocess.run(["pgrep", "-f", "ray::MemberWorker.train"], capture_output=True,
                               text=True).stdout.split()  # fmt: skip
        if found and (run_dir / "metrics.jsonl").is_file():  # in the second generation
            victim = int(found[0])
        time.sleep(0.2)
    if victim is None:
        sys.exit("no worker was found training in the second generation")
    time.sleep(1.0)
    os.kill(victim, signal.SIGKILL)
    output, _ = driver.communicate()
    print(output)
    summary = json.loads((run_dir / "summary.json").read_text())
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    deaths = [m["ray"]["worker_deaths"] for m in metrics]
    members = {len(m["members"]) for m in metrics}
    print(f"exit {driver.returncode}; generations {summary['generations']}, members per "
          f"generation {sorted(members)}, worker deaths per generation {deaths}, best "
          f"{summary['best_fitness']}")  # fmt: skip


def slow(args: argparse.Namespace, workdir: Path) -> None:
    """Two workers, the first made ``--factor`` times slower (it sleeps after each call's work,
    as on a slower node), synchronous and ``--async``: the env steps per second of the other
    worker's members, from its start to the end of its last round."""
    evo = args.evo_steps
    manifest = _sized(args.manifests[0], workdir, "slow", training__pop_size=args.pop,
                      training__evo_steps=evo, training__max_steps=args.max_steps or 4 * evo,
                      training__target_score=None)  # fmt: skip
    print(f"{'evolution':<12} {'slot 0':<10} {'other slot steps/s':>18} {'run s':>7} "
          f"{'staleness max':>13} {'best':>6}")  # fmt: skip
    for mode in ("synchronous", "async"):
        for factor in (1.0, args.factor):
            env = {**os.environ, "AGILE_RAY_SLOW_SLOT": f"0:{factor:g}"}
            flags = ["--backend", "ray", "--members-per-worker", str(args.pop // 2)]
            flags += ["--async"] if mode == "async" else []
            run = train(manifest, workdir / f"slow-{mode}-{factor:g}", *flags, env=env)
            last = run["metrics"][-1]
            if mode == "async":
                other = last["async"]["slots"][1]
                speed = other["steps"] / other["ended_at"]
                stale = max(m["async"]["staleness_max"] for m in run["metrics"])
            else:
                speed = last["steps_per_member"] * (args.pop // 2) / last["wall_seconds"]
                stale = 0
            pace = "normal" if factor == 1 else f"1/{factor:g} speed"
            print(f"{mode:<12} {pace:<10} {speed:>18,.0f} {run['seconds']:>7.1f} {stale:>13} "
                  f"{run['summary']['best_fitness']:>6.1f}", flush=True)  # fmt: skip


def curves(args: argparse.Namespace, workdir: Path) -> None:
    """For run folders (kept by ``compare --keep``), the best fitness of each generation at
    every ``--every`` global steps (the last generation at or before them), as a table."""
    marks = list(range(args.every, args.upto + 1, args.every))
    print(f"{'run':<28}" + "".join(f"{m // 1000:>6}k" for m in marks))
    for run_dir in args.manifests:
        lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        cells = []
        for mark in marks:
            seen = [line["best_fitness"] for line in lines if line["global_steps"] <= mark]
            done = lines[-1]["global_steps"] < mark
            cells.append(" " * 7 if done or not seen else f"{seen[-1]:>7.1f}")
        print(f"{run_dir.name:<28}" + "".join(cells), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("compare", "sweep", "scale", "fault", "slow", "curves"))
    parser.add_argument("manifests", type=Path, nargs="+")
    parser.add_argument("--pop", type=int, default=8, help="Population (compare, fault).")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--backends", nargs="+", choices=sorted(BACKENDS),
                        default=["local", "ray"], help="compare: what to run.")  # fmt: skip
    parser.add_argument("--max-steps", type=int, help="training.max_steps (per member).")
    parser.add_argument("--pops", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--hidden", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--evo-steps", type=int, default=1_000,
                        help="sweep: steps per member per generation (short: the overhead "
                        "does not depend on them).")  # fmt: skip
    parser.add_argument(
        "--workers",
        type=int,
        default=16,
        help="scale: Ray workers (they share this machine's CPUs).",
    )
    parser.add_argument(
        "--checkpoint-every", type=int, help="scale: the ray backend's --checkpoint-every."
    )
    parser.add_argument("--factor", type=float, default=2.0, help="slow: how much slower.")
    parser.add_argument("--every", type=int, default=40_000, help="curves: global steps apart.")
    parser.add_argument("--upto", type=int, default=400_000, help="curves: the last mark.")
    parser.add_argument("--keep", type=Path, help="Keep the run folders here.")
    args = parser.parse_args()
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="agile-ray-bench-", dir=args.keep))
    try:
        modes = {"compare": compare, "sweep": sweep, "scale": scale, "fault": fault,
                 "slow": slow, "curves": curves}  # fmt: skip
        modes[args.mode](args, workdir)
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
