"""`ddlsim plan` for a scenario with several jobs ([[job]] tables, docs/jobs.md):
per-job groupings, CASSINI-style start offsets, and their gain measured.

1. **Groupings** (``groupings="plan"``, the default): every all-reduce job
   is planned alone with :func:`ddlsim.plan.planner.make_plan` (WFBP,
   SyncEASGD, the DDP bucket sweep and MG-WFBP, each simulated) and takes
   the grouping of the fastest plan; ``groupings="keep"`` keeps each job's
   own (parameter-server jobs always keep theirs).
2. **Profiles.** Each job runs alone on its placement (the fabric, its
   hosts, no other job; :mod:`ddlsim.simulation.jobs`) with its flows
   recorded; its communication profile is its last iteration's flows on
   the links of their routes (:func:`ddlsim.plan.offsets.profile_from_log`).
3. **Offsets**: :func:`ddlsim.plan.offsets.search_offsets` over the
   profiles, against the scenario's own starts.
4. **Measured**: the jobs run together twice, with the scenario's starts
   (``without``) and with the offsets (``with``); per job its mean
   iteration time, its slowdown against its time alone, and the gain
   (mean without / mean with). The predicted slowdown beside it is
   ``(period + predicted delay) / period`` from the offset search's model.

The JSON (:meth:`JobsOffsetPlan.to_dict`) holds ``scenario``: the scenario
with each job's grouping and ``start`` set to the plan, which
``ddlsim simulate`` runs as is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..arguments import whole
from ..errors import PlanError
from .offsets import DEFAULT_MAX_CELLS, DEFAULT_RESTARTS, CommProfile, OffsetPlan, profile_from_log, search_offsets

Progress = Callable[[str], None]


@dataclass
class JobsOffsetPlan:
    """What :func:`make_jobs_plan` found and measured."""

    scenario: Any  # the planned Scenario (groupings and starts applied)
    names: list[str]
    hosts: list[list[int]]
    groupings: list[dict]  # per job: {"source": "plan" | "kept", "grouping": ..., "plan": {...} or None}
    profiles: list[CommProfile]
    offsets: OffsetPlan
    alone_s: list[list[float]]  # per job: its iteration times alone
    without: list[list[float]]  # per job: iteration times together, the scenario's starts
    with_offsets: list[list[float]]  # per job: iteration times together, the planned starts
    starts_before_ns: list[int]
    simulations: int = 0
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def job_rows(self) -> list[dict]:
        rows = []
        delays_before = self.offsets.before.predicted_delay_ns()
        delays_after = self.offsets.after.predicted_delay_ns()
        for j, name in enumerate(self.names):
            alone = float(np.mean(self.alone_s[j]))
            without, with_ = float(np.mean(self.without[j])), float(np.mean(self.with_offsets[j]))
            period = self.profiles[j].period_ns
            rows.append({
                "job": j, "name": name, "hosts": self.hosts[j],
                "start_before_ns": self.starts_before_ns[j], "start_ns": self.offsets.after.offsets_ns[j],
                "period_ns": period,
                "grouping": self.groupings[j],
                "alone_iteration_time_s": alone,
                "measured": {
                    "without": {"iteration_time_s": without, "iteration_times_s": self.without[j], "slowdown": without / alone},
                    "with": {"iteration_time_s": with_, "iteration_times_s": self.with_offsets[j], "slowdown": with_ / alone},
                    "gain": without / with_,
                },
                "predicted": {
                    "without": {"delay_ns": delays_before[j], "slowdown": (period + delays_before[j]) / period},
                    "with": {"delay_ns": delays_after[j], "slowdown": (period + delays_after[j]) / period},
                    "gain": (period + delays_before[j]) / (period + delays_after[j]),
                },
            })
        return rows

    def to_dict(self) -> dict:
        return {
            "ddlsim_plan_jobs": 1,
            "jobs": self.job_rows(),
            "offsets": self.offsets.to_dict(),
            "profiles": [p.to_dict() for p in self.profiles],
            "scenario": _scenario_data(self.scenario),
            "simulations": self.simulations,
            "wall_s": self.wall_s,
            "notes": list(self.notes),
        }

    def save(self, path: str | Path) -> None:
        from ..output import without_wall_time
        from ..trace.parquet import write_json  # complete or absent, never half-written

        write_json(path, without_wall_time(self.to_dict()))


def _scenario_data(sc: Any) -> dict:
    """The scenario as data that validates again: the planner's, with each [[job]] table holding only the keys
    set (a key left out takes the scenario's value; written out as null it would not validate)."""
    from .planner import scenario_dict

    data = scenario_dict(sc)
    data["job"] = [{k: v for k, v in table.items() if v is not None} for table in data.get("job", [])]
    return data


def has_jobs(scenario: Any) -> bool:
    """Whether a scenario (a file, dict or Scenario) has [[job]] tables; False when it cannot be read
    (the ordinary path then reports why)."""
    if isinstance(scenario, (str, Path)):
        from ..errors import ScenarioError
        from ..simulation.scenario import read_scenario_toml

        try:
            data = read_scenario_toml(scenario)
        except ScenarioError:
            return False
        return bool(data.get("job"))
    if isinstance(scenario, dict):
        return bool(scenario.get("job"))
    return bool(getattr(scenario, "job", None))


def _job_table(sc: Any, index: int) -> dict:
    return sc.job[index].model_dump(mode="json", exclude_unset=True)


def _with_jobs(sc: Any, tables: Sequence[dict]) -> Any:
    """`sc` with its [[job]] tables replaced by `tables` (validated again)."""
    from ..simulation.scenario import scenario_from_dict

    data = sc.model_dump(mode="json", exclude={"base_dir", "job"}, exclude_unset=True)
    data["job"] = [dict(t) for t in tables]
    return scenario_from_dict(data, origin="plan").model_copy(update={"base_dir": sc.base_dir})


def _plan_grouping(sub: Any, planner_options: dict) -> tuple[Optional[dict], dict]:
    """(the fastest plan's grouping or None, what the plan says) for one job's scenario."""
    from .planner import make_plan

    if sub.strategy.kind != "ring" or sub.workers < 2:
        return None, {"source": "kept", "reason": "ddlsim plan plans all-reduce jobs of 2 or more workers"}
    plan = make_plan(sub, slice_bytes=(), credit_bytes=(), threads=1, **planner_options)
    cands = [plan.wfbp, plan.synceasgd, plan.ddp_default, *plan.ddp_sweep, plan.mg_wfbp]
    best = min(cands, key=lambda c: c.iteration_time_s)  # the first of equals: the list's order
    return best.grouping, {"source": "plan", "label": best.label, "iteration_time_s": best.iteration_time_s,
                           "mg_wfbp_s": plan.mg_wfbp.iteration_time_s, "best_ddp_bucket_cap_mb": plan.best_ddp.bucket_cap_mb,
                           "best_ddp_s": plan.best_ddp.iteration_time_s, "wfbp_s": plan.wfbp.iteration_time_s,
                           "simulations": plan.simulations}


def make_jobs_plan(scenario: Any, *, groupings: str = "plan", grid_ns: Optional[int] = None, method: str = "auto",
                   seed: int = 0, restarts: int = DEFAULT_RESTARTS, max_cells: int = DEFAULT_MAX_CELLS,
                   bucket_caps_mb: Optional[Sequence[float]] = None, progress: Optional[Progress] = None,
                   **overrides: Any) -> JobsOffsetPlan:
    """Plans a scenario of several jobs (see the module doc)."""
    from ..analyze.jobs import job_iterations
    from ..simulation.jobs import (_run_engine, check_budget, job_names, job_scenarios, jobs_event_log, plan_jobs,
                                   with_starts)
    from ..simulation.run import _resolve

    t0 = time.perf_counter()
    if groupings not in ("plan", "keep"):
        raise PlanError(f"groupings {groupings!r}: choose plan (each job's fastest plan) or keep (each job's own)")
    if method not in ("auto", "exact", "affinity"):  # before any simulation
        raise PlanError(f"offset search: method {method!r}: choose auto, exact or affinity")
    if grid_ns is not None:
        grid_ns = whole(grid_ns, "offset search: grid_ns (the grid step)", 1, 10**15, PlanError)
    restarts = whole(restarts, "offset search: restarts", 0, 10**6, PlanError)
    max_cells = whole(max_cells, "offset search: max_cells", 1, 1 << 31, PlanError)
    seed = whole(seed, "offset search: seed", 0, 2**64 - 1, PlanError)
    sc = _resolve(scenario, {k: v for k, v in overrides.items() if v is not None})
    if len(sc.job) < 2:
        raise PlanError("offsets for several jobs need a scenario with two or more [[job]] tables (docs/jobs.md)")
    names = job_names(sc)
    subs = job_scenarios(sc)
    simulations = 0
    notes: list[str] = []
    tables = [_job_table(sc, j) for j in range(len(subs))]
    chosen: list[dict] = []
    for j, sub in enumerate(subs):
        own = sub.strategy.model_dump(mode="json").get("grouping")
        if groupings == "plan":
            if progress:
                progress(f"planning the grouping of {names[j]}")
            options = {"bucket_caps_mb": tuple(bucket_caps_mb)} if bucket_caps_mb else {}
            grouping, info = _plan_grouping(sub, options)
            simulations += int(info.get("simulations", 0))
            if grouping is not None:
                strategy = sub.strategy.model_dump(mode="json", exclude_unset=True)
                strategy["kind"] = sub.strategy.kind
                strategy["grouping"] = grouping
                tables[j]["strategy"] = strategy
                chosen.append({**info, "grouping": grouping})
                continue
            chosen.append({**info, "grouping": own})
        else:
            chosen.append({"source": "kept", "grouping": own})
    planned = _with_jobs(sc, tables)
    jp = plan_jobs(planned)
    check_budget(jp)  # before any simulation: the runs together are the largest
    starts_before = list(jp.starts_ns)  # the [[job]] starts, job_stagger included
    profiles, alone = [], []
    for j in range(len(subs)):
        if progress:
            progress(f"profiling {names[j]} alone")
        log = jobs_event_log(_run_engine(jp, only=j), jp, only=j)
        simulations += 1
        profiles.append(profile_from_log(log, names[j], network=planned.network))
        alone.append([float(x) for x in job_iterations(log, j)["time_s"]])
    if progress:
        progress("searching offsets")
    found = search_offsets(profiles, grid_ns=grid_ns, start_ns=starts_before, method=method, seed=seed,
                           restarts=restarts, max_cells=max_cells)
    final = with_starts(planned, [int(s) for s in found.after.offsets_ns])

    def together(scenario: Any) -> list[list[float]]:
        plan = plan_jobs(scenario)
        log = jobs_event_log(_run_engine(plan), plan)
        return [[float(x) for x in job_iterations(log, j)["time_s"]] for j in range(len(subs))]

    if progress:
        progress("simulating the jobs together without offsets")
    without = together(planned)
    if progress:
        progress("simulating the jobs together with offsets")
    with_offsets = together(final)
    simulations += 2
    notes.extend(sc.migration_notes)
    notes.extend(found.notes)
    for j, p in enumerate(profiles):
        if not p.phases:
            notes.append(f"{names[j]} sent nothing in its last iteration alone: it has no communication to place")
    return JobsOffsetPlan(
        scenario=final, names=names, hosts=[list(h) for h in jp.hosts], groupings=chosen, profiles=profiles,
        offsets=found, alone_s=alone, without=without, with_offsets=with_offsets, starts_before_ns=starts_before,
        simulations=simulations, wall_s=time.perf_counter() - t0, notes=notes,
    )
