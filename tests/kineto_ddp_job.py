"""One rank of a tiny 2-process gloo DDP job under torch.profiler (CPU activities);
writes OUT/rank<RANK>.json with prof.export_chrome_trace. Used by test_capture_kineto.py.

    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python tests/kineto_ddp_job.py OUT
"""

import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile, schedule

STEPS = 4  # 1 warm-up + 3 recorded (ProfilerStep#1..#3: the profiler names steps only under a schedule)


def main(out_dir: str) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    path = os.path.join(out_dir, f"rank{rank}.json")
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=STEPS - 1),
                 on_trace_ready=lambda prof: prof.export_chrome_trace(path)) as prof:
        for _ in range(STEPS):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
    # the trace is written and closed; skip Python's finalization of torch (1-2 s of a busy core per rank)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
