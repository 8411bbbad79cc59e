"""Training throughput of an SFT, DPO, GRPO or LLMPPO population of LoRA adapters: together (one
generation call, one forward and one backward pass of the base for every member's batch)
against one by one (``--per-member``).

    python benchmarks/llm_population.py MODEL_DIR [--algorithm SFT|DPO|GRPO|LLMPPO] [--sizes 1 4 8]
                                        [--iterations 20] [--batch 16] [--repeats 3]
                                        [--device cpu|cuda] [--shape model|0.5b]
                                        [--shape-dir DIR] [--rollouts colocated|async]
                                        [--env digits|calculator]

MODEL_DIR is a local causal LM (``agile llm tiny-model models/tiny-llm`` makes one). Each
measurement runs in a fresh process: the population is built as ``agile train`` builds it on
``configs/training/llm/digits.jsonl``, one warm-up iteration is taken, then ``--iterations``
iterations of ``--batch`` prompts per member are timed; the line gives prompts per second
(the whole population's; GRPO samples 4 completions of each), the median of ``--repeats``
processes, and the peak resident memory.

``--rollouts async`` trains GRPO with asynchronous rollouts (a copy of the model samples the
next iteration in a thread; staleness 1). ``--env calculator`` trains GRPO on the tool-calling
game's episodes (configs/training/llm/calculator_env.py: a tool call, its result, an answer;
``--batch`` counts episodes).

``--device cuda`` puts the model on the GPU (torch keeps its own thread count there; on the
CPU the process uses one thread), waits for the GPU before reading each timer, and reports
the peak GPU memory torch allocated (``torch.cuda.max_memory_allocated``) instead of the
resident memory. ``--shape 0.5b`` trains, instead of MODEL_DIR's weights, a randomly
initialised model with the shapes of Qwen2.5-0.5B (hidden 896, 24 layers, 14 heads, 2
key-value heads, vocabulary 151,936, tied embeddings: 494M parameters; bfloat16 on cuda,
float32 on the CPU) with MODEL_DIR's tokenizer, so nothing is downloaded. It is saved once,
before the measurements, into ``--shape-dir`` (default: a temporary folder, deleted after),
where a later run for the same device finds and reuses it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, resource, sys, time, torch
from agile_cli import TrainingManifest
from agile_cli.helpers import installed_registry
from agile_rl.runtime.agent import AgentContext
from agile_cli.training import setup
model, together, name = sys.argv[1], sys.argv[5] == "1", sys.argv[6]
size, iterations, batch = (int(value) for value in sys.argv[2:5])
device = setup.resolve_device(sys.argv[7])
asynchronous = sys.argv[8] == "async"
calculator = sys.argv[9] == "calculator"
cuda = device.type == "cuda"
if not cuda:
    torch.set_num_threads(1)
algorithm = {"name": name, "batch_size": batch, "lr": 0.005, "gradient_checkpointing": False}
environment = {"dataset": "configs/training/llm/digits.jsonl"}
if name == "SFT":
    environment["response_column"] = "answer"
if name in ("GRPO", "LLMPPO"):
    algorithm.update(max_output_tokens=6, temperature=1.0)
    if name == "GRPO":
        algorithm["group_size"] = 4
    else:
        algorithm["lr_actor"] = algorithm.pop("lr")
    environment.update(prompt_template={"user_0": "{question}="}, max_reward=1.0,
                       rubric_file_path="configs/training/llm/digits_reward.py",
                       rubric_name="digits_reward")
context_length = 32
if calculator:  # the tool-calling game: episodes of a call, the tool's result, an answer
    environment = {"env_type": "rollout", "max_turns": 2, "answer_tool": "answer",
                   "entrypoint": "configs/training/llm/calculator_env.py:Calculator",
                   "max_reward": 1.0}
    algorithm.update(max_output_tokens=72, temperature=0.6)
    context_length = 160
content = {
    "algorithm": algorithm,
    "environment": environment,
    "training": {"max_steps": 10**6, "evo_steps": 10, "pop_size": size},
    "replay_buffer": {"kind": "llm", "max_rollout_version_lag": 1},
    "network": {"pretrained_model_name_or_path": model, "max_context_length": context_length,
                "lora_config": {"lora_r": 8, "lora_alpha": 16, "target_modules": "all-linear",
                                "lora_dropout": 0.0}},
}
if asynchronous:
    content["training"].update(rollout_mode="async", rollout_engines_per_agent=1)
def clock():
    if cuda:
        torch.cuda.synchronize(device)
    return time.perf_counter()
registry = installed_registry()
manifest = TrainingManifest.get_validated(content, registry=registry)
env = setup.build_environment(manifest, registry, seed=0)
context = AgentContext(device, 1, manifest.training)
members = setup.build_population(manifest, setup.algorithm_class(manifest, registry), env, context)
runner = setup.build_runner(manifest, env, None)
runner.stack = together
runner.train_population(members, batch, lambda n: None)  # warm-up
started = clock()
runner.train_population(members, batch * iterations, lambda n: None)
seconds = clock() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
gpu = torch.cuda.max_memory_allocated(device) / 2**20 if cuda else None
print(json.dumps({"prompts_per_second": size * batch * iterations / seconds, "peak_mib": peak,
                  "gpu_peak_mib": gpu}))
"""

