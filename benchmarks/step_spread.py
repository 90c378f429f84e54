#!/usr/bin/env python3
"""How much a training step's measured time moves between processes, and the roofline beside it
(docs/compute-model.md, "Run 4": a host-bound step measured in two processes of one session differed by up to
1.9x, so one process's number cannot test a 15 % goal).

    PYTHONPATH=python python benchmarks/step_spread.py --cases resnet50:32:fp16 alexnet:32:tf32 --processes 5 --out spread/
    PYTHONPATH=python python benchmarks/step_spread.py --device cpu --quick --cases resnet18:2:fp32 --processes 3 --out /tmp/spread
    PYTHONPATH=python python benchmarks/step_spread.py --report spread/ --predict-device H200

Each of N fresh processes, one after another, times every case's eager step (forward, loss and backward, no
hooks: gpu_layer_times.py's step, its warm-up and its median of repeats), the cases in an order rotated by
the process's number, so that no case always comes first. OUT/spread.csv has one row per process and case,
written after every process (a run cut short keeps the processes that finished). ``--report`` gives, per case,
the median over the processes, the lowest and the highest, their spread ((highest - lowest) / median), and
ddlsim's roofline for the case: its error against the median and whether it lies inside the measured range.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "python"))

COLUMNS = ["model", "batch", "precision", "image", "process", "measured_ms"]


def rotated(cases: list, k: int) -> list:
    """The cases in the order process k runs them: the list rotated left by k."""
    if not cases:
        return []
    k %= len(cases)
    return cases[k:] + cases[:k]


def child(cases: list, process: int, device: str, quick: bool, warmup: int, repeats: int) -> int:
    """One process: every case's eager step, one JSON line each on stdout."""
    import torch

    import gpu_layer_times as glt

    cuda = device == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = False  # PyTorch's default, as gpu_layer_times.py
    for name, batch, precision in rotated(cases, process):
        torch.manual_seed(0)
        dev = "cuda" if cuda else "cpu"
        image = (75 if name == "inception_v3" else 64) if quick else glt.IMAGE.get(name, 224)
        row = {"model": name, "batch": batch, "precision": precision, "image": image, "process": process}
        try:
            model = glt.build(name).to(dev).train()
            x = torch.randn(batch, 3, image, image, device=dev)
            y = torch.randint(0, 1000, (batch,), device=dev)
            autocast = glt.set_precision(precision, cuda)
            times = glt.timed(lambda: glt.step(model, x, y, autocast), glt.Timer(cuda), warmup, repeats)  # noqa: B023
            row["measured_ms"] = round(statistics.median(times), 4)
        except RuntimeError as exc:  # e.g. out of memory: recorded, the other cases still run
            row["error"] = f"{type(exc).__name__}: {exc}"[:200]
        print(json.dumps(row), flush=True)
        model = x = y = None
        if cuda:
            torch.cuda.empty_cache()
    return 0


def write_rows(out: Path, rows: list) -> None:
    """OUT/spread.csv through the benchmarks' atomic write (gpu_setup.write_out): an interrupted write leaves the
    previous file or none, never a partial one."""
    import io

    from gpu_setup import write_out

    text = io.StringIO()
    w = csv.DictWriter(text, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    if not write_out(out / "spread.csv", text.getvalue()):
        raise SystemExit(2)


def measure(args, cases: list) -> int:
    """N child processes in turn, each under what is left of the budget; spread.csv after each."""
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(HERE.parent / "python") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    spec = [f"{m}:{b}:{p}" for m, b, p in cases]
    rows, failures, t0 = [], [], time.monotonic()
    for k in range(args.processes):
        left = args.budget_s - (time.monotonic() - t0)
        if left <= 0:
            failures.append(f"process {k}: not started (budget)")
            continue
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(k), "--device", args.device,
               "--warmup", str(args.warmup), "--repeats", str(args.repeats), "--cases", *spec]
        if args.quick:
            cmd.append("--quick")
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=left, env=env)
            out, code = proc.stdout, proc.returncode
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            code = "timeout"
        parsed = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        got = [r for r in parsed if "measured_ms" in r]
        rows += got
        failures += [f"process {k}: {r['model']}:{r['batch']}:{r['precision']}: {r['error']}" for r in parsed
                     if "error" in r]
        if code != 0:
            failures.append(f"process {k}: exit {code}, {len(got)} of {len(cases)} cases")
        write_rows(args.out, rows)
        print(f"process {k}: " + ", ".join(f"{r['model']}:{r['batch']}:{r['precision']} {r['measured_ms']:.2f} ms"
                                           for r in got), flush=True)
    for line in failures:
        print(line, file=sys.stderr)
    print(f"wrote {args.out / 'spread.csv'}: {len(rows)} rows from {args.processes} processes in "
          f"{time.monotonic() - t0:.0f} s", flush=True)
    return 0


