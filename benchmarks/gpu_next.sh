#!/usr/bin/env bash
# The roofline's device run (docs/compute-model.md, "The device run script"; run 4 was its first use): in one go, each
# step under its own timeout (a slow step cannot eat the others), GPU steps 490 s at most in all (run 4: 152 s on an
# H200, 96 s on an H100, before the spread step; that step about 100 s):
#   1. (H200 only) the BatchNorm and pointwise grids: conv_shapes.py --norm, --pointwise -> norm.json, pointwise.json
#   2. the host microbenchmarks 3 times, the first with the whole-model check: host_dispatch.py -> host1..3.json
#   3. the layer times of cases the model misses on this card, blind: gpu_layer_times.py --cases -> glt/
#   4. the same kind of cases' GPU time alone (the step as a CUDA graph): gpu_layer_times.py --graph-only -> graph/
#   5. the host-bound cases' eager step in 5 fresh processes (median and range): step_spread.py -> spread/
#   6. (CPU, seconds) the tables the roofline reads, named for this card: conv_shapes.py --table, host_dispatch.py
#      --median -> tables/{norm_classes,pointwise,host_dispatch}_<card>.json
# Then, on the lead's machine with the returned folder:
#   PYTHON=.venv/bin/python bash benchmarks/gpu_next.sh --install DIR   # the grids' tables -> data/kernels/; the host
#     runs -> docs/data/host-dispatch-<card>-<stamp>-<i>.json and the host table rebuilt as the median of every one
#   PYTHON=.venv/bin/python bash benchmarks/gpu_next.sh --rescore DIR   # the docs' tables: the new run scored
#     blind, the graph report, the spread report, and the stored runs rescored with the new tables
# Usage on the GPU machine (the card is detected from nvidia-smi: H200 or H100):
#   PYTHONPATH=$PWD/python OUT=/tmp/out bash benchmarks/gpu_next.sh
#   bash benchmarks/gpu_next.sh --dry-run [--device H200|H100]    # print the steps, run nothing
set -u
mode=run
device=""
dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) mode=dry ;;
    --device) device=${2:-}; shift ;;
    --install) mode=install; dir=${2:-}; shift ;;
    --rescore) mode=rescore; dir=${2:-}; shift ;;
    *) echo "error: unknown argument $1; use --dry-run [--device H200|H100], --install DIR or --rescore DIR" >&2
       exit 2 ;;
  esac
  shift
done
py=${PYTHON:-python3}
out=${OUT:-out}
export PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}

# the cases each card's stored runs still miss (|error| > 15 % with every table, docs/compute-model.md "Run 3")
CASES_H200="resnet18:32:fp16 resnet50:32:fp16 resnet101:32:tf32 resnet101:32:fp16 alexnet:32:tf32 alexnet:32:fp16
  alexnet:128:fp16 inception_v3:32:tf32 inception_v3:32:fp16 resnet50:128:tf32 resnet101:128:tf32 resnet152:128:tf32"
CASES_H100="resnet18:32:fp16 resnet101:32:tf32 resnet152:32:tf32 resnet152:32:fp16 alexnet:32:tf32 alexnet:32:fp16
  alexnet:128:fp16 googlenet:32:fp32 googlenet:32:tf32 googlenet:128:fp16 inception_v3:32:tf32 inception_v3:32:fp16"
# host or GPU? the host-bound misses, and on the H200 the GPU-bound TF32 ResNet that is over-predicted
GRAPH_H200="alexnet:32:tf32 alexnet:32:fp16 alexnet:128:fp16 inception_v3:32:fp16 resnet18:32:fp16 resnet50:32:fp16
  resnet50:128:tf32 resnet101:128:tf32"
GRAPH_H100="alexnet:32:tf32 alexnet:32:fp16 alexnet:128:fp16 googlenet:128:fp16 googlenet:32:tf32
  inception_v3:32:fp16 inception_v3:32:tf32 resnet18:32:fp16"
# how much each host-bound miss of run 4 moves between processes (5 fresh processes), with one GPU-bound control
SPREAD_H200="resnet18:32:fp16 resnet50:32:fp16 resnet101:32:fp16 alexnet:32:tf32 alexnet:32:fp16 inception_v3:32:fp16
  googlenet:32:fp32 resnet50:128:tf32"
SPREAD_H100="alexnet:32:tf32 alexnet:32:fp16 googlenet:32:fp32 googlenet:32:tf32 googlenet:128:fp16
  inception_v3:32:fp16 resnet18:32:fp16 resnet50:128:tf32"

