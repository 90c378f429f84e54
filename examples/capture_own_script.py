"""Record your own DDP training script with ddlsim.capture.attach.

Two ranks on this machine (CPU, gloo), a tiny MLP, three iterations:

    python examples/capture_own_script.py run-own/      # then: ddlsim analyze run-own/events.parquet

Under torchrun, drop the spawn and call `train(out_dir)` in each rank
(torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT):

    torchrun --nproc-per-node 2 examples/capture_own_script.py run-own/ --torchrun

`--iterations N` trains N iterations (default 3). With `--plan PLAN` the
script runs a `ddlsim plan --out PLAN` result (made from its own capture)
and records that it did:

    ddlsim plan --model Sequential --profile run-own/events.parquet --workers 2 --out plan.json
    python examples/capture_own_script.py run-planned/ --plan plan.json
    ddlsim plan --apply report/ --before run-own/ --after run-planned/
"""

import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import ddlsim.capture


def train(out_dir: str, iterations: int = 3, plan_path: str | None = None) -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
    plan = None
    if plan_path is None:
        ddp_model = DistributedDataParallel(model, bucket_cap_mb=0.05)  # small buckets: several all-reduces
    else:  # the plan's buckets (or merge groups); loss= lets a merge plan run as DDP's own buckets
        x0, y0 = torch.randn(2, 64), torch.randint(0, 10, (2,))
        plan = ddlsim.capture.plan_for(model, plan_path, loss=lambda m: nn.functional.cross_entropy(m(x0), y0))
        ddp_model = DistributedDataParallel(model, **plan.ddp_kwargs)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    rec = ddlsim.capture.attach(ddp_model, out_dir, metadata={"example": "capture_own_script"}, plan=plan)
    data = torch.Generator().manual_seed(dist.get_rank())
    for _ in range(iterations):
        x, y = torch.randn(16, 64, generator=data), torch.randint(0, 10, (16,), generator=data)
        with rec.iteration():
            optimizer.zero_grad()
            nn.functional.cross_entropy(ddp_model(x), y).backward()
            with rec.optimizer_step():
                optimizer.step()
    written = rec.close()  # rank 0 merges once every rank is done
    if written is not None:
        print(f"wrote {written}")
    dist.destroy_process_group()


def _spawned(rank: int, world_size: int, port: int, out_dir: str, iterations: int, plan_path: str | None) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    train(out_dir, iterations, plan_path)


def main(argv: list[str]) -> int:
    plan_path = argv[argv.index("--plan") + 1] if "--plan" in argv[:-1] else None
    iterations = int(argv[argv.index("--iterations") + 1]) if "--iterations" in argv[:-1] else 3
    out_dir = argv[0] if argv and not argv[0].startswith("--") else "run-own"
    if "--torchrun" in argv:
        train(out_dir, iterations, plan_path)
        return 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.set_num_threads(1)
    mp.spawn(_spawned, args=(2, port, out_dir, iterations, plan_path), nprocs=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
