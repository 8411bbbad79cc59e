#!/usr/bin/env bash
# agile's LLM side on a CUDA machine, in one command: train SFT, GRPO (colocated and
# asynchronous rollouts), DPO and multi-turn GRPO populations of the tiny model on --device
# cuda, evaluate a GPU-trained run on the CPU, train
# SFT over a quantised base (nf4, int8), time populations at Qwen2.5-0.5B's shape (random
# weights, bf16) together vs one by one, measure adapter memory on the GPU, and train a LoRA
# over a 4- and an 8-bit bitsandbytes base. From the repo root, with agile installed
# (pip install -e ".[llm]" bitsandbytes) and the tiny model made (agile llm tiny-model
# models/tiny-llm): bash benchmarks/llm_gpu.sh. The log is also written to $OUT/log
# (default /tmp/llm-out). It ends within DEADLINE (default 540) seconds.
set -u
export PYTHONUNBUFFERED=1 WANDB_MODE=disabled AGILE_NO_BROWSER=1 TOKENIZERS_PARALLELISM=false HF_HUB_DISABLE_PROGRESS_BARS=1
OUT=${OUT:-/tmp/llm-out}; mkdir -p "$OUT"
W=/tmp/w; Q=/tmp/q05; mkdir -p $W
A="python3 -m agile_cli"
step() { echo; echo "=== $1 ($(date +%T), ${SECONDS}s)"; }
D=${DEADLINE:-540}  # seconds: no command runs past it (each timeout is cut to what is left)
# r TIMEOUT LINES COMMAND...: the command's last LINES lines (less agile's hints, and
# llm_memory.py's closing JSON but its ratio) and its exit status
r() {
  local t=$1 n=$2 left=$((D - SECONDS)); shift 2
  if ((left < 15)); then echo "[skipped: ${D}s deadline]"; return; fi
  ((t > left)) && t=$left
  timeout "$t" "$@" 2>&1 | grep -vE '^  (run folder|evaluate|train longer|report) ' |
    sed -E 's/^\{"rows".*"ratio/{"ratio/' | tail -n "$n"
  echo "[exit ${PIPESTATUS[0]}]"
}

bnb_check() {  # bnb_check 4bit|8bit: LoRA (r 16 on q, k, v, o), 2 AdamW steps, quantised base
cat > /tmp/bnb_check.py <<'PY'
import sys, time, warnings, torch, transformers
from pathlib import Path
warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error(); transformers.logging.disable_progress_bar()
sys.path.insert(0, "benchmarks")
from llm_population import save_random_05b
import bitsandbytes as bnb
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, BitsAndBytesConfig
print(save_random_05b("models/tiny-llm", Path("/tmp/q05"), "cuda"))
mib = lambda: f"{torch.cuda.memory_allocated() / 2**20:,.0f} MiB"
if sys.argv[1] == "4bit":
    quant, kind, dtype = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
        bnb_4bit_compute_dtype=torch.bfloat16), bnb.nn.Linear4bit, torch.bfloat16
else:  # LLM.int8 computes in float16 (bf16 inputs would be cast, with a warning a call)
    quant, kind, dtype = BitsAndBytesConfig(load_in_8bit=True), bnb.nn.Linear8bitLt, torch.float16
torch.cuda.reset_peak_memory_stats()
model = AutoModelForCausalLM.from_pretrained("/tmp/q05", quantization_config=quant,
                                             device_map="cuda", dtype=dtype)
loaded = mib()
lora = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                  lora_dropout=0.0, task_type="CAUSAL_LM")
model = get_peft_model(model, lora)
weights = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.AdamW(weights, lr=1e-3)
ids = torch.randint(4, 99, (16, 64), device="cuda")
for _ in range(2):  # the second step timed
    torch.cuda.synchronize(); started = time.perf_counter()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward(); optimizer.step(); optimizer.zero_grad()
    torch.cuda.synchronize(); seconds = time.perf_counter() - started
q = model.base_model.model.model.layers[0].self_attn.q_proj
layers = [m for m in model.modules() if isinstance(m, kind)]
print(f"{sys.argv[1]} ({dtype}): base loaded {loaded}, after LoRA steps {mib()}, "
      f"peak {torch.cuda.max_memory_allocated() / 2**20:,.0f} MiB; step {seconds * 1000:.1f} ms, "
      f"loss {loss.item():.3f}")
