"""Speed against the reference: env steps/s of AgileRL 2.58.0 and of agile on the same manifests.

For each manifest and seed it trains the reference (AgileRL, PyPI ``agilerl==2.58.0``, in a
virtualenv of its own) and then agile, each in a fresh process and never two at once, and
reports for each run:

* steps/s: env steps summed over the population divided by the training wall time;
* process seconds: wall time of the whole process (imports, set-up, training, exit), and its
  CPU seconds (user + system, with the child processes it reaped: environment workers);
* peak MiB: the peak resident memory (``os.wait4``'s ``ru_maxrss``: the largest of the process
  and its reaped children, not their sum, so async environment workers are not added in);
* best: the best member's fitness in the last evaluation, and (ever) the best fitness any
  member reached in any evaluation (the reference's; agile's runs show it in their
  ``metrics.jsonl``);
* load before: the 1-minute load average when the run started. The runs need the machine to
  themselves; a load well above what the previous run of this script leaves (it decays over a
  minute) means something else was using the CPUs, and the figures are not to be trusted.

then a table of the ratio agile / reference of steps/s (above 1: agile is faster).

Set up the reference once (about 2.3 GB on disk, a few minutes), then benchmark::

    python benchmarks/reference_speed.py --setup [--venv /work/refenv]
    .venv/bin/python benchmarks/reference_speed.py configs/training/dqn/cartpole.yaml \\
        configs/training/ppo/cartpole.yaml configs/training/td3/pendulum.yaml \\
        [--max-steps 20000] [--seeds 1 2 3] [--only reference|agile] [--json results.json] \\
        [--set training.pop_size=16] [--compile] [--reference-threads N] [--keep]

``--setup`` makes the virtualenv, installs the CPU wheel ``torch==2.13.0`` first and then
``agilerl==2.58.0`` with a constraints file pinning that torch, so pip never fetches a CUDA
build. Workaround: agilerl 2.58.0 imports ``peft`` whenever its algorithms are imported
(``agilerl.distributed.expert_parallel``), yet declares it only in its LLM extras, so a plain
install cannot train anything; setup therefore also installs ``peft==0.21.0`` and
``transformers==5.14.1``, the versions agilerl's own ``llm`` extra pins.

How each tool runs (the run folder and the temporary manifest live under /tmp):

* agile: ``agile train MANIFEST --quiet --seed S --run-dir DIR``; its figures come from
  ``DIR/summary.json`` (``steps_per_second`` = ``global_steps`` / ``wall_seconds``).
* reference: a small driver in the reference's python feeds the same YAML file to its
  manifest entry point, ``LocalTrainer.from_manifest``, with ``mutation.rand_seed`` set to S
  and Python's, NumPy's and torch's global seeds set to S first, then times
  ``trainer.train(verbose=False, wb=False)`` (no elite saving, no checkpoints, W&B disabled;
  AgileRL still draws its progress bar, into the log file). Env steps are the members' own
  step counters (``agent.metrics.steps``) summed. ``--keep`` keeps the logs and run folders.

``--max-steps N`` writes a copy of each manifest with ``training.max_steps`` set to N and gives
that same copy to both tools; N must be at least the manifest's ``training.evo_steps``.
``--set KEY=VALUE`` (repeatable) sets any other field of that copy, the value read as YAML
(``--set training.target_score=null`` removes the key, so that both tools run the whole
budget). ``--compile`` runs agile a second time with ``--compile on`` (``agile-compiled``, its
ratio in a column of its own, and the seconds it spent compiling from its ``metrics.jsonl``).
Neither tool's torch threads are forced: each keeps its default. Those defaults differ: agile sets
torch to one thread for evolvable networks, while AgileRL leaves torch's default (one per
core, 2 here), which makes every small matrix product pay for thread hand-offs and suffers
badly when anything else competes for the cores. ``--reference-threads 1`` sets the
reference's torch threads, to see how much of the gap that default is (not the default run).

Differences that remain (known):

* n-step replay (the DQN manifest): AgileRL 2.58.0 cannot train DQN with
  ``replay_buffer.n_step_buffer: true`` and no PER. Its trainer makes the n-step buffer the
  main memory, and the loop's ``Sampler`` then binds ``sample`` to its index lookup, so the
  first learning step fails (``Sampler.sample_n_step() got an unexpected keyword argument
  'return_idx'``). The driver works around it by making the loop sample that buffer
  uniformly, as it samples any other buffer (it replaces ``Sampler.sample_n_step``, which
  nothing else uses in such a run). Storage and sampling then cost what the manifest asks
  for: 3-step returns are accumulated on every step and stored. But AgileRL's DQN
  bootstraps those 3-step returns with ``gamma`` rather than ``gamma ** 3``, so its learning
  (and fitness) differs from agile's; the work per step does not. The run prints a note.
* Keys the reference's manifest schema forbids (pydantic ``extra_forbidden``) are dropped
  from its copy and printed with the results; any other rejection fails the reference run,
  and the run's output says why. For the TD3 manifest these are ``algorithm.policy_noise: 0.2`` and
  ``algorithm.noise_clip: 0.5``: the defaults of AgileRL's ``TD3.learn``, which its training
  loop always uses, so the run is the same.
* Timed span: the reference's time is the whole ``train()`` call, so it includes the
  pre-training mutation and each generation's selection and mutation; agile's
  ``wall_seconds`` sums each generation's training and evaluation only, leaving out its
  evolution step and its per-generation checkpoint writes (which the reference does not do).
  Both count evaluation time and count only training env steps. The process seconds column
  covers everything for both.
* Step budget: the reference trains whole generations while every member is under
  ``max_steps`` (PPO with evo_steps 10,240 and max_steps 20,000 trains 20,480 per member);
  agile stops each member at ``max_steps``. Each tool's steps/s uses its own step count.
* AgileRL 2.58.0 records per-neuron gradient statistics during training whenever parameter
  mutation is on (its ReGraMa parameter mutation); that is part of its default behaviour and
  is measured as such.
* Random streams differ (environment resets, exploration, mutations), so fitness is only a
  sanity check, not a like-for-like result.
"""

