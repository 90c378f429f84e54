"""A ``ddlsim plan`` result applied to the built-in DDP job (``ddlsim capture ddp --plan plan.json``).

A plan (:meth:`ddlsim.plan.planner.Plan.to_dict`, ``"ddlsim_plan": 1``) has two entries the DDP job can run:

* ``ddp``: DDP's own bucketing with the plan's ``bucket_cap_mb``. DDP builds
  the buckets itself (from the order gradients become ready), so the
  captured buckets are DDP's, recorded as usual.
* ``mg_wfbp``: the MG-WFBP merge plan, a list of groups of tensors (by
  parameter name). It runs one of two ways (the plan facts' ``path`` says
  which, and why):

  - ``ddp-buckets``: where every group is one contiguous run of DDP's bucket
    order (the order the gradients become ready, :func:`gradient_ready_order`,
    which is how DDP rebuilds its buckets after the first iteration), DDP
    builds the groups itself: ``bucket_cap_mb_list`` gives bucket k a cap of
    exactly group k's bytes, and DDP's size rule (close a bucket once it
    holds at least its cap) then closes each bucket on its group's last
    tensor. No hook, no per-parameter buckets. Needs a torch whose DDP takes
    ``bucket_cap_mb_list``.
  - ``hook``: otherwise the job runs DDP with one bucket per parameter (a
    1-byte ``bucket_cap_mb``: no tensor fits beside another) and a
    communication hook (:class:`PlanMerger`) that holds each bucket until
    every tensor of its plan group is ready, then all-reduces the group as
    one message and hands every bucket its slice of the result. Any
    assignment works, adjacent layers or not, because every rank calls the
    hook in the same bucket order. It costs: DDP with one bucket per
    parameter is 15-20 % slower on gloo for ResNet-18 (docs/planning.md).

  Either way the averaged gradients are those of plain DDP, element by element.

``best`` takes whichever of the two the plan predicts faster.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ..errors import DdlsimError
from ..inputs import input_file

ENTRIES = ("best", "ddp", "mg_wfbp")
ONE_BYTE_MB = 1.0 / (1 << 20)  # bucket_cap_mb that leaves every parameter in a bucket of its own


def load_plan(path: str | Path, label: Optional[str] = None) -> dict:
    """The plan JSON at `path`, checked to be a ``ddlsim plan`` result. `label` names it in errors (``--plan PATH``)."""
    label = label or f"--plan {path}"
    path = input_file(path, "plan", "give the JSON file that ddlsim plan ... --out wrote", label=label,
                      missing=f"{label}: no such file; write one with ddlsim plan ... --out {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise DdlsimError(f"{label}: not a readable JSON plan ({exc}); write one with ddlsim plan --out") from None
    return checked_plan(data, label)


def checked_plan(data: Any, label: str) -> dict:
    """`data` (a plan as :meth:`~ddlsim.plan.planner.Plan.to_dict` gives it) checked to be a ``ddlsim plan`` result."""
    if not isinstance(data, dict) or data.get("ddlsim_plan") != 1:
        raise DdlsimError(f"{label}: not a ddlsim plan (no \"ddlsim_plan\": 1); write one with ddlsim plan --out")
    for key in ("model", "ddp", "mg_wfbp"):
        if not isinstance(data.get(key), dict):
            raise DdlsimError(f"{label}: field {key!r} is missing or not an object; write the plan again with ddlsim plan --out")
    from .plan_facts import check_plan_facts

    return check_plan_facts(data, label)


def choose_entry(plan: dict, entry: str) -> str:
    """`entry`, or for ``best`` the entry the plan predicts faster (``ddp`` on a tie)."""
    if entry not in ENTRIES:
        raise DdlsimError(f"--plan-entry {entry!r}: choose one of {', '.join(ENTRIES)}")
    if entry != "best":
        return entry
    return "mg_wfbp" if plan["mg_wfbp"]["iteration_time_s"] < plan["ddp"]["iteration_time_s"] else "ddp"


def plan_config(plan: dict, entry: str, parameter_names: list[str], path: str | Path = "plan",
                parameter_bytes: Optional[list[int]] = None, ready_order: Optional[list[int]] = None,
                ddp_takes_cap_list: Optional[bool] = None) -> dict:
    """The DDP job's config keys that apply `entry` of `plan` to a model with `parameter_names`:
    ``bucket_cap_mb``, the plan's facts (``plan``) for the capture's metadata and, for ``mg_wfbp``, either
    ``bucket_cap_mb_list`` (the ``ddp-buckets`` path: the groups are contiguous in `ready_order`, the parameter
    indices in the order their gradients become ready; `parameter_bytes` their sizes) or ``merge_groups`` (lists
    of parameter indices, in plan order: the ``hook`` path). Without `ready_order` and `parameter_bytes` the hook
    path is taken. `ddp_takes_cap_list`: whether this torch's DDP takes ``bucket_cap_mb_list`` (default: ask it).
    Raises DdlsimError naming the mismatch."""
    entry = choose_entry(plan, entry)
    facts = {"entry": entry, "file": str(path), "model": plan["model"].get("name"),
             "predicted_iteration_s": plan[entry]["iteration_time_s"],
             "predicted_default_s": plan.get("baselines", {}).get("ddp_default", {}).get("iteration_time_s")}
    captured = plan.get("captured")  # a plan made from a capture: its replay, the prediction of the job as captured
    if isinstance(captured, dict) and _is_time(captured.get("iteration_time_s")):
        facts["predicted_captured_s"] = float(captured["iteration_time_s"])
    if entry == "ddp":
        cap = plan["ddp"].get("bucket_cap_mb")
        if not isinstance(cap, (int, float)) or isinstance(cap, bool) or cap <= 0:
            raise DdlsimError(f"--plan {path}: ddp.bucket_cap_mb must be a positive number, got {cap!r}")
        return {"bucket_cap_mb": float(cap), "plan": facts}
    index = {name: i for i, name in enumerate(parameter_names)}
    groups: list[list[int]] = []
    seen: set[int] = set()
    for k, group in enumerate(plan["mg_wfbp"].get("plan") or []):
        tensors = group.get("tensors") if isinstance(group, dict) else None
        if not isinstance(tensors, list) or not tensors:
            raise DdlsimError(f"--plan {path}: mg_wfbp.plan[{k}] has no tensors; write the plan again with ddlsim plan --out")
        unknown = [t for t in tensors if t not in index]
        if unknown:
            raise DdlsimError(f"--plan {path}: mg_wfbp.plan[{k}] names {unknown[0]!r}, which the model being captured does "
                              f"not have; plan for the same model (ddlsim plan --model {facts['model'] or 'MODEL'})")
        ids = [index[t] for t in tensors]
        twice = seen.intersection(ids)
        if twice:
            raise DdlsimError(f"--plan {path}: tensor {parameter_names[min(twice)]!r} is in two groups of mg_wfbp.plan")
        seen.update(ids)
        groups.append(ids)
    missing = [parameter_names[i] for i in range(len(parameter_names)) if i not in seen]
    if missing:
        raise DdlsimError(f"--plan {path}: mg_wfbp.plan leaves out {missing[0]!r} ({len(missing)} tensors in all); "
                          f"plan for the same model (ddlsim plan --model {facts['model'] or 'MODEL'})")
    facts["groups"] = len(groups)
    if ddp_takes_cap_list is None:
        ddp_takes_cap_list = ddp_takes_bucket_cap_list()
    buckets = None
    if ready_order is None or parameter_bytes is None:
        why = "the order DDP's gradients become ready is not known"
    elif not ddp_takes_cap_list:
        why = "this torch's DDP has no bucket_cap_mb_list"
    else:
        buckets = contiguous_buckets(groups, ready_order)
        why = None if buckets is not None else "a group is not one contiguous run of DDP's bucket order"
    if buckets is None:
        facts.update(path="hook", why=why)
        return {"bucket_cap_mb": ONE_BYTE_MB, "merge_groups": groups, "plan": facts}
    caps = [sum(int(parameter_bytes[t]) for t in bucket) / float(1 << 20) for bucket in buckets]
    facts.update(path="ddp-buckets", buckets=[[parameter_names[t] for t in bucket] for bucket in buckets])
    return {"bucket_cap_mb": max(caps), "bucket_cap_mb_list": caps, "plan": facts}


def _is_time(value: Any) -> bool:
    import math

    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


@dataclass(frozen=True)
class ScriptPlan:
    """A ``ddlsim plan`` result made ready for your own DDP model (:func:`plan_for`).

    ``DistributedDataParallel(model, **plan.ddp_kwargs)`` builds the wrapper the plan needs, and
    ``ddlsim.capture.attach(ddp_model, out, plan=plan)`` installs the merge hook where the plan needs one
    (``merge_groups``) and records the plan's facts (``facts``: entry, path, predictions) in the capture, from which
    ``ddlsim plan --apply DIR --before ... --after ...`` reports measured against predicted gain."""

    entry: str  # "ddp" or "mg_wfbp"
    path: str  # "ddp" (DDP's buckets at the plan's cap), "ddp-buckets" (the groups as DDP's own buckets) or "hook"
    ddp_kwargs: dict  # bucket_cap_mb and, on the ddp-buckets path, bucket_cap_mb_list
    merge_groups: Optional[tuple]  # the hook path's groups of parameter indices, else None
    facts: dict  # recorded as the capture's ``plan``


def plan_for(module, plan: str | Path | dict, *, entry: str = "best", loss=None) -> ScriptPlan:
    """`plan` (a ``ddlsim plan --out`` file, its dict, or :func:`ddlsim.make_plan`'s plan) made ready for `module`, the ``torch.nn.Module`` your script
    is about to wrap in ``DistributedDataParallel`` (every rank calls it alike). `entry`: ``best`` (the entry the plan
    predicts faster), ``ddp`` or ``mg_wfbp``. `loss`: for the ``mg_wfbp`` entry, a function that takes a module and
    returns a scalar loss of one small batch (e.g. ``lambda m: loss_fn(m(x), y)``): one backward pass of a copy of
    `module` gives the order its gradients become ready, so that a merge plan whose groups are contiguous in it runs
    as DDP's own buckets; without it (or where a group is not contiguous) the plan runs through the merge hook (one
    bucket per parameter, each group all-reduced as one message). The plan must be for `module`: its
    ``ddp.parameter_order`` must be the module's ``named_parameters()`` names. Raises DdlsimError naming the fault."""
    import torch

    if isinstance(module, torch.nn.parallel.DistributedDataParallel):
        raise DdlsimError("plan_for: give the model before DistributedDataParallel wraps it (the plan's ddp_kwargs "
                          "build the wrapper): plan_for(model, ...), then DistributedDataParallel(model, **plan.ddp_kwargs)")
    if not isinstance(module, torch.nn.Module):
        raise DdlsimError(f"plan_for: module must be a torch.nn.Module, got {type(module).__name__}")
    if not isinstance(entry, str) or entry not in ENTRIES:
        raise DdlsimError(f"plan_for: entry {entry!r}: choose one of {', '.join(ENTRIES)}")
    if loss is not None and not callable(loss):
        raise DdlsimError(f"plan_for: loss must be a function of a module that returns a scalar loss, got {type(loss).__name__}")
    if isinstance(plan, (str, Path)):
        label, where = f"plan_for: {plan}", str(Path(plan).resolve())
        data = load_plan(plan, label)
    else:  # the plan's dict, or ddlsim.make_plan's Plan (its to_dict() is what plan --out writes)
        label, where = "plan_for: plan", "(in memory)"
        to_dict = getattr(plan, "to_dict", None)
        data = checked_plan(to_dict() if callable(to_dict) and not isinstance(plan, dict) else plan, label)
    named = list(module.named_parameters())
    names = [name for name, _ in named]
    frozen = [name for name, p in named if not p.requires_grad]
    if frozen:
        raise DdlsimError(f"plan_for: parameter {frozen[0]!r} does not require grad ({len(frozen)} in all); DDP leaves "
                          "frozen parameters out of its buckets, which a plan's tensors do not: plan for the model "
                          "with every parameter trained")
    order = data["ddp"].get("parameter_order")
    if isinstance(order, list) and order != names:
        k = next((i for i, (a, b) in enumerate(zip(order, names)) if a != b), min(len(order), len(names)))
        theirs = order[k] if k < len(order) else "(none)"
        ours = names[k] if k < len(names) else "(none)"
        raise DdlsimError(f"{label}: the plan is for model {data['model'].get('name')!r}, whose parameter {k} is "
                          f"{theirs!r}; this module's is {ours!r} ({len(names)} parameters, the plan's {len(order)}). "
                          "Plan for this model (ddlsim plan --model NAME --profile CAPTURE, from its own capture)")
    ready = sizes = None
    if loss is not None and choose_entry(data, entry) == "mg_wfbp":
        ready, sizes = module_ready_order(module, loss)
    config = plan_config(data, entry, names, where, parameter_bytes=sizes, ready_order=ready)
    if config["plan"]["entry"] == "mg_wfbp" and config["plan"].get("path") == "hook" and loss is None:
        config["plan"]["why"] += " (give plan_for a loss= to learn it)"
    kwargs = {"bucket_cap_mb": config["bucket_cap_mb"]}
    if config.get("bucket_cap_mb_list"):
        kwargs["bucket_cap_mb_list"] = list(config["bucket_cap_mb_list"])
    groups = config.get("merge_groups")
    path = "ddp" if config["plan"]["entry"] == "ddp" else config["plan"]["path"]
    config["plan"]["path"] = path
    return ScriptPlan(entry=config["plan"]["entry"], path=path, ddp_kwargs=kwargs,
                      merge_groups=None if groups is None else tuple(tuple(g) for g in groups), facts=config["plan"])


