"""Peak memory of a population of LoRA adapters over one base model of a real size.

    python benchmarks/llm_memory.py [--sizes 1 4] [--layers 24]

Builds, at random (nothing is downloaded), a causal LM with the shapes of Qwen2.5-0.5B
(hidden 896, 24 layers, 14 heads, vocabulary 151,936: 494M parameters, float32), adds N
adapters the way agile's population does (rank 16 on q, k, v and o, AdamW over each), takes
one gradient step with each (so gradients and both AdamW moments exist), and reports, in a
fresh process per N, the resident memory with the base model alone (after one forward pass),
with the N trained adapters, and the peak (which model construction sets).
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
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{size} {base} {adapter} {alone:.0f} {resident():.0f} {peak:.0f}")
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
        _, base, adapter, alone, trained, peak = out[-6:]
        rows[size] = {"base_parameters": int(base), "adapter_parameters": int(adapter),
                      "base_alone_mib": float(alone), "with_adapters_mib": float(trained),
                      "peak_mib": float(peak)}  # fmt: skip
        print(size, rows[size], flush=True)
    first, last = min(rows), max(rows)
    ratio = rows[last]["with_adapters_mib"] / rows[first]["with_adapters_mib"]
    print(json.dumps({"rows": rows, f"ratio pop {last} / pop {first}": round(ratio, 3)}))


if __name__ == "__main__":
    main()