#: Writes a randomly initialised model of Qwen2.5-0.5B's shapes with the tokenizer of argv[1]
#: into argv[2], in bfloat16 on cuda and float32 on the CPU (argv[3]).
MAKE = r"""
import sys, torch
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
source, folder, device = sys.argv[1:4]
tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
dtype = torch.bfloat16 if device == "cuda" else torch.float32
config = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                     num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                     max_position_embeddings=32768, tie_word_embeddings=True,
                     bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                     pad_token_id=tokenizer.pad_token_id)
torch.manual_seed(0)
torch.set_default_dtype(dtype)
with torch.device(device):
    model = Qwen2ForCausalLM(config)
model.save_pretrained(folder)
tokenizer.save_pretrained(folder)
print(sum(p.numel() for p in model.parameters()), model.dtype)
"""


def run_child(args: list[str]) -> str:
    """The last line a child printed; its error output and an exit when it failed."""
    done = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        sys.stderr.write("".join(done.stderr.splitlines(keepends=True)[-25:]))
        raise SystemExit(f"a child process failed with status {done.returncode}")
    return done.stdout.strip().splitlines()[-1]


def save_random_05b(model: str, folder: Path, device: str) -> str:
    """Save, unless ``folder`` already holds one for ``device``, a random model of
    Qwen2.5-0.5B's shapes with ``model``'s tokenizer; returns what was done."""
    dtype = "bfloat16" if device == "cuda" else "float32"
    config = folder / "config.json"
    if config.is_file() and json.loads(config.read_text()).get("dtype") == dtype:
        return f"reusing the random Qwen2.5-0.5B-shaped model ({dtype}) in {folder}"
    folder.mkdir(parents=True, exist_ok=True)
    made = run_child([sys.executable, "-c", MAKE, model, str(folder), device]).split()
    size = f"{int(made[0]):,} parameters, {dtype}"
    return f"saved a random Qwen2.5-0.5B-shaped model ({size}) in {folder}"


def measure(
    model: str,
    name: str,
    size: int,
    iterations: int,
    batch: int,
    together: bool,
    device: str,
    rollouts: str = "colocated",
    env: str = "digits",
) -> dict:
    args = [sys.executable, "-c", CHILD, model, str(size), str(iterations), str(batch),
            "1" if together else "0", name, device, rollouts, env]  # fmt: skip
    return json.loads(run_child(args))


def table(args: argparse.Namespace, model: str) -> None:
    """One line per population size: one by one, together, and the speed-up."""
    memory = "gpu_peak_mib" if args.device == "cuda" else "peak_mib"
    unit = "GPU MiB" if args.device == "cuda" else "MiB"
    print(f"pop  one by one (prompts/s, {unit})  together (prompts/s, {unit})  speed-up")
    for size in args.sizes:
        row = {}
        for together in (False, True):
            runs = [measure(model, args.algorithm, size, args.iterations, args.batch, together,
                            args.device, args.rollouts, args.env)
                    for _ in range(args.repeats)]  # fmt: skip
            row[together] = (statistics.median(r["prompts_per_second"] for r in runs),
                             max(r[memory] for r in runs))  # fmt: skip
        (alone, alone_mib), (joint, joint_mib) = row[False], row[True]
        print(f"{size:>3}  {alone:>12,.0f} {alone_mib:>10,.0f}       "
              f"{joint:>12,.0f} {joint_mib:>10,.0f}      {joint / alone:.2f}x")  # fmt: skip
        sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--algorithm", choices=["SFT", "DPO", "GRPO", "LLMPPO"], default="SFT")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--rollouts", choices=["colocated", "async"], default="colocated",
                        help="GRPO: training.rollout_mode")  # fmt: skip
    parser.add_argument("--env", choices=["digits", "calculator"], default="digits",
                        help="GRPO: the digits rows, or the tool game's episodes")  # fmt: skip
    parser.add_argument("--shape", choices=["model", "0.5b"], default="model")
    parser.add_argument("--shape-dir", type=Path, help="where --shape 0.5b keeps its model")
    args = parser.parse_args(argv)
    if args.shape == "model":
        table(args, args.model)
        return 0
    with tempfile.TemporaryDirectory(prefix="agile-0.5b-") as scratch:
        folder = (args.shape_dir or Path(scratch)).resolve()
        print(save_random_05b(args.model, folder, args.device), flush=True)
        table(args, str(folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
