"""`ddlsim sweep` benchmark: one grid on the local process pool and on a local
Ray instance, in the same run, and the overhead of Ray against the pool.

Each backend runs the whole grid into a fresh output directory (simulation,
transfer of the results to the driver, Parquet files). Ray's start-up is
timed apart (the instance is started first, the sweep then reuses it), so the
printed ratio is the per-grid overhead of running on Ray: task submission,
pickling, the object store; the start-up is a fixed cost per sweep.

    python benchmarks/bench_sweep.py                 # the small default grid, 2 processes / 2 Ray CPUs, 3 rounds
    python benchmarks/bench_sweep.py --jobs 4 --no-ray
    python benchmarks/bench_sweep.py --thesis-grid --jobs 2            # the thesis' chapter 5 grid, flow level, pool
    python benchmarks/bench_sweep.py --thesis-grid --fidelity packet --ratios 16 --rates 23 --seeds 1

`time_grid_backends(grid, jobs)` takes any grid (ddlsim.sweep.load_grid), so
a larger one (the thesis' chapter 5 grid) can reuse it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))

from ddlsim.sweep import load_grid, run_grid  # noqa: E402

# The default grid: ResNet-50 at flow level, 1 iteration, 3 sizes x 2 bandwidths (6 runs).
SMALL_GRID = """iterations = 1
[model]
name = "resnet50"
[network]
fidelity = "flow"
[sweep]
workers = [4, 8, 16]
network.bandwidth = ["10Gbps", "40Gbps"]
"""


def small_grid(directory: Path):
    path = directory / "bench-grid.toml"
    path.write_text(SMALL_GRID)
    return load_grid(path)


def time_grid(grid, jobs: int, ray: str | None = None) -> dict:
    """Runs `grid` into a fresh directory on the local pool (ray None) or on
    Ray ("local": the instance this process started, or one to start; or an
    address); wall time of the whole sweep and the sum of the runs' own times."""
    out = Path(tempfile.mkdtemp(prefix="ddlsim-bench-sweep-"))
    try:
        t0 = time.perf_counter()
        stats = run_grid(grid, out, jobs=jobs, ray=ray)
        wall = time.perf_counter() - t0
    finally:
        shutil.rmtree(out, ignore_errors=True)
    assert stats.simulated == len(grid.points), stats
    return {"wall_s": wall, "runs": stats.simulated, "simulation_wall_s": stats.simulation_wall_s}


def time_grid_backends(grid, jobs: int = 2, with_ray: bool = True, repeat: int = 1,
                       object_store_bytes: int = 100 * 1024**2) -> dict:
    """The grid on the local pool and (with_ray) on a local Ray instance of
    `jobs` CPUs, started first and timed apart; `repeat` rounds alternate
    the two and the fastest of each counts (the machine's other load varies).
    The ratio is Ray's grid time over the pool's, both measured here, now."""
    result = {"runs": len(grid.points), "jobs": jobs, "repeat": repeat}
    pools, rays = [], []
    if with_ray:
        from ddlsim.sweep import ray_backend

        ray = ray_backend.import_ray()
        ray_backend.LOCAL_OBJECT_STORE_BYTES = object_store_bytes
        t0 = time.perf_counter()
        ray_backend.start_ray(ray, "local", jobs)  # as `ddlsim sweep --ray` starts it (a second try if the first times out)
        result["ray_start_s"] = time.perf_counter() - t0
    try:
        for _ in range(repeat):
            pools.append(time_grid(grid, jobs))
            if with_ray:
                rays.append(time_grid(grid, jobs, ray="local"))  # reuses the instance started above
    finally:
        if with_ray:
            ray.shutdown()
    result["pool_rounds_s"] = [r["wall_s"] for r in pools]
    result["ray_rounds_s"] = [r["wall_s"] for r in rays]
    result["pool"] = min(pools, key=lambda r: r["wall_s"])
    if with_ray:
        result["ray"] = min(rays, key=lambda r: r["wall_s"])
        result["ray_over_pool"] = result["ray"]["wall_s"] / result["pool"]["wall_s"]
    return result


def time_thesis_grid(jobs: int = 2, fidelity: str = "flow", ray: str | None = None, ratios=None, rates=None,
                     seeds=None) -> dict:
    """The thesis' chapter 5 grid (ddlsim.reproduce.thesis_network: 4 ratios x 4 rates x 2 bands x 3 seeds, and
    the job alone per ratio; 100 runs of 12 simulated seconds and more) run through run_grid into a fresh
    directory; wall time of the whole grid and the runs' own times (their sum, mean and longest)."""
    from ddlsim.reproduce import thesis_network as tn

    plan = tn.parse_plan(False, fidelity, ratios, rates, seeds)
    out = Path(tempfile.mkdtemp(prefix="ddlsim-bench-thesis-"))
    per_run: list[float] = []
    try:
        t0 = time.perf_counter()
        for sub, _ratio, grid in tn.grids(plan):
            stats = run_grid(grid, out / sub, jobs=jobs, ray=ray)
            assert stats.simulated == len(grid.points), stats
        wall = time.perf_counter() - t0
        runs = tn.collect(plan, out)
        per_run = [float(x) for x in runs["simulation_wall_s"]]
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {"wall_s": wall, "runs": len(per_run), "fidelity": fidelity, "jobs": jobs,
            "simulation_wall_s": sum(per_run), "mean_run_s": sum(per_run) / max(1, len(per_run)),
            "longest_run_s": max(per_run, default=0.0)}


