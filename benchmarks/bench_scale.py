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

`--baseline-python DIR` compares against another build's python package
directory instead of building a commit (DIR holds `ddlsim/` with its built
`_core.abi3.so`, e.g. a copy of the scratch worktree's `python/` that
`--baseline-commit` builds, `/tmp/ddlsim-bench-<sha>/python`). `--case
STRATEGY:WORKERS:FIDELITY` (repeatable) runs only the cases named, e.g. the
1024-rank flow case alone:

    python benchmarks/bench_scale.py --speed --large --case ring:1024:flow \
        --baseline-python .bench-base --repeat 3

`--process` times whole processes instead: `ddlsim simulate ... --json` of
one ResNet-50 iteration in the closed-form model (analytic star, 10 Gbit/s,
10 us) at 1,024 workers (`--large`: also 4,096, 16,384 and 65,536), Python
start-up and imports included, with bytecode cached as on a user's machine
(the .pyc files go under the temp directory). Each command runs once to
warm up, then `--repeat` times (default 5); the minimum wall time counts,
next to its peak RSS (the child's own, from wait4) and its ratio to
`python -c pass` measured in the same run. Every size runs with rank
classes (this tree's default) and with `--per-rank` (every worker
simulated, as before rank classes; skipped where the size estimate refuses
it); `--baseline-commit REV` adds REV's build of the same command.

    python benchmarks/bench_scale.py --process --repeat 5 --large
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


PROCESS_SIZES = (1024,)
PROCESS_LARGE = (4096, 16384, 65536)


def _process_env(python_path: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # cached bytecode, as users have it
    env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "ddlsim-bench-pycache")
    if python_path is not None:
        env["PYTHONPATH"] = str(python_path)
    return env


def time_process(command: list[str], env: dict[str, str], repeat: int) -> tuple[float, float, int]:
    """(min wall s, peak RSS MiB of that run, exit status) of `command` run `repeat` times after a warm-up."""
    best = (float("inf"), 0.0, 0)
    for attempt in range(repeat + 1):
        t0 = time.perf_counter()
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        if proc.stderr:
            proc.stderr.close()
        if proc.returncode != 0:
            return float("nan"), 0.0, proc.returncode if "estimate" not in err else 2
        if attempt and wall < best[0]:
            best = (wall, usage.ru_maxrss / 1024, 0)
    return best


def process_main(args: argparse.Namespace) -> None:
    here = _process_env(ROOT / "python")
    baseline = _process_env(build_baseline(args.baseline_commit)) if args.baseline_commit else None
    if args.baseline_python:
        baseline = _process_env(Path(args.baseline_python).resolve())
    repeat = args.repeat if args.repeat > 1 else 5
    floor, _, _ = time_process([sys.executable, "-c", "pass"], here, repeat)
    print(f"python -c pass: {floor:.3f} s (min of {repeat}); ratios below are against it")
    header = f"{'workers':>8} {'build':<22}{'wall s':>9}{'x pass':>8}{'peak MiB':>10}"
    print(header)
    print("-" * len(header))
    sizes = PROCESS_SIZES + (PROCESS_LARGE if args.large else ())
    for n in sizes:
        command = [sys.executable, "-m", "ddlsim", "simulate", "--model", "resnet50", "--workers", str(n),
                   "--iterations", "1", "--network", "analytic", "--collective-model", "closed-form", "--bandwidth",
                   "10Gbps", "--latency", "10us", "--json"]
        builds = [("this tree (classes)", command, here), ("this tree --per-rank", command + ["--per-rank"], here)]
        if baseline is not None:
            builds.append((f"@{args.baseline_commit or args.baseline_python}"[:21], command, baseline))
        for label, cmd, env in builds:
            wall, peak, status = time_process(cmd, env, repeat)
            if status:
                print(f"{n:>8,} {label:<22}{'refused (size estimate)' if status == 2 else f'failed ({status})':>27}", flush=True)
                continue
            print(f"{n:>8,} {label:<22}{wall:>9.3f}{wall / floor:>8.1f}{peak:>10.0f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="skip the 1024-worker cases")
    parser.add_argument("--speed", action="store_true", help="engine-speed cases: ring at 256 workers, analytic and flow")
    parser.add_argument("--large", action="store_true", help="with --speed: add 1024 workers (minutes); with --process: "
                        "add 4,096 to 65,536 workers")
    parser.add_argument("--baseline-commit", metavar="REV", help="build REV in a scratch worktree and compare against it")
    parser.add_argument("--repeat", type=int, default=1, help="runs per case and build; the minimum engine time counts")
    parser.add_argument("--baseline-python", metavar="DIR",
                        help="compare against the python/ directory of another tree (its extension built) "
                        "instead of building --baseline-commit")
    parser.add_argument("--case", action="append", metavar="STRATEGY:WORKERS:FIDELITY",
                        help="run only this case (repeatable), e.g. ring:1024:flow")
    parser.add_argument("--process", action="store_true",
                        help="whole-process time of closed-form simulate --json (with --large: up to 65,536 workers)")
    args = parser.parse_args()
    if args.process:
        process_main(args)
        return
    if args.speed:
        cases = [c for c in SPEED_CASES if args.large or c[1] < 1024]
    else:
        cases = [c for c in CASES if not (args.quick and c[1] >= 1024)]
    if args.case:
        wanted = set(args.case)
        cases = [c for c in cases if f"{c[0]}:{c[1]}:{c[4]}" in wanted]
        if not cases:
            sys.exit(f"bench_scale: no case matches --case {' '.join(args.case)} (STRATEGY:WORKERS:FIDELITY, e.g. "
                     f"ring:1024:flow, with --speed --large for the 1024-worker engine cases)")
    here = ROOT / "python"
    baseline = build_baseline(args.baseline_commit) if args.baseline_commit and not args.baseline_python else None
    base_name = args.baseline_commit
    if args.baseline_python:
        baseline = Path(args.baseline_python).resolve()
        if not (baseline / "ddlsim" / "__init__.py").is_file():
            sys.exit(f"bench_scale: --baseline-python {args.baseline_python}: no ddlsim package there "
                     f"(give the python/ directory of a tree whose extension is built)")
        base_name = args.baseline_python
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
                rows.append((f" @{base_name}", run_case(case, baseline, False)))
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
            new, old = by_build[""], by_build[f" @{base_name}"]
            if new["events"] != old["events"]:
                print(f"  note: the builds processed different events ({new['events']:,} vs {old['events']:,}); compare events/s")
            compared.append((f"{label} {fidelity}", new, old))
    if compared:
        print(f"\nevents/s, this tree vs {base_name} (same machine, same run; > 1: this tree is faster)")
        for label, new, old in compared:
            ratio = (new["events"] / new["engine_s"]) / (old["events"] / old["engine_s"])
            print(f"  {label:<24} {new['engine_s']:8.3f} s vs {old['engine_s']:8.3f} s engine, "
                  f"simulate CPU {new['cpu_s']:.3f} s vs {old['cpu_s']:.3f} s, "
                  f"{new['events'] / new['engine_s']:>12,.0f} vs {old['events'] / old['engine_s']:>12,.0f} events/s, "
                  f"ratio {ratio:.2f}; peak {new['peak_mib']:.0f} vs {old['peak_mib']:.0f} MiB")


if __name__ == "__main__":
    main()
