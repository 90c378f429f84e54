"""``ddlsim validate``: replay against capture over a grid of real runs.

Each case is a job (DDP or PS), a model and a link (unshaped, or shaped to a
rate: 1 Gbit/s, 100 Mbit/s; shaping needs root), captured ``repeats`` times
with ``ddlsim capture`` (or taken from existing captures, ``--captures``).

* **measured**: per capture, :func:`ddlsim.analyze.breakdown.iteration_mean`
  (the same iterations capture's summary, analyze and replay count); per
  case, the mean over the repeats and their spread ((max - min) / mean).
* **self-prediction**: each capture replayed under its own settings, exactly
  as ``ddlsim replay CAPTURE/events.parquet`` replays it
  (:func:`ddlsim.replay`: the capture's layer times, framework gaps,
  optimizer step, buckets, gamma and shaped link rate).
* **cross-prediction**: each capture of a job and model replayed at the rate
  of another shaped link of the same job and model (``--bandwidth``), and
  compared with the captures made there. That link is a tbf-shaped veth (how
  capture shapes), so the replay describes it so (``--wire tbf``: its headers
  and its token bucket) whatever link the capture itself ran on; a shaped
  capture gets that by default, an unshaped one would otherwise be replayed on
  a bare link of that rate.

Writes into ``--out`` (a new or empty directory): ``captures/`` (when it
captures), ``cases.csv`` (one row per case and prediction), ``runs.csv`` (one
row per capture and prediction), ``iterations.csv`` (per capture, its
measured and replayed iteration times), ``operations.csv`` (per case and
operation, e.g. "worker collective/allreduce", measured and replayed time
per rank and iteration), ``validation.png`` (predicted
against measured), ``errors.png`` (error per case with its goal) and
``index.html``.
"""

from __future__ import annotations

import html
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from .errors import DdlsimError
from .safe_io import staged_directory

GOALS_PCT = {("ddp", "self"): 5.0, ("ps", "self"): 10.0, ("ddp", "cross"): 10.0, ("ps", "cross"): 10.0}
# job -> model -> capture arguments
JOBS: dict[str, dict[str, list[str]]] = {
    "ddp": {"lenet5": ["--model", "lenet5", "--batch-size", "16"],
            "resnet18": ["--model", "resnet18", "--batch-size", "8"]},
    # the PS capture's image model is LeNet-5; its other model (sparse-lr) is not a zoo model replay can rebuild
    "ps": {"lenet5": ["--model", "lenet5", "--servers", "1", "--batch-size", "16"]},
}
LINKS = ("unshaped", "1Gbps", "100Mbps")
PARTS = ("compute_s", "communication_s", "exposed_communication_s", "idle_s")


@dataclass
class Capture:
    job: str
    model: str
    link: str  # "unshaped" or the shaped rate, normalised ("1000Mbps")
    path: Path  # events.parquet
    repeat: int = 0
    measured: dict[str, Any] = field(default_factory=dict)
    replayable: bool = True  # a zoo model, or one rebuilt from the capture (ddlsim.workload.captured)


def link_label(bandwidth: Optional[str]) -> str:
    """"unshaped", or a shaped rate in Mbit/s ("1Gbps" and "1000Mbps" are one link)."""
    if not bandwidth or str(bandwidth).lower() == "unshaped":
        return "unshaped"
    from .units import parse_bandwidth

    try:
        return f"{parse_bandwidth(str(bandwidth)) / 1e6:g}Mbps"
    except (ValueError, DdlsimError) as exc:
        raise DdlsimError(f"link {bandwidth!r}: {exc}; write unshaped or a rate with a unit, e.g. 1Gbps") from None