def module_ready_order(module, loss) -> tuple[list[int], list[int]]:
    """(the parameter indices of `module` in the order their gradients become ready in one backward pass of
    ``loss(copy)``, on a deep copy of `module` so that its own gradients stay as they are; each parameter's bytes)."""
    import copy

    import torch

    twin = copy.deepcopy(module)
    order: list[int] = []
    handles = [p.register_post_accumulate_grad_hook(lambda _p, i=i: order.append(i))
               for i, p in enumerate(twin.parameters())]
    try:
        value = loss(twin)
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            raise DdlsimError(f"plan_for: loss(module) must return a scalar tensor, got {type(value).__name__}"
                              + (f" of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else ""))
        value.backward()
    finally:
        for handle in handles:
            handle.remove()
    return order, [p.numel() * p.element_size() for p in module.parameters()]


def job_plan_config(plan: dict, entry: str, model: str, image_size: int, path: str | Path = "plan") -> dict:
    """:func:`plan_config` for the built-in job's zoo `model` at `image_size`: its parameter names and, for the
    ``mg_wfbp`` entry, the order its gradients become ready (:func:`gradient_ready_order`)."""
    from .ddp_models import build_model

    names = [name for name, _ in build_model(model).named_parameters()]
    if choose_entry(plan, entry) != "mg_wfbp":
        return plan_config(plan, entry, names, path)
    order, sizes = gradient_ready_order(model, image_size)
    return plan_config(plan, entry, names, path, parameter_bytes=sizes, ready_order=order)


def contiguous_buckets(groups: list[list[int]], ready_order: list[int]) -> Optional[list[list[int]]]:
    """The plan `groups` as DDP buckets in DDP's bucket order (each bucket's tensors in `ready_order`), when every
    group is one contiguous run of `ready_order` (the parameter indices in the order their gradients become ready);
    None when one is not, or `ready_order` does not hold exactly the groups' tensors."""
    group_of = {t: k for k, g in enumerate(groups) for t in g}
    if sorted(ready_order) != sorted(group_of):
        return None
    buckets: list[list[int]] = []
    seen: set[int] = set()
    for t in ready_order:
        k = group_of[t]
        if buckets and group_of[buckets[-1][0]] == k:
            buckets[-1].append(t)
        elif k in seen:
            return None  # the group came back after another one: not contiguous
        else:
            seen.add(k)
            buckets.append([t])
    return buckets


def ddp_takes_bucket_cap_list() -> bool:
    """Whether the installed torch's DistributedDataParallel takes ``bucket_cap_mb_list`` (per-bucket caps)."""
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    return "bucket_cap_mb_list" in inspect.signature(DistributedDataParallel.__init__).parameters


def gradient_ready_order(model: str, image_size: int, batch_size: int = 2) -> tuple[list[int], list[int]]:
    """(the parameter indices of zoo `model` in the order their gradients become ready in one backward pass, each
    parameter's bytes). DDP's reducer marks a parameter ready when its gradient is accumulated and rebuilds its
    buckets in that order after the first iteration; the CPU autograd engine's order is the same on every run."""
    import torch

    from .ddp_models import build_model, synthetic_batches

    images, labels = synthetic_batches(model, batch_size, image_size, 1, 0)[0]
    return module_ready_order(build_model(model), lambda m: torch.nn.CrossEntropyLoss()(m(images), labels))


class PlanMerger:
    """DDP communication hook state that all-reduces each plan group as one message (see the module docstring).

    `groups`: lists of parameter indices (positions in ``named_parameters()``). :meth:`bucket` is called with each
    DDP bucket; it returns the future DDP waits on and, when the bucket completes its group, the group's index
    and the bucket list to launch (the caller all-reduces them with :meth:`launch`)."""

    def __init__(self, groups: list[list[int]]):
        self.groups = [list(g) for g in groups]
        self.group_of = {t: k for k, g in enumerate(self.groups) for t in g}
        self._pending: dict[int, list] = {}
        self._lock = threading.Lock()

    def bucket(self, tensors: tuple[int, ...], buffer):
        """(future for DDP, ready) where ready is None or (group index, [(buffer, future, tensors), ...]);
        (None, None) for a bucket that spans plan groups (DDP's provisional first-iteration bucket): the caller
        all-reduces it as DDP would."""
        import torch

        owners = {self.group_of.get(t) for t in tensors}
        if None in owners:
            raise RuntimeError(f"DDP bucket with tensors {list(tensors)} holds a parameter of no plan group")
        if len(owners) != 1 or len(tensors) > len(self.groups[next(iter(owners))]):
            # DDP's provisional first-iteration bucket (all gradients together) spans groups: it travels as it is
            with self._lock:
                if any(self._pending.get(g) for g in owners):
                    raise RuntimeError(f"DDP bucket with tensors {list(tensors)} spans plan groups that are partly "
                                       "pending; run DDP with one bucket per parameter (bucket_cap_mb = 1 byte)")
            return None, None
        group = owners.pop()
        future = torch.futures.Future(devices=[buffer.device]) if buffer.is_cuda else torch.futures.Future()
        with self._lock:
            parts = self._pending.setdefault(group, [])
            parts.append((buffer, future, tuple(tensors)))
            if sum(len(p[2]) for p in parts) < len(self.groups[group]):
                return future, None
            del self._pending[group]
        return future, (group, parts)

    @staticmethod
    def launch(parts, world_size: int, process_group=None, before_results=None):
        """All-reduces the buffers of `parts` as one flat message (averaged, as DDP's default hook does); returns the
        all-reduce's future, which hands every part's future its slice when it completes (after calling
        `before_results()`, so a row recorded there is written before DDP goes on)."""
        import torch
        import torch.distributed as dist

        flat = torch.cat([buffer.reshape(-1) for buffer, _, _ in parts])
        flat.div_(world_size)
        work = dist.all_reduce(flat, group=process_group, async_op=True).get_future()

        def scatter(fut):
            result = fut.value()[0] if isinstance(fut.value(), list) else fut.value()
            if before_results is not None:
                before_results()
            offset = 0
            for buffer, future, _ in parts:
                n = buffer.numel()
                # into DDP's own bucket buffer: DDP views a hook's result with absolute storage offsets
                # (as_strided), so a slice of the flat result would hand every bucket the first bucket's bytes
                buffer.copy_(result[offset:offset + n].view_as(buffer))
                future.set_result(buffer)
                offset += n
            return result

        return work.then(scatter)


def parameter_checksum(module) -> str:
    """SHA-256 of every parameter's bytes in ``named_parameters()`` order (equal runs give equal weights)."""
    import hashlib

    digest = hashlib.sha256()
    for name, p in module.named_parameters():
        digest.update(name.encode())
        digest.update(p.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def captured_groups(log) -> Optional[list[list[str]]]:
    """The tensors (names) of each all-reduce of a capture's last bucket layout, in launch order; None where the
    capture does not record them, or its bucket table names a tensor its parameter list lacks (a damaged log)."""
    names = [p["name"] for p in log.metadata.get("parameters", [])]
    buckets = log.metadata.get("buckets") or []
    if not names or not buckets or any(t >= len(names) for b in buckets for t in b.get("tensors", [])):
        return None
    return [[names[t] for t in b["tensors"]] for b in buckets]
