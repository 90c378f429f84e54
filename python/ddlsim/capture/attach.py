"""Record your own DDP training script::

    import ddlsim.capture

    ddp_model = DistributedDataParallel(model, bucket_cap_mb=25)
    rec = ddlsim.capture.attach(ddp_model, "run/", model="resnet18")  # every rank, after init_process_group
    for images, labels in loader:
        with rec.iteration():
            optimizer.zero_grad()
            loss_fn(ddp_model(images), labels).backward()
            with rec.optimizer_step():
                optimizer.step()
    rec.close()   # every rank; rank 0 then writes run/events.parquet

The hooks are those of the built-in job (:mod:`.ddp_hooks`): per-layer
forward/backward rows, one all-reduce row per bucket, the bucket groups.
Call :func:`attach` before the model's first forward (DDP's first iteration
uses provisional buckets, recorded as such) and before any other comm hook
(DDP takes one comm hook per model).
"""

from __future__ import annotations

import contextlib
import sys
import types
from pathlib import Path
from typing import Iterator, Optional

from .ddp_merge import merge_ddp, write_sidecar
from .recorder import RankRecorder, now_ns


class DdpCapture:
    """The handle :func:`attach` returns."""

    def __init__(self, ddp_model, out_dir: str | Path, *, model: Optional[str] = None, metadata: Optional[dict] = None,
                 process_group=None, layer_every: int = 1, plan=None):
        import torch
        import torch.distributed as dist

        from .ddp_hooks import DdpHooks
        from .dist_clock import estimate_offset_ns

        if not dist.is_initialized():
            raise RuntimeError("ddlsim.capture.attach: call torch.distributed.init_process_group first")
        merger = _plan_merger(ddp_model, plan)
        self.out = Path(out_dir)
        self.rank, self.world_size = dist.get_rank(process_group), dist.get_world_size(process_group)
        self._group = process_group
        offset, measured = estimate_offset_ns(self.rank, self.world_size)
        self.recorder = RankRecorder(self.out, self.rank, "worker", clock_offset_ns=offset,
                                     meta={"clock_offset_measured_ns": measured})
        self.hooks = DdpHooks(ddp_model, self.recorder, process_group=process_group, layer_every=layer_every,
                              merger=merger)
        self._ddp = ddp_model
        self._iterations = 0
        self.job = {"job": "ddp", "model": model or type(ddp_model.module).__name__, "workers": self.world_size,
                    "backend": str(dist.get_backend(process_group)), "torch_version": torch.__version__,
                    "bucket_cap_mb": ddp_model.bucket_bytes_cap / 2**20, "script": True, **(metadata or {})}
        if plan is not None:  # which plan ran, and what it predicted (ddlsim plan --apply DIR --before --after)
            self.job["plan"] = dict(plan.facts)
            if "bucket_cap_mb_list" in plan.ddp_kwargs:
                self.job["bucket_cap_mb_list"] = list(plan.ddp_kwargs["bucket_cap_mb_list"])

    @contextlib.contextmanager
    def iteration(self) -> Iterator[int]:
        """One training iteration (numbered from 0); flushes the rank's rows at its end."""
        index = self._iterations
        self.hooks.begin_iteration(index)
        yield index
        changed = self.hooks.end_iteration()
        self._iterations += 1
        if changed or index == 0:
            self._write_facts()

    @contextlib.contextmanager
    def optimizer_step(self) -> Iterator[None]:
        start = now_ns()
        yield
        self.hooks.optimizer_step_row(start, now_ns())

    def _write_facts(self, **extra) -> None:
        write_sidecar(self.out, self.rank, {"job": {**self.job, "iterations": self._iterations}, **self.hooks.facts(), **extra})

    def close(self, merge: bool = True, measure: bool = True) -> Optional[Path]:
        """Completes this rank's file; with `merge`, waits for all ranks and rank 0 writes (and returns)
        OUT/events.parquet. With `measure` (and the default process group), first measures what ``ddlsim capture
        ddp`` measures after training, on every rank together: the reduction cost, 40 four-byte all-reduces and the
        ring's payload rate (about a second; ``ddlsim replay`` of the log takes its link latency and rate from them,
        where it would otherwise assume 10 Gbit/s and no per-call cost)."""
        import torch.distributed as dist

        from .ddp_hooks import reducer_facts

        self.hooks.remove()  # the measurements' all-reduces are not the training's
        if measure and self._group is None:
            from .ddp import after_training_facts

            self.job.update(after_training_facts(self._ddp.module, self.world_size))
        self._write_facts(reducer=reducer_facts(self._ddp))
        self.recorder.close(iterations=self._iterations)
        if not merge:
            return None
        dist.barrier(group=self._group)
        if self.rank != 0:
            return None
        merge_ddp(self.out)
        return self.out / "events.parquet"


