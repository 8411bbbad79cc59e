"""Asynchronous rollouts against colocated ones, on the tiny model: throughput and learning.

    python benchmarks/llm_async.py [--model models/tiny-llm] [--seeds 1 2 3] [--out DIR]

GRPO on the digits example (configs/training/grpo/digits.yaml, population 2), started from the
adapter of a short SFT run as ``benchmarks/llm_benchmark.py`` does, once with
``training.rollout_mode: colocated`` and once with ``async`` (``max_rollout_version_lag: 1``)
per seed: the whole process's wall time and peak memory, training prompts per second, and the
elite's held-out mean reward and accuracy (``agile evaluate``). Measured figures only; the
machine is shared, so compare the ratios of one sitting.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml
from llm_benchmark import CONFIGS, ROOT, agile, train_and_score, variant

MODES = {
    "colocated": {},
    "async": {"training__rollout_mode": "async", "training__rollout_engines_per_agent": 1,
              "replay_buffer__max_rollout_version_lag": 1},
}  # fmt: skip


def sft_adapter(model: Path, out: Path) -> Path:
    """The elite adapter of a short SFT run (exact match about 0.1): GRPO's start."""
    short = variant("sft", out, network__pretrained_model_name_or_path=str(model),
                    training__pop_size=2, training__max_steps=2400)  # fmt: skip
    subprocess.run(agile("train", str(short), "--run-dir", str(out / "run-sft-short"),
                         "--overwrite"), check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    return out / "run-sft-short" / "elite"


def grpo(model: Path, adapter: Path, out: Path, mode: str, seed: int) -> Path:
    """The GRPO example in ``mode`` with ``seed``, from ``adapter``."""
    content = yaml.safe_load((CONFIGS / "grpo" / "digits.yaml").read_text())
    content["network"].update(pretrained_model_name_or_path=str(model), adapter_path=str(adapter))
    content["training"]["pop_size"] = 2
    content["algorithm"]["seed"] = seed
    content["mutation"]["rand_seed"] = seed
    for key, value in MODES[mode].items():
        section, field = key.split("__")
        content.setdefault(section, {})[field] = value
    path = out / f"grpo-{mode}-{seed}.yaml"
    path.write_text(yaml.safe_dump(content))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "tiny-llm")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=None, help="agile train --threads")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="agile-llm-async-"))
    out.mkdir(parents=True, exist_ok=True)
    if not (args.model / "config.json").is_file():
        subprocess.run(agile("llm", "tiny-model", str(args.model)), check=True)
    adapter = sft_adapter(args.model, out)
    results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for seed in args.seeds:
        for mode in MODES:
            path = grpo(args.model, adapter, out, mode, seed)
            threads = [] if args.threads is None else ["--threads", str(args.threads)]
            measured = train_and_score(path, out / f"run-{mode}-{seed}", *threads)
            results[mode].append({"seed": seed, **measured})
            print(mode, seed, json.dumps(measured), flush=True)
    for mode, runs in results.items():
        rates = [run["prompts_per_second"] for run in runs]
        rewards = [run["after"]["mean reward"] for run in runs]
        print(f"{mode}: prompts/s median {statistics.median(rates):.1f}; held-out mean reward "
              f"{' / '.join(f'{r:.3f}' for r in rewards)}")  # fmt: skip
    (out / "llm_async.json").write_text(json.dumps(results, indent=2))
    print(f"written to {out / 'llm_async.json'}")


if __name__ == "__main__":
    main()