def operation_means(log, iterations: Optional[list[int]] = None) -> dict[str, float]:
    """Per operation ("ROLE KIND/OP", e.g. "worker collective/allreduce"): its rows' summed duration per rank and
    iteration in s, the mean over the ranks of that role and the `iterations` given (default all)."""
    import numpy as np

    from .analyze.breakdown import collective_iterations
    from .trace.coerce import as_columns

    carried = collective_iterations(getattr(log, "metadata", None) or {})
    log = as_columns(log)
    cols = {k: np.asarray(log.column(k)) for k in ("rank", "role", "iteration", "kind", "op", "start_ns", "end_ns")}
    keep = (cols["iteration"] >= 0) & (cols["kind"] != "marker") & (cols["kind"] != "barrier")
    if iterations is not None:
        keep &= np.isin(cols["iteration"], iterations)
    out: dict[str, float] = {}
    for role in sorted(set(cols["role"][keep].tolist())):
        mine = keep & (cols["role"] == role)
        ranks = len(np.unique(cols["rank"][mine]))
        steps = ranks * len(np.unique(cols["iteration"][mine]))
        for kind, op in sorted(set(zip(cols["kind"][mine].tolist(), cols["op"][mine].tolist()))):
            rows = mine & (cols["kind"] == kind) & (cols["op"] == op)
            count = steps
            if kind == "collective" and carried is not None:  # recorded on these iterations only: the mean over them
                count = ranks * len(np.unique(cols["iteration"][mine & np.isin(cols["iteration"], sorted(carried))])) or steps
            out[f"{role} {kind}/{op}"] = float((cols["end_ns"][rows] - cols["start_ns"][rows]).sum()) / count / 1e9
    return out


def _measure(path: Path) -> dict[str, Any]:
    import numpy as np

    from .analyze.breakdown import breakdown_mask, iteration_arrays, iteration_mean
    from .trace.parquet import read_event_log

    log = read_event_log(path)
    arrays = iteration_arrays(log)
    mean = iteration_mean(arrays, log.metadata)
    mask = mean["mask"]
    out = {"mean_s": mean["mean_s"], "definition": mean["definition"], "metadata": log.metadata,
           "iterations": [int(i) for i in arrays["iteration"]], "times_s": [float(t) for t in arrays["time_s"]],
           "counted": [bool(m) for m in mask], "ops": operation_means(log, mean["iterations"])}
    parts = breakdown_mask(arrays, log.metadata, mask)  # all-reduce rows on some iterations only: over those
    for part in PARTS:
        out[part] = float(np.asarray(arrays[part])[parts].mean()) if parts.any() else float("nan")
    return out


def _predict(path: Path, bandwidth: Optional[str] = None, idle_curve: Any = None,
             message_times: Optional[str] = None) -> dict[str, Any]:
    """The replay of one capture (``ddlsim replay PATH [--bandwidth B --wire tbf]``): its mean iteration (what
    ``ddlsim replay`` prints), its per-iteration times and breakdown."""
    from .analyze.breakdown import iteration_arrays
    from .api import replay

    # a cross-prediction's link is one capture shaped (tbf on a veth): its framing, whatever the capture's own link
    kw: dict[str, Any] = {"bandwidth": bandwidth, "wire": "tbf"} if bandwidth else {}
    if idle_curve is not None and _job_of(path) == "ddp":
        kw["idle_curve"] = idle_curve  # a curve (dict) or False (none) for the DDP captures
    if message_times is not None and _job_of(path) == "ps":
        kw["message_times"] = message_times  # the PS captures' messages: measured (default) or their mean
    result = replay(path, **kw)
    arrays = iteration_arrays(result.columns)
    out = {"mean_s": result.iteration_time_s, "times_s": [float(t) for t in arrays["time_s"]], "notes": list(result.notes),
           "ops": operation_means(result.columns)}
    for part in PARTS:
        out[part] = float(arrays[part].mean())
    return out


def _job_of(path: Path) -> Optional[str]:
    from .trace.parquet import read_log_metadata

    return read_log_metadata(path).get("job")