def attach(ddp_model, out_dir: str | Path, *, model: Optional[str] = None, metadata: Optional[dict] = None,
           process_group=None, layer_every: int = 1, plan=None) -> DdpCapture:
    """Installs the recording hooks on a DistributedDataParallel model (every rank calls it); see the module docstring.

    `model`: a zoo name (``ddlsim models``) if the model is one, so ``ddlsim replay`` can use the log.
    `layer_every`: per-layer rows on iteration 0 and every `layer_every`-th iteration from 1 on only (``ddlsim
    capture ddp --layer-every``; the other iterations pay no per-layer cost).
    `plan`: a :class:`~ddlsim.capture.ddp_plan.ScriptPlan` (:func:`~ddlsim.capture.ddp_plan.plan_for`) that
    `ddp_model` was built with (``DistributedDataParallel(model, **plan.ddp_kwargs)``): its merge hook is installed
    where it needs one, and the capture records which plan ran and what it predicted.
    """
    from .layer_hooks import check_layer_every

    check_layer_every(layer_every)
    return DdpCapture(ddp_model, out_dir, model=model, metadata=metadata, process_group=process_group,
                      layer_every=layer_every, plan=plan)


def _plan_merger(ddp_model, plan):
    """The :class:`~ddlsim.capture.ddp_plan.PlanMerger` of `plan` (None without one or where DDP's own buckets run
    it), once `ddp_model` is checked to be built with the plan's ``ddp_kwargs``."""
    from ..errors import DdlsimError
    from .ddp_plan import PlanMerger, ScriptPlan

    if plan is None:
        return None
    if not isinstance(plan, ScriptPlan):
        raise DdlsimError(f"attach: plan must be what ddlsim.capture.plan_for(model, 'plan.json') returns, got "
                          f"{type(plan).__name__}")
    fix = "build it with DistributedDataParallel(model, **plan.ddp_kwargs)"
    cap = int(plan.ddp_kwargs["bucket_cap_mb"] * 2**20)  # as DDP computes bucket_bytes_cap
    if getattr(ddp_model, "bucket_bytes_cap", None) != cap:
        raise DdlsimError(f"attach: the DDP model's bucket_bytes_cap is {getattr(ddp_model, 'bucket_bytes_cap', None)}, "
                          f"the plan's {cap}: {fix}")
    caps = plan.ddp_kwargs.get("bucket_cap_mb_list")
    if caps and getattr(ddp_model, "bucket_bytes_cap_list", None) != [int(c * 2**20) for c in caps]:
        raise DdlsimError(f"attach: the DDP model was built without the plan's bucket_cap_mb_list: {fix}")
    if plan.merge_groups is None:
        return None
    count = len(list(ddp_model.module.parameters()))
    if sorted(t for g in plan.merge_groups for t in g) != list(range(count)):
        raise DdlsimError(f"attach: the plan's groups are not those of this model's {count} parameters; make the plan "
                          "with plan_for(model, ...) for the model this DDP wraps")
    return PlanMerger([list(g) for g in plan.merge_groups])


class _CallableModule(types.ModuleType):
    """This module, callable as :func:`attach`: ``ddlsim.capture.attach`` names the function, but once something
    imported this module first (``from ddlsim.capture.attach import DdpCapture``) the package's attribute is the
    module."""

    def __call__(self, *args, **kwargs) -> DdpCapture:
        return attach(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
