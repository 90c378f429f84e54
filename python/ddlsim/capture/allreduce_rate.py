"""The rate a ring all-reduce gets on the capture's own links, measured after training (docs/validation.md).

Two TCP flows in opposite directions through tbf-shaped links, which is what every step of a ring all-reduce is,
get less than the link's payload rate, and how much less depends on the machine (docs/validation.md). So the capture
measures it: the median time of all-reduces of two sizes M1 < M2, each behind a barrier, and the slope between them.
The slope leaves out what every all-reduce pays once (the per-call cost, a token bucket's burst), so

    payload rate = 8 x 2 (N - 1) / N x (M2 - M1) / (T(M2) - T(M1))   bit/s

is the rate each rank's sent bytes got. Replay takes it as the link's payload rate when it replays the capture at
its own rate (:func:`ddlsim.simulation.replay.replay_plan`).
"""

from __future__ import annotations

SIZES_BYTES = (2 << 20, 8 << 20)


def measured_allreduce_rate(world_size: int, repeats: int = 3, sizes: tuple[int, int] = SIZES_BYTES) -> dict:
    """``allreduce_rate_bps`` (the payload rate above), ``allreduce_rate_sizes`` and ``allreduce_rate_ns`` (the median
    time per size), on the default process group; {} with one rank or when the larger size was not slower."""
    if world_size < 2:
        return {}
    medians = [median_allreduce_ns(max(1, size // 4), repeats) for size in sizes]
    return rate_from_times(world_size, sizes, medians)


def upper_median(values) -> float:
    """The middle value of an odd count, the upper of the two middle ones of an even count."""
    ordered = sorted(values)
    return float(ordered[len(ordered) // 2])


def median_allreduce_ns(elements: int, repeats: int) -> float:
    """The median of :func:`allreduce_times_ns` (:func:`upper_median`)."""
    return upper_median(allreduce_times_ns(elements, repeats))


def allreduce_times_ns(elements: int, repeats: int) -> list[float]:
    """The times of ``repeats`` all-reduces of ``elements`` float32 zeros on the default process group, each
    after a barrier (so every rank starts together), the buffer's first use left out. On NCCL the buffer is on the
    rank's GPU (NCCL takes no host tensors) and each time ends when the device has finished (NCCL returns once the
    all-reduce is queued)."""
    import time

    import torch
    import torch.distributed as dist

    device = collective_device()
    finish = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    x = torch.zeros(elements, device=device)
    dist.all_reduce(x)  # the buffer's first use
    finish()
    times = []
    for _ in range(repeats):
        dist.barrier()
        finish()
        start = time.perf_counter_ns()
        dist.all_reduce(x)
        finish()
        times.append(float(time.perf_counter_ns() - start))
    return times


def collective_device():
    """Where the default process group's collectives take their tensors: the rank's current GPU on NCCL, else the
    host."""
    import torch
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def rate_from_times(world_size: int, sizes: tuple[int, int], medians: list[float]) -> dict:
    """The payload rate of the module docstring from the median times of the two sizes; {} when it is undefined."""
    extra_ns = medians[1] - medians[0]
    if world_size < 2 or extra_ns <= 0 or sizes[1] <= sizes[0]:
        return {}
    sent = 2 * (world_size - 1) / world_size * (sizes[1] - sizes[0])
    return {"allreduce_rate_bps": 8 * sent / (extra_ns / 1e9), "allreduce_rate_sizes": list(sizes),
            "allreduce_rate_ns": medians}