from __future__ import annotations

import argparse
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

REPO = Path(__file__).resolve().parent.parent
DEFAULT_VENV = Path("/work/refenv")
TORCH = "torch==2.13.0"
REFERENCE = ["agilerl==2.58.0", "peft==0.21.0", "transformers==5.14.1"]
MARKER = "REFERENCE_RESULT "
AGILE_ARGS = {"agile": [], "agile-compiled": ["--compile", "on"]}  # agile's runs, their flags
TOOLS = ("reference", *AGILE_ARGS)

DRIVER = f'''"""Train a manifest with AgileRL's LocalTrainer; print one JSON line of figures."""
import json, os, random, sys, time

os.environ["WANDB_MODE"] = "disabled"
import numpy as np
import pydantic
import torch
import yaml
from agilerl.arena.models.manifest import TrainingManifest
from agilerl.components.replay_buffer import MultiStepReplayBuffer, ReplayBuffer
from agilerl.components.sampler import Sampler
from agilerl.training.trainer import LocalTrainer


def validated(raw):
    """Validate, dropping the keys the reference's schema forbids; return (manifest, dropped)."""
    dropped = {{}}
    while True:
        try:
            return TrainingManifest.get_validated(raw, mode="python"), dropped
        except pydantic.ValidationError as error:
            extra = [e["loc"] for e in error.errors() if e["type"] == "extra_forbidden"]
            if not extra:
                raise
            for loc in extra:
                section = raw
                for key in loc[:-1]:
                    section = section[key]
                dropped[".".join(map(str, loc))] = section.pop(loc[-1])


def sample_uniformly(sampler, batch_size, return_idx=False):
    """Sample the main n-step memory the way every other replay buffer is sampled."""
    return ReplayBuffer.sample(sampler.memory, batch_size, return_idx)


def work_around_n_step(trainer):
    """An n-step main memory without PER crashes 2.58.0's loop (its sampler looks transitions
    up by index only); have the loop sample it uniformly instead. Returns a note, or None."""
    if isinstance(trainer.memory, MultiStepReplayBuffer) and trainer.n_step_memory is None:
        Sampler.sample_n_step = sample_uniformly
        return "n-step main memory sampled uniformly (2.58.0 crashes otherwise)"
    return None


def register_atari():
    """gymnasium 1.x knows ALE/ ids only once ale-py registers them (agile does it itself)."""
    try:
        import ale_py
        import gymnasium
    except ImportError:
        return
    gymnasium.register_envs(ale_py)


def main():
    path, seed = sys.argv[1], int(sys.argv[2])
    register_atari()
    if len(sys.argv) > 3:
        torch.set_num_threads(int(sys.argv[3]))
    with open(path) as handle:
        raw = yaml.safe_load(handle)
    if isinstance(raw.get("mutation"), dict):
        raw["mutation"]["rand_seed"] = seed
    manifest, dropped = validated(raw)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    trainer = LocalTrainer.from_manifest(manifest)
    workaround = work_around_n_step(trainer)
    start = time.perf_counter()
    population, fitnesses = trainer.train(verbose=False, wb=False, save_elite=False)
    seconds = time.perf_counter() - start
    trainer.close()
    steps = sum(int(agent.metrics.steps) for agent in population)
    figures = {{
        "global_steps": steps,
        "train_seconds": seconds,
        "steps_per_second": steps / seconds,
        "best_fitness": max(float(f) for f in fitnesses),
        "best_ever": max(float(f) for agent in population for f in agent.fitness),
        "torch_threads": torch.get_num_threads(),
        "dropped": dropped,
        "workaround": workaround,
    }}
    print("{MARKER}" + json.dumps(figures), flush=True)


main()
'''


