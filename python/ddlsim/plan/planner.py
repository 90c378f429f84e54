"""`ddlsim plan`: which merge plan and DDP bucket size minimise the
iteration time on a cluster, and by how much.

For a model and a cluster (a scenario: workers, network, all-reduce
algorithm; optionally a :class:`~ddlsim.plan.cost.CostModel` that sets the
network's alpha and beta and prices all-reduces for the planner) the planner

1. computes the MG-WFBP merge plan (the exact optimum of the paper's model,
   :func:`ddlsim.simulation.grouping.mg_wfbp_optimal`) with the cost model's
   T_ar(M) = a + b M;
2. sweeps DDP's ``bucket_cap_mb`` (1, 5, 10, 25, 50, 100 by default) and,
   for the ring, P3's slice size (per-tensor all-reduces cut into slices of
   that many bytes, the lowest layer first, preempted only between slices:
   ``stream_policy = "priority"``, ``preemption = "message"``,
   ``chunk_bytes`` = slice), and ByteScheduler's credit (per-tensor
   all-reduces cut into ``partition_bytes`` pieces, the lowest layer first,
   several in flight while fewer than ``credit_bytes`` run);
3. simulates every candidate with :func:`ddlsim.simulate` — WFBP (one
   all-reduce per tensor), SyncEASGD (one after the backward pass), DDP's
   default 25 MB, each swept bucket size and the MG-WFBP plan (given to the
   simulator as explicit groups of tensor names) — and reports the simulated
   iteration times and speed-ups. The planner's own estimate for MG-WFBP is
   reported beside it for comparison only.

Planned from a DDP capture (``profile`` an events.parquet of ``ddlsim capture ddp``, no scenario, no cost
model), the scenario is the one ``ddlsim replay`` builds from it
(:func:`ddlsim.simulation.replay.replay_plan`), and the plan has a ``captured`` entry: the job with the
capture's own buckets, whose time is the replay's exactly. DDP's buckets for each size are then built as the
capture shows its torch builds them (:func:`_first_bucket_is_cap`). Where the capture's ranks computed on the CPU
with no core to spare and its link did not hold the all-reduces back, the transport ran on the cores that compute,
and the plan's ``shared_cores`` lists the entries whose predicted gain counts on more communication under compute
than the job as captured had (:func:`shared_core_overlap`), with a note: the engine simulates that overlap as free.

Candidates with the same groups are simulated once. The JSON
(:meth:`Plan.to_dict`) holds the scenario that was simulated and, for each
plan, a scenario ``grouping`` that reproduces it, so that
``ddlsim.simulate(plan["scenario"], grouping=plan["mg_wfbp"]["grouping"])``
gives the same time; the DDP section holds what a DDP job needs:
``bucket_cap_mb``, the parameter order (registration order, by name) and
the bucket membership by tensor name, in DDP's bucket order.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..api import SimulationResult, simulate
from ..arguments import real, whole
from ..errors import PlanError
from ..simulation import grouping as gp
from ..simulation.lowering import allreduce_cost
from ..simulation.model_build import build_model, layer_times_ns
from ..simulation.run import _resolve
from ..simulation.scenario import Scenario, with_overrides
from ..units import MAX_SIZE_BYTES, format_binary_size, format_bytes
from ..workload.model import Model
from .cost import CostModel

DEFAULT_BUCKET_CAPS_MB = (1, 5, 10, 25, 50, 100)
DEFAULT_SLICE_BYTES = (1 << 20, 4 << 20, 16 << 20)
# ByteScheduler's own defaults: 1 M-parameter partitions and a 4 M-parameter credit (fp32)
DEFAULT_PARTITION_BYTES = 4_000_000
DEFAULT_CREDIT_BYTES = (16_000_000,)
BASELINES = ("wfbp", "synceasgd", "ddp_default")

Progress = Callable[[int, int, str], None]


# a plan entry that is not this much faster than the job as captured is no gain (a note says so)
NO_GAIN = 0.01

@dataclass
class Candidate:
    """One simulated grouping."""

    name: str
    label: str
    grouping: dict  # the scenario grouping that reproduces it
    groups: list[dict]  # the grouping pass's groups (with "tensors")
    iteration_time_s: float
    iteration_times_s: list[float]
    bucket_cap_mb: Optional[float] = None
    slice_bytes: Optional[int] = None
    credit_bytes: Optional[int] = None
    overrides: dict = field(default_factory=dict)  # scenario settings beyond the grouping (P3's schedule)
    overlap_s: float = 0.0  # communication under compute per iteration (the analysis' overlap, mean over iterations)


@dataclass
class Plan:
    scenario: Scenario
    model: Model
    cost_model: CostModel
    cost: gp.AllReduceCost  # T_ar(M) the planner used
    wfbp: Candidate
    synceasgd: Candidate
    ddp_default: Candidate
    mg_wfbp: Candidate
    mg_wfbp_estimate_s: float  # the planner's own formula (forward + end of the last all-reduce)
    ddp_sweep: list[Candidate]
    best_ddp: Candidate
    simulations: int
    p3_sweep: list[Candidate] = field(default_factory=list)
    best_p3: Optional[Candidate] = None
    bytescheduler_sweep: list[Candidate] = field(default_factory=list)
    best_bytescheduler: Optional[Candidate] = None
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    # planned from a DDP capture: the job as it was captured, with its own buckets (ddlsim replay's time exactly)
    captured: Optional[Candidate] = None
    # planned from a CPU capture whose all-reduces ran on the cores that compute: the plans whose gain counts on
    # more communication under compute than the job as captured had (see shared_core_overlap)
    shared_cores: Optional[dict] = None

    def speedups(self, c: Candidate) -> dict[str, float]:
        """Speed-up of `c` against each baseline: baseline time / c's time."""
        return {b: getattr(self, b).iteration_time_s / c.iteration_time_s for b in BASELINES}

    @property
    def tensor_names(self) -> list[str]:
        return [t.name for t in gp.tensor_infos(self.model)]

    def _groups_by_name(self, groups: Sequence[dict]) -> list[dict]:
        names = self.tensor_names
        return [{"tensors": [names[i] for i in g["tensors"]], "bytes": g["bytes"], "layers": g["layers"]} for g in groups]

    def _entry(self, c: Candidate) -> dict:
        entry = {
            "label": c.label,
            "iteration_time_s": c.iteration_time_s,
            "iteration_times_s": c.iteration_times_s,
            "overlap_s": c.overlap_s,
            "groups": len(c.groups),
            "grouping": c.grouping,
            "speedup": self.speedups(c),
        }
        if c.overrides:
            entry["strategy"] = dict(c.overrides)
        return entry

    def to_dict(self) -> dict:
        """The plan as JSON-ready data (see the module docstring)."""
        sc = self.scenario
        names = self.tensor_names
        best = self.best_ddp
        # DDP's bucket order: bucket 0 holds the gradients that become ready first (the last layers).
        buckets = sorted(best.groups, key=lambda g: -max(g["tensors"]))
        mg = self._entry(self.mg_wfbp)
        mg["plan"] = self._groups_by_name(self.mg_wfbp.groups)
        mg["planner_estimate_s"] = self.mg_wfbp_estimate_s
        ddp = self._entry(best)
        ddp.update({
            "bucket_cap_mb": best.bucket_cap_mb,
            "ddp_kwargs": {"bucket_cap_mb": best.bucket_cap_mb},
            "parameter_order": names,
            "buckets": [
                {"index": i, "tensors": [names[t] for t in g["tensors"]], "parameter_indices": list(g["tensors"]),
                 "bytes": g["bytes"]}
                for i, g in enumerate(buckets)
            ],
            "sweep": [
                {"bucket_cap_mb": c.bucket_cap_mb, "iteration_time_s": c.iteration_time_s, "buckets": len(c.groups)}
                for c in self.ddp_sweep
            ],
        })
        p3 = None
        if self.best_p3 is not None:
            p3 = self._entry(self.best_p3)
            p3.update({
                "slice_bytes": self.best_p3.slice_bytes,
                "sweep": [{"slice_bytes": c.slice_bytes, "iteration_time_s": c.iteration_time_s} for c in self.p3_sweep],
            })
        bytescheduler = None
        if self.best_bytescheduler is not None:
            bytescheduler = self._entry(self.best_bytescheduler)
            bytescheduler.update({
                "partition_bytes": self.best_bytescheduler.overrides["partition_bytes"],
                "credit_bytes": self.best_bytescheduler.credit_bytes,
                "sweep": [{"credit_bytes": c.credit_bytes, "iteration_time_s": c.iteration_time_s} for c in self.bytescheduler_sweep],
            })
        return {
            "ddlsim_plan": 1,
            "model": {"name": self.model.name, "display_name": self.model.display_name, "tensors": len(names),
                      "bytes": self.model.size_bytes},
            "cluster": {
                "workers": sc.workers,
                "algorithm": sc.strategy.algorithm,
                "bandwidth_bps": sc.network.bandwidth_bps,
                "latency_ns": sc.network.latency_ns,
                "fidelity": sc.network.fidelity,
                "cost_model": self.cost_model.to_dict(),
                "allreduce_a_ns": self.cost.a,
                "allreduce_b_ns_per_byte": self.cost.b,
            },
            "scenario": scenario_dict(sc),
            "baselines": {b: self._entry(getattr(self, b)) for b in BASELINES},
            "mg_wfbp": mg,
            "ddp": ddp,
            "p3": p3,
            "bytescheduler": bytescheduler,
            "captured": None if self.captured is None else self._entry(self.captured),
            "shared_cores": self.shared_cores,
            "simulations": self.simulations,
            "wall_s": self.wall_s,
            "notes": list(self.notes),
        }

    def save(self, path: str | Path) -> None:
        from ..output import without_wall_time
        from ..trace.parquet import write_json  # complete or absent, never half-written

        write_json(path, without_wall_time(self.to_dict()))


