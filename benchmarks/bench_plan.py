"""Benchmark of `ddlsim plan`: ResNet-152 (467 tensors) on 64 workers, ring
all-reduce, 10 Gbit/s, 10 us, flow-level star (the issue's target: under
10 s end to end, its verifying simulations included).

Measured in the same run, each in a fresh process (imports included):

- baseline: one plain `ddlsim simulate` of the same scenario (WFBP, one
  all-reduce per tensor, one iteration, collective detail, JSON summary),
  the single most expensive simulation the plan runs;
- `ddlsim plan` end to end (CLI, JSON written);
- in-process: the MG-WFBP planner alone (O(L^2) dynamic programme over the
  learnable layers) and Algorithm 1, best of 5.

Also prints CPU time (user + sys of the child), since on a shared machine
wall-clock time includes waiting for a core.

    python benchmarks/bench_plan.py [--workers 64] [--model resnet152] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time


def run(args: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of a `python -m ddlsim ...` child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "ddlsim", *args], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"ddlsim {' '.join(args)} failed:\n{p.stderr}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet152")
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    common = ["--model", a.model, "--workers", str(a.workers), "--bandwidth", "10Gbps", "--latency", "10us"]
    with tempfile.TemporaryDirectory() as tmp:
        plan_json = os.path.join(tmp, "plan.json")
        base, plan = [], []
        for _ in range(a.repeat):
            base.append(run(["simulate", *common, "--iterations", "1", "--trace-detail", "collective", "--json"]))
            plan.append(run(["plan", *common, "--out", plan_json, "--json"]))
    import ddlsim
    from ddlsim.simulation import grouping as gp
    from ddlsim.simulation.lowering import allreduce_cost
    from ddlsim.simulation.model_build import build_model, layer_times_ns

    sc = ddlsim.Scenario.model_validate({"model": {"name": a.model}, "workers": a.workers})
    model = build_model(sc.model)
    bwd = [b for _, b in layer_times_ns(model, sc.model)]
    _, ready, sizes = gp.mg_wfbp_units(model, bwd)
    cost = allreduce_cost(sc)
    planner = {}
    for name, fn in gp.MG_WFBP_METHODS.items():
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            fn(ready, sizes, cost)
            best = min(best, time.perf_counter() - t0)
        planner[name] = best

    med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
    print(f"{model.display_name}: {len(model.tensors)} tensors, {len(ready)} learnable layers; {a.workers} workers, "
          f"ring, 10 Gbit/s, 10 us, flow; median of {a.repeat}, load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs")
    print(f"{'case':44s} {'wall s':>8s} {'CPU s':>8s} {'x baseline (wall)':>18s}")
    b_wall, b_cpu = med(base, 0), med(base, 1)
    print(f"{'baseline: ddlsim simulate (WFBP, 1 iteration)':44s} {b_wall:8.2f} {b_cpu:8.2f} {1.0:18.2f}")
    p_wall, p_cpu = med(plan, 0), med(plan, 1)
    print(f"{'ddlsim plan (end to end)':44s} {p_wall:8.2f} {p_cpu:8.2f} {p_wall / b_wall:18.2f}")
    for name, s in planner.items():
        print(f"{'MG-WFBP planner, ' + name + ' (in process)':44s} {s:8.4f}")
    print(f"target: ddlsim plan under 10 s: {'met' if p_wall < 10 else 'NOT met'} ({p_wall:.2f} s)")


if __name__ == "__main__":
    main()
