"""Multi-frequency PBT: smoke runs of the reference's MF-PBT manifests, and MF-PBT against
tournament selection on one manifest over several seeds.

    python benchmarks/mfpbt.py smoke ROOT            # ROOT: a checkout of the reference
    python benchmarks/mfpbt.py compare configs/training/td3/pendulum.yaml --pop 8 \\
        --seeds 1 2 3 --max-steps 40000 --evo-steps 1000

``smoke`` finds every manifest under ROOT (and every YAML block of its docs) whose selection
strategy is ``multi_frequency``, shrinks only its budget (a few generations of a few hundred
steps per member, enough for the slowest subpopulation to evolve once), and trains it with
``agile train``, printing one line per manifest. ``compare`` trains the manifest twice per
seed, once with its tournament selection and once with MF-PBT on the same population size,
the same budget and the same seed, and reports each run's final and best fitness (the best
member of a generation, from ``metrics.jsonl``) and the curves side by side.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from reference_manifests import candidates, parsed_manifest, tree_files

SELECTION_KEYS = ("selection_strategy", "tournament_selection")


def _selection(data: dict[str, Any]) -> dict[str, Any] | None:
    for key in SELECTION_KEYS:
        if isinstance(data.get(key), dict):
            return data[key]
    return None


def _manifests(root: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every MF-PBT manifest under ``root``: files, then YAML blocks of .rst and .md files."""
    for name, text in candidates(tree_files(root)):
        data = parsed_manifest(text)
        selection = (_selection(data) or {}) if data is not None else {}
        if data is not None and selection.get("strategy") == "multi_frequency":
            yield name, data


def _shrunk(data: dict[str, Any], evo_steps: int) -> dict[str, Any]:
    """The manifest with a smoke run's budget: enough generations of ``evo_steps`` steps for
    the slowest subpopulation to evolve once, at most 4 environments and rollouts of at most
    64 steps; the algorithm, network, mutation and selection sections are left as written."""
    shrunk = copy.deepcopy(data)
    selection = _selection(shrunk)
    assert selection is not None
    ratios = selection.get("evolution_frequency_ratios") or [1, 5]
    training = shrunk.setdefault("training", {})
    training.update({"evo_steps": evo_steps, "max_steps": evo_steps * (max(ratios) + 1)})
    training.update({"target_score": None, "learning_delay": 0})
    training["eval_steps"] = min(int(training.get("eval_steps") or 200), 200)
    environment = shrunk["environment"]
    if isinstance(environment, dict) and "num_envs" in environment:
        environment["num_envs"] = min(int(environment["num_envs"]), 4)
    algorithm = shrunk["algorithm"]
    if "learn_step" in algorithm:
        algorithm["learn_step"] = min(int(algorithm["learn_step"]), 64)
    return shrunk


def _stand_in_dataset(data: dict[str, Any], datasets: Path) -> str | None:
    """For a manifest naming a Minari dataset, make a stand-in of that id under ``datasets``
    (50 episodes of random actions: what a ``random`` dataset holds, but not the published
    file, which cannot be downloaded here); returns what to print, or None."""
    environment = data["environment"]
    dataset_id = environment.get("minari_dataset_id") if isinstance(environment, dict) else None
    if dataset_id is None:
        return None
    import os

    import minari
    from minari.data_collector.episode_buffer import EpisodeBuffer

    os.environ["MINARI_DATASETS_PATH"] = str(datasets)
    episodes = [EpisodeBuffer(id=n, infos={}, **_random_episode(environment["name"], n))
                for n in range(50)]  # fmt: skip
    minari.create_dataset_from_buffers(dataset_id, episodes, env=environment["name"])
    return f"with a stand-in '{dataset_id}' made here (50 episodes of random actions)"


def _random_episode(name: str, seed: int) -> dict[str, Any]:
    import gymnasium
    import numpy as np

    env = gymnasium.make(name)
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    columns: dict[str, list[Any]] = {"observations": [obs], "actions": [], "rewards": [],
                                     "terminations": [], "truncations": []}  # fmt: skip
    finished = False
    while not finished:
        action = env.action_space.sample()
        obs, reward, terminated, truncated, _ = env.step(action)
        for key, value in zip(columns, (obs, action, reward, terminated, truncated), strict=True):
            columns[key].append(value)
        finished = terminated or truncated
    env.close()
    return {key: np.array(values) for key, values in columns.items()}


def smoke(root: Path, evo_steps: int, timeout: float) -> int:
    failures = 0
    with tempfile.TemporaryDirectory(prefix="agile-mfpbt-smoke-") as work:
        for name, data in _manifests(root):
            stand_in = _stand_in_dataset(data, Path(work) / "minari")
            target = root / (name.split("#")[0] + f".smoke-{abs(hash(name)) % 10_000}.yaml")
            target.write_text(yaml.safe_dump(_shrunk(data, evo_steps), sort_keys=False))
            run_dir = Path(work) / target.stem
            started = time.perf_counter()
            try:
                done = subprocess.run(
                    ["agile", "train", str(target), "--run-dir", str(run_dir), "--overwrite"],
                    cwd=root, capture_output=True, text=True, timeout=timeout, check=False,
                )  # fmt: skip
                code, said = done.returncode, (done.stdout + done.stderr).strip()
            except subprocess.TimeoutExpired:
                code, said = -1, f"did not finish in {timeout:.0f} s"
            finally:
                target.unlink(missing_ok=True)
            seconds = time.perf_counter() - started
            failures += code != 0
            print(
                f"{'OK' if code == 0 else f'FAILED ({code})':12} {name}  {seconds:.0f} s"
                + ("" if code == 0 else "\n    " + "\n    ".join(said.splitlines()[-6:]))
            )
            if code == 0:
                print("    " + _evolutions(run_dir) + (f"; {stand_in}" if stand_in else ""))
    return 1 if failures else 0


