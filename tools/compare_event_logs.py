"""Byte-for-byte comparison of two ddlsim builds over a fixed set of CLI scenarios.

Every scenario runs `ddlsim simulate ... --record-flows -o DIR/<name>` with
the given build on PYTHONPATH; `--compare` then checks that events.parquet
and flows.parquet (and iterations.csv) of two such directories are
byte-identical, scenario by scenario. Engine changes meant to be pure speed
work (same events in the same order) must pass it:

    python tools/compare_event_logs.py run --python /tmp/ref/python --out /tmp/logs-ref
    python tools/compare_event_logs.py run --python python --out /tmp/logs-new
    python tools/compare_event_logs.py compare /tmp/logs-ref /tmp/logs-new

The scenarios cover every strategy, the all-reduce algorithms, chunked
messages, stream priority with preemption, ByteScheduler credit, in-network
fans, leaf-spine ECMP and spray, several ranks per host, closed form, async
PS, step and collective log detail, flow, analytic and packet fidelity.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import subprocess
import sys
from pathlib import Path

BASE = ["-i", "1", "-q", "--record-flows"]

# name -> extra arguments
SCENARIOS: dict[str, list[str]] = {
    "ring8_step": ["-n", "8", "--trace-detail", "step"],
    "ring8_analytic": ["-n", "8", "--network", "analytic", "--trace-detail", "step"],
    "ring32_collective": ["-n", "32", "--trace-detail", "collective"],
    "ring16_chunked": ["-n", "16", "--chunk-bytes", "1MB", "--trace-detail", "step"],
    "ring8_gamma": ["-n", "8", "--gamma", "0.05", "--trace-detail", "step"],
    "ring8_stagger": ["-n", "8", "--stagger", "1ms", "--stagger-mode", "random", "--seed", "3", "--jitter", "0.1"],
    "halving_doubling16": ["-n", "16", "--algorithm", "halving-doubling", "--trace-detail", "step"],
    "recursive_doubling8": ["-n", "8", "--algorithm", "recursive-doubling"],
    "binary_tree8": ["-n", "8", "--algorithm", "binary-tree"],
    "double_binary_tree8": ["-n", "8", "--algorithm", "double-binary-tree"],
    "direct8": ["-n", "8", "--algorithm", "direct"],
    "butterfly8": ["-n", "8", "--algorithm", "butterfly"],
    "hierarchical_ring16": ["-n", "16", "--algorithm", "hierarchical-ring", "--ranks-per-host", "4"],
    "priority_chunk": ["-n", "8", "--stream-policy", "priority", "--preemption", "chunk", "--priority-bands"],
    "priority_message": ["-n", "8", "--stream-policy", "priority", "--preemption", "message", "--chunk-bytes", "2MB"],
    "bytescheduler_credit": ["-n", "8", "--partition", "4MB", "--credit", "16MB"],
    "ps8": ["-n", "8", "--strategy", "ps", "--servers", "2"],
    "ps_async": ["-n", "8", "--strategy", "ps", "--servers", "2", "--async", "--staleness", "1", "-i", "2"],
    "ps_multiagg": ["-n", "8", "--strategy", "ps", "--servers", "2", "--in-network", "multiagg", "--switch-memory", "10MB"],
    "ring_multicast": ["-n", "8", "--in-network", "multicast"],
    "leafspine_ecmp": ["-n", "16", "--topology", "leaf-spine", "--hosts-per-leaf", "4", "--oversubscription", "2"],
    "leafspine_spray": ["-n", "16", "--topology", "leaf-spine", "--hosts-per-leaf", "4", "--routing", "spray"],
    "closed_form": ["-n", "16", "--network", "analytic", "--collective-model", "closed-form"],
    "packet4": ["-n", "4", "--network", "packet", "-m", "alexnet"],
    "background": ["-n", "8", "--background", "websearch:load=0.3,seed=2"],
    # The same at collective detail (the ring then runs on its own machine, see collective/ring.rs).
    "priority_chunk_coll": ["-n", "8", "--stream-policy", "priority", "--preemption", "chunk", "--priority-bands", "--trace-detail", "collective"],
    "priority_message_coll": ["-n", "8", "--stream-policy", "priority", "--preemption", "message", "--chunk-bytes", "2MB", "--trace-detail", "collective"],
    "bytescheduler_coll": ["-n", "8", "--partition", "4MB", "--credit", "16MB", "--trace-detail", "collective"],
    "ring_chunked_coll": ["-n", "16", "--chunk-bytes", "1MB", "--trace-detail", "collective"],
    "stagger_coll": ["-n", "8", "--stagger", "1ms", "--stagger-mode", "random", "--seed", "3", "--jitter", "0.1", "--trace-detail", "collective"],
    "leafspine_coll": ["-n", "16", "--topology", "leaf-spine", "--hosts-per-leaf", "4", "--oversubscription", "2", "--trace-detail", "collective"],
    "background_coll": ["-n", "8", "--background", "websearch:load=0.3,seed=2", "--trace-detail", "collective"],
    "ranks_per_host_coll": ["-n", "16", "--ranks-per-host", "4", "--trace-detail", "collective"],
    "analytic_coll": ["-n", "64", "--network", "analytic", "--trace-detail", "collective"],
}

COMPARED = ["events.parquet", "flows.parquet", "iterations.csv"]


def run(python: Path, out: Path, only: list[str]) -> None:
    env = dict(os.environ, PYTHONPATH=str(python.resolve()))
    out.mkdir(parents=True, exist_ok=True)
    for name, extra in SCENARIOS.items():
        if only and name not in only:
            continue
        target = out / name
        cmd = [sys.executable, "-m", "ddlsim", "simulate", *BASE, *extra, "-o", str(target)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"compare_event_logs: scenario {name} failed: {proc.stderr.strip()[-1500:]}")
        print(f"ran {name}", flush=True)


def compare(a: Path, b: Path) -> int:
    bad = 0
    for name in SCENARIOS:
        for f in COMPARED:
            fa, fb = a / name / f, b / name / f
            if not fa.exists() and not fb.exists():
                continue
            same = fa.exists() and fb.exists() and filecmp.cmp(fa, fb, shallow=False)
            if not same:
                bad += 1
            print(f"{name:<24}{f:<18}{'identical' if same else 'DIFFERENT'}")
    print(f"{bad} file(s) differ" if bad else "all identical")
    return 1 if bad else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run every scenario with one build")
    r.add_argument("--python", type=Path, required=True, help="the build's python/ directory (put on PYTHONPATH)")
    r.add_argument("--out", type=Path, required=True, help="directory for the scenarios' outputs")
    r.add_argument("--only", nargs="*", default=[], help="run only these scenarios")
    c = sub.add_parser("compare", help="compare two output directories")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.command == "run":
        run(args.python, args.out, args.only)
    else:
        sys.exit(compare(args.a, args.b))


if __name__ == "__main__":
    main()