def scenario_dict(sc: Scenario) -> dict:
    """The scenario as data that validates again (every field written out,
    but not the FLOP-model fields a measured profile replaces)."""
    data = sc.model_dump(mode="json", exclude={"base_dir"})
    if sc.model.profile:
        for key in ("device", "precision", "efficiency", "compute"):
            if key not in sc.model.model_fields_set:
                data["model"].pop(key, None)
    return data


def _names_grouping(model: Model, groups: Sequence[dict]) -> dict:
    names = [t.name for t in gp.tensor_infos(model)]
    return {"kind": "groups", "groups": [[names[i] for i in g["tensors"]] for g in groups]}


def _signature(groups: Sequence[dict]) -> tuple:
    """What the engine sees of a grouping (the order of tensors inside a buffer does not matter to it)."""
    return tuple(sorted(tuple(sorted(g["tensors"])) for g in groups))


def plan_scenario(scenario: Scenario | dict | str | Path | None = None, cost_model: Optional[CostModel] = None,
                  notes: Optional[list[str]] = None, **overrides: Any) -> tuple[Scenario, CostModel]:
    """The scenario a plan simulates: `scenario` with `overrides`, ring
    all-reduce, and the cost model's network (latency = alpha, bandwidth =
    1 / beta, its algorithm) when one is given. Unless iterations are given,
    one iteration when every iteration is the same (barrier on, no jitter, no
    sampled rank times or transient stragglers). Planned from a DDP capture
    (``profile``) with no cost model and no latency given: the per-call cost
    alpha the capture measured (:func:`ddlsim.plan.capture_cost.capture_alpha`)
    as the ring's per-step latency, and its reduction cost gamma unless one is
    given; `notes` gets a line saying so."""
    given = {k: v for k, v in overrides.items() if v is not None}
    replayed = _replay_of_capture(given, notes) if scenario is None and cost_model is None else None
    sc = replayed if replayed is not None else _resolve(scenario, given)
    same = sc.jitter == 0 and sc.model.rank_times == "median" and all(s.rank is not None for s in sc.straggler)
    if "iterations" not in sc.model_fields_set and sc.barrier and same:
        # with a barrier and no jitter every iteration is the same: one is enough
        sc = with_overrides(sc, {"iterations": 1})
    if "trace_detail" not in sc.model_fields_set:
        sc = with_overrides(sc, {"trace_detail": "collective"})  # the plan reads iteration times only
    if sc.strategy.kind != "ring":
        raise PlanError(f"ddlsim plan plans all-reduce jobs (MG-WFBP and DDP), but the strategy is {sc.strategy.kind!r}; "
                        'use strategy kind = "ring"')
    if sc.workers < 2:
        raise PlanError("ddlsim plan needs at least 2 workers (with one there is nothing to synchronise)")
    if sc.model.profile and not Path(sc.model.profile).is_absolute():
        # the plan's JSON holds the scenario: make it usable from any directory
        base = Path(sc.base_dir) if sc.base_dir else Path.cwd()
        sc = with_overrides(sc, {"profile": str((base / sc.model.profile).resolve())})
    if cost_model is not None:
        sc = with_overrides(sc, cost_model.network(sc.workers), origin="cost model")
    else:
        if replayed is None:  # a replay's scenario already holds what its capture measured
            sc = _capture_alpha(sc, notes)
        cost_model = CostModel.from_network(sc.network.latency_ns, sc.network.bandwidth_bps, sc.strategy.algorithm)
    return sc, cost_model


