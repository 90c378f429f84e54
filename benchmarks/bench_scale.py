"""Engine benchmark: one ResNet-50 iteration on a star network, 10 Gbit/s, 10 us.

Default cases (flow fidelity): ring at 8, 64, 256 and 1024 workers; ring at
64 workers logged at step detail (about 2.6 M rows); ps at 8 and 32 workers
(1 server per 4 workers). Each case runs in a fresh subprocess so that its
peak memory (max RSS) is its own. Prints the engine time, the whole
`ddlsim.simulate` call (Python included), `save` (Parquet + Perfetto + csv +
json, no PNG), the whole process (imports included), events/s, peak memory
and each case's engine time per transfer relative to the first case measured
in the same run.

`--speed` runs the engine-speed cases instead: ring at 256 workers, analytic
and flow fidelity (`--large` adds 1024 workers, minutes on a 2-core machine).
`--baseline-commit REV` also builds commit REV in a scratch worktree
(`git worktree add` under the temp directory, `cargo build --release` there),
runs every case with that build too, alternating with this tree's build
(`--repeat` runs each, the minimum engine time counts), checks that both
processed the same events, and prints the events/s of both and their ratio,
and the CPU time of the whole `simulate` call (less sensitive to other load
on the machine than the engine's wall time).

    python benchmarks/bench_scale.py            # all cases
    python benchmarks/bench_scale.py --quick    # skip 1024 workers
    python benchmarks/bench_scale.py --speed --baseline-commit a0263f6 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (strategy, workers, servers, trace detail, network fidelity)
CASES = [
    ("ring", 8, 0, "auto", "flow"),
    ("ring", 64, 0, "auto", "flow"),
    ("ring", 64, 0, "step", "flow"),
    ("ring", 256, 0, "auto", "flow"),
    ("ring", 1024, 0, "auto", "flow"),
    ("ps", 8, 2, "auto", "flow"),
    ("ps", 32, 8, "auto", "flow"),
]

SPEED_CASES = [
    ("ring", 256, 0, "auto", "analytic"),
    ("ring", 256, 0, "auto", "flow"),
    ("ring", 1024, 0, "auto", "analytic"),
    ("ring", 1024, 0, "auto", "flow"),
]

# Runs with the ddlsim on PYTHONPATH; argv: strategy workers servers detail fidelity save(0/1).
# Uses only what every engine since a0263f6 offers (simulate keywords, wall_s, stats, iterations).
CHILD = r"""
import json, resource, sys, tempfile, time
import ddlsim
strategy, workers, servers, detail, fidelity, save = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6] == "1"
kw = dict(model="resnet50", workers=workers, strategy=strategy, iterations=1, network=fidelity,
          bandwidth="10Gbps", latency="10us", trace_detail=detail)
if servers:
    kw["servers"] = servers
t0, c0 = time.perf_counter(), time.thread_time()
r = ddlsim.simulate(**kw)
total, cpu = time.perf_counter() - t0, time.thread_time() - c0
save_s = 0.0
if save:
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        r.save(out, timeline=False)
        save_s = time.perf_counter() - t0
print(json.dumps({"engine_s": r.wall_s, "total_s": total, "cpu_s": cpu, "save_s": save_s, "events": r.stats["events"],
                  "transfers": r.stats["transfers"], "rows": len(r.events),
                  "detail": r.engine_document["trace_detail"],
                  "iteration_s": float(r.iterations["time_s"].iloc[0]),
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run_case(case: tuple, python_path: Path, save: bool) -> dict:
    strategy, workers, servers, detail, fidelity = case
    env = dict(os.environ, PYTHONPATH=str(python_path))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, strategy, str(workers), str(servers), detail, fidelity, "1" if save else "0"],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"bench_scale: case {case} failed with {python_path}:\n{proc.stderr.strip()[-2000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - t0
    return result


def build_baseline(rev: str) -> Path:
    """Builds commit `rev` in a scratch worktree; returns its python/ directory (with the built extension)."""
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", rev], capture_output=True, text=True)
    if sha.returncode != 0:
        sys.exit(f"bench_scale: --baseline-commit {rev!r} is not a commit of {ROOT}: {sha.stderr.strip()}")
    tree = Path(tempfile.gettempdir()) / f"ddlsim-bench-{sha.stdout.strip()}"
    if not (tree / ".git").exists():
        if tree.exists():
            sys.exit(f"bench_scale: {tree} exists and is not a worktree; remove it or pick another commit")
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev], check=True, capture_output=True)
    print(f"building {rev} in {tree} ...", flush=True)
    subprocess.run(["cargo", "build", "--release", "--quiet", "--features", "pyo3/extension-module"], cwd=tree, check=True)
    shutil.copyfile(tree / "target" / "release" / "lib_core.so", tree / "python" / "ddlsim" / "_core.abi3.so")
    return tree / "python"


