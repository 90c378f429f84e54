"""Capture overhead: iteration time of a DDP job recorded by ddlsim's capture
against the same job unrecorded. Target: under 3 %.

Each rank holds identical DDP copies of the model, one plain and one
recorded (per-layer forward/backward rows, the all-reduce comm hook, the
optimizer row, a flush per iteration: what ``ddlsim capture ddp`` records),
and runs them alternately (ABBA order), so both see the same machine load.
After warm-up iterations (DDP's bucket rebuild), rank 0 times every
iteration from zero_grad to the end of the optimizer step, behind a barrier
(and a device synchronisation on a GPU). Printed: the median of each, the
ratio of medians and the median of the per-iteration ratios (the paired
estimate, less sensitive to drifting load); rank 0's CPU time per iteration
(all its threads: the host work the recording adds, which other jobs' load
disturbs less than the wall time); and whether the recorded copy's log is
complete (every layer's forward and backward row in every iteration).

    PYTHONPATH=python OMP_NUM_THREADS=1 python benchmarks/bench_capture_overhead.py              # CPU, gloo, 2 ranks
    PYTHONPATH=python python benchmarks/bench_capture_overhead.py --device cuda --workers 1      # GPU, NCCL, CUDA events

`--layer-every K` records layer rows on the warm-up iterations and every K-th timed iteration from the first
only (``ddlsim capture ddp --layer-every K``); the median then hides the sampled iterations, so the overhead over
all timed iterations (ratio of means) is printed too, and that of the sampled iterations alone. Given several
times (``--layer-every 1 --layer-every 10``), one recorded copy per K runs in the same alternation.

`--block B` times blocks of B consecutive iterations per copy with no synchronisation between them (the host runs
ahead of the GPU as in training, so a synchronisation inside the capture shows; the times are per iteration, one
per block, and "sampled" means a block holding a sampled iteration).

With K > 1 the recorded copy runs its un-sampled iterations through a second DDP wrapper of its model without
the Python comm hook (DDP's own C++ all-reduce, no ``allreduce`` rows), as ``capture ddp`` does. `--old-hook`
adds, per K > 1, a copy with the previous behaviour (one wrapper, the Python comm hook on every iteration) to
the same alternation: before and after, paired, in one run.

`--comm-hook` adds a third copy with torch's default ``allreduce_hook`` (a Python comm hook that records
nothing), which separates the cost of any Python comm hook from the recording's.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gpu_setup import check_out, write_out  # the benchmarks' one way to write a result file


def _rank(rank: int, args, port: int, out_dir: str, queue) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from ddlsim.capture.ddp_hooks import DdpHooks
    from ddlsim.capture.ddp_models import build_model, synthetic_batches
    from ddlsim.capture.recorder import RankRecorder

    cuda = args.device == "cuda"
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if not cuda:
        torch.set_num_threads(1)
    else:
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=args.workers)
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    ids = [dev.index] if cuda else None
    torch.manual_seed(0)
    plain = DistributedDataParallel(build_model(args.model).to(dev), bucket_cap_mb=args.bucket_cap_mb, device_ids=ids)
    models = {"plain": (plain, torch.optim.SGD(plain.parameters(), lr=0.01), None)}
    copies = [(every, False) for every in args.layer_every]
    if args.old_hook:
        copies += [(every, True) for every in args.layer_every if every > 1]
    for every, old in copies:  # one recorded copy per K (and per behaviour), each with its own rank file
        torch.manual_seed(0)
        recorded = DistributedDataParallel(build_model(args.model).to(dev), bucket_cap_mb=args.bucket_cap_mb, device_ids=ids)
        # K > 1: the un-sampled iterations through a wrapper without the Python comm hook (capture ddp), unless `old`
        twin = (DistributedDataParallel(recorded.module, bucket_cap_mb=args.bucket_cap_mb, device_ids=ids)
                if every > 1 and not old else None)
        # layer rows on the warm-up iterations and every K-th from the first timed one (capture ddp --layer-every K)
        copy_dir = os.path.join(out_dir, f"k{every}{'-old' if old else ''}")
        hooks = DdpHooks(recorded, RankRecorder(copy_dir, rank, "worker"), cuda=cuda, layer_every=every,
                         layer_warmup=args.warmup, plain=twin)
        models[_copy_name(args, every, old)] = (recorded, torch.optim.SGD(recorded.parameters(), lr=0.01), hooks)
    if args.comm_hook:
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        torch.manual_seed(0)
        hooked = DistributedDataParallel(build_model(args.model).to(dev), bucket_cap_mb=args.bucket_cap_mb, device_ids=ids)
        hooked.register_comm_hook(None, allreduce_hook)
        models["comm hook"] = (hooked, torch.optim.SGD(hooked.parameters(), lr=0.01), None)
    total = args.warmup + args.iterations
    batches = [(x.to(dev), y.to(dev)) for x, y in synthetic_batches(args.model, args.batch_size, args.image_size, total, rank)]
    loss_fn = torch.nn.CrossEntropyLoss()
    times = {mode: [] for mode in models}
    cpu = {mode: [] for mode in models}  # this process's CPU time (all its threads) per iteration
    block = args.block
    for first in range(0, total, block):  # a block of `block` iterations per copy (1: each iteration timed alone)
        chunk = list(range(first, min(first + block, total)))
        order = list(models) if (first // block) % 2 == 0 else list(reversed(models))
        for mode in order:
            model, optimizer, h = models[mode]
            if cuda:
                torch.cuda.synchronize()
            dist.barrier()
            start, start_cpu = time.perf_counter(), time.process_time()
            for iteration in chunk:  # no synchronisation inside a block: the host runs ahead as in training
                x, y = batches[iteration]
                if h is not None:
                    h.begin_iteration(iteration)
                optimizer.zero_grad(set_to_none=True)
                loss_fn((model if h is None else h.model)(x), y).backward()
                if h is not None:
                    step_start = h.mark()
                    optimizer.step()
                    h.optimizer_step_row(step_start, h.mark())
                    h.end_iteration()
                else:
                    optimizer.step()
            if cuda:
                torch.cuda.synchronize()
            if chunk[0] >= args.warmup:  # one entry per block: its time per iteration
                times[mode].append((time.perf_counter() - start) / len(chunk))
                cpu[mode].append((time.process_time() - start_cpu) / len(chunk))
    recorded_copies = {mode: h for mode, (_, _, h) in models.items() if h is not None}
    for h in recorded_copies.values():
        h.rec.close()
    if rank == 0:
        device = torch.cuda.get_device_name(dev) if cuda else "cpu"
        checks = {mode: (_check_rows(h, args.warmup + args.iterations), list(h.layer_iterations))
                  for mode, h in recorded_copies.items()}
        queue.put((times, cpu, device, checks))
    dist.destroy_process_group()


def robust_overhead(recorded: list[float], plain: list[float], sampled: set[int]) -> tuple[float, dict]:
    """The overhead over all timed iterations, robust to the other jobs' spikes: the timed iterations (positions)
    fall in three kinds, those with layer rows (`sampled`), the one right after each (it converts their rows) and
    the others; per kind the median of the paired differences (recorded - plain), weighted by how many timed
    iterations are of that kind, over the plain median times their number. A mean would let one 90 ms spike of
    either copy move 50 iterations' result by 4 %. Returns (ratio, {kind: (count, median difference s)})."""
    import statistics

    kinds: dict[str, list[float]] = {"sampled": [], "after": [], "other": []}
    for k, (r, p) in enumerate(zip(recorded, plain)):
        kind = "sampled" if k in sampled else "after" if k - 1 in sampled else "other"
        kinds[kind].append(r - p)
    parts = {kind: (len(v), statistics.median(v)) for kind, v in kinds.items() if v}
    extra = sum(n * m for n, m in parts.values())
    return 1 + extra / (len(plain) * statistics.median(plain)), parts


