"""What one gloo all-reduce costs on this machine, by size and by the wait before it (docs/validation.md,
"On this 2-core machine, quiet").

The validate grid's LeNet-5 captures all-reduce one 0.25 MB bucket per iteration. At 1 Gbit/s tbf's token bucket
(500 kB) lets those bytes through at once, yet the all-reduce took 2.5 ms while training on this 2-core machine
(0.7-0.8 ms on a 16-core host): a per-call cost that is not the link's. This benchmark measures it apart, on
loopback with no shaping: 2 gloo ranks, one thread each, every (size, wait) pair `--repeats` times in a seeded
random order (so a machine that drifts over the run spreads over every condition alike); before each call a
barrier, then each rank sleeps `wait` ms (as a rank computes before its all-reduce; 0: right after the
barrier). Prints per size and wait the median, the 10th and 90th percentiles and the minimum, in microseconds,
and the share of calls slower than 4 x the size's minimum.

    python benchmarks/gloo_call_cost.py --sizes 4,16384,49152,262144,2097152 --waits 0,5 --repeats 40 --seed 0
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, args, port: int, queue) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=args.workers)
    trials = [(size, wait) for size in args.sizes for wait in args.waits for _ in range(args.repeats)]
    random.Random(args.seed).shuffle(trials)  # the same order on every rank
    tensors = {size: torch.ones(max(1, size // 4)) for size in args.sizes}
    for size in args.sizes:  # one untimed call per size: gloo's first use of a size allocates
        dist.all_reduce(tensors[size])
    times: dict[tuple[int, float], list[float]] = {}
    for size, wait in trials:
        dist.barrier()
        if wait > 0:
            time.sleep(wait / 1e3)
        start = time.perf_counter_ns()
        dist.all_reduce(tensors[size])
        times.setdefault((size, wait), []).append((time.perf_counter_ns() - start) / 1e3)
    if rank == 0:
        queue.put(times)
    dist.destroy_process_group()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def _numbers(kind, least):
    """An argparse type: comma-separated `kind` values, each at least `least` (a bad one: argparse's one-line error)."""
    def parse(text: str) -> list:
        try:
            values = [kind(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated numbers, e.g. 4,16384") from None
        if not values or min(values) < least:
            raise argparse.ArgumentTypeError(f"{text!r}: give one or more numbers, each at least {least}")
        return values
    return parse


def main(argv=None) -> int:
    import torch.multiprocessing as mp

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=_numbers(int, 4), default=[4, 16384, 49152, 262144, 2097152],
                        help="bytes per all-reduce, comma-separated")
    parser.add_argument("--waits", type=_numbers(float, 0.0), default=[0.0, 5.0],
                        help="ms each rank sleeps after the barrier, comma-separated")
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.workers < 2:
        parser.error("--repeats must be >= 1 and --workers >= 2")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank, args=(r, args, port, queue)) for r in range(args.workers)]
    for p in procs:
        p.start()
    times = queue.get()
    for p in procs:
        p.join()
    print(f"gloo all-reduce, {args.workers} ranks on loopback, {os.cpu_count()} cores, {args.repeats} calls per cell "
          f"(seed {args.seed}); microseconds")
    print(f"{'bytes':>9} {'wait ms':>7} {'median':>8} {'p10':>8} {'p90':>8} {'min':>8} {'> 4x min':>8}")
    for size in args.sizes:
        floor = min(min(times[(size, w)]) for w in args.waits)
        for wait in args.waits:
            v = times[(size, wait)]
            slow = sum(t > 4 * floor for t in v) / len(v)
            print(f"{size:>9} {wait:>7g} {statistics.median(v):>8.0f} {_percentile(v, 0.1):>8.0f} "
                  f"{_percentile(v, 0.9):>8.0f} {min(v):>8.0f} {slow:>8.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
