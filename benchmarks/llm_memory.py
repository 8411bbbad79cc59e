"""Peak memory of a population of LoRA adapters over one base model of a real size.

    python benchmarks/llm_memory.py [--sizes 1 4] [--layers 24]

Builds, at random (nothing is downloaded), a causal LM with the shapes of Qwen2.5-0.5B
(hidden 896, 24 layers, 14 heads, vocabulary 151,936: 494M parameters, float32), adds N
adapters the way agile's population does (rank 16 on q, k, v and o, AdamW over each), takes
one gradient step with each (so gradients and both AdamW moments exist), and reports, in a
fresh process per N, the resident memory with the base model alone (after one forward pass),
with the N trained adapters, and the peak (which model construction sets); then the time of
one population step (a batch of 2 x 32 tokens per member; the mean of 2 after a warm-up) one
adapter after another, and together (every member's rows in one forward and backward pass,
each through its adapter).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import resource, sys, torch
from transformers import Qwen2Config, Qwen2ForCausalLM
sys.path.insert(0, "plugins")
from agile_llm.adapters import AdapterPopulation
size, layers = int(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
config = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                     num_hidden_layers=layers, num_attention_heads=14, num_key_value_heads=2,
                     tie_word_embeddings=True)
model = Qwen2ForCausalLM(config).eval().requires_grad_(False)
base = sum(p.numel() for p in model.parameters())
def resident():
    with open("/proc/self/status") as status:
        line = next(l for l in status if l.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024
ids = torch.randint(0, 151936, (2, 32))
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
import time
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
            part = logits[k * ids.shape[0] : (k + 1) * ids.shape[0], :-1]
            total = total + torch.nn.functional.cross_entropy(
                part.reshape(-1, part.shape[-1]), ids[:, 1:].reshape(-1))
        total.backward()
    for optimizer in optimizers:
        optimizer.step()
        optimizer.zero_grad()
seconds = []
for step in (one_by_one, together):
    step()  # warm-up: the allocator and the pages of a batch this size
    started = time.perf_counter()
    for _ in range(2):
        step()
    seconds.append((time.perf_counter() - started) / 2)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(size, base, adapter, round(alone), round(trained), round(peak),
      *(round(t, 3) for t in seconds))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--layers", type=int, default=24)
    args = parser.parse_args()
    rows = {}
    for size in args.sizes:
        out = subprocess.run([sys.executable, "-c", CHILD, str(size), str(args.layers)],
                             capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
        _, base, adapter, alone, trained, peak, one_by_one, together = out[-8:]
        rows[size] = {"base_parameters": int(base), "adapter_parameters": int(adapter),
                      "base_alone_mib": float(alone), "with_adapters_mib": float(trained),
                      "peak_mib": float(peak), "step_one_by_one_s": float(one_by_one),
                      "step_together_s": float(together)}  # fmt: skip
        print(size, rows[size], flush=True)
    first, last = min(rows), max(rows)
    ratio = rows[last]["with_adapters_mib"] / rows[first]["with_adapters_mib"]
    print(json.dumps({"rows": rows, f"ratio pop {last} / pop {first}": round(ratio, 3)}))


if __name__ == "__main__":
    main()
