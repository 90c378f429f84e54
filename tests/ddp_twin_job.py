"""One rank of a 2-process gloo DDP job that trains the same seeded CNN (with a BatchNorm: DDP broadcasts its
buffers every forward) once per mode and writes OUT/rank<RANK>.json: per mode the SHA-256 of the trained parameters
and buffers, the all-reduces the process group ran in each iteration (torch.profiler's ``c10d::allreduce_`` ops,
each iteration profiled alone), the Python comm hook's calls per iteration, and the iterations with all-reduce rows.
Used by test_capture_plain_wrapper.py.

Modes: ``plain`` (one DDP wrapper, no hook: the reference), ``hooked`` (ddlsim's DdpHooks with layer_every K, the
comm hook on every iteration: the previous capture), ``twin`` (DdpHooks with K and a plain twin wrapper for the
un-sampled iterations), ``twin-list`` (the same with a per-bucket ``bucket_cap_mb_list``, a plan's ``ddp-buckets``
path, where this torch takes one).

    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python tests/ddp_twin_job.py OUT plain,twin
"""

import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ddlsim.capture.ddp_hooks import DdpHooks
from ddlsim.capture.ddp_plan import ddp_takes_bucket_cap_list
from ddlsim.capture.recorder import RankRecorder

EVERY = 3
ITERATIONS = 9


class CountingHooks(DdpHooks):
    """DdpHooks that counts its comm hook's calls."""

    calls = 0

    def _comm_hook(self, state, bucket):
        self.calls += 1
        return super()._comm_hook(state, bucket)


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 6 * 6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def train(mode: str, out_dir: str, rank: int) -> dict:
    from torch.profiler import ProfilerActivity, profile

    module = model()
    args = {"bucket_cap_mb": 0.002}  # several buckets
    if mode == "twin-list":
        args = {"bucket_cap_mb": 0.004, "bucket_cap_mb_list": [0.002, 0.004]}
    ddp = DistributedDataParallel(module, **args)
    hooks = None
    if mode != "plain":
        twin = DistributedDataParallel(module, **args) if mode.startswith("twin") else None
        hooks = CountingHooks(ddp, RankRecorder(os.path.join(out_dir, mode), rank, "worker"), layer_every=EVERY,
                              layer_warmup=1, plain=twin)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9)
    generator = torch.Generator().manual_seed(rank)
    allreduces, calls = [], []
    for iteration in range(ITERATIONS):
        x = torch.randn(4, 1, 8, 8, generator=generator)
        y = torch.randint(0, 3, (4,), generator=generator)
        before = hooks.calls if hooks else 0
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            if hooks:
                hooks.begin_iteration(iteration)
            optimizer.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy((hooks.model if hooks else ddp)(x), y).backward()
            start = hooks.mark() if hooks else 0
            optimizer.step()
            if hooks:
                hooks.optimizer_step_row(start, hooks.mark())
                hooks.end_iteration()
        allreduces.append(sum(1 for e in prof.events() if e.name == "c10d::allreduce_"))
        calls.append((hooks.calls if hooks else 0) - before)
    digest = hashlib.sha256()
    for tensor in [*module.parameters(), *module.buffers()]:
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    result = {"digest": digest.hexdigest(), "allreduces": allreduces, "hook_calls": calls}
    if hooks:
        result.update(collective_iterations=hooks.collective_iterations, layer_iterations=hooks.layer_iterations,
                      rows=str(hooks.rec.path), facts=hooks.facts())
        hooks.rec.close()
        hooks.remove()
    return result


def main(out_dir: str, modes: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    results = {}
    for mode in modes.split(","):
        if mode == "twin-list" and not ddp_takes_bucket_cap_list():
            continue
        results[mode] = train(mode, out_dir, rank)
        dist.barrier()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as fh:
        json.dump(results, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
