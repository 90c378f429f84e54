"""Record your own DDP training script with ddlsim.capture.attach.

Two ranks on this machine (CPU, gloo), a tiny MLP, three iterations:

    python examples/capture_own_script.py run-own/      # then: ddlsim analyze run-own/events.parquet

Under torchrun, drop the spawn and call `train(out_dir)` in each rank
(torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT):

    torchrun --nproc-per-node 2 examples/capture_own_script.py run-own/ --torchrun
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


def train(out_dir: str, iterations: int = 3) -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
    ddp_model = DistributedDataParallel(model, bucket_cap_mb=0.05)  # small buckets: several all-reduces
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    rec = ddlsim.capture.attach(ddp_model, out_dir, metadata={"example": "capture_own_script"})
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


def _spawned(rank: int, world_size: int, port: int, out_dir: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    train(out_dir)


def main(argv: list[str]) -> int:
    out_dir = argv[0] if argv else "run-own"
    if "--torchrun" in argv:
        train(out_dir)
        return 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.set_num_threads(1)
    mp.spawn(_spawned, args=(2, port, out_dir), nprocs=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