print(f"q_proj base: {type(q.base_layer).__module__}.{type(q.base_layer).__name__} "
      f"(weight {q.base_layer.weight.dtype}); {len(layers)} {kind.__name__} layers; "
      f"LoRA weights {sorted({str(p.dtype) for p in weights})}, {sum(p.numel() for p in weights):,} "
      f"parameters, |lora_B| max {q.lora_B['default'].weight.abs().max().item():.2e}")
PY
r 90 6 python3 /tmp/bnb_check.py "$1"
}

main() {
step "environment"
timeout 20 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
r 60 4 python3 -c "import torch, transformers, peft, accelerate, tokenizers as t; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0)); print('transformers', transformers.__version__, 'peft', peft.__version__, 'accelerate', accelerate.__version__, 'tokenizers', t.__version__)"

step "SFT digits on cuda (1,600 prompts per member, 2 generations)"
r 100 6 $A train configs/training/sft/digits.yaml --device cuda --quiet --run-dir $W/sft --overwrite --set training.max_steps=1600
step "GRPO digits on cuda, colocated rollouts (400 prompts per member, 2 generations)"
r 100 6 $A train configs/training/grpo/digits.yaml --device cuda --quiet --run-dir $W/grpo --overwrite --set training.max_steps=400
step "GRPO digits on cuda, asynchronous rollouts (the same budget; lag 1)"
r 100 6 $A train configs/training/grpo/digits.yaml --device cuda --quiet --run-dir $W/grpo-async --overwrite --set training.max_steps=400 --set training.rollout_mode=async --set training.rollout_engines_per_agent=1 --set replay_buffer.max_rollout_version_lag=1
step "DPO digits on cuda (800 prompts per member, 2 generations)"
r 100 6 $A train configs/training/dpo/digits.yaml --device cuda --quiet --run-dir $W/dpo --overwrite --set training.max_steps=800
step "the GPU-trained GRPO run read back on the CPU"
r 60 7 $A evaluate $W/grpo --device cpu
step "multi-turn GRPO (guess the digit) on cuda, 400 episodes per member"
r 100 6 $A train configs/training/grpo/guess_digit.yaml --device cuda --quiet --run-dir $W/mt --overwrite --set training.max_steps=400
r 60 6 $A evaluate $W/mt --device cuda

step "SFT population at Qwen2.5-0.5B's shape (bf16, random), cuda: together vs one by one"
r 120 6 python3 benchmarks/llm_population.py models/tiny-llm --device cuda --shape 0.5b --shape-dir $Q --algorithm SFT --sizes 1 4 8 --iterations 4 --repeats 1
step "GRPO population at Qwen2.5-0.5B's shape (4 completions of 6 tokens per prompt), cuda"
r 150 6 python3 benchmarks/llm_population.py models/tiny-llm --device cuda --shape 0.5b --shape-dir $Q --algorithm GRPO --sizes 1 4 8 --iterations 2 --repeats 1

for q in nf4 int8; do
  step "agile train SFT over the 0.5B-shape base quantised $q (bitsandbytes), cuda"
  r 90 6 $A train configs/training/sft/digits.yaml --device cuda --quiet --run-dir $W/q$q --overwrite --set network.pretrained_model_name_or_path=$Q --set algorithm.quantization=$q --set training.max_steps=64 --set training.eval_rows=16 --set training.pop_size=2
done
step "adapter memory and step time on the GPU (llm_memory.py; MiB allocated by torch)"
r 100 6 python3 benchmarks/llm_memory.py --device cuda --sizes 1 4 8

if python3 -c "import bitsandbytes" 2>/dev/null; then
  step "bitsandbytes"
  r 60 3 python3 -c "import bitsandbytes; print('bitsandbytes', bitsandbytes.__version__)"
  step "QLoRA: 4-bit NF4 base (bf16 compute) + LoRA, two AdamW steps (16 x 64 tokens)"
  bnb_check 4bit
  step "8-bit base (LLM.int8) + LoRA, two AdamW steps"
  bnb_check 8bit
fi
step "done"
}

set -o pipefail
main 2>&1 | tee "$OUT/log"
