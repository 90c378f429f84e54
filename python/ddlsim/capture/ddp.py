"""The built-in DDP capture job: one rank of a data-parallel training run on
CPU (gloo), recorded by :class:`~ddlsim.capture.ddp_hooks.DdpHooks`.

``run_rank(config, rank, world_size, out_dir)`` is what
``python -m ddlsim.capture.rank_main ddp`` calls (locally through
:func:`~ddlsim.capture.launch.launch_local`, or under torchrun). Config keys
(:data:`DEFAULTS`): model (lenet5 | resnet18 | resnet50), iterations,
batch_size, image_size, bucket_cap_mb, seed, lr, merge (rank 0 merges into
``OUT/events.parquet`` once all ranks finished), timeout_s, merge_groups and plan (a ``ddlsim plan`` applied:
:mod:`~ddlsim.capture.ddp_plan`); test-only fault
injection: crash_rank, crash_after_iteration (that rank exits with status 3
right after recording that iteration); layer_every (K: per-layer rows on the
warm-up iteration 0 and every K-th iteration from 1 on, 1, 1 + K, ...; the
others record their forward and backward pass as one row each and run through
a second DDP wrapper without the Python comm hook, so they have no
``allreduce`` rows, except with merge_groups, see :mod:`.ddp_hooks`); device: "cpu" (gloo, host-clock
timings) or "cuda" (NCCL, one GPU per rank by local rank, every row timed
by CUDA events, see :mod:`.layer_hooks`).
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from ..errors import DdlsimError
from .allreduce_rate import upper_median
from .ddp_merge import merge_ddp, write_sidecar
from .ddp_models import build_model, check_model_config, synthetic_batches
from .layer_hooks import check_layer_every
from .recorder import RankRecorder

DEFAULTS = {"model": "lenet5", "iterations": 5, "batch_size": 8, "image_size": 32, "bucket_cap_mb": 25.0, "seed": 0,
            "lr": 0.01, "merge": True, "timeout_s": 300, "crash_rank": -1, "crash_after_iteration": -1,
            "merge_groups": None, "plan": None, "device": "cpu", "bucket_cap_mb_list": None, "layer_every": 1,
            "idle_curve": False}
CRASH_STATUS = 3


def job_config(config: dict) -> dict:
    """`config` over the defaults, checked; raises ValueError naming the bad key."""
    cfg = {**DEFAULTS, **{k: v for k, v in config.items() if k in DEFAULTS}}
    for key in ("iterations", "batch_size", "image_size"):
        if isinstance(cfg[key], bool) or not isinstance(cfg[key], int) or not 1 <= cfg[key] < 2 ** 31:
            raise ValueError(f"{key} must be a positive integer below 2^31, got {cfg[key]!r}")
    for key, what in (("bucket_cap_mb", "a positive number of MiB"), ("lr", "a positive number"),
                      ("timeout_s", "a positive number of seconds")):
        value = cfg[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise ValueError(f"{key} must be {what}, got {value!r}")
    try:
        timedelta(seconds=cfg["timeout_s"])  # the process group's timeout
    except OverflowError:
        raise ValueError(f"timeout_s must be a positive number of seconds below {timedelta.max.total_seconds():.0f}, "
                         f"got {cfg['timeout_s']!r}") from None
    if isinstance(cfg["seed"], bool) or not isinstance(cfg["seed"], int) or not 0 <= cfg["seed"] < 2 ** 63:
        raise ValueError(f"seed must be a whole number from 0 to 2^63 - 1, got {cfg['seed']!r}")
    if not isinstance(cfg["merge"], bool):
        raise ValueError(f"merge must be true or false, got {cfg['merge']!r}")
    groups = cfg["merge_groups"]
    if groups is not None and not (isinstance(groups, list) and groups and all(
            isinstance(g, list) and g and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in g)
            for g in groups)):
        raise ValueError("merge_groups must be a non-empty list of non-empty lists of parameter indices")
    caps = cfg["bucket_cap_mb_list"]
    if caps is not None and not (isinstance(caps, list) and caps and all(
            isinstance(c, (int, float)) and not isinstance(c, bool) and c > 0 for c in caps)):
        raise ValueError(f"bucket_cap_mb_list must be a non-empty list of positive MiB, got {caps!r}")
    check_layer_every(cfg["layer_every"])
    if not isinstance(cfg["idle_curve"], bool):
        raise ValueError(f"idle_curve must be true or false, got {cfg['idle_curve']!r}")
    if cfg["device"] not in ("cpu", "cuda"):
        raise ValueError(f"device must be \"cpu\" or \"cuda\", got {cfg['device']!r}")
    check_model_config(cfg["model"], cfg["image_size"])
    return cfg


def reduction_cost_ns_per_byte(elements: int, repeats: int = 7) -> float:
    """The reduction cost gamma on this machine: ns per byte of ``a.add_(b)`` on two fp32 tensors of `elements`
    (a bucket's size; what gloo's ring does with each chunk it receives), the median of `repeats` timed runs.
    Stored in the capture's metadata; replay uses it as ``strategy.gamma_ns_per_byte``."""
    import time

    import torch

    a, b = torch.ones(max(1, int(elements))), torch.ones(max(1, int(elements)))
    a.add_(b)  # first touch
    times = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        a.add_(b)
        times.append(time.perf_counter_ns() - start)
    return upper_median(times) / (a.numel() * a.element_size())


