"""Clock offset of this rank against rank 0, measured over torch.distributed.

NTP style: the rank sends its time t0, rank 0 answers with its receive and
send times t1, t2, the rank reads t3 on arrival; the offset (rank 0's clock
minus this rank's) is ((t1 - t0) + (t2 - t3)) / 2, taken from the round with
the shortest round trip. Ranks on rank 0's host share its monotonic clock,
so their offset is exactly 0 (the measured value is kept for reference).
Collective call: every rank of the group must call :func:`estimate_offset_ns`.
"""

from __future__ import annotations

import hashlib
import socket

from .recorder import now_ns


def best_offset(samples) -> tuple[int, int]:
    """(offset, round trip) in ns from NTP samples (t0 sent, t1 received by rank 0, t2 answered, t3 back): the
    sample with the shortest round trip, offset ((t1 - t0) + (t2 - t3)) / 2. Shared by the RPC probe of the PS job."""
    t0, t1, t2, t3 = min(samples, key=lambda s: (s[3] - s[0]) - (s[2] - s[1]))
    return ((t1 - t0) + (t2 - t3)) // 2, (t3 - t0) - (t2 - t1)


def _host_key(host: str) -> int:
    return int.from_bytes(hashlib.sha256(host.encode()).digest()[:7], "big")


def estimate_offset_ns(rank: int, world_size: int, rounds: int = 5, group=None) -> tuple[int, int]:
    """(offset to add to this rank's times, the measured offset) in ns; rank 0: (0, 0). `group`: a process group
    that carries CPU tensors (a gloo group beside an NCCL job); None: the default group."""
    import torch
    import torch.distributed as dist

    host = _host_key(socket.gethostname())
    if rank == 0:
        request = torch.zeros(2, dtype=torch.int64)
        for peer in range(1, world_size):
            for _ in range(rounds):
                dist.recv(request, src=peer, group=group)
                t1 = now_ns()
                dist.send(torch.tensor([t1, now_ns(), host], dtype=torch.int64), dst=peer, group=group)
        return 0, 0
    samples, same_host = [], False
    answer = torch.zeros(3, dtype=torch.int64)
    for _ in range(rounds):
        t0 = now_ns()
        dist.send(torch.tensor([t0, host], dtype=torch.int64), dst=0, group=group)
        dist.recv(answer, src=0, group=group)
        t3 = now_ns()
        t1, t2, root_host = (int(v) for v in answer.tolist())
        samples.append((t0, t1, t2, t3))
        same_host = root_host == host
    measured, _ = best_offset(samples)
    return (0 if same_host else measured), measured
