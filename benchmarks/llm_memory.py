"""Peak memory of a population of LoRA adapters over one base model of a real size.

    python benchmarks/llm_memory.py [--sizes 1 4] [--layers 24] [--device cpu|cuda]

Builds, at random (nothing is downloaded), a causal LM with the shapes of Qwen2.5-0.5B
(hidden 896, 24 layers, 14 heads, vocabulary 151,936: 494M parameters, float32), adds N
adapters the way agile's population does (rank 16 on q, k, v and o, AdamW over each), takes
one gradient step with each (so gradients and both AdamW moments exist), and reports, in a
fresh process per N, the resident memory with the base model alone (after one forward pass),
with the N trained adapters, and the peak (which model construction sets); then the time of
one population step (a batch of 2 x 32 tokens per member; the mean of 2 after a warm-up) one
adapter after another, and together (every member's rows in one forward and backward pass,
each through its adapter).

``--device cuda`` builds the base in bfloat16 on the GPU and reports, instead of resident
memory, the GPU memory torch holds (``torch.cuda.memory_allocated``: base alone, with the
adapters) and its peak (``torch.cuda.max_memory_allocated``), in MiB, with the dtypes of the
base and of the adapters' weights; a step's time there is the mean of 10 after a warm-up,
read after waiting for the GPU.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time, torch
from transformers import Qwen2Config, Qwen2ForCausalLM
sys.path.insert(0, "plugins")
from agile_llm.adapters import AdapterPopulation
size, layers, device = int(sys.argv[1]), int(sys.argv[2]), torch.device(sys.argv[3])
cuda = device.type == "cuda"
torch.manual_seed(0)
config = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                     num_hidden_layers=layers, num_attention_heads=14, num_key_value_heads=2,
                     tie_word_embeddings=True)
torch.set_default_dtype(torch.bfloat16 if cuda else torch.float32)
with device:
    model = Qwen2ForCausalLM(config).eval().requires_grad_(False)
torch.set_default_dtype(torch.float32)
base = sum(p.numel() for p in model.parameters())
def resident():
    if cuda:
        return torch.cuda.memory_allocated(device) / 2**20
    with open("/proc/self/status") as status:
        line = next(l for l in status if l.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024
def clock():
    if cuda:
        torch.cuda.synchronize(device)
    return time.perf_counter()
ids = torch.randint(0, 151936, (2, 32), device=device)
model(input_ids=ids)  # the base's own working memory, before any adapter
alone = resident()
lora = {"r": 16, "lora_alpha": 32, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
        "lora_dropout": 0.0}
names = [f"member_{i}" for i in range(size)]
population = AdapterPopulation(model, lora, names)
for name in names:
    population.activate(name)
    weights = list(population.adapter_parameters(name).values())
    optimizer = torch.optim.AdamW(weights, lr=1e-4)
    population.model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    population.__dict__.setdefault("_keep", []).append(optimizer)
adapter = sum(p.numel() for p in population.adapter_parameters(names[0]).values())
trained = resident()
optimizers = population.__dict__["_keep"]
def one_by_one():
    for name, optimizer in zip(names, optimizers):
        population.activate(name)
        population.model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
def together():
    rows = [name for name in names for _ in range(ids.shape[0])]
    with population.mixed(rows):
        logits = population.model(input_ids=ids.repeat(size, 1)).logits
        total = 0
        for k in range(size):
            part = logits[k * ids.shape[0] : (k + 1) * ids.shape[0], :-1].float()
            total = total + torch.nn.functional.cross_entropy(
                part.reshape(-1, part.shape[-1]), ids[:, 1:].reshape(-1))
        total.backward()
    for optimizer in optimizers:
        optimizer.step()
        optimizer.zero_grad()
repeats = 10 if cuda else 2
seconds = []
for step in (one_by_one, together):
    step()  # warm-up: the allocator and the pages of a batch this size
    started = clock()
    for _ in range(repeats):
        step()
    seconds.append((clock() - started) / repeats)
if cuda:
    peak = torch.cuda.max_memory_allocated(device) / 2**20
else:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
lora_dtype = next(iter(population.adapter_parameters(names[0]).values())).dtype
print(json.dumps({"size": size, "base": base, "adapter": adapter, "alone": round(alone),
                  "trained": round(trained), "peak": round(peak),
                  "seconds": [round(t, 5 if cuda else 3) for t in seconds],
                  "base_dtype": str(model.dtype), "adapter_dtype": str(lora_dtype)}))
"""


def measure(size: int, layers: int, device: str) -> dict:
    """One fresh process's row for a population of ``size``."""
    args = [sys.executable, "-c", CHILD, str(size), str(layers), device]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write("".join(done.stderr.splitlines(keepends=True)[-25:]))
        raise SystemExit(f"the process for {size} adapters failed with status {done.returncode}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if device == "cuda":
        return {"base_parameters": out["base"], "adapter_parameters": out["adapter"],
                "base_alone_gpu_mib": float(out["alone"]),
                "with_adapters_gpu_mib": float(out["trained"]),
                "gpu_peak_mib": float(out["peak"]), "step_one_by_one_s": out["seconds"][0],
                "step_together_s": out["seconds"][1], "base_dtype": out["base_dtype"],
                "adapter_dtype": out["adapter_dtype"]}  # fmt: skip
    return {"base_parameters": out["base"], "adapter_parameters": out["adapter"],
            "base_alone_mib": float(out["alone"]), "with_adapters_mib": float(out["trained"]),
            "peak_mib": float(out["peak"]), "step_one_by_one_s": out["seconds"][0],
            "step_together_s": out["seconds"][1]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    rows = {}
    for size in args.sizes:
        rows[size] = measure(size, args.layers, args.device)
        print(size, rows[size], flush=True)
    first, last = min(rows), max(rows)
    key = "with_adapters_gpu_mib" if args.device == "cuda" else "with_adapters_mib"
    ratio = rows[last][key] / rows[first][key]
    print(json.dumps({"rows": rows, f"ratio pop {last} / pop {first}": round(ratio, 3)}))


if __name__ == "__main__":
    main()