def find_captures(directory: Path) -> list[Capture]:
    """Every capture (``events.parquet`` with ``source = capture``) under `directory`, up to three levels down."""
    from .trace.parquet import read_log_metadata
    from .workload.captured import captured_model, in_zoo

    if not directory.is_dir():
        raise DdlsimError(f"--captures {directory}: not a directory; give the directory that holds the captures "
                          "(e.g. the captures/ of an earlier ddlsim validate --out)")
    found = []
    for depth in ("*/events.parquet", "*/*/events.parquet", "*/*/*/events.parquet", "events.parquet"):
        for path in sorted(directory.glob(depth)):
            try:
                meta = read_log_metadata(path)
            except (OSError, DdlsimError, ValueError) as exc:
                raise DdlsimError(f"{path}: not a readable event log ({exc}); remove it from --captures or "
                                  "capture it again") from None
            if meta.get("source") != "capture" or meta.get("job") not in JOBS:
                continue
            model = str(meta.get("model", ""))
            replayable = in_zoo(model) or captured_model(meta, str(path)) is not None
            found.append(Capture(str(meta["job"]), model, link_label(meta.get("bandwidth")), path, replayable=replayable))
    if not found:
        raise DdlsimError(f"--captures {directory}: no DDP or PS captures found (DIR/*/events.parquet made by "
                          "ddlsim capture ddp|ps); capture some or drop --captures")
    seen: dict[tuple, int] = {}
    for c in found:
        key = (c.job, c.model, c.link)
        c.repeat = seen.get(key, 0)
        seen[key] = c.repeat + 1
    return found


def grid_cases(jobs: list[str], models: list[str], links: list[str]) -> list[tuple[str, str, str]]:
    """The (job, model, link) cases to capture; none, or shaped links without root, is one line."""
    cases = [(j, m, link) for j in jobs for m in models if m in JOBS[j] for link in links]
    if not cases:
        raise DdlsimError(f"no case: models {', '.join(models)} for jobs {', '.join(jobs)}; "
                          f"DDP takes {', '.join(JOBS['ddp'])}, PS takes {', '.join(JOBS['ps'])}")
    if any(link != "unshaped" for _, _, link in cases) and os.geteuid() != 0:
        raise DdlsimError("shaped links (--links with a rate) need root (network namespaces and tc); run as root, "
                          "use --links unshaped, or give existing captures with --captures")
    return cases


def capture_grid(out: Path, *, jobs: list[str], models: list[str], links: list[str], repeats: int, iterations: int,
                 workers: int, timeout_s: float, progress: Callable[[str], None],
                 measure_idle_curve: bool = False) -> list[Capture]:
    """Runs every capture of the grid into ``out/captures/JOB-MODEL-LINK-rK`` (``ddlsim capture`` in a child
    process each); `measure_idle_curve`: the DDP captures measure their ranks' idle curve after training."""
    cases = grid_cases(jobs, models, links)
    captures, total, done = [], len(cases) * repeats, 0
    for job, model, link in cases:
        for repeat in range(repeats):
            name = f"{job}-{model}-{link}-r{repeat}"
            target = out / "captures" / name
            cmd = [sys.executable, "-m", "ddlsim", "capture", job, *JOBS[job][model], "--workers", str(workers),
                   "--iterations", str(iterations), "--out", str(target), "--timeout", f"{timeout_s:g}"]
            if link != "unshaped":
                cmd += ["--bandwidth", link]
            if measure_idle_curve and job == "ddp":
                cmd += ["--idle-curve"]
            done += 1
            progress(f"[{done}/{total}] capturing {name}")
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [str(Path(__file__).resolve().parents[1]),
                                                                           os.environ.get("PYTHONPATH", "")] if p)}
            proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
            if proc.returncode != 0:
                tail = " ".join((proc.stderr or "").strip().splitlines()[-1:]) or f"exit status {proc.returncode}"
                raise DdlsimError(f"capture {name} failed: {tail} (its logs: {target / 'logs'})")
            captures.append(Capture(job, model, link_label(link), target / "events.parquet", repeat))
    return captures


def _stats(values: list[float]) -> dict[str, float]:
    import numpy as np

    from .analyze.breakdown import spread_pct

    v = np.asarray(values, dtype=float)
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0, "spread_pct": spread_pct(v),
            "min": float(v.min()), "max": float(v.max())}


# Captures' means this many of their own standard errors apart (or more): the spread is the captures' own state.
BETWEEN_CAPTURES_RATIO = 2.0