def best_of(case: tuple, python_path: Path, repeat: int, save: bool) -> dict:
    runs = [run_case(case, python_path, save) for _ in range(repeat)]
    return min(runs, key=lambda r: r["engine_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="skip the 1024-worker cases")
    parser.add_argument("--speed", action="store_true", help="engine-speed cases: ring at 256 workers, analytic and flow")
    parser.add_argument("--large", action="store_true", help="with --speed: add 1024 workers (minutes)")
    parser.add_argument("--baseline-commit", metavar="REV", help="build REV in a scratch worktree and compare against it")
    parser.add_argument("--repeat", type=int, default=1, help="runs per case and build; the minimum engine time counts")
    args = parser.parse_args()
    if args.speed:
        cases = [c for c in SPEED_CASES if args.large or c[1] < 1024]
    else:
        cases = [c for c in CASES if not (args.quick and c[1] >= 1024)]
    here = ROOT / "python"
    baseline = build_baseline(args.baseline_commit) if args.baseline_commit else None
    save = not args.speed and baseline is None
    header = (f"{'case':<16}{'network':>9}{'detail':>11}{'engine s':>10}{'simulate s':>11}{'save s':>8}{'process s':>10}"
              f"{'events':>13}{'events/s':>12}{'transfers':>13}{'peak MiB':>10}{'ns/transfer':>13}{'vs first':>9}{'iter ms':>10}")
    print(header)
    print("-" * len(header))
    first = None
    compared = []
    for case in cases:
        strategy, workers, servers, detail, fidelity = case
        label = f"{strategy} N={workers}" + (f" S={servers}" if servers else "")
        rows = []
        for _ in range(args.repeat):
            rows.append(("", run_case(case, here, save)))
            if baseline is not None:
                rows.append((f" @{args.baseline_commit}", run_case(case, baseline, False)))
        by_build: dict[str, dict] = {}
        for tag, r in rows:
            if tag not in by_build or r["engine_s"] < by_build[tag]["engine_s"]:
                by_build[tag] = r
        for tag, r in by_build.items():
            per_transfer = r["engine_s"] / max(r["transfers"], 1) * 1e9
            if first is None:
                first = per_transfer
            print(f"{(label + tag)[:24]:<16}{fidelity:>9}{r['detail']:>11}{r['engine_s']:>10.3f}{r['total_s']:>11.3f}{r['save_s']:>8.3f}"
                  f"{r['process_s']:>10.3f}{r['events']:>13,}"
                  f"{r['events'] / r['engine_s']:>12,.0f}{r['transfers']:>13,}{r['peak_mib']:>10.0f}"
                  f"{per_transfer:>13.1f}{per_transfer / first:>9.2f}{r['iteration_s'] * 1e3:>10.2f}", flush=True)
        if baseline is not None:
            new, old = by_build[""], by_build[f" @{args.baseline_commit}"]
            if new["events"] != old["events"]:
                print(f"  note: the builds processed different events ({new['events']:,} vs {old['events']:,}); compare events/s")
            compared.append((f"{label} {fidelity}", new, old))
    if compared:
        print(f"\nevents/s, this tree vs {args.baseline_commit} (same machine, same run; > 1: this tree is faster)")
        for label, new, old in compared:
            ratio = (new["events"] / new["engine_s"]) / (old["events"] / old["engine_s"])
            print(f"  {label:<24} {new['engine_s']:8.3f} s vs {old['engine_s']:8.3f} s engine, "
                  f"simulate CPU {new['cpu_s']:.3f} s vs {old['cpu_s']:.3f} s, "
                  f"{new['events'] / new['engine_s']:>12,.0f} vs {old['events'] / old['engine_s']:>12,.0f} events/s, "
                  f"ratio {ratio:.2f}; peak {new['peak_mib']:.0f} vs {old['peak_mib']:.0f} MiB")


if __name__ == "__main__":
    main()