def _evolutions(run_dir: Path) -> str:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evolved = [record["selection"]["evolved"] for record in records[1:]]
    best = max(record["best_fitness"] for record in records)
    return f"{len(records)} generations, best {best:.4g}, subpopulations evolved: {evolved}"


def _variant(data: dict[str, Any], strategy: str, args: argparse.Namespace) -> dict[str, Any]:
    variant = copy.deepcopy(data)
    for key in SELECTION_KEYS:
        variant.pop(key, None)
    training = variant.setdefault("training", {})
    training.update({"pop_size": args.pop, "max_steps": args.max_steps,
                     "evo_steps": args.evo_steps, "target_score": None})  # fmt: skip
    if strategy == "tournament":
        variant["tournament_selection"] = _selection(data) or {}
    else:
        variant["selection_strategy"] = {"strategy": "multi_frequency",
                                         "n_subpopulations": args.subpopulations,
                                         "evolution_frequency_ratios": args.ratios}  # fmt: skip
    return variant


def _train(manifest: dict[str, Any], seed: int, work: Path, label: str) -> list[dict[str, Any]]:
    path = work / f"{label}-{seed}.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    run_dir = work / f"{label}-{seed}"
    command = ["agile", "train", str(path), "--seed", str(seed), "--run-dir", str(run_dir),
               "--overwrite", "--quiet"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{label} seed {seed} failed:\n{done.stdout}{done.stderr}")
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def compare(args: argparse.Namespace) -> int:
    data = yaml.safe_load(Path(args.manifest).read_text())
    results: dict[str, dict[int, list[tuple[int, float]]]] = {"tournament": {}, "mfpbt": {}}
    with tempfile.TemporaryDirectory(prefix="agile-mfpbt-compare-") as work:
        for seed in args.seeds:
            for label in results:
                started = time.perf_counter()
                records = _train(_variant(data, label, args), seed, Path(work), label)
                curve = [(r["global_steps"], r["best_fitness"]) for r in records]
                results[label][seed] = curve
                print(
                    f"{label:10} seed {seed}: final {curve[-1][1]:9.2f}  best "
                    f"{max(f for _, f in curve):9.2f}  at {curve[-1][0]:,} steps "
                    f"({time.perf_counter() - started:.0f} s)",
                    flush=True,
                )
    _table(results, args.seeds)
    if args.json:
        Path(args.json).write_text(
            json.dumps({k: {str(s): c for s, c in v.items()} for k, v in results.items()}, indent=1)
        )
    return 0


def _table(results: dict[str, dict[int, list[tuple[int, float]]]], seeds: list[int]) -> None:
    print("\n| seed | tournament final | tournament best | MF-PBT final | MF-PBT best |")
    print("|---|---|---|---|---|")
    for seed in seeds:
        cells = []
        for label in ("tournament", "mfpbt"):
            curve = results[label][seed]
            cells += [f"{curve[-1][1]:.2f}", f"{max(f for _, f in curve):.2f}"]
        print(f"| {seed} | " + " | ".join(cells) + " |")
    print("\nbest fitness by generation (mean over seeds):")
    length = min(len(curve) for runs in results.values() for curve in runs.values())
    for g in range(0, length, max(1, length // 10)):
        steps = results["tournament"][seeds[0]][g][0]
        means = [sum(results[k][s][g][1] for s in seeds) / len(seeds) for k in results]
        print(f"  {steps:>9,} steps  tournament {means[0]:9.2f}  MF-PBT {means[1]:9.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    smoke_parser = commands.add_parser("smoke", help="train the reference's MF-PBT manifests")
    smoke_parser.add_argument("root", type=Path, help="a checkout of the reference")
    smoke_parser.add_argument("--evo-steps", type=int, default=256)
    smoke_parser.add_argument("--timeout", type=float, default=900)
    compare_parser = commands.add_parser("compare", help="MF-PBT against tournament selection")
    compare_parser.add_argument("manifest")
    compare_parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    compare_parser.add_argument("--pop", type=int, default=8)
    compare_parser.add_argument("--subpopulations", type=int, default=2)
    compare_parser.add_argument("--ratios", type=int, nargs="+", default=[1, 5])
    compare_parser.add_argument("--max-steps", type=int, default=40_000)
    compare_parser.add_argument("--evo-steps", type=int, default=1_000)
    compare_parser.add_argument("--json", help="also write the curves here")
    args = parser.parse_args(argv)
    if args.command == "smoke":
        return smoke(args.root, args.evo_steps, args.timeout)
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
