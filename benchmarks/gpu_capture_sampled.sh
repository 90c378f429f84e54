#!/usr/bin/env bash
# The GPU capture-overhead run of docs/capture.md "Overhead" (sampled layer rows, --layer-every K): on one GPU,
# ResNet-50 batch 32 and ResNet-18 batch 128 at 224x224, one rank; plain DDP, torch's allreduce_hook (ResNet-50)
# and ddlsim's capture with K = 1, 10, 25, 1000 (ResNet-18: 1, 10) as copies of one process in ABBA order (same
# load); ResNet-50 twice (the spread); with HOOK_COST=1 also the per-layer hook cost microbenchmark on the GPU.
# Writes under ${OUT:-out}/: overhead.log (all output, the device first, a summary table last), r50-a.json,
# r50-b.json, r18.json (hook-cost.json). About 2 minutes on an H100 (each step has its own timeout).
#   PYTHONPATH=$PWD/python OUT=/tmp/out bash benchmarks/gpu_capture_sampled.sh
set -u
out=${OUT:-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
py=${PYTHON:-python3}
log="$out/overhead.log"
{ nvidia-smi -L; nproc; uptime; "$py" -c "import torch; print('torch', torch.__version__)"; } > "$log" 2>&1
bench() {  # name timeout args...
  local name=$1 limit=$2; shift 2
  echo "== $name: $*" >> "$log"
  timeout "$limit" "$py" benchmarks/bench_capture_overhead.py --device cuda --workers 1 --image-size 224 \
    --json "$out/$name.json" "$@" >> "$log" 2>&1 || echo "== $name: exit $?" >> "$log"
}
ks="--layer-every 1 --layer-every 10 --layer-every 25 --layer-every 1000"
bench r50-a 75 --model resnet50 --batch-size 32 --iterations 50 --comm-hook $ks
bench r50-b 75 --model resnet50 --batch-size 32 --iterations 50 --comm-hook $ks
bench r18 60 --model resnet18 --batch-size 128 --iterations 40 --layer-every 1 --layer-every 10
if [ "${HOOK_COST:-0}" = 1 ]; then
  echo "== hook-cost" >> "$log"
  timeout 40 "$py" benchmarks/bench_hook_cost.py --device cuda --layers 100 --iterations 20 --repeats 3 --every 10 \
    --json "$out/hook-cost.json" >> "$log" 2>&1 || echo "== hook-cost: exit $?" >> "$log"
fi
uptime >> "$log"
echo "== summary (docs/capture.md table)" >> "$log"
"$py" benchmarks/summarize_capture_overhead.py "$out/r50-a.json" "$out/r50-b.json" "$out/r18.json" >> "$log" 2>&1