def capture_noise(times: list[list[float]]) -> dict[str, float]:
    """How far repeated captures' means lie apart, against how well each capture knows its own mean. `times`: per
    capture, the times of its counted iterations. ``sem``: a capture mean's standard error, pooled over the captures
    (the root of the mean of var_i / n_i, var with one degree of freedom less); ``ratio``: the standard deviation of
    the captures' means over ``sem``. Near 1, the captures differ as their iterations' noise predicts, and more
    iterations per capture narrow the spread; at :data:`BETWEEN_CAPTURES_RATIO` or more (one-way ANOVA's F, which is
    ratio² for captures of equal length, at 4 or more: about its 5 % point for 3 captures of 4 or more iterations)
    each capture keeps a state of its own through its iterations, which only more captures average away. Both nan
    for fewer than two captures or a capture of fewer than two iterations; ``ratio`` inf where every capture's
    iterations are alike but their means are not."""
    import numpy as np

    if len(times) < 2 or any(len(t) < 2 for t in times):
        return {"sem": float("nan"), "ratio": float("nan")}
    series = [np.asarray(t, dtype=float) for t in times]
    sem = float(np.sqrt(np.mean([t.var(ddof=1) / len(t) for t in series])))
    spread = float(np.std([t.mean() for t in series], ddof=1))
    return {"sem": sem, "ratio": spread / sem if sem > 0 else (float("inf") if spread > 0 else float("nan"))}


def _counted_times_ms(c: Capture) -> list[float]:
    return [t * 1e3 for t, counted in zip(c.measured["times_s"], c.measured["counted"]) if counted]


def _cores(captures: list[Capture]) -> dict[str, Any]:
    """The most processes and the fewest cores any of `captures` ran with on its host (``processes``,
    ``host_cores`` in their metadata; "" where a capture does not record them)."""
    found = [(m.get("processes"), m.get("host_cores")) for m in (c.measured["metadata"] for c in captures)]
    if not found or any(not isinstance(p, int) or not isinstance(k, int) for p, k in found):
        return {"processes": "", "host_cores": ""}
    return {"processes": max(p for p, _ in found), "host_cores": min(k for _, k in found)}


def evaluate(captures: list[Capture], progress: Callable[[str], None],
             idle_curve: Any = None, message_times: Optional[str] = None) -> dict[str, list[dict[str, Any]]]:
    """Measures and replays every capture (self), and every capture at every other shaped link of its job and
    model (cross). Returns the rows of cases.csv, runs.csv and iterations.csv."""
    for i, c in enumerate(captures, 1):
        progress(f"[{i}/{len(captures)}] measuring and replaying {c.path.parent.name}")
        c.measured = _measure(c.path)
    groups: dict[tuple[str, str, str], list[Capture]] = {}
    for c in captures:
        groups.setdefault((c.job, c.model, c.link), []).append(c)
    runs, iterations, cases, operations = [], [], [], []
    for (job, model, link), members in sorted(groups.items()):
        targets = [("self", link, members)] + [("cross", other, groups[(job, model, other)])
                                              for (j, m, other) in sorted(groups) if (j, m) == (job, model)
                                              and other != link and other != "unshaped"]
        for kind, target, measured_at in targets:
            predictions = []
            for c in members:
                p = _predict(c.path, None if kind == "self" else target, idle_curve, message_times)
                predictions.append(p)
                runs.append({"job": job, "model": model, "captured_link": link, "predicted_link": target, "kind": kind,
                             "repeat": c.repeat, "capture": str(c.path), "measured_ms": c.measured["mean_s"] * 1e3
                             if kind == "self" else float("nan"), "predicted_ms": p["mean_s"] * 1e3})
                if kind == "self":
                    for k, (it, t) in enumerate(zip(c.measured["iterations"], c.measured["times_s"])):
                        iterations.append({"job": job, "model": model, "link": link, "repeat": c.repeat, "iteration": it,
                                           "counted": c.measured["counted"][k], "measured_ms": t * 1e3,
                                           "predicted_ms": p["times_s"][k] * 1e3 if k < len(p["times_s"]) else float("nan")})
            m = _stats([c.measured["mean_s"] * 1e3 for c in measured_at])
            p = _stats([x["mean_s"] * 1e3 for x in predictions])
            error = (p["mean"] - m["mean"]) / m["mean"] * 100
            goal = GOALS_PCT[(job, kind)]
            row = {"job": job, "model": model, "kind": kind, "captured_link": link, "predicted_link": target,
                   "repeats_captured": len(members), "repeats_measured": len(measured_at),
                   "measured_ms": m["mean"], "measured_std_ms": m["std"], "measured_spread_pct": m["spread_pct"],
                   "measured_min_ms": m["min"], "measured_max_ms": m["max"],
                   "predicted_ms": p["mean"], "predicted_spread_pct": p["spread_pct"],
                   "predicted_min_ms": p["min"], "predicted_max_ms": p["max"], "error_pct": error,
                   "goal_pct": goal, "within_goal": abs(error) <= goal, "goal_above_spread": goal > m["spread_pct"],
                   **_cores([*members, *measured_at])}
            noise = capture_noise([_counted_times_ms(c) for c in measured_at])
            row["capture_sem_ms"], row["between_capture_ratio"] = noise["sem"], noise["ratio"]
            row["capture_means_ms"] = " ".join(f"{c.measured['mean_s'] * 1e3:.2f}" for c in measured_at)
            for part in PARTS:
                name = part.replace("_s", "")
                row[f"measured_{name}_ms"] = sum(c.measured[part] for c in measured_at) / len(measured_at) * 1e3
                row[f"predicted_{name}_ms"] = sum(x[part] for x in predictions) / len(predictions) * 1e3
            cases.append(row)
            if kind == "self":
                names = sorted(set().union(*(c.measured["ops"] for c in members), *(x["ops"] for x in predictions)))
                for name in names:
                    operations.append({
                        "job": job, "model": model, "link": link, "operation": name,
                        "measured_ms": sum(c.measured["ops"].get(name, 0.0) for c in members) / len(members) * 1e3,
                        "predicted_ms": sum(x["ops"].get(name, 0.0) for x in predictions) / len(predictions) * 1e3})
    return {"cases": cases, "runs": runs, "iterations": iterations, "operations": operations}


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    import csv

    with path.open("w", newline="", encoding="utf-8") as fh:
        if not rows:
            return
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})