def cluster_estimate(simulation_wall_s: float, longest_run_s: float, nodes: int, cpus_per_node: int) -> float:
    """A lower bound on a grid's wall time on `nodes` x `cpus_per_node` Ray workers: the runs' total time spread
    evenly, and never less than the longest run (start-up and transfer not counted)."""
    return max(simulation_wall_s / (nodes * cpus_per_node), longest_run_s)


def thesis_main(args) -> None:
    ints = (lambda text: [int(v) for v in text.split(",")] if text else None)
    subset = (ints(args.ratios), ints(args.rates), ints(args.seeds))
    backends = [None]
    if args.ray:  # the pool, then the same grid on a local Ray instance started once, its start-up timed apart
        from ddlsim.sweep import ray_backend

        ray = ray_backend.import_ray()
        ray_backend.LOCAL_OBJECT_STORE_BYTES = 100 * 1024**2
        t0 = time.perf_counter()
        ray_backend.start_ray(ray, "local", args.jobs)
        print(f"local Ray instance of {args.jobs} CPUs started in {time.perf_counter() - t0:.1f} s")
        backends.append("local")
    results = {}
    try:
        for backend in backends:
            r = results[backend] = time_thesis_grid(args.jobs, args.fidelity, backend, *subset)
            print(f"thesis chapter 5 grid at {r['fidelity']} fidelity: {r['runs']} runs on {r['jobs']} "
                  f"{'Ray CPUs' if backend else 'local processes'}: {r['wall_s']:.1f} s wall "
                  f"({r['simulation_wall_s']:.1f} s in the runs, mean {r['mean_run_s']:.2f} s, longest {r['longest_run_s']:.2f} s)")
    finally:
        if args.ray:
            ray.shutdown()
    r = results[None]
    if args.ray:
        print(f"Ray overhead: {results['local']['wall_s'] / r['wall_s']:.2f}x the local pool's time on the same grid")
    for nodes in (1, 4, 16):
        print(f"  estimate on a Ray cluster of {nodes} node(s) x 16 CPUs: "
              f">= {cluster_estimate(r['simulation_wall_s'], r['longest_run_s'], nodes, 16):.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="local processes, and the CPUs of the local Ray instance")
    parser.add_argument("--no-ray", action="store_true", help="the local pool only")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (pool, Ray alternating); the fastest of each counts")
    parser.add_argument("--thesis-grid", action="store_true", help="time the thesis' chapter 5 grid instead (local pool, "
                        "or Ray with --ray)")
    parser.add_argument("--fidelity", default="flow", choices=("flow", "packet"), help="with --thesis-grid")
    parser.add_argument("--ray", action="store_true", help="with --thesis-grid: on a local Ray instance")
    parser.add_argument("--ratios", help="with --thesis-grid: a subset, e.g. 16,4")
    parser.add_argument("--rates", help="with --thesis-grid: a subset, e.g. 23")
    parser.add_argument("--seeds", help="with --thesis-grid: a subset, e.g. 1")
    args = parser.parse_args()
    if args.thesis_grid:
        thesis_main(args)
        return
    with tempfile.TemporaryDirectory() as scratch:
        grid = small_grid(Path(scratch))
        r = time_grid_backends(grid, jobs=args.jobs, with_ray=not args.no_ray, repeat=args.repeat)
    pool = r["pool"]
    print(f"grid: {r['runs']} runs (ResNet-50, flow level, 1 iteration), {r['jobs']} processes / Ray CPUs, "
          f"fastest of {r['repeat']}")
    print(f"local pool: {pool['wall_s']:.2f} s ({pool['simulation_wall_s']:.2f} s in the runs themselves)")
    print("rounds (s): pool " + ", ".join(f"{t:.2f}" for t in r["pool_rounds_s"])
          + ("; Ray " + ", ".join(f"{t:.2f}" for t in r["ray_rounds_s"]) if r["ray_rounds_s"] else "")
          + " (the first round pays the workers' imports)")
    if "ray" in r:
        ray = r["ray"]
        print(f"local Ray:  {ray['wall_s']:.2f} s ({ray['simulation_wall_s']:.2f} s in the runs themselves), "
              f"after a start-up of {r['ray_start_s']:.2f} s")
        print(f"Ray overhead: {r['ray_over_pool']:.2f}x the local pool's time on the same grid "
              f"({(ray['wall_s'] - pool['wall_s']) / r['runs'] * 1e3:+.0f} ms per run); "
              f"{(ray['wall_s'] + r['ray_start_s']) / pool['wall_s']:.2f}x with the start-up")


if __name__ == "__main__":
    main()
