"""Benchmark: the capture's shaped links re-run on its own sends (`ddlsim.simulation.tbf_queue.tbf_transit`).

Seeded random sets of PS-like messages (workers to one server and back, 0-200 kB, 100 Mbit/s links with tbf's
64 KiB bucket). Times this tree's `tbf_transit` and, with `--baseline-commit REV`, the `tbf_transit` of REV's
`python/ddlsim/simulation/tbf_queue.py` (read with `git show`, loaded on its own: the pure-Python first version,
43eef7e-444f850, needs only numpy), alternating, the minimum of `--repeat` runs each; checks that both give the
same times (to 1e-6 relative) and prints each one's seconds and their ratio.

    python benchmarks/bench_tbf_transit.py --baseline-commit 444f850 --repeat 5
"""

from __future__ import annotations

import argparse
import shutil
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))


def messages(n: int, workers: int, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    worker = rng.integers(0, workers, n)
    up = rng.random(n) < 0.5  # a request (worker -> server) or a response (server -> worker)
    sender, receiver = np.where(up, worker, workers), np.where(up, workers, worker)
    sent = np.sort(rng.integers(0, n * 20_000, n))
    return sent, sender, receiver, rng.integers(0, 200_000, n).astype(float)


def baseline(rev: str, scratch: Path):
    """REV's tbf_transit, its module written under `scratch` and imported from there."""
    text = subprocess.run(["git", "show", f"{rev}:python/ddlsim/simulation/tbf_queue.py"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    path = scratch / "tbf_queue_baseline.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("tbf_queue_baseline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.tbf_transit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-commit", help="also time this commit's tbf_transit")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from ddlsim.simulation.tbf_queue import tbf_transit

    scratch = Path(tempfile.mkdtemp(prefix="ddlsim-bench-tbf-"))
    try:
        runs = {"this tree": tbf_transit}
        if args.baseline_commit:
            runs[args.baseline_commit] = baseline(args.baseline_commit, scratch)
        print(f"{'messages':>9} {'workers':>7} " + " ".join(f"{name + ' s':>14}" for name in runs) +
              ("   ratio (baseline / this)" if len(runs) > 1 else ""))
        compare(runs, args)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def compare(runs: dict, args: argparse.Namespace) -> None:
    for n, workers in ((5_000, 2), (20_000, 8)):
        data = messages(n, workers, seed=n + workers)
        best = {name: float("inf") for name in runs}
        results = {}
        for _ in range(args.repeat):
            for name, fn in runs.items():
                t = time.perf_counter()
                results[name] = fn(*data, 100e6, 65_536)
                best[name] = min(best[name], time.perf_counter() - t)
        values = list(results.values())
        for other in values[1:]:
            np.testing.assert_allclose(other, values[0], rtol=1e-6, atol=1e-3)
        line = f"{n:9d} {workers:7d} " + " ".join(f"{best[name]:14.4f}" for name in runs)
        if len(runs) > 1:
            line += f"   {best[args.baseline_commit] / best['this tree']:.1f}"
        print(line)


if __name__ == "__main__":
    main()
