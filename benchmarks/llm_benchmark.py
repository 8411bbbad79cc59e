"""LLM fine-tuning on the tiny local model: what SFT, DPO and GRPO learn, how long they take,
and how much memory a population of adapters needs.

    python benchmarks/llm_benchmark.py [--model models/tiny-llm] [--pop 2] [--out DIR]

For each of the example manifests (configs/training/{sft,dpo,grpo}/digits.yaml, with the
population size given), it scores fresh members on the held-out split, trains with
``agile train`` in a child process (whole-process wall time and peak memory), and scores the
elite with ``agile evaluate``. GRPO starts from the adapter of a short SFT run (a partly
trained model), as fine-tuning with rewards usually does. It then times generation and
updates in tokens per second, and compares the peak memory of populations of 1 and 4.
Measured figures only; the machine is shared, so compare ratios.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs" / "training"
CHILD = (
    "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
    "stdout=subprocess.DEVNULL); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def agile(*args: str) -> list[str]:
    return [sys.executable, "-m", "agile_cli.cli", *args]


def measured(command: list[str]) -> tuple[float, float]:
    """Whole-process wall seconds and peak resident MiB of ``command``."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, *command], capture_output=True,
                          text=True, check=True)  # fmt: skip
    return time.perf_counter() - started, int(done.stdout.split()[-1]) / 1024


def evaluated(run_dir: Path) -> dict[str, float]:
    """The held-out metrics ``agile evaluate`` prints for a run's elite."""
    shown = subprocess.run(agile("evaluate", str(run_dir)), capture_output=True, text=True,
                           check=True).stdout  # fmt: skip
    return {name: float(value) for name, value in
            re.findall(r"^([a-z -]+): ([-0-9.e]+)$", shown, re.MULTILINE)}  # fmt: skip


def fresh_scores(manifest_path: Path) -> dict[str, float]:
    """The held-out metrics of an untrained member (its adapter starts as the identity)."""
    import torch

    from agile_cli import TrainingManifest
    from agile_cli.helpers import installed_registry
    from agile_cli.training import setup
    from agile_rl.runtime.agent import AgentContext

    registry = installed_registry()
    manifest = TrainingManifest.get_validated(manifest_path, registry=registry)
    env = setup.build_environment(manifest, registry, seed=0)
    context = AgentContext(torch.device("cpu"), 1, manifest.training)
    cls = setup.algorithm_class(manifest, registry)
    member = setup.build_population(manifest, cls, env, context, size=1)[0]
    runner = setup.build_runner(manifest, env, None)
    runner.evaluate_population([member], 1, None)
    return runner.last[member.index].metrics


def variant(name: str, out: Path, **changes: Any) -> Path:
    """An example manifest with some fields changed (``section__field=value``)."""
    content = yaml.safe_load((CONFIGS / name / "digits.yaml").read_text())
    for key, value in changes.items():
        section, field = key.split("__")
        content[section][field] = value
    path = out / f"{name}-{abs(hash(tuple(sorted(changes.items())))) % 10**6}.yaml"
    path.write_text(yaml.safe_dump(content))
    return path


def train_and_score(path: Path, run_dir: Path, *options: str) -> dict[str, Any]:
    """Held-out scores before and after ``agile train`` (with ``options``), its time and
    memory."""
    before = fresh_scores(path)
    command = agile("train", str(path), "--run-dir", str(run_dir), "--overwrite", *options)
    seconds, mib = measured(command)
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"before": before, "after": evaluated(run_dir), "process_seconds": round(seconds, 1),
            "training_seconds": summary["wall_seconds"], "peak_mib": round(mib),
            "prompts_per_second": summary["steps_per_second"]}  # fmt: skip


def throughput(path: Path) -> dict[str, float]:
    """Tokens per second of sampling completions and of SFT updates, one member."""
    import torch

    from agile_cli import TrainingManifest
    from agile_cli.helpers import installed_registry
    from agile_cli.training import setup
    from agile_rl.runtime.agent import AgentContext

    registry = installed_registry()
    manifest = TrainingManifest.get_validated(path, registry=registry)
    env = setup.build_environment(manifest, registry, seed=0)
    member = setup.build_population(manifest, setup.algorithm_class(manifest, registry), env,
                                    AgentContext(torch.device("cpu"), 1, manifest.training),
                                    size=1)[0]  # fmt: skip
    rows = env.rows_at(0, 64)
    prompts = member.prompt_ids(member.render_prompts(rows, env))
    started = time.perf_counter()
    done = member.complete(prompts, explore=True)
    generated = int(done.completion.sum())
    sampling = generated / (time.perf_counter() - started)
    batch = member.sequences(rows, env)  # the SFT member's training rows
    started = time.perf_counter()
    for start in range(0, 64, 16):
        member.train_step(rows[start : start + 16], env)
    updating = int(batch.mask.sum()) / (time.perf_counter() - started)
    return {"sampling_tokens_per_second": round(sampling), "update_tokens_per_second":
            round(updating)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "tiny-llm")
    parser.add_argument("--pop", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="agile-llm-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    if not (args.model / "config.json").is_file():
        subprocess.run(agile("llm", "tiny-model", str(args.model)), check=True)
    model = {"network__pretrained_model_name_or_path": str(args.model)}
    pop = {"training__pop_size": args.pop}
    results: dict[str, Any] = {}
    for name in ("sft", "dpo"):
        path = variant(name, out, **model, **pop)
        results[name.upper()] = train_and_score(path, out / f"run-{name}")
        print(name.upper(), json.dumps(results[name.upper()]), flush=True)
    short = variant("sft", out, **model, **pop, training__max_steps=2400)
    subprocess.run(agile("train", str(short), "--run-dir", str(out / "run-sft-short"),
                         "--overwrite"), check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    network = yaml.safe_load((CONFIGS / "grpo" / "digits.yaml").read_text())["network"]
    network.update(pretrained_model_name_or_path=str(args.model),
                   adapter_path=str(out / "run-sft-short" / "elite"))  # fmt: skip
    grpo = variant("grpo", out, **pop, network__adapter_path=network["adapter_path"],
                   **model)  # fmt: skip
    results["GRPO (from a short SFT)"] = train_and_score(grpo, out / "run-grpo")
    print("GRPO", json.dumps(results["GRPO (from a short SFT)"]), flush=True)
    memory = {}
    for size in (1, 4):
        path = variant("sft", out, **model, training__pop_size=size, training__max_steps=320)
        memory[f"pop {size}"] = round(measured(agile("train", str(path), "--run-dir",
                                      str(out / f"run-mem-{size}"), "--overwrite"))[1])  # fmt: skip
    results["peak_mib_sft"] = memory
    results["throughput"] = throughput(variant("sft", out, **model, training__pop_size=1))
    print(json.dumps(results, indent=2))
    (out / "llm_benchmark.json").write_text(json.dumps(results, indent=2))
    print(f"written to {out / 'llm_benchmark.json'}")


if __name__ == "__main__":
    main()