card_of() {  # an nvidia-smi name -> H200 | H100 | ""
  case "$1" in *H200*) echo H200 ;; *H100*) echo H100 ;; *) echo "" ;; esac
}

log=/dev/null
step() {  # name timeout command...: run it under `timeout`, output to OUT/name.log, one line in OUT/steps.log
  local name=$1 limit=$2; shift 2
  if [ "$mode" = dry ]; then
    printf 'step %s timeout=%ss:' "$name" "$limit"; printf ' %q' "$@"; echo
    return 0
  fi
  local t0=$SECONDS rc
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  rc=$?
  echo "$name rc=$rc seconds=$((SECONDS - t0)) limit=$limit" >> "$log"
  return 0
}

cpu_step() {  # name command...: a CPU step (seconds), in the dry run printed as such
  local name=$1; shift
  if [ "$mode" = dry ]; then
    printf 'cpu %s:' "$name"; printf ' %q' "$@"; echo
    return 0
  fi
  "$@" >> "$out/$name.log" 2>&1
  echo "$name rc=$? (cpu)" >> "$log"
}

if [ "$mode" = install ] || [ "$mode" = rescore ]; then
  if [ -z "$dir" ] || [ ! -f "$dir/card.txt" ]; then
    echo "error: --$mode ${dir:-DIR}: not a folder this script wrote (no card.txt); give the run's OUT folder" >&2
    exit 2
  fi
  card=$(cat "$dir/card.txt")
  lc=$(echo "$card" | tr 'A-Z' 'a-z')
  if [ "$mode" = install ]; then
    # every file must load as the card's before any is copied (a misnamed or damaged one is refused in one line);
    # then the grids' tables are copied, and the host table pools every stored host run of the card
    # (docs/compute-model.md, "Run 4"): the run's raw runs join docs/data and the table is the median of them all
    "$py" - "$dir" "$card" "$lc" "$(date -u -r "$dir/card.txt" +%Y%m%dT%H%M)" <<'PY' || exit 2
import json, shutil, sys
from pathlib import Path
from ddlsim.errors import ModelError
from ddlsim.workload import roofline, devices
d, card, lc, stamp = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
runs = sorted(d.glob("host[0-9]*.json"))
try:
    roofline.norm_table(card, str(d / "tables")); roofline.pointwise_table(card, str(d / "tables"))
    for run in runs:
        try:
            doc = json.loads(run.read_text())
            devices.host_dispatch_from_benchmark(doc)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ModelError(f"{run}: not a benchmarks/host_dispatch.py result ({type(exc).__name__}: {exc})")
        name = doc.get("device")
        other = devices.measured_on_other_device(name, card)
        if other is not None:
            raise ModelError(f"{run}: measured on {name!r}, a {other}, not a {card}; leave it out of this folder")
except ModelError as exc:
    sys.exit(f"error: --install: {exc}")
kernels, data = Path("python/ddlsim/data/kernels"), Path("docs/data")
for stem in ("norm_classes", "pointwise"):
    f = d / "tables" / f"{stem}_{lc}.json"
    if not f.is_file():
        print(f"not in the run: {f} (left as it is)")
        continue
    shutil.copyfile(f, kernels / f.name)
    print(f"installed {kernels / f.name}")
if not runs:
    print(f"no host runs in {d} (host1.json ...): the host table is left as it is")
    sys.exit(0)
sys.path.insert(0, "benchmarks")
import host_dispatch  # noqa: E402
for i, run in enumerate(runs, 1):  # installed twice: the same names, counted once
    shutil.copyfile(run, data / f"host-dispatch-{lc}-{stamp}-{i}.json")
    print(f"stored {data / f'host-dispatch-{lc}-{stamp}-{i}.json'}")
sys.exit(host_dispatch.write_median(sorted(data.glob(f"host-dispatch-{lc}-*.json")), kernels / f"host_dispatch_{lc}.json"))
PY
    exit 0
  fi
  glt=benchmarks/gpu_layer_times.py
  echo "## the new run on the $card, blind (its roofline_ms: the tree before the new tables)"
  "$py" "$glt" --rescore "$dir/glt/summary.csv" --predict-device "$card"
  echo; echo "## host or GPU: the step as a CUDA graph (the GPU alone) beside the model's totals"
  "$py" "$glt" --graph-report "$dir/graph/graph.csv" --predict-device "$card"
  if [ -f "$dir/spread/spread.csv" ]; then
    echo; echo "## the host-bound cases in 5 processes: the median, the range, the roofline"
    "$py" benchmarks/step_spread.py --report "$dir/spread/spread.csv" --predict-device "$card"
  fi
  echo; echo "## the stored runs rescored"
  for run in h100-summary h100-run2-summary h100-run3-summary h100-run4-summary h200-summary h200-run4-summary; do
    stored=$(echo "${run%%-*}" | tr 'a-z' 'A-Z')
    echo "### $run ($stored)"
    "$py" "$glt" --rescore "docs/data/gpu-layer-times-$run.csv" --predict-device "$stored" | grep -A99 "^the run's roofline"
  done
  exit 0