def summarize(rows: list) -> list:
    """Per case (in first-seen order): the processes' times, their median, lowest, highest and spread."""
    groups: dict = {}
    for r in rows:
        key = (r["model"], int(r["batch"]), r["precision"], int(r.get("image") or 0))
        groups.setdefault(key, []).append(float(r["measured_ms"]))
    out = []
    for (model, batch, precision, image), times in groups.items():
        med = statistics.median(times)
        out.append({"model": model, "batch": batch, "precision": precision, "image": image, "processes": len(times),
                    "median_ms": med, "min_ms": min(times), "max_ms": max(times),
                    "spread": (max(times) - min(times)) / med})
    return out


def report(run: Path, device: str) -> str:
    path = run / "spread.csv" if run.is_dir() else run
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    missing = [c for c in ("model", "batch", "precision", "measured_ms") if rows and c not in rows[0]]
    if missing:
        raise KeyError(missing[0])
    import gpu_layer_times as glt
    from ddlsim.workload import roofline
    from ddlsim.workload.zoo import load_model

    lines = ["| model | batch | precision | processes | median ms | lowest ms | highest ms | spread | roofline ms | "
             "error vs median | inside the range |", "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | "
             "---: | --- |"]
    within = inside = scored = 0
    cases = summarize(rows)
    for c in cases:
        if c["image"] != glt.IMAGE.get(c["model"], 224):  # a --quick run's small images: the zoo's model is not it
            lines.append(f"| {c['model']} | {c['batch']} | {c['precision']} | {c['processes']} | {c['median_ms']:.2f} | "
                         f"{c['min_ms']:.2f} | {c['max_ms']:.2f} | {c['spread'] * 100:.1f} % | - (image "
                         f"{c['image']}) | - | - |")
            continue
        scored += 1
        pred = glt.predict(c["model"], c["batch"], c["precision"], device)["roofline_ms"]
        host, gpu, _ = roofline.step_totals_s(load_model(c["model"]), device, c["precision"], c["batch"])
        err = pred / c["median_ms"] - 1
        is_inside = c["min_ms"] <= pred <= c["max_ms"]
        within += abs(err) <= 0.15
        inside += is_inside
        bound = "host" if host > gpu else "GPU"
        lines.append(f"| {c['model']} | {c['batch']} | {c['precision']} | {c['processes']} | {c['median_ms']:.2f} | "
                     f"{c['min_ms']:.2f} | {c['max_ms']:.2f} | {c['spread'] * 100:.1f} % | {pred:.2f} ({bound}) | "
                     f"{err * 100:+.1f} % | {'yes' if is_inside else 'no'} |")
    if scored:
        lines.append(f"\n{within} of {scored} cases within 15 % of the median over processes; the roofline inside "
                     f"the measured range in {inside} of {scored}.")
    else:
        lines.append("\nno case at the zoo's image size (224, Inception-v3 299): nothing to score against the roofline.")
    return "\n".join(lines)


def main(argv=None) -> int:
    import gpu_layer_times as glt

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=None, metavar="MODEL:BATCH:PRECISION")
    ap.add_argument("--processes", type=int, default=5, help="fresh processes, one after another (default 5)")
    ap.add_argument("--out", type=Path, default=None, help="a new or empty directory for spread.csv")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--quick", action="store_true", help="small images (a smoke test)")
    ap.add_argument("--warmup", type=int, default=None, help="steps before timing, per case and process (default 5)")
    ap.add_argument("--repeats", type=int, default=None, help="timed steps, per case and process (default 10)")
    ap.add_argument("--budget-s", type=float, default=110.0, help="start no process after this many seconds")
    ap.add_argument("--report", type=Path, default=None, metavar="RUN",
                    help="measure nothing: a finished run's spread.csv beside the roofline")
    ap.add_argument("--predict-device", default="H100", help="ddlsim device preset for --report (default H100)")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.report is not None:
        try:
            print(report(args.report, args.predict_device))
        except (OSError, KeyError, ValueError) as exc:
            why = f"no {exc.args[0]!r} column" if isinstance(exc, KeyError) and exc.args else str(exc)
            print(f"error: --report {args.report}: {why}; give a finished run's directory or its spread.csv and a "
                  f"known --predict-device", file=sys.stderr)
            return 2
        return 0
    args.warmup = 1 if args.warmup is None and args.quick else (5 if args.warmup is None else args.warmup)
    args.repeats = 2 if args.repeats is None and args.quick else (10 if args.repeats is None else args.repeats)
    try:
        cases = [glt.parse_case(c) for c in args.cases or []]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not cases or args.processes < 1 or args.warmup < 0 or args.repeats < 1:
        print("error: give --cases MODEL:BATCH:PRECISION ..., --processes >= 1, --warmup >= 0 and --repeats >= 1",
              file=sys.stderr)
        return 2
    if args.child is not None:
        return child(cases, args.child, args.device, args.quick, args.warmup, args.repeats)
    if args.out is None:
        print("error: --out DIR is needed to measure (or give --report RUN)", file=sys.stderr)
        return 2
    if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        print(f"error: --out {args.out}: exists and is not an empty directory; name a new one", file=sys.stderr)
        return 2
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("error: --device cuda but torch sees no GPU; run with --device cpu --quick for a smoke test",
                  file=sys.stderr)
            return 2
    return measure(args, cases)


if __name__ == "__main__":
    sys.exit(main())
