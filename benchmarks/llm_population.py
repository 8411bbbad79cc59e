"""Training throughput of an SFT, DPO or GRPO population of LoRA adapters: together (one
generation call, one forward and one backward pass of the base for every member's batch)
against one by one (``--per-member``).

    python benchmarks/llm_population.py MODEL_DIR [--algorithm SFT|DPO|GRPO] [--sizes 1 4 8]
                                        [--iterations 20] [--batch 16] [--repeats 3]

MODEL_DIR is a local causal LM (``agile llm tiny-model models/tiny-llm`` makes one). Each
measurement runs in a fresh process: the population is built as ``agile train`` builds it on
``configs/training/llm/digits.jsonl``, one warm-up iteration is taken, then ``--iterations``
iterations of ``--batch`` prompts per member are timed; the line gives prompts per second
(the whole population's; GRPO samples 4 completions of each), the median of ``--repeats``
processes, and the peak resident memory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, resource, sys, time, torch
from agile_cli import TrainingManifest, installed_registry
from agile_cli.runtime.agent import AgentContext
from agile_cli.training import setup
model, together, name = sys.argv[1], sys.argv[5] == "1", sys.argv[6]
size, iterations, batch = (int(value) for value in sys.argv[2:5])
torch.set_num_threads(1)
algorithm = {"name": name, "batch_size": batch, "lr": 0.005, "gradient_checkpointing": False}
environment = {"dataset": "configs/training/llm/digits.jsonl"}
if name == "SFT":
    environment["response_column"] = "answer"
if name == "GRPO":
    algorithm.update(group_size=4, max_output_tokens=6, temperature=1.0)
    environment.update(prompt_template={"user_0": "{question}="}, max_reward=1.0,
                       reward_file_path="configs/training/llm/digits_reward.py",
                       reward_fn_name="digits_reward")
content = {
    "algorithm": algorithm,
    "environment": environment,
    "training": {"max_steps": 10**6, "evo_steps": 10, "pop_size": size},
    "network": {"pretrained_model_name_or_path": model, "max_context_length": 32,
                "lora_config": {"lora_r": 8, "lora_alpha": 16, "target_modules": "all-linear",
                                "lora_dropout": 0.0}},
}
registry = installed_registry()
manifest = TrainingManifest.get_validated(content, registry=registry)
env = setup.build_environment(manifest, registry, seed=0)
context = AgentContext(torch.device("cpu"), 1, manifest.training)
members = setup.build_population(manifest, setup.algorithm_class(manifest, registry), env, context)
runner = setup.build_runner(manifest, env, None)
runner.together = together
runner.train_population(members, batch, lambda n: None)  # warm-up
started = time.perf_counter()
runner.train_population(members, batch * iterations, lambda n: None)
seconds = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"prompts_per_second": size * batch * iterations / seconds, "peak_mib": peak}))
"""


def measure(model: str, name: str, size: int, iterations: int, batch: int, together: bool) -> dict:
    args = [sys.executable, "-c", CHILD, model, str(size), str(iterations), str(batch),
            "1" if together else "0", name]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--algorithm", choices=["SFT", "DPO", "GRPO"], default="SFT")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    print("pop  one by one (prompts/s, MiB)  together (prompts/s, MiB)  speed-up")
    for size in args.sizes:
        row = {}
        for together in (False, True):
            runs = [measure(args.model, args.algorithm, size, args.iterations, args.batch, together)
                    for _ in range(args.repeats)]  # fmt: skip
            row[together] = (statistics.median(r["prompts_per_second"] for r in runs),
                             max(r["peak_mib"] for r in runs))  # fmt: skip
        (alone, alone_mib), (joint, joint_mib) = row[False], row[True]
        print(f"{size:>3}  {alone:>12,.0f} {alone_mib:>10,.0f}       "
              f"{joint:>12,.0f} {joint_mib:>10,.0f}      {joint / alone:.2f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