def _plots(stage: Path, cases: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # log axes: the cases run from a few ms (LeNet-5) to seconds (ResNet-18 at 100 Mbit/s); bars: the captures'
    # (measured) and their replays' (predicted) lowest to highest
    fig, ax = plt.subplots(figsize=(6, 5.5))
    for kind, marker in (("self", "o"), ("cross", "s")):
        rows = [c for c in cases if c["kind"] == kind]
        if rows:
            ax.errorbar([c["measured_ms"] for c in rows], [c["predicted_ms"] for c in rows],
                        xerr=[[c["measured_ms"] - c["measured_min_ms"] for c in rows],
                              [c["measured_max_ms"] - c["measured_ms"] for c in rows]],
                        yerr=[[c["predicted_ms"] - c["predicted_min_ms"] for c in rows],
                              [c["predicted_max_ms"] - c["predicted_ms"] for c in rows]],
                        fmt=marker, capsize=2, elinewidth=0.8, label=kind)
    values = [c[k] for c in cases for k in ("measured_min_ms", "measured_max_ms", "predicted_min_ms", "predicted_max_ms")
              if c[k] > 0]
    low, high = (min(values) / 1.5, max(values) * 1.5) if values else (0.1, 10.0)
    ax.plot([low, high], [low, high], color="grey", linewidth=0.8, label="predicted = measured")
    for factor in (0.9, 1.1):
        ax.plot([low, high], [low * factor, high * factor], color="grey", linewidth=0.6, linestyle="--")
    ax.plot([], [], color="grey", linewidth=0.6, linestyle="--", label="±10 %")
    ax.set_xscale("log"), ax.set_yscale("log")
    ax.set_xlim(low, high), ax.set_ylim(low, high)
    ax.set_xlabel("measured iteration (ms): mean of the captures, bar: lowest to highest")
    ax.set_ylabel("replayed iteration (ms): mean of the replays, bar: lowest to highest")
    ax.legend()
    fig.tight_layout()
    fig.savefig(stage / "validation.png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(cases) + 1.5))
    labels = [f"{c['job']} {c['model']} {c['captured_link']}->{c['predicted_link']}" for c in cases]
    ys = range(len(cases))
    ax.barh(list(ys), [c["error_pct"] for c in cases], color=["tab:green" if c["within_goal"] else "tab:red" for c in cases])
    # the measured captures' lowest and highest against their mean: a replay in that band is as close as they are
    ax.errorbar([0] * len(cases), list(ys),
                xerr=[[(1 - c["measured_min_ms"] / c["measured_ms"]) * 100 for c in cases],
                      [(c["measured_max_ms"] / c["measured_ms"] - 1) * 100 for c in cases]],
                fmt="none", ecolor="black", capsize=3, label="measured captures, lowest to highest")
    for y, c in zip(ys, cases):
        ax.plot([-c["goal_pct"], c["goal_pct"]], [y, y], "|", color="grey", markersize=12)
    ax.set_yticks(list(ys), labels)
    ax.axvline(0, color="grey", linewidth=0.8)
    ax.set_xlabel("replay error (%); | goal; bar: the measured captures against their mean")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(stage / "errors.png", dpi=110, metadata={"Software": None})
    plt.close(fig)


def _html(cases: list[dict[str, Any]], command: str) -> str:
    columns = ["job", "model", "kind", "captured_link", "predicted_link", "repeats_measured", "measured_ms",
               "measured_spread_pct", "predicted_ms", "error_pct", "goal_pct", "within_goal", "measured_compute_ms",
               "predicted_compute_ms", "measured_exposed_communication_ms", "predicted_exposed_communication_ms",
               "measured_idle_ms", "predicted_idle_ms", "processes", "host_cores", "capture_means_ms",
               "capture_sem_ms", "between_capture_ratio"]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(f'{r[c]:.4g}' if isinstance(r[c], float) else str(r[c]))}</td>"
                                    for c in columns) + "</tr>\n" for r in cases)
    return ("<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>ddlsim validate</title>"
            "<style>body{font-family:sans-serif} td,th{padding:2px 6px;border-bottom:1px solid #ddd;text-align:right}"
            "</style></head><body>\n<h1>Replay against capture</h1>\n"
            f"<p>Command: <code>{html.escape(command)}</code></p>\n"
            "<p>measured: mean over repeats of each capture's iteration mean (warm-up excluded, as capture and analyze "
            "count it); predicted: <code>ddlsim replay</code> of each capture (cross: at the other link's rate); "
            "error = predicted / measured - 1; spread = (max - min) / mean of the measured repeats.</p>\n"
            f"<table><tr>{head}</tr>\n{body}</table>\n"
            + "".join(f"<p>{html.escape(line)}</p>\n" for line in spread_notes(cases))
            + f"<p>{html.escape(goal_summary(cases))}</p>\n"
            "<p><img src=\"validation.png\" alt=\"predicted against measured\"> "
            "<img src=\"errors.png\" alt=\"error per case\"></p>\n</body></html>\n")


