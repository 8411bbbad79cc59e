"""The tool-calling example, measured: what the tiny model wins in the calculator game
(configs/training/llm/calculator_env.py) before fine-tuning, after the SFT stage and after the
GRPO stage, and how long each stage takes.

    python benchmarks/llm_tools.py [--out DIR] [--sft-steps N] [--grpo-steps N]

Run from the repository root after ``agile llm tiny-model models/tiny-llm``. Each stage is the
example manifest as the README runs it (configs/training/sft/calculator_tools.yaml, then
configs/training/grpo/calculator_tools.yaml from the SFT run's elite), trained by ``agile
train`` in a child process (whole-process wall time and peak memory). The game's held-out
episodes (greedy) score the base model and the SFT adapter before GRPO trains, and ``agile
evaluate`` scores GRPO's elite. Measured figures only.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import yaml
from llm_benchmark import CONFIGS, agile, evaluated, fresh_scores, measured

SFT = CONFIGS / "sft" / "calculator_tools.yaml"
GRPO = CONFIGS / "grpo" / "calculator_tools.yaml"


def changed(path: Path, out: Path, name: str, **fields: Any) -> Path:
    """A copy of the manifest at ``path`` with ``section__field=value`` changes."""
    content = yaml.safe_load(path.read_text())
    for key, value in fields.items():
        section, field = key.split("__")
        content[section][field] = value
    target = out / name
    target.write_text(yaml.safe_dump(content))
    return target


def stage(manifest: Path, run_dir: Path) -> dict[str, Any]:
    """Train ``manifest`` into ``run_dir``: its time, memory and throughput."""
    seconds, mib = measured(agile("train", str(manifest), "--run-dir", str(run_dir), "--overwrite"))
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"process_seconds": round(seconds, 1), "peak_mib": round(mib),
            "steps_per_second": summary["steps_per_second"]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="where the runs go")
    parser.add_argument("--sft-steps", type=int, default=None, help="SFT's training.max_steps")
    parser.add_argument("--grpo-steps", type=int, default=None, help="GRPO's training.max_steps")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="agile-llm-tools-"))
    out.mkdir(parents=True, exist_ok=True)
    sft_steps = {"training__max_steps": args.sft_steps} if args.sft_steps else {}
    grpo_steps = {"training__max_steps": args.grpo_steps} if args.grpo_steps else {}
    sft = changed(SFT, out, "sft.yaml", **sft_steps)
    elite = str(out / "run-sft" / "elite")
    grpo = changed(GRPO, out, "grpo.yaml", network__adapter_path=elite, **grpo_steps)
    base = changed(GRPO, out, "base.yaml", network__adapter_path=None)
    results: dict[str, Any] = {"base model": fresh_scores(base)}
    print("base", json.dumps(results["base model"]), flush=True)
    results["SFT stage"] = stage(sft, out / "run-sft")
    results["after SFT"] = fresh_scores(grpo)
    print("SFT", json.dumps(results["SFT stage"]), json.dumps(results["after SFT"]), flush=True)
    results["GRPO stage"] = stage(grpo, out / "run-grpo")
    results["after GRPO"] = evaluated(out / "run-grpo")
    print("GRPO", json.dumps(results["GRPO stage"]), json.dumps(results["after GRPO"]), flush=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
