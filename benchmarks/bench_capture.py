"""Capture overhead: the same DDP job with and without the recording hooks.

Two ranks (CPU, gloo) each hold two identical DDP copies of the model, one
plain and one recorded by ddlsim's hooks (per-layer forward/backward rows,
the all-reduce comm hook, a fsync'd flush per iteration), and run their
iterations alternately, so both see the same machine load. After one
warm-up iteration each (DDP's bucket rebuild), rank 0 times every iteration
(zero_grad to optimizer step, behind a barrier); the medians and their ratio
are printed. Target: overhead under 3 %. A third copy with torch's own
``allreduce_hook`` separates the cost of having any Python comm hook (DDP
then no longer fuses the 1/world-size scaling into its gradient copy; the
hook scales the bucket in an extra pass) from the recording's.

    PYTHONPATH=python python benchmarks/bench_capture.py [--model resnet18] [--iterations 10] [--batch-size 8]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time


def _rank(rank: int, args, port: int, out_dir: str, queue) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel

    from ddlsim.capture.ddp_hooks import DdpHooks
    from ddlsim.capture.ddp_models import build_model, synthetic_batches
    from ddlsim.capture.recorder import RankRecorder

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    plain = DistributedDataParallel(build_model(args.model), bucket_cap_mb=args.bucket_cap_mb)
    torch.manual_seed(0)
    hooked = DistributedDataParallel(build_model(args.model), bucket_cap_mb=args.bucket_cap_mb)
    hooked.register_comm_hook(None, allreduce_hook)
    torch.manual_seed(0)
    recorded = DistributedDataParallel(build_model(args.model), bucket_cap_mb=args.bucket_cap_mb)
    hooks = DdpHooks(recorded, RankRecorder(out_dir, rank, "worker"))
    models = {"plain": (plain, torch.optim.SGD(plain.parameters(), lr=0.01), None),
              "comm hook": (hooked, torch.optim.SGD(hooked.parameters(), lr=0.01), None),
              "recorded": (recorded, torch.optim.SGD(recorded.parameters(), lr=0.01), hooks)}
    batches = synthetic_batches(args.model, args.batch_size, args.image_size, args.iterations + 1, rank)
    loss_fn = torch.nn.CrossEntropyLoss()
    times = {mode: [] for mode in models}
    for iteration, (x, y) in enumerate(batches):
        order = list(models) if iteration % 2 == 0 else list(reversed(models))
        for mode in order:
            model, optimizer, h = models[mode]
            dist.barrier()
            start = time.perf_counter()
            if h is not None:
                h.begin_iteration(iteration)
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            if h is not None:
                step_start = time.monotonic_ns()
                optimizer.step()
                h.optimizer_step_row(step_start, time.monotonic_ns())
                h.end_iteration()
            else:
                optimizer.step()
            if iteration > 0:
                times[mode].append(time.perf_counter() - start)
    if rank == 0:
        queue.put(times)
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    import torch.multiprocessing as mp

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0)
    args = parser.parse_args(argv)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as out_dir:
        mp.start_processes(_rank, args=(args, port, out_dir, queue), nprocs=2, start_method="spawn")
        times = queue.get()
    median = {mode: statistics.median(v) for mode, v in times.items()}
    print(f"{args.model}, 2 ranks (gloo, CPU), batch {args.batch_size}, {args.image_size}x{args.image_size}, "
          f"{len(times['plain'])} timed iterations each (alternating)")
    for mode, label in (("plain", "plain DDP"), ("comm hook", "DDP + torch's default allreduce_hook"),
                        ("recorded", "DDP + ddlsim's recording hooks")):
        print(f"  {label:38s} median {median[mode] * 1e3:7.1f} ms   mean {statistics.mean(times[mode]) * 1e3:7.1f} ms")
    print(f"capture overhead vs plain DDP: {(median['recorded'] / median['plain'] - 1) * 100:+.2f} % (target < 3 %)")
    print(f"  of which any Python comm hook: {(median['comm hook'] / median['plain'] - 1) * 100:+.2f} %; "
          f"the recording itself: {(median['recorded'] / median['comm hook'] - 1) * 100:+.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