def setup(venv: Path) -> None:
    """Make the reference virtualenv: CPU torch first, then agilerl pinned to that torch."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    constraints = venv / "torch-constraints.txt"
    constraints.write_text(TORCH + "\n")
    pip = [str(python), "-m", "pip", "install", "-c", str(constraints)]
    subprocess.run([*pip, TORCH], check=True)
    subprocess.run([*pip, *REFERENCE], check=True)
    check = (
        "import torch, agilerl.training.trainer as t; from importlib.metadata import version; "
        "assert torch.__version__.startswith('2.13.0') and torch.version.cuda is None, "
        "torch.__version__; print('torch', torch.__version__, 'agilerl', version('agilerl'))"
    )
    subprocess.run([str(python), "-c", check], check=True, env=_env())
    print(f"reference ready in {venv}")


def _env() -> dict[str, str]:
    return {**os.environ, "WANDB_MODE": "disabled", "WANDB_SILENT": "true"}


def run_process(command: list[str], log: Path) -> tuple[dict[str, float], int, str]:
    """Run to the end; return (process figures, exit code, output), the output kept in log.

    The figures: wall seconds, CPU seconds (user + system, with the children it reaped, such
    as environment workers), peak MiB, and the 1-minute load average just before the start
    (a high one means something else was using the CPUs)."""
    load = os.getloadavg()[0]
    with log.open("wb") as out:
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=_env())
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
    figures = {"process_seconds": wall, "cpu_seconds": usage.ru_utime + usage.ru_stime,
               "peak_mib": usage.ru_maxrss / 1024, "load_before": load}  # fmt: skip
    return figures, os.waitstatus_to_exitcode(status), log.read_text(errors="replace")


def run_reference(
    manifest: Path, seed: int, workdir: Path, venv: Path, threads: int | None
) -> dict[str, Any]:
    driver = workdir / "reference_driver.py"
    driver.write_text(DRIVER)
    command = [str(venv / "bin" / "python"), str(driver), str(manifest), str(seed)]
    command += [str(threads)] if threads else []
    figures, code, output = run_process(command, workdir / f"reference-{seed}.log")
    lines = [line for line in output.splitlines() if line.startswith(MARKER)]
    if code != 0 or not lines:
        return _failure(code, output)
    return {**figures, **json.loads(lines[-1][len(MARKER) :])}


def run_agile(manifest: Path, seed: int, workdir: Path, agile: str, tool: str) -> dict[str, Any]:
    run_dir = workdir / f"{tool}-{seed}"
    command = [agile, "train", str(manifest), "--quiet", "--seed", str(seed),
               "--run-dir", str(run_dir), *AGILE_ARGS[tool]]  # fmt: skip
    figures, code, output = run_process(command, workdir / f"{tool}-{seed}.log")
    summary_file = run_dir / "summary.json"
    if code != 0 or not summary_file.exists():
        return _failure(code, output)
    summary = json.loads(summary_file.read_text())
    if "--compile" in AGILE_ARGS[tool]:
        figures["compiled_seconds"] = _compiled(run_dir / "metrics.jsonl")
    return {
        **figures,
        "global_steps": summary["global_steps"],
        "train_seconds": summary["wall_seconds"],
        "steps_per_second": summary["steps_per_second"],
        "best_fitness": summary["best_fitness"],
    }


def _compiled(metrics: Path) -> float:
    """Seconds the run spent compiling, summed over its generations' metrics lines."""
    lines = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return sum(line.get("compiled", {}).get("seconds", 0.0) for line in lines)