def _ddp_capture_meta(profile: Any) -> Optional[dict]:
    """The metadata of the DDP capture (an events.parquet) at `profile`; None for anything else."""
    if not profile or not str(profile).endswith(".parquet") or not Path(profile).is_file():
        return None
    from ..simulation.replay import recorded_metadata

    try:
        meta = recorded_metadata(Path(profile))
    except Exception:  # not a parquet event log: the profile is read (and refused) elsewhere
        return None
    return meta if meta.get("source") == "capture" and meta.get("job") == "ddp" else None


def _first_bucket_is_cap(model: Model, own_groups: Sequence[dict], meta: dict, notes: list[str]) -> bool:
    """Whether the DDP capture whose metadata is `meta` built its buckets (`own_groups`) with a first bucket as large as the
    others (torch's DDP does so when it is given ``bucket_cap_mb``, as a plan's ``ddp_kwargs`` and ``capture ddp``
    give it, in the versions whose first small bucket is only for the default) rather than DDP's 1 MiB first bucket
    (:func:`ddlsim.simulation.grouping.ddp`); `notes` gets a line when it did."""
    cap = meta.get("bucket_cap_mb")
    if not isinstance(cap, (int, float)) or isinstance(cap, bool) or cap <= 0:
        return False
    mine = _signature(own_groups)
    if mine == _signature(gp.ddp(model, float(cap))):
        return False
    if mine != _signature(gp.ddp(model, float(cap), first_bucket_bytes=int(cap * 1024 * 1024))):
        return False
    notes.append(f"DDP's buckets for each bucket_cap_mb: the first as large as the others, as the capture's "
                 f"{len(own_groups)} buckets at bucket_cap_mb={cap:g} show (the torch that ran it gives a given "
                 f"bucket_cap_mb no {gp.DDP_FIRST_BUCKET_BYTES >> 20} MiB first bucket)")
    return True


