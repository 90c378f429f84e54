"""Several training jobs sharing one fabric ([[job]] tables; docs/jobs.md).

A scenario with ``[[job]]`` tables runs every job in ONE engine run: each job
is lowered on its own (its model, workers, strategy, grouping, iterations,
band), placed on hosts of its own, and the engine merges the jobs' graphs
(crates/ddlsim-core/src/lower/jobs.rs), so their flows share the links at
analytic, flow and packet fidelity; background tenants ([[tenant]]) come on
top.

- **Expansion.** A key of a [[job]] table replaces the scenario's (sections
  such as ``model`` and ``strategy`` are replaced whole); keys left out
  take the scenario's. ``band`` sets the job's ``network.job_band``.
- **Placement.** Jobs with an explicit host list take those hosts; the
  others, in table order, take hosts among the free ones: ``packed`` the
  lowest-numbered, ``spread`` one per leaf in turn (round-robin over the
  leaves of a leaf-spine fabric; as packed on a star), ``random`` a seeded
  sample (``placement_seed``, default the scenario's seed + the job's
  index), sorted. A job needs ceil(workers / ranks_per_host) hosts, plus
  one per parameter server with ``server_hosts = "separate"``. The fabric
  has ``network.hosts`` hosts, else as many as the jobs need (at least one
  past the highest host listed).
- **Ranks.** The log's ranks are global: job j's ranks follow job j-1's
  (workers, then servers); the ``job`` column says whose a row is, and
  ``metadata["jobs"][j]["first_rank"]`` turns a global rank into the job's
  own (rank - first_rank). Iterations, layers, tensors and groups stay
  per job.
- **Alone.** :func:`run_jobs` also runs every job alone (same placement,
  fabric and background tenants, no other job) and reports each job's
  slowdown: its mean iteration time with the others over its time alone.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _core
from ..errors import ScenarioError, from_engine_error
from ..units import parse_duration_ns
from ..analyze.jobs import contention_frame, job_iterations, jobs_timeline_figure
from ..trace.columns import ArrayLog
from ..workload.model import Model
from .bridge import _dictionary, event_log_from_engine, raw_column
from .lowering import engine_json, network_document, resolve_trace_detail, tenant_documents, training_document
from .model_build import build_model, layer_times_ns
from .scenario import JobConfig, RingStrategy, Scenario, scenario_from_dict

if TYPE_CHECKING:
    import pandas as pd

    from ..trace.schema import EventLog

# Keys of a [[job]] table that replace the scenario's own.
JOB_SCENARIO_KEYS = ("model", "workers", "strategy", "iterations", "seed", "jitter", "barrier", "stagger", "stagger_mode")


def job_label(sc: Scenario, index: int) -> str:
    """``job 1 (name)``: how messages and tables name a job."""
    name = sc.job[index].name
    return f"job {index}" + (f" ({name})" if name else "")


def job_names(sc: Scenario) -> list[str]:
    """Each job's name: its own, else ``job<index>``."""
    return [j.name if j.name else f"job{i}" for i, j in enumerate(sc.job)]


def job_scenarios(sc: Scenario) -> list[Scenario]:
    """Each [[job]] table as a scenario of one job (see the module doc); ScenarioError names the job at fault."""
    if not sc.job:
        raise ScenarioError("the scenario has no [[job]] tables; give two or more (docs/jobs.md), or simulate it as one job")
    names = [j.name for j in sc.job if j.name is not None]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ScenarioError(f"job name {twice[0]!r} is used twice; give each [[job]] its own name")
    base = sc.model_dump(exclude={"base_dir", "job", "tenant", "job_stagger"}, exclude_unset=True)
    out = []
    for index, job in enumerate(sc.job):
        # a key set to None (a scenario dumped whole, e.g. a run's recorded one) is a key left out
        given = {k: v for k, v in job.model_dump(exclude_unset=True).items() if v is not None}
        data = dict(base)
        for key in JOB_SCENARIO_KEYS:
            if key in given:
                value = given[key]
                data[key] = {"kind": value.strip().lower()} if key == "strategy" and isinstance(value, str) else value
        network = {k: v for k, v in dict(data.get("network") or {}).items() if k != "hosts"}
        if job.band is not None:
            network["job_band"] = job.band
        data["network"] = network
        sub = scenario_from_dict(data, origin=job_label(sc, index))
        out.append(sub.model_copy(update={"base_dir": sc.base_dir}))
    return out


