#!/usr/bin/env bash
# The real-workload suite with --device cuda, in one command, for whenever a GPU is at hand (CI
# never runs it): the reference's TD3 manifest on HalfCheetah-v5 and its PPO image manifest on
# Breakout (raw frames), the shipped Atari and MuJoCo manifests for a short budget each, every
# one on cuda and then on the CPU in the same sitting.
# From the repo root, with agile installed with the atari and mujoco extras
# (pip install -e ".[atari,mujoco]"): bash benchmarks/gpu.sh. Each run's figures come from its
# run folder's summary.json; the log is also written to $OUT/log (default /tmp/gpu-out). No
# command runs past DEADLINE (default 540) seconds.
set -u
export PYTHONUNBUFFERED=1 WANDB_MODE=disabled AGILE_NO_BROWSER=1
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
D=${DEADLINE:-540}
exec > >(tee "$OUT/log") 2>&1
step() { echo; echo "=== $1 ($(date +%T), ${SECONDS}s)"; }

# run NAME DEVICE TIMEOUT MANIFEST [agile train options...]: one training run, then its speed
run() {
  local name=$1 device=$2 t=$3 manifest=$4 left=$((D - SECONDS)); shift 4
  if ((left < 20)); then echo "$name $device: [skipped: ${D}s deadline]"; return; fi
  ((t > left)) && t=$left
  rm -rf "$OUT/$name-$device"
  /usr/bin/time -f "%e s wall, %M KB peak" timeout "$t" python3 -m agile_cli train "$manifest" \
    --quiet --seed 1 --device "$device" --run-dir "$OUT/$name-$device" "$@" 2>&1 | tail -n 1
  python3 - "$OUT/$name-$device/summary.json" "$name $device" <<'PY'
import json, sys
try:
    summary = json.load(open(sys.argv[1]))
except OSError:
    sys.exit(print(f"{sys.argv[2]}: no summary (stopped, or failed: see above)"))
print(f"{sys.argv[2]}: {summary['steps_per_second']:,.0f} env steps/s, "
      f"{summary['global_steps']:,} steps in {summary['wall_seconds']:.1f} s")
PY
}

step "machine"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"

step "the stacked update, eager and compiled (--compile on), TD3 HalfCheetah, on cuda"
t=$((D - SECONDS < 150 ? D - SECONDS : 150))
timeout "$t" python3 benchmarks/update_floor.py configs/training/td3/halfcheetah.yaml \
  --device cuda --compile --populations 4 16 --updates 20 --repeats 3 2>&1 | grep -v -i warn

for device in cuda cpu; do
  step "reference TD3 manifest, HalfCheetah-v5, 10,000 steps per member ($device)"
  run td3-halfcheetah "$device" 240 benchmarks/workloads/td3_halfcheetah.yaml
  step "reference PPO image manifest, Breakout raw frames, 1,000 steps per member ($device)"
  run ppo-breakout-raw "$device" 240 benchmarks/workloads/ppo_breakout.yaml
  step "shipped PPO Breakout (atari preprocessing), 4,096 steps per member ($device)"
  run ppo-breakout "$device" 180 configs/training/ppo/breakout.yaml \
    --set training.max_steps=4096 --set training.evo_steps=4096 --set training.eval_steps=500
  step "shipped SAC HalfCheetah, 5,000 steps per member ($device)"
  run sac-halfcheetah "$device" 180 configs/training/sac/halfcheetah.yaml \
    --set training.max_steps=5000 --set training.evo_steps=5000 --set training.learning_delay=1000
done
echo; echo "done in ${SECONDS}s"