def _replay_of_capture(overrides: dict[str, Any], notes: Optional[list[str]]) -> Optional[Scenario]:
    """Planned from a DDP capture (``profile``, no scenario, no cost model): the scenario ``ddlsim replay`` builds
    from it (:func:`ddlsim.simulation.replay.replay_plan`: the capture's own buckets, framework gaps, optimizer step,
    the wait for the slower rank, the ring's rate while training, the per-call cost, gamma and latency), with the
    other `overrides`, so that the plan's simulation of the job as captured is the replay's, to the last digit. A
    bandwidth equal to the capture's own shaped link is not passed on (the replay then takes the rate the ring got
    there while training); `notes` gets the replay's notes. None for any other profile."""
    profile = overrides.get("profile")
    meta = _ddp_capture_meta(profile)
    if meta is None:
        return None
    from ..simulation.replay import replay_plan

    rest = {k: v for k, v in overrides.items() if k not in ("profile", "model")}
    if "bandwidth" in rest and meta.get("bandwidth"):
        from ..units import parse_bandwidth

        try:
            same = parse_bandwidth(str(rest["bandwidth"])) == parse_bandwidth(str(meta["bandwidth"]))
        except ValueError:
            same = False
        if same:
            del rest["bandwidth"]
    sc, replay_notes = replay_plan(profile, model=overrides.get("model"), **rest)
    if notes is not None:
        notes.extend(replay_notes)
    return sc


