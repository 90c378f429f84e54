"""`ddlsim sweep` benchmark: one grid on the local process pool and on a local
Ray instance, in the same run, and the overhead of Ray against the pool.

Each backend runs the whole grid into a fresh output directory (simulation,
transfer of the results to the driver, Parquet files). Ray's start-up is
timed apart (the instance is started first, the sweep then reuses it), so the
printed ratio is the per-grid overhead of running on Ray: task submission,
pickling, the object store; the start-up is a fixed cost per sweep.

    python benchmarks/bench_sweep.py                 # the small default grid, 2 processes / 2 Ray CPUs, 3 rounds
    python benchmarks/bench_sweep.py --jobs 4 --no-ray

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="local processes, and the CPUs of the local Ray instance")
    parser.add_argument("--no-ray", action="store_true", help="the local pool only")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (pool, Ray alternating); the fastest of each counts")
    args = parser.parse_args()
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