def default_workers(cores: int) -> int:
    """Worker ranks per capture when none are given: 4 where the machine has a core for each process (4 workers,
    and a PS capture's server) and one to spare, else 2 (a capture's processes then share cores, which replay does
    not simulate: see ``shared cores`` in the report)."""
    return 4 if cores >= 4 + 1 + 1 else 2


def validate(out: str | Path, *, captures: Optional[str | Path] = None, quick: bool = False,
             jobs: Optional[list[str]] = None, models: Optional[list[str]] = None, links: Optional[list[str]] = None,
             repeats: int = 3, iterations: int = 5, workers: Optional[int] = None, timeout_s: float = 600.0, idle_curve: Any = None,
             measure_idle_curve: bool = False, command: str = "ddlsim validate", progress: Optional[Callable[[str], None]] = None,
             message_times: Optional[str] = None) -> dict[str, Any]:
    """Runs the validation (module docstring) into `out`, a new or empty directory. Returns the three tables."""
    from .safe_io import check_directory_target

    from .arguments import path_arg, real, whole

    out = path_arg(out, "out")
    captures = None if captures is None else path_arg(captures, "captures")
    say = progress or (lambda text: None)
    # checked before anything runs: counts as whole numbers in range (the flag named too), and from Python a list of
    # names as a list or as one comma-separated string (as the flags take them)
    repeats = whole(repeats, "repeats (--repeats)", 1, 10_000)
    iterations = whole(iterations, "iterations (--iterations; the first is a warm-up)", 2, 1_000_000)
    workers = None if workers is None else whole(workers, "workers (--workers)", 1, 4096)
    timeout_s = real(timeout_s, "timeout_s", 0, 1e9, open_lo=True)
    jobs, models, links = ([x.strip() for x in v.split(",") if x.strip()] if isinstance(v, str) else v
                           for v in (jobs, models, links))
    out = check_directory_target(Path(out))
    if out.exists() and any(out.iterdir()):
        raise DdlsimError(f"--out {out}: exists and is not empty; name a new or empty directory (ddlsim validate "
                          "writes its captures and reports there and never overwrites)")
    if quick:
        jobs, models, links, repeats = jobs or ["ddp", "ps"], models or ["lenet5"], links or ["unshaped"], 1
        iterations = min(iterations, 4)
        workers = 2 if workers is None else workers
    if workers is None and captures is None:
        from .capture.launch import host_cores

        cores = host_cores()
        workers = default_workers(cores)
        chosen = f"{workers} workers per capture ({cores} cores{': a core per process and one to spare' if workers > 2 else ''})"
    else:
        chosen = None
    workers = 2 if workers is None else workers
    jobs = jobs or list(JOBS)
    links = [link_label(x) if x != "unshaped" else x for x in (links or list(LINKS))]
    for job in jobs:
        if job not in JOBS:
            raise DdlsimError(f"--jobs: unknown job {job!r}; give ddp and/or ps")
    # existing captures may hold any model (your own script's, rebuilt from the capture); new ones a grid's
    existing = find_captures(Path(captures)) if captures is not None else []
    held = sorted({c.model for c in existing if c.replayable})
    known = sorted({m for j in JOBS.values() for m in j}) if captures is None else held
    models = models or (held if captures is not None else ["lenet5", "resnet18"])
    for model in models:
        if model in {c.model for c in existing} - set(held):
            raise DdlsimError(f"--models {model}: its captures under {captures} cannot be replayed (not a zoo model, "
                              "and they do not record their layers and parameters, as a DDP capture does); give any of "
                              f"{', '.join(held) or '(none)'}")
        if model not in known:
            where = f"the captures under {captures} hold" if captures is not None else "give any of"
            raise DdlsimError(f"--models: unknown model {model!r}; {where} {', '.join(known) or '(none replayable)'}")
    if idle_curve is not None and idle_curve is not False and not isinstance(idle_curve, dict):
        from .simulation.idle_wake import read_curve

        idle_curve = read_curve(idle_curve)  # read once, before any capture (its bad input: one line)
    from .simulation.replay import check_message_times

    check_message_times(message_times)  # before any capture
    if chosen:  # said once the input is known to be good
        say(chosen)
    if captures is not None:
        found = [c for c in existing if c.job in jobs and c.model in models and
                 c.link in [link_label(x) for x in links]]
        if not found:
            raise DdlsimError(f"--captures {captures}: none of its captures is in the grid asked for (jobs "
                              f"{', '.join(jobs)}, models {', '.join(models)}, links {', '.join(links)})")
        out.mkdir(parents=True, exist_ok=True)
    else:
        grid_cases(jobs, models, links)  # before the directory is made: a grid without a case leaves nothing
        out.mkdir(parents=True, exist_ok=True)
        found = capture_grid(out, jobs=jobs, models=models, links=links, repeats=repeats, iterations=iterations,
                             workers=workers, timeout_s=timeout_s, progress=say,
                             measure_idle_curve=measure_idle_curve)
    tables = evaluate(found, say, idle_curve, message_times)
    say("writing cases.csv, runs.csv, iterations.csv, validation.png, errors.png, index.html")
    with staged_directory(out) as stage:  # all or nothing, no scratch left even when interrupted
        _write_csv(stage / "cases.csv", tables["cases"])
        _write_csv(stage / "runs.csv", tables["runs"])
        _write_csv(stage / "iterations.csv", tables["iterations"])
        _write_csv(stage / "operations.csv", tables["operations"])
        _plots(stage, tables["cases"])
        (stage / "index.html").write_text(_html(tables["cases"], command), encoding="utf-8")
    return tables