def _capture_alpha(sc: Scenario, notes: Optional[list[str]]) -> Scenario:
    """`sc` with the per-step latency (and gamma) its DDP capture profile measured, where none was given."""
    if not sc.model.profile or "latency" in sc.network.model_fields_set:
        return sc
    from .capture_cost import capture_alpha

    found = capture_alpha(sc.model.profile)
    if found is None:
        return sc
    update: dict[str, Any] = {"latency": f"{max(1, round(found['step_ns']))}ns"}
    line = (f"alpha = {found['alpha_ns'] / 1e3:.4g} us per all-reduce call, measured in the capture {sc.model.profile} "
            f"(its 4-byte all-reduce, {found['small_ns'] / 1e3:.4g} us, and its training all-reduces): latency "
            f"{update['latency']} per ring step = alpha / (2 ({found['workers']} - 1)); --latency overrides it")
    if found["gamma_ns_per_byte"] and "gamma_ns_per_byte" not in sc.strategy.model_fields_set:
        update["gamma_ns_per_byte"] = found["gamma_ns_per_byte"]
        line += f"; reduction cost gamma = {found['gamma_ns_per_byte']:.4g} ns/byte, measured there too"
    if notes is not None:
        notes.append(line)
    return with_overrides(sc, update, origin=f"capture {sc.model.profile}")


# What the plans that put communication under compute measured where the transport shared the cores
# (docs/planning.md, "Measured in pairs"): quoted by the note, so a reader sees the size of the risk.
SHARED_CORES_MEASURED = ("2 CPU ranks on 2 cores, LeNet-5 unshaped and at 1 Gbit/s and ResNet-18 unshaped: MG-WFBP "
                         "predicted -16, -19 and -15 %, measured +17, +38 and +1 % over 8-10 before/after pairs each")


def shared_core_overlap(meta: dict, plan: Plan) -> Optional[dict]:
    """Planned from the DDP capture whose metadata is `meta`: where its ranks computed on the CPU with no core to
    spare (:func:`ddlsim.simulation.overheads.transport_on_the_cores`) and its link did not hold the all-reduces
    back, the transport (gloo's threads) ran on the cores that compute. The engine simulates communication under
    compute as free, which there it is not: an entry whose predicted gain counts on more communication under compute
    than the job as captured had is listed. The facts, each listed entry's overlap and gain, and a ``note``; None
    where the capture's transport had cores of its own, or no entry gains with more overlap."""
    from ..simulation.overheads import transport_on_the_cores

    why = transport_on_the_cores(meta)
    captured = plan.captured
    if why is None or captured is None:
        return None
    entries = {}
    for name, c in (("mg_wfbp", plan.mg_wfbp), ("ddp", plan.best_ddp), ("p3", plan.best_p3),
                    ("bytescheduler", plan.best_bytescheduler)):
        if c is None or c.iteration_time_s >= captured.iteration_time_s or c.overlap_s <= captured.overlap_s:
            continue
        entries[name] = {"label": c.label, "overlap_s": c.overlap_s, "gain": 1.0 - c.iteration_time_s / captured.iteration_time_s}
    if not entries:
        return None
    listed = "; ".join(f"{e['label']} {-e['gain']:+.1%} with {e['overlap_s'] * 1e3:.3g} ms under compute" for e in entries.values())
    note = (f"shared cores: {why}, so its all-reduces ran on the cores that compute (the transport's threads beside "
            f"the backward pass). ddlsim simulates communication under compute as free; these plans' gains count on "
            f"more of it than the job as captured had ({captured.overlap_s * 1e3:.3g} ms per iteration): {listed}. "
            f"On such cores that overlap can cost more than it saves ({SHARED_CORES_MEASURED}; docs/planning.md): "
            f"measure the plan before trusting it (ddlsim plan --apply DIR --repeats 6)")
    return {"why": why, "processes": meta.get("processes"), "host_cores": meta.get("host_cores"),
            "threads": meta.get("threads"), "captured_overlap_s": captured.overlap_s, "entries": entries, "note": note}


