"""A ``ddlsim plan`` MG-WFBP plan run on the real DDP job both ways (docs/planning.md), and DDP's default, measured
in one go on this machine:

1. ``before``: DDP's default 25 MB buckets;
2. the plan, made from step 1's capture (layer times, and alpha and gamma as the capture measured them);
3. ``ddp-buckets``: the plan's groups as DDP's own buckets (``bucket_cap_mb_list``), when the groups are contiguous
   in DDP's bucket order and this torch's DDP takes per-bucket caps;
4. ``hook``: the same groups through the merge hook over one DDP bucket per parameter (the older path);
5. ``before`` again (ABA: both ends see the machine's drift).

Prints one JSON document: per run the mean iteration after the warm-up (the one definition every output uses), its
median, the all-reduces it ran and which path; the plan's predictions. Captures go to a temporary directory (removed
at the end), or to ``--out`` (kept).

    PYTHONPATH=python python benchmarks/bench_plan_paths.py --model resnet18 --iterations 8
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path


def _measure(log) -> dict:
    from ddlsim.analyze.breakdown import iteration_arrays, iteration_mean

    arrays = iteration_arrays(log)
    mean = iteration_mean(arrays, log.metadata)
    used = [float(t) for t, keep in zip(arrays["time_s"], mean["mask"]) if keep]
    return {"mean_ms": mean["mean_s"] * 1e3, "median_ms": statistics.median(used) * 1e3,
            "all_reduces": len(log.metadata.get("buckets") or []),
            "bucket_mib": [round(b["bytes"] / 2**20, 3) for b in log.metadata.get("buckets") or []],
            "path": (log.metadata.get("plan") or {}).get("path"),
            "sha256": log.metadata.get("parameter_sha256")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.out is not None:
        return _run(args, args.out)
    with tempfile.TemporaryDirectory(prefix="ddlsim-plan-paths-") as tmp:  # removed afterwards, failed or not
        return _run(args, Path(tmp))


def _run(args, out: Path) -> int:
    from ddlsim.capture.ddp import job_config
    from ddlsim.capture.ddp_models import build_model
    from ddlsim.capture.ddp_plan import gradient_ready_order, plan_config
    from ddlsim.capture.ddp_run import run_ddp_capture
    from ddlsim.plan.planner import make_plan

    out.mkdir(parents=True, exist_ok=True)
    base = job_config({"model": args.model, "iterations": args.iterations, "batch_size": args.batch_size,
                       "image_size": args.image_size, "bucket_cap_mb": 25.0, "seed": 0})
    runs: dict[str, dict] = {}

    def capture(name: str, config: dict):
        log, failure = run_ddp_capture(config, args.workers, out / name, timeout_s=300)
        if failure is not None:
            raise SystemExit(f"{name}: {failure}")
        runs[name] = _measure(log)
        print(f"{name}: {runs[name]['mean_ms']:.1f} ms", file=sys.stderr)
        return log

    capture("before", base)
    plan = make_plan(model=args.model, profile=str((out / "before" / "events.parquet").resolve()), workers=args.workers)
    data = plan.to_dict()
    names = [n for n, _ in build_model(args.model).named_parameters()]
    order, sizes = gradient_ready_order(args.model, args.image_size)
    own = plan_config(data, "mg_wfbp", names, "plan", parameter_bytes=sizes, ready_order=order)
    hook = plan_config(data, "mg_wfbp", names, "plan", parameter_bytes=sizes, ready_order=order,
                       ddp_takes_cap_list=False)
    if own["plan"]["path"] == "ddp-buckets":
        capture("ddp-buckets", {**base, **own})
    capture("hook", {**base, **hook})
    capture("before-again", base)
    report = {"model": args.model, "workers": args.workers, "iterations": args.iterations,
              "batch_size": args.batch_size, "path_for_this_plan": own["plan"]["path"],
              "why": own["plan"].get("why"), "plan_notes": plan.notes,
              "predicted_ms": {"captured": data["captured"]["iteration_time_s"] * 1e3 if data.get("captured") else None,
                               "ddp_default": data["baselines"]["ddp_default"]["iteration_time_s"] * 1e3,
                               "mg_wfbp": data["mg_wfbp"]["iteration_time_s"] * 1e3},
              "plan_groups": len(data["mg_wfbp"]["plan"]), "runs": runs}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