fi

if [ "$mode" = dry ]; then
  card=${device:-H200}
  case "$card" in H200|H100) ;; *) echo "error: --device $card: H200 or H100" >&2; exit 2 ;; esac
else
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  card=$(card_of "$name")
  if [ -z "$card" ]; then
    echo "error: this script is for an H200 or an H100; nvidia-smi says '${name:-no GPU}'" >&2
    exit 2
  fi
  mkdir -p "$out/tables"
  log="$out/steps.log"
  echo "$card" > "$out/card.txt"
  { nvidia-smi -L; nproc; uptime; git rev-parse HEAD 2>/dev/null
    "$py" -c "import torch, torchvision; print(torch.__version__, torchvision.__version__, torch.backends.cudnn.version())"
  } > "$out/env.txt" 2>&1
fi
lc=$(echo "$card" | tr 'A-Z' 'a-z')
if [ "$card" = H200 ]; then cases=$CASES_H200; graph=$GRAPH_H200; spread=$SPREAD_H200
else cases=$CASES_H100; graph=$GRAPH_H100; spread=$SPREAD_H100; fi

# 1. the grids the H200 lacks (the H100 has its own, run 2 and 3)
if [ "$card" = H200 ]; then
  step norm 40 "$py" benchmarks/conv_shapes.py --norm --budget-s 14 --out "$out/norm.json"
  step pointwise 40 "$py" benchmarks/conv_shapes.py --pointwise --budget-s 14 --out "$out/pointwise.json"
fi
# 2. the host microbenchmarks, three runs for a median (the first with the whole-model host check)
step host1 50 "$py" benchmarks/host_dispatch.py --out "$out/host1.json"
step host2 35 "$py" benchmarks/host_dispatch.py --no-model-check --out "$out/host2.json"
step host3 35 "$py" benchmarks/host_dispatch.py --no-model-check --out "$out/host3.json"
# 3. the missed cases, measured again and scored blind (the prediction is this tree's, before the new tables)
# shellcheck disable=SC2086
step glt 105 "$py" benchmarks/gpu_layer_times.py --cases $cases --skip-ddp --skip-microbench --budget-s 90 \
  --predict-device "$card" --out "$out/glt"
# 4. host or GPU: each case's GPU time alone
# shellcheck disable=SC2086
step graph 55 "$py" benchmarks/gpu_layer_times.py --graph-only --cases $graph --budget-s 45 --out "$out/graph"
# 5. the host-bound cases' spread: each case's eager step in 5 fresh processes, one after another
# shellcheck disable=SC2086
step spread 130 "$py" benchmarks/step_spread.py --cases $spread --processes 5 --budget-s 100 --out "$out/spread"
# 6. the tables, named for this card (CPU)
src="on one NVIDIA $card, the device machine of this project ($(date -u +%Y-%m-%d 2>/dev/null), benchmarks/gpu_next.sh)"
if [ "$card" = H200 ]; then
  cpu_step tables "$py" benchmarks/conv_shapes.py --table "$out/norm.json" \
    --source "benchmarks/conv_shapes.py --norm $src" --out "$out/tables/norm_classes_$lc.json"
  cpu_step tables "$py" benchmarks/conv_shapes.py --table "$out/pointwise.json" \
    --source "benchmarks/conv_shapes.py --pointwise $src" --out "$out/tables/pointwise_$lc.json"
fi
hosts=()
for i in 1 2 3; do  # the runs that finished (a step that timed out wrote none)
  if [ "$mode" = dry ] || [ -f "$out/host$i.json" ]; then hosts+=("$out/host$i.json"); fi
done
if [ ${#hosts[@]} -gt 0 ]; then
  cpu_step tables "$py" benchmarks/host_dispatch.py --median "${hosts[@]}" --out "$out/tables/host_dispatch_$lc.json"
fi
if [ "$mode" != dry ]; then
  uptime >> "$log"
  cat "$log"
fi
