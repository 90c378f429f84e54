"""Does a CPU training step run slower after its thread idled? (docs/validation.md, "On a quiet machine")

A DDP rank on a slow link idles while its all-reduce is on the wire (16 ms per iteration for LeNet-5 at
100 Mbit/s, 0.7 ms at 1 Gbit/s) and then runs its optimizer step and the next forward and backward. The
validate grid's 100 Mbit/s captures measured every compute row slower than the 1 Gbit/s ones made 15-44 s
earlier on the same cores. Two causes fit: a core that is slower after a long idle (a deeper sleep state, a
lower clock, cold caches), or a machine that was slower while those captures ran. This benchmark tells them
apart on one machine, in one run: it times the step, the forward and the backward right after the thread
waited ``idle`` ms, either sleeping (the core may go idle, as a rank blocked on its all-reduce does) or
spinning (the core stays busy), with the idle lengths and the two ways of waiting in a seeded random order,
so that a machine getting slower or faster over the run spreads over every condition alike.

    python benchmarks/idle_wake.py --model lenet5 --idles 0,0.5,2,8,16,32 --repeats 40 --out idle.csv

``--out`` writes every trial; ``ddlsim replay --idle-curve idle.csv`` (and ``ddlsim validate --idle-curve``)
replays a DDP capture with the curve of its sleeping trials (ddlsim.simulation.idle_wake), as
``ddlsim capture ddp`` measures it on each rank after training.

Prints, per way of waiting and idle length, the median of each part and its ratio to the same part after no
wait. Pin it to a core (``taskset -c 6``) to see one core's behaviour; unpinned, the scheduler may also move
the thread to another core after a sleep.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from ddlsim.capture.idle_curve import trial_order  # noqa: E402  (the trials' seeded order, as capture has it)


def run(model_name: str, batch: int, image_size: int, idles, modes, repeats: int, seed: int, warmup: int = 5):
    """Every trial (ddlsim.capture.idle_curve.trials) of `model_name` at `batch`, one thread."""
    import torch

    from ddlsim.capture.ddp_models import build_model, synthetic_batches
    from ddlsim.capture.idle_curve import Bench, trials

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    images, labels = synthetic_batches(model_name, batch, image_size, 1, seed)[0]
    return trials(Bench(build_model(model_name), images, labels), idles, modes, repeats, seed, warmup=warmup)


def summary(rows):
    """Median per (mode, idle) of each part, and its ratio to the same mode's idle-0 median (or the smallest idle)."""
    parts = ("step_ms", "forward_ms", "backward_ms")
    groups = {}
    for row in rows:
        groups.setdefault((row["mode"], row["idle_ms"]), []).append(row)
    out = []
    for mode in sorted({m for m, _ in groups}):
        idles = sorted(i for m, i in groups if m == mode)
        base = {p: statistics.median(r[p] for r in groups[(mode, idles[0])]) for p in parts}
        for idle in idles:
            med = {p: statistics.median(r[p] for r in groups[(mode, idle)]) for p in parts}
            out.append({"mode": mode, "idle_ms": idle, "n": len(groups[(mode, idle)]),
                        **{p: med[p] for p in parts},
                        **{p.replace("_ms", "_ratio"): (med[p] / base[p] if base[p] > 0 else float("nan")) for p in parts}})
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="lenet5", choices=("lenet5", "resnet18", "resnet50"))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--idles", default="0,0.5,2,8,16,32", help="idle lengths in ms, comma-separated")
    parser.add_argument("--modes", default="sleep,spin", help="sleep, spin or both")
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="CSV of every trial")
    args = parser.parse_args(argv)
    try:
        idles = sorted({float(x) for x in args.idles.split(",") if x.strip()})
    except ValueError:
        print(f"idle_wake.py: --idles {args.idles!r} must be numbers of ms, comma-separated", file=sys.stderr)
        return 2
    modes = [m for m in args.modes.split(",") if m]
    if not idles or any(i < 0 for i in idles) or not modes or any(m not in ("sleep", "spin") for m in modes) \
            or args.repeats < 1:
        print("idle_wake.py: give idles >= 0, modes among sleep,spin and --repeats >= 1", file=sys.stderr)
        return 2
    if args.out and os.path.lexists(args.out):
        print(f"idle_wake.py: {args.out} exists; name a new file for --out", file=sys.stderr)
        return 2
    rows = run(args.model, args.batch, args.image_size, idles, modes, args.repeats, args.seed)
    if args.out:
        with open(args.out, "x", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    print(f"{args.model}, batch {args.batch}, {args.repeats} trials per condition, one thread; "
          f"medians in ms (ratio to the same wait's shortest idle)")
    print("| wait | idle ms | step | forward | backward |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for s in summary(rows):
        print(f"| {s['mode']} | {s['idle_ms']:g} | {s['step_ms']:.3f} ({s['step_ratio']:.2f}) | "
              f"{s['forward_ms']:.3f} ({s['forward_ratio']:.2f}) | {s['backward_ms']:.3f} ({s['backward_ratio']:.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