def _copy_name(args, every: int, old: bool = False) -> str:
    """The recorded copy's name: "recorded" with one --layer-every (and no --old-hook), "recorded K=k" with several;
    "recorded K=k old" for the copy with the Python comm hook on every iteration (--old-hook)."""
    if old:
        return f"recorded K={every} old"
    return "recorded" if len(args.layer_every) == 1 and not args.old_hook else f"recorded K={every}"


def _check_rows(hooks, iterations: int) -> str:
    """The recorded copy's log is complete: every sampled iteration (all with --layer-every 1) has one forward and
    one backward row per layer, every other one a forward and a backward row of the whole pass; every iteration its
    optimizer and marker rows, and its all-reduce rows where it ran through the comm hook's wrapper (every iteration
    with K = 1 or --old-hook, the sampled ones otherwise: none on the others); and every row ends after it starts."""
    from collections import Counter

    with open(hooks.rec.path, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.startswith('{"id"')]
    count = Counter((r["iteration"], r["op"]) for r in rows)
    sampled, hooked = set(hooks.layer_iterations), set(hooks.collective_iterations)
    complete = all(count[(i, "forward")] == count[(i, "backward")] == (len(hooks.layers) if i in sampled else 1)
                   and (count[(i, "allreduce")] >= 1) == (i in hooked) and count[(i, "optimizer_step")] == 1
                   and count[(i, "iteration")] == 1 for i in range(iterations))
    ordered = all(r["start_ns"] <= r["end_ns"] for r in rows)
    return (f"{'complete' if complete and ordered else 'INCOMPLETE'}: {len(rows)} rows over {iterations} iterations "
            f"({len(hooks.layers)} layers; layer rows on {len(sampled)} of them, all-reduce rows on {len(hooked)})")