def _failure(code: int, output: str) -> dict[str, Any]:
    tail = "\n".join(output.splitlines()[-15:])
    print(f"    failed (exit {code}):\n{tail}", file=sys.stderr)
    return {"error": f"exit {code}", "output_tail": tail}


def prepare_manifest(manifest: Path, max_steps: int | None, sets: list[str], workdir: Path) -> Path:
    """The manifest both tools read: the original, or a copy with training.max_steps = N and
    each --set KEY=VALUE applied (VALUE read as YAML; null removes the key)."""
    if max_steps is None and not sets:
        return manifest
    import yaml

    content = yaml.safe_load(manifest.read_text())
    for assignment in sets:
        _assign(content, assignment)
    training = content.setdefault("training", {})
    evo_steps = training.get("evo_steps") or 0
    if max_steps is not None and max_steps < evo_steps:
        sys.exit(f"{manifest}: --max-steps {max_steps} is below training.evo_steps {evo_steps}")
    if max_steps is not None:
        training["max_steps"] = max_steps
    copy = workdir / manifest.name
    copy.write_text(yaml.safe_dump(content, sort_keys=False))
    return copy


def _assign(content: dict[str, Any], assignment: str) -> None:
    import yaml

    key, separator, text = assignment.partition("=")
    if not separator or not key:
        sys.exit(f"--set {assignment!r}: expected KEY=VALUE, e.g. training.pop_size=16")
    *parents, leaf = key.split(".")
    for part in parents:
        content = content.setdefault(part, {})
        if not isinstance(content, dict):
            sys.exit(f"--set {assignment!r}: {part} is not a section of the manifest")
    value = yaml.safe_load(text)
    if value is None:
        content.pop(leaf, None)
    else:
        content[leaf] = value


def fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_run(row: dict[str, Any]) -> None:
    if "error" in row:
        print(f"  {row['tool']:<9} seed {row['seed']}: FAILED ({row['error']})")
        return
    print(f"  {row['tool']:<9} seed {row['seed']}: {row['steps_per_second']:>8,.0f} steps/s  "
          f"{row['global_steps']:>9,} steps in {row['train_seconds']:6.1f} s  "
          f"process {row['process_seconds']:6.1f} s (cpu {row['cpu_seconds']:6.1f} s)  "
          f"peak {row['peak_mib']:6.0f} MiB  best {fmt(row['best_fitness'], '.1f')} "
          f"(ever {fmt(row.get('best_ever'), '.1f')})  "
          f"load before {row['load_before']:.1f}")  # fmt: skip
    if row.get("compiled_seconds") is not None:
        print(f"            compiling: {row['compiled_seconds']:.1f} s")
    if row.get("dropped"):
        print(f"            dropped for the reference: {row['dropped']}")
    if row.get("workaround"):
        print(f"            reference workaround: {row['workaround']}")


def speed(rows: list[dict[str, Any]], manifest: str, seed: int, tool: str) -> float | None:
    for row in rows:
        if (row["manifest"], row["seed"], row["tool"]) == (manifest, seed, tool):
            return row.get("steps_per_second")
    return None