def small_allreduce_ns(repeats: int = 40) -> dict:
    """The fixed cost of one all-reduce on this machine and process group, from `repeats` 4-byte ``all_reduce``
    calls (gloo's ring: 2 (N - 1) steps of almost no bytes, so per step the software and scheduling latency a step
    pays besides its bytes): ``allreduce_small_ns``, their median (replay uses it / (2 (N - 1)) as the link
    latency), ``allreduce_small_mean_ns``, their mean (on a machine with no core to spare some calls stall for
    milliseconds: the mean holds them, the median does not; replay adds the difference to each call where the
    capture's link bound, see :func:`ddlsim.simulation.overheads.small_call_stall`), and ``allreduce_small_repeats``."""
    from .allreduce_rate import allreduce_times_ns

    times = allreduce_times_ns(1, repeats)
    return {"allreduce_small_ns": upper_median(times), "allreduce_small_mean_ns": float(sum(times) / len(times)),
            "allreduce_small_repeats": len(times)}


def after_training_facts(model, world_size: int) -> dict:
    """What every rank measures after training, on the default process group (replay uses each; docs/validation.md):
    the reduction cost ``gamma_ns_per_byte``, and with two ranks or more the 4-byte all-reduces
    (:func:`small_allreduce_ns`), the per-step latency ``allreduce_step_ns`` and the ring's payload rate
    (:func:`ddlsim.capture.allreduce_rate.measured_allreduce_rate`). Collective: every rank calls it."""
    facts = {"gamma_ns_per_byte": reduction_cost_ns_per_byte(min(sum(p.numel() for p in model.parameters()), 2**22))}
    if world_size > 1:
        facts.update(small_allreduce_ns())
        facts["allreduce_step_ns"] = facts["allreduce_small_ns"] / (2 * (world_size - 1))
        from .allreduce_rate import measured_allreduce_rate

        facts.update(measured_allreduce_rate(world_size))  # the ring's payload rate on these links
    return facts