def main(argv: list[str] | None = None) -> int:
    import torch.multiprocessing as mp

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18", help="lenet5 | resnet18 | resnet50")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--workers", type=int, default=None, help="ranks (default: 2 on the CPU, 1 on a GPU)")
    parser.add_argument("--iterations", type=int, default=20, help="timed iterations of each copy")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0)
    parser.add_argument("--json", type=str, default=None, help="also write the times to this JSON file")
    parser.add_argument("--block", type=int, default=1,
                        help="time blocks of this many consecutive iterations per copy, with no synchronisation between "
                        "them (as in training; default 1: every iteration timed alone, behind a barrier and a device "
                        "synchronisation); --warmup and --iterations must be multiples of it; the times are per "
                        "iteration, one per block")
    parser.add_argument("--comm-hook", action="store_true", help="also time a copy with torch's default allreduce_hook")
    parser.add_argument("--old-hook", action="store_true",
                        help="also time, per --layer-every K > 1, the previous capture: one DDP wrapper, the Python comm "
                        "hook on every iteration (before/after in one run)")
    parser.add_argument("--layer-every", type=int, action="append", default=None,
                        help="layer rows on the warm-up iterations and every K-th timed one from the first (capture ddp "
                        "--layer-every K; default 1); repeated: one recorded copy per K, all in the same alternation")
    args = parser.parse_args(argv)
    args.workers = args.workers or (1 if args.device == "cuda" else 2)
    args.layer_every = args.layer_every or [1]
    if min(args.layer_every) < 1 or len(set(args.layer_every)) != len(args.layer_every):
        parser.error(f"--layer-every must be distinct positive integers, got {args.layer_every}")
    if args.block < 1 or args.warmup % args.block or args.iterations % args.block:
        parser.error(f"--block must be a positive divisor of --warmup and --iterations, got {args.block}")
    if args.json and not check_out(Path(args.json), "--json"):  # before any run: a bad path costs nothing
        return 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as out_dir:
        mp.start_processes(_rank, args=(args, port, out_dir, queue), nprocs=args.workers, start_method="spawn")
        times, cpu, device, checks = queue.get()
    median = {mode: statistics.median(v) for mode, v in times.items()}
    mean = {mode: statistics.mean(v) for mode, v in times.items()}
    backend = "NCCL, GPU, CUDA-event timings" if args.device == "cuda" else "gloo, CPU"
    print(f"{args.model} on {device}, {args.workers} rank(s) ({backend}), batch {args.batch_size}, {args.image_size}x{args.image_size}, "
          f"{len(times['plain'])} timed {'iterations' if args.block == 1 else f'blocks of {args.block} iterations'} each "
          f"(alternating, after {args.warmup} warm-up)")
    labels = {"plain": "plain DDP", "comm hook": "DDP + torch's allreduce_hook"}
    labels.update({_copy_name(args, k): "DDP + ddlsim's capture" + ("" if _copy_name(args, k) == "recorded" else f", K={k}")
                   for k in args.layer_every})
    if args.old_hook:
        labels.update({_copy_name(args, k, True): f"DDP + capture, K={k}, hook always" for k in args.layer_every if k > 1})
    for mode, label in labels.items():
        if mode not in times:
            continue
        print(f"  {label:36s} median {median[mode] * 1e3:8.2f} ms   mean {mean[mode] * 1e3:8.2f} ms"
              f"   rank 0's CPU time median {statistics.median(cpu[mode]) * 1e3:8.2f} ms")
    report = {}
    for every, old in [(k, False) for k in args.layer_every] + [(k, True) for k in args.layer_every if args.old_hook and k > 1]:
        mode = _copy_name(args, every, old)
        rows, sampled = checks[mode]
        tag = "" if mode == "recorded" else f"[K={every}{', hook always' if old else ''}] "
        paired = statistics.median(r / p for r, p in zip(times[mode], times["plain"]))
        # the timed entries (iterations, or blocks of --block) with layer rows
        on = sorted({(i - args.warmup) // args.block for i in sampled if i >= args.warmup})
        print(f"{tag}recorded log: {rows}")
        cpu_ratio = statistics.median(cpu[mode]) / statistics.median(cpu["plain"])
        print(f"{tag}rank 0's CPU time: {(cpu_ratio - 1) * 100:+.2f} % (ratio of medians; the host work the recording "
              f"adds, less sensitive to other jobs' load than the wall time)")
        print(f"{tag}capture overhead: {(median[mode] / median['plain'] - 1) * 100:+.2f} % (ratio of medians), "
              f"{(paired - 1) * 100:+.2f} % (median of paired ratios); target < 3 %")
        sampled_ratio = None
        if every > 1 and on:
            sampled_ratio = (statistics.mean(times[mode][k] for k in on) / statistics.mean(times["plain"][k] for k in on))
            print(f"{tag}layer rows on {len(on)} of {len(times['plain'])} timed iterations (--layer-every {every}): "
                  f"those cost {(sampled_ratio - 1) * 100:+.2f} % (ratio of means); the median hides them, so:")
        print(f"{tag}capture overhead over all timed iterations: {(mean[mode] / mean['plain'] - 1) * 100:+.2f} % "
              f"(ratio of means, every timed iteration counted)")
        robust, parts = robust_overhead(times[mode], times["plain"], set(on))
        print(f"{tag}capture overhead over all timed iterations, robust to spikes: {(robust - 1) * 100:+.2f} % (per kind "
              "of iteration the median paired difference x its count: "
              + ", ".join(f"{kind} {n} x {m * 1e3:+.2f} ms" for kind, (n, m) in parts.items()) + ")")
        report[mode] = {"layer_every": every, "hook_every_iteration": old or every == 1, "recorded_log": rows, "overhead_ratio_of_medians": median[mode] / median["plain"],
                        "overhead_paired_median": paired, "overhead_ratio_of_means": mean[mode] / mean["plain"],
                        "cpu_ratio_of_medians": cpu_ratio, "layer_iterations": sampled, "overhead_robust": robust,
                        "overhead_robust_parts_s": parts,
                        "overhead_sampled_iterations_ratio_of_means": sampled_ratio}
    if args.json:
        first = report[_copy_name(args, args.layer_every[0])]  # the keys of a one-copy run, as before
        text = json.dumps({"args": vars(args), "device": device, "times_s": times, "cpu_times_s": cpu, **first,
                           "copies": report}, indent=1)
        if not write_out(Path(args.json), text, option="--json"):
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