def ratio_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per manifest and seed: each tool's speed and each agile run's / reference."""
    table = []
    for manifest, seed in dict.fromkeys((r["manifest"], r["seed"]) for r in rows):
        entry: dict[str, Any] = {"manifest": manifest, "seed": seed}
        for tool in TOOLS:
            entry[tool] = speed(rows, manifest, seed, tool)
        ref = entry["reference"]
        for tool in AGILE_ARGS:
            ours = entry[tool]
            entry[f"{tool}/ref"] = ours / ref if ref and ours else None
        table.append(entry)
    return table


def print_table(table: list[dict[str, Any]]) -> None:
    width = max(len(entry["manifest"]) for entry in table)
    columns = [c for c in table[0] if c not in ("manifest", "seed")]
    shown = [c for c in columns if any(e[c] is not None for e in table)]
    print(f"\n{'manifest':<{width}} {'seed':>4} " + " ".join(f"{c:>18}" for c in shown))
    for e in table:
        cells = [fmt(e[c], ".2f" if c.endswith("/ref") else ",.0f") for c in shown]
        print(f"{e['manifest']:<{width}} {e['seed']:>4} " + " ".join(f"{c:>18}" for c in cells))
    for manifest in dict.fromkeys(e["manifest"] for e in table):
        for column in (c for c in shown if c.endswith("/ref")):
            ratios = [e[column] for e in table if e["manifest"] == manifest and e[column]]
            if len(ratios) > 1:
                print(f"{manifest}: median {column} {statistics.median(ratios):.2f}")


def find_agile() -> str:
    local = REPO / ".venv" / "bin" / "agile"
    found = str(local) if local.exists() else shutil.which("agile")
    return found or sys.exit("agile not found: expected .venv/bin/agile or agile on PATH")


def prepare_all(
    manifests: list[Path], max_steps: int | None, sets: list[str]
) -> list[tuple[Path, Path, Path]]:
    """(manifest, the copy both tools read, its folder) for each, all made before any run
    so that a --max-steps too small for one manifest stops the benchmark before it starts."""
    workdirs = [Path(tempfile.mkdtemp(prefix=f"reference-speed-{m.stem}-")) for m in manifests]
    try:
        copies = [
            prepare_manifest(m, max_steps, sets, w)
            for m, w in zip(manifests, workdirs, strict=True)
        ]
    except SystemExit:
        for workdir in workdirs:
            shutil.rmtree(workdir, ignore_errors=True)
        raise
    return list(zip(manifests, copies, workdirs, strict=True))


def benchmark(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every manifest x seed x tool, one process at a time."""
    tools = [args.only] if args.only else ["reference", "agile"]
    if args.compile and "agile-compiled" not in tools:
        tools.append("agile-compiled")
    python = args.venv / "bin" / "python"
    if "reference" in tools and not python.exists():
        sys.exit(f"no reference virtualenv at {args.venv}: run with --setup first")
    agile = find_agile() if any(tool in AGILE_ARGS for tool in tools) else ""
    runs = prepare_all(args.manifests, args.max_steps, args.set)
    rows = []
    for manifest, copy, workdir in runs:
        print(f"{manifest}  (steps per member: {args.max_steps or 'as written'}; files {workdir})")
        for seed in args.seeds:
            for tool in tools:
                if tool == "reference":
                    row = run_reference(copy, seed, workdir, args.venv, args.reference_threads)
                else:
                    row = run_agile(copy, seed, workdir, agile, tool)
                row = {"manifest": str(manifest), "seed": seed, "tool": tool, **row}
                print_run(row)
                rows.append(row)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return rows


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifests", type=Path, nargs="*", help="Training manifests.")
    parser.add_argument("--setup", action="store_true", help="Create the reference venv.")
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV,
                        help=f"Reference virtualenv (default {DEFAULT_VENV}).")  # fmt: skip
    parser.add_argument("--max-steps", type=int, help="Replace training.max_steps (per member).")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="Set a manifest field in the copy both tools read (YAML value; "
                        "null removes it), e.g. training.pop_size=16. Repeatable.")  # fmt: skip
    parser.add_argument("--only", choices=TOOLS, help="Run one tool only.")
    parser.add_argument("--compile", action="store_true",
                        help="Also run agile with --compile on (tool agile-compiled).")  # fmt: skip
    parser.add_argument("--reference-threads", type=int, metavar="N",
                        help="torch threads for the reference (default: torch's own).")  # fmt: skip
    parser.add_argument("--json", type=Path, help="Write the runs and ratios to this file.")
    parser.add_argument("--keep", action="store_true", help="Keep the temporary run folders.")
    args = parser.parse_args()
    if not args.setup and not args.manifests:
        parser.error("give manifests to benchmark, or --setup")
    return args


def main() -> None:
    args = parse_args()
    if args.setup:
        setup(args.venv)
    if not args.manifests:
        return
    rows = benchmark(args)
    table = ratio_table(rows)
    print_table(table)
    if args.json:
        args.json.write_text(json.dumps({"runs": rows, "ratios": table}, indent=2) + "\n")


if __name__ == "__main__":
    main()