def make_plan(scenario: Scenario | dict | str | Path | None = None, *, cost_model: Optional[CostModel] = None,
              bucket_caps_mb: Sequence[float] = DEFAULT_BUCKET_CAPS_MB, slice_bytes: Sequence[int] = DEFAULT_SLICE_BYTES,
              credit_bytes: Sequence[int] = DEFAULT_CREDIT_BYTES, partition_bytes: int = DEFAULT_PARTITION_BYTES,
              progress: Optional[Progress] = None, threads: Optional[int] = None, **overrides: Any) -> Plan:
    """Plans gradient synchronisation for a scenario (see the module docstring).

    `progress(done, total, label)` is called as simulations finish; `threads`
    simulations run at a time (default: the CPU count, at most 4).

    >>> p = make_plan(model="resnet50", workers=16, bandwidth="10Gbps")   # doctest: +SKIP
    >>> p.best_ddp.bucket_cap_mb, p.speedups(p.mg_wfbp)                   # doctest: +SKIP
    """
    t0 = time.perf_counter()
    caps = list(dict.fromkeys(real(c, "bucket caps (MB): each", 0, 1e6, PlanError, open_lo=True) for c in bucket_caps_mb))
    if not caps:
        raise PlanError("bucket caps: give at least one, e.g. (1, 5, 25)")
    slices = list(dict.fromkeys(whole(s, "P3 slice sizes (bytes): each", 1, MAX_SIZE_BYTES, PlanError) for s in slice_bytes))
    credits = list(dict.fromkeys(whole(c, "ByteScheduler credits (bytes): each", 1, MAX_SIZE_BYTES, PlanError)
                                 for c in credit_bytes))
    partition_bytes = whole(partition_bytes, "ByteScheduler partition size (bytes)", 1, MAX_SIZE_BYTES, PlanError)
    notes: list[str] = []
    capture_meta = _ddp_capture_meta(overrides.get("profile"))  # read once: the buckets' rule and the caveat use it
    from_capture = scenario is None and cost_model is None and capture_meta is not None
    sc, cost_model = plan_scenario(scenario, cost_model, notes, **overrides)
    replayed = sc if from_capture else None
    if credits and sc.network.collective_model == "closed-form":
        notes.append("ByteScheduler runs all-reduces side by side, which the closed-form collective model cannot time; no credit sweep")
        credits = []
    if slices and sc.strategy.algorithm != "ring":
        notes.append(f"P3 slices are ring messages; the {sc.strategy.algorithm} all-reduce has none, so no P3 sweep")
        slices = []
    if (slices or credits) and sc.barrier:
        notes.append("P3, ByteScheduler (any priority schedule) gain little with the inter-iteration barrier on; "
                     "plan with --no-barrier to see what it buys")
    model = build_model(sc.model, sc.base_dir)
    times = layer_times_ns(model, sc.model)
    bwd = [b for _, b in times]
    names = [t.name for t in gp.tensor_infos(model)]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise PlanError(f"model {model.name} has two tensors named {dup!r}; a plan names tensors, so names must be unique")
    cost = cost_model.allreduce(sc.workers)
    if cost_model.source == "network":
        cost = allreduce_cost(sc)  # exactly what `grouping = "mg-wfbp"` uses on this scenario

    # the plans
    layers, ready, sizes = gp.mg_wfbp_units(model, bwd)
    mg_plan = gp.mg_wfbp_optimal(ready, sizes, cost)
    mg_groups = gp.mg_wfbp(model, bwd, cost, "optimal")
    estimate_s = (sum(f for f, _ in times) + mg_plan.iteration_end) / 1e9
    jobs: list[tuple[str, str, dict, list[dict], Optional[float]]] = [
        ("wfbp", "WFBP (per tensor)", {"kind": "per-tensor"},
         [gp.make_group([t], "per-tensor") for t in gp.tensor_infos(model)], None),
        ("synceasgd", "SyncEASGD", {"kind": "synceasgd"}, gp.synceasgd(model), None),
    ]
    own = sc.strategy.grouping if replayed is not None else None
    own_groups = gp.user_groups(model, own.groups) if own is not None and getattr(own, "kind", None) == "groups" else None
    if own_groups is not None:
        first_is_cap = _first_bucket_is_cap(model, own_groups, capture_meta or {}, notes)
    else:  # no capture to show which rule the job's torch follows: the one of the torch versions in use today
        first_is_cap = True
        notes.append(f"DDP's buckets for each bucket_cap_mb: the first as large as the others, as torch's DDP builds "
                     f"them when it is given bucket_cap_mb (torch 2.11 and 2.15 checked; the plan's ddp_kwargs give "
                     f"it); DDP's default (no bucket_cap_mb) keeps its {gp.DDP_FIRST_BUCKET_BYTES >> 20} MiB first "
                     f"bucket. Plan from a capture (--profile) to follow the rule of the torch that ran it")
    # DDP as it runs when given no bucket_cap_mb: a 1 MiB first bucket, then 25 MB (every torch version)
    jobs.append(("ddp-default", f"DDP {gp.DDP_BUCKET_CAP_MB:g} MB (default)",
                 {"kind": "ddp", "bucket_cap_mb": float(gp.DDP_BUCKET_CAP_MB)}, gp.ddp(model, gp.DDP_BUCKET_CAP_MB),
                 float(gp.DDP_BUCKET_CAP_MB)))
    for cap in sorted(set(caps)):
        if first_is_cap:  # DDP's buckets as torch builds them for a bucket_cap_mb it is given
            groups = gp.ddp(model, cap, first_bucket_bytes=int(cap * 1024 * 1024))
            jobs.append((f"ddp:{cap:g}", f"DDP {cap:g} MB", _names_grouping(model, groups), groups, cap))
        else:
            jobs.append((f"ddp:{cap:g}", f"DDP {cap:g} MB", {"kind": "ddp", "bucket_cap_mb": cap}, gp.ddp(model, cap), cap))
    jobs.append(("mg-wfbp", "MG-WFBP", _names_grouping(model, mg_groups), mg_groups, None))
    if own_groups is not None:  # the capture's own buckets, as replay runs them
        jobs.append(("captured", f"as captured ({len(own_groups)} DDP buckets)", _names_grouping(model, own_groups),
                     own_groups, None))

    wfbp_groups = jobs[0][3]
    p3_jobs = [(f"p3:{s}", f"P3 {format_binary_size(s)} slices",
                {"stream_policy": "priority", "preemption": "message", "chunk_bytes": s}, s) for s in slices]

    bs_jobs = [(f"bytescheduler:{c}", f"ByteScheduler {format_bytes(partition_bytes)} partitions, credit {format_bytes(c)}",
                {"stream_policy": "priority", "preemption": "none", "partition_bytes": int(partition_bytes), "credit_bytes": c}, c) for c in credits]

    # one simulation per distinct grouping (and schedule), the most work first, on
    # `threads` threads (the engine releases the GIL while it runs)
    todo: dict[tuple, tuple[str, dict]] = {}
    for name, label, grouping, groups, cap in jobs:
        todo.setdefault(_signature(groups), (label, {"grouping": grouping}))
    for name, label, schedule, s in p3_jobs:
        todo[("p3", s)] = (label, {"grouping": {"kind": "per-tensor"}, **schedule})
    for name, label, schedule, c in bs_jobs:
        todo[("bytescheduler", c)] = (label, {"grouping": {"kind": "per-tensor"}, **schedule})
    order = sorted(todo, key=lambda key: (key[0] not in ("p3", "bytescheduler"), len(key)), reverse=True)
    results: dict[tuple, SimulationResult] = {}
    if threads is None:
        threads = min(4, os.cpu_count() or 1)
    if progress:
        progress(0, len(order), todo[order[0]][0])
    if threads <= 1:
        for key in order:
            results[key] = simulate(sc, **todo[key][1])
            if progress:
                progress(len(results), len(order), todo[key][0])
    else:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            futures = {pool.submit(simulate, sc, **todo[key][1]): key for key in order}
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                if progress:
                    progress(len(results), len(order), todo[futures[future]][0])

    def candidate(name: str, label: str, grouping: dict, groups: list[dict], key: tuple, **extra: Any) -> Candidate:
        r = results[key]
        return Candidate(name, label, grouping, groups, r.iteration_time_s, [float(x) for x in r._iteration_arrays["time_s"]],
                         overlap_s=float(r._iteration_arrays["overlap_s"].mean()), **extra)

    candidates = {name: candidate(name, label, grouping, groups, _signature(groups), bucket_cap_mb=cap)
                  for name, label, grouping, groups, cap in jobs}
    p3_sweep = [candidate(name, label, {"kind": "per-tensor"}, wfbp_groups, ("p3", s), slice_bytes=s, overrides=schedule)
                for name, label, schedule, s in p3_jobs]
    bs_sweep = [candidate(name, label, {"kind": "per-tensor"}, wfbp_groups, ("bytescheduler", c), credit_bytes=c, overrides=schedule)
                for name, label, schedule, c in bs_jobs]

    sweep = [candidates[f"ddp:{c:g}"] for c in caps]
    best = min(sweep, key=lambda c: (c.iteration_time_s, c.bucket_cap_mb))
    plan = Plan(
        scenario=sc, model=model, cost_model=cost_model, cost=cost,
        wfbp=candidates["wfbp"], synceasgd=candidates["synceasgd"],
        ddp_default=candidates["ddp-default"], mg_wfbp=candidates["mg-wfbp"],
        mg_wfbp_estimate_s=estimate_s, ddp_sweep=sweep, best_ddp=best, simulations=len(results),
        p3_sweep=p3_sweep, best_p3=min(p3_sweep, key=lambda c: (c.iteration_time_s, c.slice_bytes)) if p3_sweep else None,
        bytescheduler_sweep=bs_sweep,
        best_bytescheduler=min(bs_sweep, key=lambda c: (c.iteration_time_s, c.credit_bytes)) if bs_sweep else None,
        captured=candidates.get("captured"),
    )
    plan.notes.extend(sc.migration_notes)
    if plan.captured is not None:
        plan.shared_cores = shared_core_overlap(capture_meta or {}, plan)
        if plan.shared_cores is not None:
            notes.append(plan.shared_cores["note"])
    if plan.captured is not None:
        own = plan.captured.iteration_time_s
        faster = min(plan.mg_wfbp.iteration_time_s, best.iteration_time_s)
        if faster > own * (1 - NO_GAIN):
            notes.append(f"neither entry a DDP job can run is at least {NO_GAIN:.0%} faster than the job as captured "
                         f"({own * 1e3:.3g} ms; MG-WFBP {plan.mg_wfbp.iteration_time_s * 1e3:.3g} ms, DDP "
                         f"{best.bucket_cap_mb:g} MB {best.iteration_time_s * 1e3:.3g} ms): keep the job's own buckets; "
                         "running the plan (capture ddp --plan, ddlsim.capture.plan_for) would measure noise")
    if plan.ddp_default.iteration_time_s < best.iteration_time_s:
        notes.append(f"DDP's default ({gp.DDP_FIRST_BUCKET_BYTES >> 20} MiB first bucket, then "
                     f"{gp.DDP_BUCKET_CAP_MB:g} MB; {plan.ddp_default.iteration_time_s * 1e3:.2f} ms) is faster than "
                     f"every bucket_cap_mb swept (best {best.bucket_cap_mb:g} MB, {best.iteration_time_s * 1e3:.2f} ms): "
                     f"give DDP no bucket_cap_mb")
    plan.notes.extend(notes)
    plan.wall_s = time.perf_counter() - t0
    return plan