def hosts_needed(sub: Scenario) -> int:
    """Hosts a job occupies: its workers' (ranks_per_host to a host), plus its servers' own when separate."""
    worker_hosts = math.ceil(sub.workers / sub.network.ranks_per_host)
    return worker_hosts + (sub.servers if sub.network.server_hosts == "separate" else 0)


def rank_hosts(sub: Scenario, hosts: list[int]) -> list[int]:
    """Host of each of the job's ranks on its `hosts` (in order): workers ranks_per_host to a host, then servers
    (on hosts of their own after the workers', or colocated with worker s)."""
    per_host = sub.network.ranks_per_host
    worker_hosts = math.ceil(sub.workers / per_host)
    out = [hosts[w // per_host] for w in range(sub.workers)]
    for s in range(sub.servers):
        out.append(out[s % sub.workers] if sub.network.server_hosts == "colocated" else hosts[worker_hosts + s])
    return out


def _spread_order(free: list[int], hosts_per_leaf: int) -> list[int]:
    """The free hosts one per leaf in turn: the first free host of every leaf, then the second, ..."""
    by_leaf: dict[int, list[int]] = {}
    for h in free:
        by_leaf.setdefault(h // hosts_per_leaf, []).append(h)
    order = []
    depth = max((len(v) for v in by_leaf.values()), default=0)
    for i in range(depth):
        order.extend(v[i] for _, v in sorted(by_leaf.items()) if i < len(v))
    return order


def _needs_text(sub: Scenario) -> str:
    per_host = sub.network.ranks_per_host
    servers = f" + {sub.servers} server host(s)" if sub.servers and sub.network.server_hosts == "separate" else ""
    return f"{sub.workers} worker(s), {per_host} per host{servers}"


def place_jobs(sc: Scenario, subs: list[Scenario]) -> tuple[list[list[int]], int]:
    """(hosts of each job, in rank order; hosts in the fabric): see the module doc. ScenarioError (one line) when
    the hosts do not suffice, a list has the wrong length, lies outside the fabric or overlaps another job's."""
    needs = [hosts_needed(s) for s in subs]
    chosen: list[list[int] | None] = [None] * len(subs)
    owner: dict[int, int] = {}
    for i, job in enumerate(sc.job):
        if not isinstance(job.placement, list):
            continue
        if len(job.placement) != needs[i]:
            raise ScenarioError(f"{job_label(sc, i)}: placement lists {len(job.placement)} host(s), but the job needs "
                                f"{needs[i]} ({_needs_text(subs[i])}); list {needs[i]} hosts")
        for h in job.placement:
            if h in owner:
                raise ScenarioError(f"{job_label(sc, i)}: host {h} is also in {job_label(sc, owner[h])}'s placement; "
                                    "jobs run on hosts of their own: list other hosts")
            owner[h] = i
        chosen[i] = list(job.placement)
    given = sc.network.hosts
    fabric = given if given is not None else max(sum(needs), max(owner, default=-1) + 1)
    outside = sorted(h for h in owner if h >= fabric)
    if outside:
        i = owner[outside[0]]
        raise ScenarioError(f"{job_label(sc, i)}: host {outside[0]} is not in the fabric (network.hosts = {fabric}: "
                            f"hosts 0 to {fabric - 1}); raise network.hosts to at least {outside[-1] + 1} or list lower hosts")
    free = [h for h in range(fabric) if h not in owner]
    for i, job in enumerate(sc.job):
        if chosen[i] is not None:
            continue
        if len(free) < needs[i]:
            where = f"network.hosts = {fabric}" if given is not None else f"the fabric's {fabric}"
            raise ScenarioError(
                f"{job_label(sc, i)}: needs {needs[i]} host(s) ({_needs_text(subs[i])}), but only {len(free)} of "
                f"{where} are free after the jobs before it; raise network.hosts or give the job fewer workers")
        if job.placement == "random":
            seed = job.placement_seed if job.placement_seed is not None else (sc.seed + i) % 2**63
            take = sorted(random.Random(seed).sample(free, needs[i]))
        elif job.placement == "spread" and sc.network.topology == "leaf-spine":
            take = _spread_order(free, sc.network.hosts_per_leaf)[:needs[i]]
        else:
            take = free[:needs[i]]
        chosen[i] = take
        free = [h for h in free if h not in set(take)]
    return [list(c or []) for c in chosen], fabric


@dataclass
class JobsPlan:
    """What the engine gets for a jobs scenario: each job's scenario, model, training document, start and hosts,
    the network document and the trace detail."""

    scenario: Scenario
    subs: list[Scenario]
    models: list[Model]
    trainings: list[dict]
    starts_ns: list[int]
    hosts: list[list[int]]
    fabric_hosts: int
    network: dict
    detail: str

    def jobs_document(self, only: int | None = None) -> dict:
        """The engine's jobs document: every job, or only job `only` (its run alone)."""
        picked = range(len(self.subs)) if only is None else [only]
        return {"jobs": [{"start_ns": self.starts_ns[j], "training": self.trainings[j]} for j in picked]}


def plan_jobs(sc: Scenario) -> JobsPlan:
    """Expands, places and lowers the jobs of `sc` (nothing runs)."""
    subs = job_scenarios(sc)
    placements, fabric = place_jobs(sc, subs)
    models, trainings = [], []
    for sub, hosts in zip(subs, placements):
        model = build_model(sub.model, sub.base_dir)
        times = layer_times_ns(model, sub.model)
        training = training_document(sub, model, times)
        training["host_of_rank"] = rank_hosts(sub, hosts)
        models.append(model)
        trainings.append(training)
    # The fabric's network: the scenario's, with the fabric's hosts, its tenants, and flows recorded (contention).
    fabric_view = sc.model_copy(update={"workers": 1, "strategy": RingStrategy(),
                                        "network": sc.network.model_copy(update={"hosts": fabric, "server_hosts": "separate"})})
    network = network_document(fabric_view.model_copy(update={"tenant": []}))
    tenants = tenant_documents(fabric_view)
    if tenants:
        network["tenants"] = tenants
    network["hosts"] = fabric
    network["record_flows"] = True
    if sc.trace_detail != "auto":
        detail = sc.trace_detail
    else:
        details = [resolve_trace_detail(s, [g["bytes"] for g in t["groups"]]) for s, t in zip(subs, trainings)]
        detail = "collective" if "collective" in details else "step"
    stagger = parse_duration_ns(sc.job_stagger)
    starts = [j.start_ns + k * stagger for k, j in enumerate(sc.job)]
    return JobsPlan(sc, subs, models, trainings, starts, placements, fabric, network, detail)


def with_starts(sc: Scenario, starts_ns: list[int]) -> Scenario:
    """`sc` with job k starting at ``starts_ns[k]`` ns (and no job_stagger): how a search over start offsets
    (CASSINI-style) re-runs a jobs scenario."""
    if len(starts_ns) != len(sc.job):
        raise ScenarioError(f"{len(starts_ns)} start offsets for {len(sc.job)} jobs; give one per [[job]]")
    jobs = [j.model_copy(update={"start": f"{int(t)}ns"}) for j, t in zip(sc.job, starts_ns)]
    return sc.model_copy(update={"job": jobs, "job_stagger": "0s"})


def check_budget(plan: JobsPlan, alone: bool = True) -> None:
    """Refuses (ScenarioError) a jobs run over the memory or event budget (see ddlsim.simulation.budget): the
    sum of every job's own estimate (the process's base memory once), plus the background tenants' flows: those
    of the run of all jobs, over its estimated length (the latest job's start plus its duration beside the
    tenants), and, with `alone`, those of the longest run of one job alone, and every job's own events, transfers
    and packets once more, and the largest job's memory once more (the alone runs come one at a time, while the run
    of all jobs is held)."""
    from . import budget

    ests, ends = [], []
    tenants = plan.network.get("tenants") or []
    for sub, t, start in zip(plan.subs, plan.trainings, plan.starts_ns):
        group_bytes = [g["bytes"] for g in t["groups"]]
        compute_ns = sum(layer["fwd_ns"] + layer["bwd_ns"] for layer in t["layers"])
        e = budget.estimate(sub, len(t["layers"]), group_bytes, plan.detail, None, compute_ns)
        ests.append(e)
        if tenants:
            ends.append(start / 1e9 + budget.job_seconds(sub, group_bytes, e.transfers // max(sub.iterations, 1),
                                                          compute_ns, tenants))
    flows, tenant_bytes = 0, 0
    if tenants:
        runs = [max(ends)] + ([max(ends)] if alone else [])
        for length_s in runs:
            f, b = budget.tenant_flows(tenants, length_s, plan.fabric_hosts)
            flows, tenant_bytes = flows + f, tenant_bytes + b
    tenant_hops = budget.tenant_packet_hops(plan.scenario, flows, tenant_bytes)  # their packets (packet level)
    total = budget.Estimate(ops=sum(e.ops for e in ests), transfers=sum(e.transfers for e in ests) + flows,
                            events=sum(e.events for e in ests) + 2 * flows, log_rows=sum(e.log_rows for e in ests),
                            memory_bytes=budget.BASE_BYTES + sum(e.memory_bytes - budget.BASE_BYTES for e in ests)
                            + flows * budget.TENANT_FLOW_BYTES,
                            packet_hops=sum(e.packet_hops for e in ests) + tenant_hops)
    if alone:  # then each job runs again alone, one at a time, while the run of all jobs is held
        total = budget.Estimate(ops=total.ops + sum(e.ops for e in ests),
                                transfers=total.transfers + sum(e.transfers for e in ests),
                                events=total.events + sum(e.events for e in ests), log_rows=total.log_rows,
                                memory_bytes=total.memory_bytes + max(e.memory_bytes - budget.BASE_BYTES for e in ests),
                                packet_hops=total.packet_hops + sum(e.packet_hops for e in ests))
    biggest = max(range(len(ests)), key=lambda k: ests[k].log_rows)
    budget.check(total, plan.subs[biggest], plan.detail, budget.current_control())


def _run_engine(plan: JobsPlan, only: int | None = None) -> dict:
    from . import budget

    control = budget.current_control()
    try:
        return _core.simulate_jobs_json(json.dumps(_engine_jobs(plan.jobs_document(only)), separators=(",", ":")),
                                        engine_json(plan.network), plan.detail, control.progress)
    except _core.EngineError as exc:
        raise from_engine_error(exc, lambda: _save_crash(plan.scenario)) from None
    except BaseException as exc:  # a Rust panic (PanicException derives from BaseException)
        if isinstance(exc, (KeyboardInterrupt, SystemExit, MemoryError)):
            raise
        raise from_engine_error(exc, lambda: _save_crash(plan.scenario)) from None


def _engine_jobs(document: dict) -> dict:
    """The jobs document as the engine reads it (groups without their log-only keys)."""
    return {"jobs": [{"start_ns": j["start_ns"], "training": json.loads(engine_json(j["training"]))} for j in document["jobs"]]}


def _save_crash(sc: Scenario) -> str | None:
    from .run import save_crash_scenario

    return save_crash_scenario(sc)


def jobs_event_log(out: dict, plan: JobsPlan, only: int | None = None) -> ArrayLog:
    """The event log of a jobs run (`only`: the run of job `only` alone) with the ``job`` column, per-job roles,
    names and algorithms, the groups table of every job and the flows' jobs."""
    picked = list(range(len(plan.subs))) if only is None else [only]
    hosts = [h for j in picked for h in plan.trainings[j]["host_of_rank"]]
    first = list(out["jobs"]["first_rank"])
    job_of_rank = np.asarray([picked[k] for k in out["jobs"]["job_of_rank"]], dtype=np.int32)
    meta = {"source": "simulate", "scenario": json.loads(json.dumps(plan.scenario.model_dump(mode="json", exclude={"base_dir"}),
                                                                     sort_keys=True)),
            "model": plan.models[picked[0]].name, "jobs": _jobs_metadata(plan, picked, first)}
    if only is not None:
        meta["alone"] = only
    sub0 = plan.subs[picked[0]]
    log = event_log_from_engine(out, model=plan.models[picked[0]], workers=sub0.workers, host_of_rank=hosts, algorithm="",
                                groups=plan.trainings[picked[0]]["groups"], metadata=meta)
    cols = out["columns"]
    rank = raw_column(cols, "rank")
    job = job_of_rank[rank] if len(rank) else np.zeros(0, dtype=np.int32)
    local = rank - np.asarray(first, dtype=np.int64)[np.searchsorted(picked, job)] if len(rank) else rank
    workers = np.asarray([plan.subs[j].workers for j in range(len(plan.subs))], dtype=np.int64)
    log.columns["job"] = job
    log.columns["role"] = ((local >= workers[job]).astype(np.int8) if len(rank) else np.zeros(0, np.int8), ["worker", "server"])
    # names: each job's own layer and tensor names
    layer, tensor = raw_column(cols, "layer"), raw_column(cols, "tensor")
    names: list[str] = []
    base = np.zeros(len(plan.subs), dtype=np.int64)
    layers_of = np.zeros(len(plan.subs), dtype=np.int64)
    for j in range(len(plan.subs)):
        base[j] = len(names)
        model = plan.models[j]
        layers_of[j] = len(model.layers)
        names.extend([lay.name for lay in model.layers] + [t.name for t in model.tensors])
    empty, barrier = len(names), len(names) + 1
    code = np.where(tensor >= 0, base[job] + layers_of[job] + tensor, np.where(layer >= 0, base[job] + layer, empty))
    op_names = list(out["op_names"])
    barrier_ops = [i for i, n in enumerate(op_names) if n == "barrier"]
    if barrier_ops:
        code = np.where(np.isin(raw_column(cols, "op_code"), barrier_ops), barrier, code)
    log.columns["name"] = _dictionary(names + ["", "barrier"], code)
    algorithms = [getattr(s.strategy, "algorithm", "").replace("-", "_") if s.strategy.kind == "ring" else "" for s in plan.subs]
    in_collective = raw_column(cols, "collective") >= 0
    log.columns["algorithm"] = _dictionary([""] + algorithms, np.where(in_collective, 1 + job, 0))
    log.groups = _groups(plan, picked)
    if log.flows is not None:
        src = np.asarray(log.flows["src"])
        log.flows["job"] = np.where(src >= 0, job_of_rank[np.clip(src, 0, max(len(job_of_rank) - 1, 0))], -1).astype(np.int32)
    log.metadata["contention"] = [_contention_row(row, picked) for row in out["jobs"]["contention"]]
    return log


def _contention_row(row: dict, picked: list[int]) -> dict:
    return {"link": int(row["link"]), "name": str(row["name"]), "shared_ns": int(row["shared_ns"]),
            "uses": [{"owner": kind, "id": int(picked[i]) if kind == "job" else int(i), "bytes": float(b), "flows": int(f),
                      "busy_ns": int(busy)} for kind, i, b, f, busy in row["uses"]]}


def _jobs_metadata(plan: JobsPlan, picked: list[int], first: list[int]) -> list[dict]:
    names = job_names(plan.scenario)
    out = []
    for k, j in enumerate(picked):
        sub = plan.subs[j]
        out.append({"job": j, "name": names[j], "first_rank": int(first[k]), "ranks": int(sub.ranks), "workers": sub.workers,
                    "servers": sub.servers, "hosts": list(plan.hosts[j]), "start_ns": plan.starts_ns[j],
                    "band": sub.network.job_band, "model": plan.models[j].name, "strategy": sub.strategy.kind,
                    "algorithm": getattr(sub.strategy, "algorithm", None), "iterations": sub.iterations})
    return out


def _groups(plan: JobsPlan, picked: list[int]) -> dict[str, Any]:
    from .bridge import _groups_table

    parts = [(_groups_table(plan.trainings[j]["groups"], plan.models[j]), j) for j in picked]
    out = {k: np.concatenate([p[k] for p, _ in parts]) if parts else np.zeros(0) for k in ("group", "tensor", "kind", "offset", "bytes")}
    out["job"] = np.concatenate([np.full(len(p["group"]), j, dtype=np.int32) for p, j in parts])
    return out


@dataclass
class JobsRun:
    """A run of several jobs: the plan, the event log (`columns`; `events` validated), each job's iteration
    times with the others and alone, and the links they contend on."""

    plan: JobsPlan
    columns: ArrayLog
    stats: dict[str, Any]
    alone: list[dict] | None
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    # a replay (ddlsim.replay of a log of several jobs): each job's mean iteration time in the recorded run, by name
    recorded: dict[str, float] | None = None

    @property
    def scenario(self) -> Scenario:
        return self.plan.scenario

    @cached_property
    def events(self) -> "EventLog":
        from ..trace.schema import event_log_from_array_log

        return event_log_from_array_log(self.columns)

    @cached_property
    def _iterations(self) -> list[dict]:
        return [job_iterations(self.columns, j) for j in range(len(self.plan.subs))]

    def jobs(self) -> list[dict[str, Any]]:
        """One dict per job: name, ranks, hosts, start, iteration times (s) with the other jobs and alone,
        mean iteration time, slowdown (mean with / mean alone) and the links it contends on."""
        names = job_names(self.scenario)
        meta = {m["job"]: m for m in self.columns.metadata["jobs"]}
        rows = []
        for j, it in enumerate(self._iterations):
            times = [float(x) for x in it["time_s"]]
            mean = float(np.mean(times)) if times else float("nan")
            alone = self.alone[j]["iteration_times_s"] if self.alone is not None else None
            alone_mean = float(np.mean(alone)) if alone else None
            links = [c["name"] for c in self.contention() if any(u["owner"] == "job" and u["id"] == j for u in c["uses"])]
            rows.append({
                "job": j, "name": names[j], "model": meta[j]["model"], "workers": meta[j]["workers"],
                "strategy": meta[j]["strategy"], "algorithm": meta[j]["algorithm"], "band": meta[j]["band"],
                "first_rank": meta[j]["first_rank"], "hosts": meta[j]["hosts"], "start_ns": meta[j]["start_ns"],
                "end_s": float(it["end_s"][-1]) if len(it["end_s"]) else float("nan"),
                "iteration_times_s": times, "iteration_time_s": mean,
                "communication_s": float(np.mean(it["communication_s"])) if times else float("nan"),
                "alone_iteration_times_s": alone, "alone_iteration_time_s": alone_mean,
                "slowdown": mean / alone_mean if alone_mean else None,
                "contended_links": links,
            })
            if self.recorded is not None and names[j] in self.recorded:
                rec = self.recorded[names[j]]
                rows[-1]["recorded_iteration_time_s"] = rec
                rows[-1]["recorded_difference"] = mean / rec - 1 if rec > 0 else None
        return rows

    def contention(self) -> list[dict[str, Any]]:
        """The links that carried flows of two or more jobs: link, name, shared_ns (time flows of two or more jobs
        were on it at once) and per owner (``job`` or ``tenant``, id) its bytes, flows and busy time."""
        return list(self.columns.metadata.get("contention", []))

    def job_table(self) -> "pd.DataFrame":
        import pandas as pd

        keep = ("job", "name", "model", "workers", "strategy", "band", "start_ns", "iteration_time_s",
                "alone_iteration_time_s", "slowdown", "communication_s", "contended_links")
        if self.recorded is not None:  # a replay: the recorded run's times beside
            keep += ("recorded_iteration_time_s", "recorded_difference")
        return pd.DataFrame([{k: (", ".join(r[k]) if k == "contended_links" else r.get(k)) for k in keep} for r in self.jobs()])

    def contention_table(self) -> "pd.DataFrame":
        return contention_frame(self.contention(), job_names(self.scenario))

    def summary(self) -> dict[str, Any]:
        """Machine-readable summary (the CLI's --json)."""
        return {
            "jobs": self.jobs(),
            "contention": self.contention(),
            "fabric_hosts": self.plan.fabric_hosts,
            "fidelity": self.scenario.network.fidelity,
            "topology": self.scenario.network.topology,
            "trace_detail": self.plan.detail,
            "makespan_ns": int(self.stats["makespan_ns"]),
            "events": int(self.stats["events"]),
            "transfers": int(self.stats["transfers"]),
            "log_rows": len(self.columns),
            "wall_s": self.wall_s,
            "notes": list(self.notes),
            "scenario": self.scenario.model_dump(mode="json", exclude={"base_dir"}),
        }

    def save(self, out_dir: str | Path, timeline: bool = True) -> dict[str, Path]:
        """Writes events.parquet (and its side tables), trace.json (Perfetto), jobs.csv (one row per job),
        contention.csv (one row per contended link and owner), summary.json and, with `timeline`, timeline.png
        (one lane per job) into `out_dir`, all or nothing."""
        from ..output import chrome_view, write_summary
        from ..safe_io import staged_directory
        from ..trace import write_chrome_trace, write_event_log

        names = {"events": "events.parquet", "chrome_trace": "trace.json", "jobs": "jobs.csv",
                 "contention": "contention.csv", "summary": "summary.json"}
        if timeline:
            names["timeline"] = "timeline.png"
        with staged_directory(out_dir) as stage:
            write_event_log(self.events, stage / names["events"])
            view, notes = chrome_view(self.events)
            write_chrome_trace(view, stage / names["chrome_trace"])
            self.notes.extend(notes)
            self.job_table().to_csv(stage / names["jobs"], index=False)
            self.contention_table().to_csv(stage / names["contention"], index=False)
            write_summary(self.summary(), stage / names["summary"])
            if timeline:
                from ..analyze.plot import save_figure

                save_figure(jobs_timeline_figure(self.events), stage / names["timeline"])
        return {key: Path(out_dir) / name for key, name in names.items()}


def _iteration_times(log: ArrayLog, job: int) -> list[float]:
    return [float(x) for x in job_iterations(log, job)["time_s"]]


def run_jobs(scenario: Scenario | dict | str | Path, alone: bool = True, **overrides: Any) -> JobsRun:
    """Simulates every [[job]] of `scenario` in one run (and, with `alone`, each job alone on the same placement)."""
    from .run import _resolve

    sc = _resolve(scenario, overrides)
    plan = plan_jobs(sc)
    check_budget(plan, alone)
    t0 = time.perf_counter()
    out = _run_engine(plan)
    wall = time.perf_counter() - t0
    log = jobs_event_log(out, plan)
    stats = {k: out[k] for k in ("events", "transfers", "recomputations", "makespan_ns")}
    alone_runs = None
    if alone:
        alone_runs = []
        for j in range(len(plan.subs)):
            single = _run_engine(plan, only=j)
            alone_log = jobs_event_log(single, plan, only=j)
            alone_runs.append({"iteration_times_s": _iteration_times(alone_log, j), "makespan_ns": int(single["makespan_ns"])})
    if alone_runs is not None:  # kept in the log, so that `ddlsim analyze` can report slowdowns
        for entry, single in zip(log.metadata["jobs"], alone_runs):
            entry["alone_iteration_times_s"] = single["iteration_times_s"]
    run = JobsRun(plan=plan, columns=log, stats=stats, alone=alone_runs, wall_s=wall)
    run.notes.extend(sc.migration_notes)
    return run

