#!/usr/bin/env bash
# The GPU capture-overhead run of docs/capture.md "Sampled layer rows" (--layer-every K): on one GPU, ResNet-50
# batch 32 at 224x224, one rank (--device cuda --workers 1); plain DDP and ddlsim's capture at K = 1000 (practically
# no sampled iteration: the un-sampled iterations' own cost) and K = 25, as copies of one process in ABBA order
# (same load). r50-a, r50-b: every iteration timed alone (behind a barrier and a device synchronisation, as
# before); r50-blk: blocks of 5 iterations with no synchronisation between them (--block 5, as in training: the
# host runs ahead, so a synchronisation inside the capture would show). With BEFORE=dir (a tree holding an older
# python/ddlsim) each step also runs that code as <name>-before (same machine, alternated run by run).
# Before/after in ONE run (no BEFORE needed): every step also times, per K, the previous capture (one DDP wrapper,
# the Python comm hook on every iteration: --old-hook) and torch's own allreduce_hook (--comm-hook) in the same ABBA
# alternation as the new capture (un-sampled iterations through a second wrapper without a comm hook), so the
# summary table pairs "capture, K = k" (after) with "capture, K = k, comm hook every iteration (before)".
# Writes under ${OUT:-out}/: overhead.log (all output, the device first, the summary table last) and one JSON file
# per step. About 150 s on an H100 (each step ~45 s with its 6 copies, under its own 100 s timeout).
#   PYTHONPATH=$PWD/python OUT=/tmp/out bash benchmarks/gpu_capture_sampled.sh
set -u
out=${OUT:-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
new_path=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
py=${PYTHON:-python3}
log="$out/overhead.log"
{ nvidia-smi -L; nproc; uptime; "$py" -c "import torch; print('torch', torch.__version__)"; } > "$log" 2>&1
files=()
bench() {  # name timeout args...
  local name=$1 limit=$2; shift 2
  local sides="new" side tag path
  [ -n "${BEFORE:-}" ] && sides="new before"
  for side in $sides; do
    if [ "$side" = new ]; then tag=$name; path=$new_path; else tag=$name-before; path=$BEFORE/python; fi
    echo "== $tag: $*" >> "$log"
    PYTHONPATH=$path timeout "$limit" "$py" benchmarks/bench_capture_overhead.py --device cuda --workers 1 \
      --image-size 224 --model resnet50 --batch-size 32 --layer-every 1000 --layer-every 25 $PAIRED \
      --json "$out/$tag.json" "$@" >> "$log" 2>&1 || echo "== $tag: exit $?" >> "$log"
    files+=("$out/$tag.json")
  done
}
PAIRED="--old-hook --comm-hook"  # before (--old-hook) and torch's hook in the same alternation as after
[ -n "${BEFORE:-}" ] && PAIRED=""  # an older tree's benchmark has neither option
bench r50-a 100 --iterations 60 --warmup 2
bench r50-blk 100 --iterations 60 --warmup 5 --block 5
bench r50-b 100 --iterations 60 --warmup 2
uptime >> "$log"
echo "== summary (docs/capture.md table)" >> "$log"
"$py" benchmarks/summarize_capture_overhead.py "${files[@]}" >> "$log" 2>&1
