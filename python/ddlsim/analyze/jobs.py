"""Per-job analysis of a log of several jobs on one fabric (docs/jobs.md).

A log's ``job`` column says whose each row is; its metadata ``jobs`` (written
by ``ddlsim simulate`` on a scenario with [[job]] tables) names each job, its
first global rank, hosts, start and, when the run measured it, its iteration
times alone; ``contention`` lists the links flows of two or more jobs
crossed. Iteration times per job are the breakdown's
(:func:`ddlsim.analyze.breakdown.iteration_arrays`) over that job's rows
only: a job's first iteration starts at its first row (its start offset
is not counted).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..trace.columns import ArrayLog

if TYPE_CHECKING:
    import pandas as pd


def _subset(log: ArrayLog, mask: np.ndarray) -> ArrayLog:
    """The rows of `log` where `mask` holds, for the breakdown (deps left out)."""
    cols = {}
    for name, value in log.columns.items():
        cols[name] = (np.asarray(value[0])[mask], value[1]) if isinstance(value, tuple) else np.asarray(value)[mask]
    n = int(mask.sum())
    return ArrayLog(cols, deps_offsets=np.zeros(n + 1, dtype=np.int64), deps_values=np.zeros(0, dtype=np.int64),
                    metadata=log.metadata, source=log.source)


def job_ids(log: Any) -> list[int]:
    """The jobs a log's rows belong to (``[0]`` for a log of one job or without a job column)."""
    names = log.columns if isinstance(log, ArrayLog) else log.table.column_names
    if "job" not in names or not len(log):
        return [0]
    return sorted({int(j) for j in np.unique(np.asarray(log.column("job")))})


def job_iterations(log: Any, job: int) -> dict:
    """Job `job`'s per-iteration arrays (``iteration_arrays``) from its rows of `log` (an ArrayLog or EventLog)."""
    from .breakdown import iteration_arrays

    jobs = np.asarray(log.column("job"))
    return iteration_arrays(_subset(log, jobs == job) if isinstance(log, ArrayLog) else log.filter(jobs == job))


def contention_frame(rows: list[dict], names: dict[int, str] | list[str]) -> "pd.DataFrame":
    """One row per (link, owner) of a ``contention`` list: link, link_name, owner (a job's name or ``tenant N``),
    bytes, flows, busy_ns and the link's shared_ns."""
    import pandas as pd

    lookup = dict(enumerate(names)) if isinstance(names, list) else dict(names)
    out = []
    for row in rows:
        for u in row["uses"]:
            owner = lookup.get(u["id"], f"job{u['id']}") if u["owner"] == "job" else f"tenant {u['id']}"
            out.append({"link": row["link"], "link_name": row["name"], "owner": owner, "bytes": u["bytes"],
                        "flows": u["flows"], "busy_ns": u["busy_ns"], "shared_ns": row["shared_ns"]})
    return pd.DataFrame(out, columns=["link", "link_name", "owner", "bytes", "flows", "busy_ns", "shared_ns"])


def job_table(log: Any) -> "pd.DataFrame":
    """One row per job of a log with more than one: job, name, workers, first_rank, hosts, start_ns, iterations,
    iteration_time_s (mean with the other jobs), communication_s, alone_iteration_time_s and slowdown (when the
    run measured the job alone), shared_links (links it shared with another job). Empty for a log of one job."""
    import pandas as pd

    columns = ["job", "name", "workers", "first_rank", "hosts", "start_ns", "iterations", "iteration_time_s",
               "communication_s", "alone_iteration_time_s", "slowdown", "shared_links"]
    ids = job_ids(log)
    meta = {int(m["job"]): m for m in (log.metadata.get("jobs") or [])}
    if len(ids) < 2 and len(meta) < 2:
        return pd.DataFrame(columns=columns)
    contention = log.metadata.get("contention") or []
    rows = []
    for j in ids:
        it = job_iterations(log, j)
        m = meta.get(j, {})
        mean = float(np.mean(it["time_s"])) if len(it["time_s"]) else float("nan")
        alone = m.get("alone_iteration_times_s")
        alone_mean = float(np.mean(alone)) if alone else None
        rows.append({
            "job": j, "name": m.get("name", f"job{j}"), "workers": m.get("workers"), "first_rank": m.get("first_rank"),
            "hosts": " ".join(str(h) for h in m.get("hosts", [])), "start_ns": m.get("start_ns"),
            "iterations": int(len(it["time_s"])), "iteration_time_s": mean,
            "communication_s": float(np.mean(it["communication_s"])) if len(it["time_s"]) else float("nan"),
            "alone_iteration_time_s": alone_mean, "slowdown": mean / alone_mean if alone_mean else None,
            "shared_links": sum(1 for c in contention if any(u["owner"] == "job" and u["id"] == j for u in c["uses"])),
        })
    return pd.DataFrame(rows, columns=columns)


def jobs_timeline_figure(log: Any, title: str = ""):
    """One lane per rank, grouped by job (labelled ``name: local rank``), compute (tall, light bars) and
    communication (short, solid bars) in the job's colour: when each job computes and communicates, start offsets
    included."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rank = np.asarray(log.column("rank"))
    job = np.asarray(log.column("job"))
    kind = np.asarray(log.column("kind"))
    start, end = np.asarray(log.column("start_ns")), np.asarray(log.column("end_ns"))
    names = {m["job"]: m["name"] for m in log.metadata.get("jobs", [])}
    firsts = {m["job"]: m["first_rank"] for m in log.metadata.get("jobs", [])}
    ranks = sorted(set(int(r) for r in rank))
    lane = {r: i for i, r in enumerate(ranks)}
    job_of = {int(r): int(j) for r, j in zip(rank, job)}
    fig, ax = plt.subplots(figsize=(11, max(2.5, 0.35 * len(ranks) + 1.6)))
    colours = plt.get_cmap("tab10")
    for j in sorted(set(int(x) for x in job)):
        for what, height, alpha in (("compute", 0.7, 0.35), ("communication", 0.3, 1.0)):
            mask = (job == j) & ((kind == "compute") if what == "compute" else np.isin(kind, ["send", "recv", "collective"]))
            if not mask.any():
                continue
            ys = np.asarray([lane[int(r)] for r in rank[mask]])
            s, e = start[mask] / 1e6, (end[mask] - start[mask]) / 1e6
            for k, y in enumerate(np.unique(ys)):
                on = ys == y
                ax.broken_barh(list(zip(s[on], e[on])), (y - height / 2, height), facecolors=colours(j % 10), alpha=alpha,
                               label=f"{names.get(j, j)} {what}" if k == 0 else None)
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels([f"{names.get(job_of[r], job_of[r])}: {r - firsts.get(job_of[r], 0)}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_title(title or "jobs on one fabric: compute (tall, light) and communication (short, solid) per rank")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), fontsize=7, ncol=4, frameon=False)
    fig.tight_layout()
    return fig