def format_operations(operations: list[dict[str, Any]]) -> str:
    """Per case (self-prediction) and operation: measured and replayed ms per rank and iteration."""
    lines = [f"{'job':4} {'model':9} {'link':>9}  {'operation':34} {'measured ms':>12} {'replayed ms':>12}"]
    for o in operations:
        lines.append(f"{o['job']:4} {o['model']:9} {o['link']:>9}  {o['operation']:34} {o['measured_ms']:12.2f} "
                     f"{o['predicted_ms']:12.2f}")
    return "\n".join(lines)


def goal_summary(cases: list[dict[str, Any]]) -> str:
    """How many cases are within their goal, per job and kind (self, cross), in the order they first appear, and in
    how many of those the goal is above the measured spread: ``within goal: ps self 3 of 3 (goal above the spread in
    3), ...``; empty for no cases."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for c in cases:
        groups.setdefault((c["job"], c["kind"]), []).append(c)
    parts = [f"{job} {kind} {sum(bool(c['within_goal']) for c in group)} of {len(group)} (goal above the spread in "
             f"{sum(bool(c['goal_above_spread']) for c in group)})" for (job, kind), group in groups.items()]
    return f"within goal: {', '.join(parts)}" if parts else ""


def format_cases(cases: list[dict[str, Any]]) -> str:
    """The cases as a text table (what ``ddlsim validate`` prints)."""
    head = (f"{'job':4} {'model':9} {'kind':5} {'captured':>10} {'predicted':>10} {'n':>2} {'measured ms':>12} "
            f"{'spread':>7} {'replayed ms':>12} {'error':>8} {'goal':>5}  compute / exposed comm / idle ms (measured | replayed)")
    lines = [head]
    for c in cases:
        lines.append(
            f"{c['job']:4} {c['model']:9} {c['kind']:5} {c['captured_link']:>10} {c['predicted_link']:>10} "
            f"{c['repeats_measured']:>2} {c['measured_ms']:12.2f} {c['measured_spread_pct']:6.1f}% {c['predicted_ms']:12.2f} "
            f"{c['error_pct']:+7.1f}% {c['goal_pct']:4.0f}%{'' if c['within_goal'] else '!'} "
            f"{c['measured_compute_ms']:.1f} / {c['measured_exposed_communication_ms']:.1f} / {c['measured_idle_ms']:.1f} | "
            f"{c['predicted_compute_ms']:.1f} / {c['predicted_exposed_communication_ms']:.1f} / {c['predicted_idle_ms']:.1f}")
    shared = sorted({(c["job"], c["model"], c["processes"], c["host_cores"]) for c in cases
                     if isinstance(c.get("processes"), int) and isinstance(c.get("host_cores"), int)
                     and c["processes"] > c["host_cores"]})
    for job, model, processes, cores in shared:
        held = ("; the PS messages' own measured times, replayed at the capture's link, hold their waits for a core"
                if job == "ps" else "")
        lines.append(f"shared cores: {job} {model} ran {processes} processes on {cores} cores, which the replay does not "
                     f"simulate (docs/validation.md){held}")
    lines += spread_notes(cases)
    if cases:
        lines.append(goal_summary(cases))
    return "\n".join(lines)


def spread_notes(cases: list[dict[str, Any]]) -> list[str]:
    """For each set of captures (job, model, link) whose spread some case's goal does not exceed, a line that tells
    whether that spread lies within the captures or between them (:func:`capture_noise`): how many standard errors of
    one capture's mean their means lie apart. A header line first; nothing where no set qualifies."""
    noisy = {(c["job"], c["model"], c["predicted_link"]) for c in cases if not c["goal_above_spread"]}
    rows = []
    for c in cases:
        key = (c["job"], c["model"], c["predicted_link"])
        ratio = c.get("between_capture_ratio", float("nan"))
        if c["kind"] != "self" or key not in noisy or ratio != ratio:  # nan: too few captures or iterations to tell
            continue
        noisy.discard(key)
        rows.append(f"  {key[0]:4} {key[1]:9} {key[2]:>9}  spread {c['measured_spread_pct']:5.1f} %: captures of "
                    f"{c['capture_means_ms']} ms, each ±{c['capture_sem_ms']:.2f} ms, {ratio:.1f} apart")
    if not rows:
        return []
    return [f"spread above a goal: the captures' means, in standard errors of one capture's mean apart (about 1: the "
            f"iterations' noise, which more --iterations narrow; {BETWEEN_CAPTURES_RATIO:g} or more: each capture's own "
            "state, which only more --repeats average away)", *rows]