def run_rank(config: dict, rank: int, world_size: int, out_dir: str | Path) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from .ddp_hooks import DdpHooks, reducer_facts
    from .dist_clock import estimate_offset_ns

    try:
        cfg = job_config(config)
    except ValueError as exc:
        raise DdlsimError(f"ddp capture: {exc}") from None
    out = Path(out_dir)
    torch.manual_seed(cfg["seed"])
    cuda = cfg["device"] == "cuda"
    if cuda and not torch.cuda.is_available():
        raise DdlsimError("device \"cuda\" but torch sees no GPU on this machine; capture with device \"cpu\"")
    if cuda:
        gpu = int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count()
        torch.cuda.set_device(gpu)
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=timedelta(seconds=cfg["timeout_s"]))
    # NCCL carries only GPU tensors: the clock probe's CPU tensors go over a gloo group beside it
    clock_group = dist.new_group(backend="gloo") if cuda and world_size > 1 else None
    offset, measured = estimate_offset_ns(rank, world_size, group=clock_group)
    model = build_model(cfg["model"])  # same seed on every rank; DDP broadcasts rank 0's weights anyway
    if cuda:
        model = model.cuda()
    # a plan's per-bucket caps (ddp_plan: DDP builds the plan's groups itself)
    per_bucket = {"bucket_cap_mb_list": cfg["bucket_cap_mb_list"]} if cfg["bucket_cap_mb_list"] else {}
    ddp_args = {"bucket_cap_mb": cfg["bucket_cap_mb"], "device_ids": [gpu] if cuda else None, **per_bucket}
    ddp_model = DistributedDataParallel(model, **ddp_args)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=cfg["lr"])
    loss_fn = torch.nn.CrossEntropyLoss()
    batches = synthetic_batches(cfg["model"], cfg["batch_size"], cfg["image_size"], cfg["iterations"], cfg["seed"] + rank)
    job = {"job": "ddp", "model": cfg["model"], "workers": world_size, "iterations": cfg["iterations"],
           "batch_size": cfg["batch_size"], "image_size": cfg["image_size"], "bucket_cap_mb": cfg["bucket_cap_mb"],
           "seed": cfg["seed"], "lr": cfg["lr"], "backend": backend, "torch_version": torch.__version__,
           "device": torch.cuda.get_device_name(gpu) if cuda else "cpu", "threads": torch.get_num_threads(),
           "timing": "cuda events" if cuda else "host clock"}
    recorder = RankRecorder(out, rank, "worker", clock_offset_ns=offset, meta={"clock_offset_measured_ns": measured})
    if cfg["plan"] is not None:
        job["plan"] = cfg["plan"]
    if cfg["bucket_cap_mb_list"]:
        job["bucket_cap_mb_list"] = cfg["bucket_cap_mb_list"]
    merger = None
    if cfg["merge_groups"] is not None:
        from .ddp_plan import PlanMerger

        merger = PlanMerger(cfg["merge_groups"])
    # sampled layer rows: the un-sampled iterations run through a second wrapper without the Python comm hook (DDP's
    # own all-reduce, no allreduce rows); not with a plan's merger, whose groups every iteration must all-reduce
    plain = DistributedDataParallel(model, **ddp_args) if cfg["layer_every"] > 1 and merger is None else None
    # layer rows sampled after the one warm-up iteration that analyze and replay leave out (warmup_iterations)
    hooks = DdpHooks(ddp_model, recorder, merger=merger, cuda=cuda, layer_every=cfg["layer_every"], layer_warmup=1,
                     plain=plain)
    for iteration, (images, labels) in enumerate(batches):
        if cuda:
            images, labels = images.cuda(non_blocking=True), labels.cuda(non_blocking=True)
        hooks.begin_iteration(iteration)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(hooks.model(images), labels)  # the iteration's wrapper (see DdpHooks.model)
        loss.backward()
        start = hooks.mark()
        optimizer.step()
        hooks.optimizer_step_row(start, hooks.mark())
        if hooks.end_iteration() or iteration == 0:
            write_sidecar(out, rank, {"job": job, **hooks.facts()})
        if rank == cfg["crash_rank"] and iteration == cfg["crash_after_iteration"]:
            os._exit(CRASH_STATUS)
    from .ddp_plan import parameter_checksum

    job["parameter_sha256"] = parameter_checksum(model)  # the trained weights: equal runs, equal digests
    job.update(after_training_facts(model, world_size))
    extra = {}
    if cfg["idle_curve"] and not cuda:  # compute after a wait, on this rank's thread (capture/idle_curve.py)
        from .idle_curve import capture_trials

        bench_model = build_model(cfg["model"])  # a copy: the DDP-wrapped one's backward would all-reduce
        bench_model.load_state_dict(model.state_dict())
        def agree(n: int) -> int:  # the ranks' least number of repeats: their trials run in step
            t = torch.tensor([n], dtype=torch.int64)
            dist.all_reduce(t, op=dist.ReduceOp.MIN)
            return int(t.item())

        extra["idle_trials"] = capture_trials(bench_model, images, labels, seed=cfg["seed"],
                                              sync=dist.barrier if world_size > 1 else None,
                                              agree=agree if world_size > 1 else None)
    write_sidecar(out, rank, {"job": job, **hooks.facts(), "reducer": reducer_facts(ddp_model), **extra})
    recorder.close(iterations=cfg["iterations"])
    hooks.remove()
    dist.barrier()  # every rank's file is complete before rank 0 merges
    if rank == 0 and cfg["merge"]:
        merge_ddp(out)
    dist.destroy_process_group()
