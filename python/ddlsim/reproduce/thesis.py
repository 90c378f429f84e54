"""The thesis' event-driven simulator results (§4.2-4.6), regenerated with ddlsim.

"Friendlier DDNN training in the datacenter" (thesis), chapter 4: a Horovod
job (ring all-reduce with tensor fusion) on the thesis' default synthetic
model (Table 4.1: 100 layers, 100 MB, 900 ms of compute, fwd:bwd = 1:2, a
6.28 MB fusion buffer, 2 workers, 10 us propagation delay), with a FIFO or a
priority transmission queue (§4.3) and the inter-iteration barrier on or off
(§4.3.1).

- :func:`fig4_7`: iteration time against bandwidth (1-100 Gbit/s), FIFO vs
  priority, barrier on and off, for 2 workers (the thesis) and 4, 8, 16.
- :func:`timelines`: the single-iteration timelines of Figs 4.8-4.11 (per
  worker: backward, forward and each fused all-reduce, with the time its
  data is needed by the next forward pass).

The model is ddlsim's ``profile = "thesis-simulator"`` (the thesis
author's simulator's per-layer times and sizes, docs/model-zoo.md) and the
grouping the thesis' fusion pass (``thesis-fusion``) with Table 4.1's
buffer. :data:`PAPER_VALUES` holds every number the text gives, with where.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from .training_common import Counter, PaperValue, Progress, Reproduction, paper_beside

if TYPE_CHECKING:
    import pandas as pd

BANDWIDTHS_GBPS = (1, 2, 3, 5, 10, 20, 50, 100)
WORKERS = (2, 4, 8, 16)
QUICK_BANDWIDTHS_GBPS = (1, 2, 5)
QUICK_WORKERS = (2, 4)
POLICIES = ("fifo", "priority")
# Table 4.1: "fusion buffer (MB) 6.28" (decimal MB, as its 100 MB model size).
FUSION_BUFFER = "6.28MB"
LATENCY = "10us"  # Table 4.1: propagation delay 0.01 ms
# Iteration 0 starts with every parameter fresh (§4.5); with the barrier off,
# iteration 1 on is the steady state. 3 iterations, iterations 1-2 averaged.
ITERATIONS = 3

# The figures 4.8-4.11 show: bandwidth, queue, barrier. Fig. 4.11's barrier is
# not stated; we pair it with Fig. 4.9 (priority with the barrier removed).
TIMELINE_FIGURES = (
    ("fig4_8", 1, "fifo", True),
    ("fig4_9", 1, "priority", False),
    ("fig4_10", 5, "fifo", True),
    ("fig4_11", 5, "priority", False),
)

_T41 = "Table 4.1 (default values for parameters of the event-driven simulator)"
PAPER_VALUES: dict[str, PaperValue] = {
    "table4_1.bandwidth_gbps": PaperValue(10, "Gbit/s", f"{_T41}: transmission rate (Gbit/s) 10"),
    "table4_1.propagation_delay_ms": PaperValue(0.01, "ms", f"{_T41}: propagation delay (ms) 0.01"),
    "table4_1.layers": PaperValue(100, "layers", f"{_T41}: number of layers 100"),
    "table4_1.iterations": PaperValue(2, "iterations", f"{_T41}: total iteration count 2"),
    "table4_1.model_size_mb": PaperValue(100, "MB", f"{_T41}: model size (MB) 100"),
    "table4_1.fusion_buffer_mb": PaperValue(6.28, "MB", f"{_T41}: fusion buffer (MB) 6.28"),
    "table4_1.compute_ms": PaperValue(900, "ms", f"{_T41}: total compute time (ms) 900"),
    "table4_1.workers": PaperValue(2, "workers", f"{_T41}: number of workers 2"),
    "fig4_7.priority_reduction_1gbps": PaperValue(
        0.12, "fraction", "Fig. 4.7 caption: 'At 1 Gbit/s there is a 12% reduction in iteration time when a priority "
        "queue is used'"),
    "fig4_7.priority_reduction_2gbps_up": PaperValue(
        0.0, "fraction", "Fig. 4.7 caption: 'no difference between using a FIFO queue vs priority queue ... if the "
        "bandwidth is equal to or higher than 2 Gbit/s'"),
    "fig4_8.backward_end_ms": PaperValue(
        900, "ms", "Fig. 4.8 caption (1 Gbit/s, FIFO): 'backpropagation is completed around 900ms'"),
    "fig4_8.next_forward_start_ms": PaperValue(
        1100, "ms", "Fig. 4.8 caption: 'none of layers could start forward propagation until all the gradients have "
        "been transmitted and received which is not until 200 ms later at 1100 ms'"),
    "fig4_8.wait_after_backward_ms": PaperValue(200, "ms", "Fig. 4.8 caption: '200 ms later'"),
    "fig4_9.next_forward_start_ms": PaperValue(
        950, "ms", "Fig. 4.9 caption (1 Gbit/s, priority, barrier removed): 'Forward propagation is able to start as "
        "soon as the gradients belonging to layer zero have been received around 950 ms'"),
    "fig4_9.gain_vs_fig4_8_ms": PaperValue(150, "ms", "Fig. 4.9 caption: 'This is 150ms faster than the FIFO queue'"),
    "fig4_10.max_queueing_ms": PaperValue(
        0, "ms", "§4.6 on Figs 4.10/4.11 (5 Gbit/s): 'each gradient transmission is completed before another one is "
        "enqueued'"),
    "fig4_11.max_queueing_ms": PaperValue(
        0, "ms", "Fig. 4.11 caption: 'each gradient transmission completes before the next gradient is calculated and "
        "ready to be sent'"),
}


def scenario(workers: int, bandwidth_gbps: float, policy: str, barrier: bool, iterations: int = ITERATIONS) -> dict:
    """The thesis' Table 4.1 job as a ddlsim scenario."""
    return {
        "workers": workers,
        "iterations": iterations,
        "barrier": barrier,
        "trace_detail": "collective",
        "model": {"name": "synthetic",
                  "synthetic": {"profile": "thesis-simulator", "layers": 100, "model_size": "100MB", "compute": "900ms"}},
        "strategy": {"kind": "ring", "algorithm": "ring", "stream_policy": policy,
                     "grouping": {"kind": "thesis-fusion", "fusion_buffer_size": FUSION_BUFFER}},
        "network": {"bandwidth": f"{bandwidth_gbps:g}Gbps", "latency": LATENCY, "topology": "star"},
    }


def _simulate(sc: dict):
    from ..api import simulate

    return simulate(sc)


# ----------------------------------------------------------------- Fig. 4.7


def fig4_7(workers: tuple[int, ...] = WORKERS, bandwidths_gbps: tuple[float, ...] = BANDWIDTHS_GBPS,
           progress: Optional[Progress] = None, _counter: Optional[Counter] = None) -> "pd.DataFrame":
    """Iteration time for every (workers, bandwidth, queue, barrier): one row
    each, `iteration_ms` the steady state (mean of iterations 1 on)."""
    import pandas as pd

    counter = _counter or Counter(len(workers) * len(bandwidths_gbps) * 4, progress)
    rows = []
    for n in workers:
        for bw in bandwidths_gbps:
            for barrier in (True, False):
                for policy in POLICIES:
                    counter.step(f"thesis Fig. 4.7: {n} workers, {bw:g} Gbit/s, {policy}, barrier {'on' if barrier else 'off'}")
                    r = _simulate(scenario(n, bw, policy, barrier))
                    times = r.iterations["time_s"].to_numpy()
                    rows.append({"workers": n, "bandwidth_gbps": bw, "policy": policy, "barrier": barrier,
                                 "iteration_ms": float(times[1:].mean()) * 1e3, "first_iteration_ms": float(times[0]) * 1e3})
    if _counter is None:
        counter.finish()
    return pd.DataFrame(rows)


def fig4_7_comparison(frame: "pd.DataFrame") -> "pd.DataFrame":
    """One row per (workers, bandwidth): the four iteration times, the
    priority queue's reduction with the barrier on, off, and priority without
    barrier against FIFO with it (Fig. 4.9 vs 4.8); the thesis' reduction
    beside them (2 workers only)."""
    import pandas as pd

    rows = []
    for (n, bw), cell in frame.groupby(["workers", "bandwidth_gbps"], sort=True):
        t = {(r.policy, bool(r.barrier)): r.iteration_ms for r in cell.itertuples()}
        fifo_on, prio_on, fifo_off, prio_off = t[("fifo", True)], t[("priority", True)], t[("fifo", False)], t[("priority", False)]
        paper = float("nan")
        if n == 2:
            key = "fig4_7.priority_reduction_1gbps" if bw == 1 else "fig4_7.priority_reduction_2gbps_up" if bw >= 2 else None
            paper = PAPER_VALUES[key].value if key else float("nan")
        rows.append({
            "workers": n, "bandwidth_gbps": bw,
            "fifo_barrier_ms": fifo_on, "priority_barrier_ms": prio_on, "fifo_no_barrier_ms": fifo_off,
            "priority_no_barrier_ms": prio_off,
            "reduction_barrier": 1 - prio_on / fifo_on, "reduction_no_barrier": 1 - prio_off / fifo_off,
            "reduction_priority_no_barrier_vs_fifo_barrier": 1 - prio_off / fifo_on,
            "paper_reduction_no_barrier": paper,
        })
    return paper_beside(pd.DataFrame(rows))


def fig4_7_figure(frame: "pd.DataFrame"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..analyze.figures import mark_coincident

    workers = sorted(frame["workers"].unique())
    fig, axes = plt.subplots(1, len(workers), figsize=(4.2 * len(workers), 3.6), squeeze=False, sharey=False)
    styles = {("fifo", True): ("FIFO, barrier", "#4C72B0", "-"), ("priority", True): ("priority, barrier", "#DD8452", "--"),
              ("fifo", False): ("FIFO, no barrier", "#55A868", "-."), ("priority", False): ("priority, no barrier", "#C44E52", ":")}
    for ax, n in zip(axes[0], workers):
        cell = frame[frame["workers"] == n]
        for (policy, barrier), (label, color, ls) in styles.items():
            line = cell[(cell["policy"] == policy) & (cell["barrier"] == barrier)].sort_values("bandwidth_gbps")
            ax.plot(line["bandwidth_gbps"], line["iteration_ms"], ls, color=color, marker="o", ms=3, label=label)
        ax.set_xscale("log")
        ax.set_xlabel("bandwidth (Gbit/s)")
        ax.set_ylabel("iteration time (ms)")
        ax.set_title(f"{n} workers" + (" (thesis Fig. 4.7)" if n == 2 else ""), fontsize=9)
        ax.grid(alpha=0.3)
        mark_coincident(ax)
    for ax in axes[0]:
        ax.legend(fontsize=7)
    fig.suptitle("Thesis Fig. 4.7 with ddlsim: iteration time, FIFO vs priority queue", fontsize=10)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------- Figs 4.8-4.11


def _timeline_rows(name: str, bw: float, policy: str, barrier: bool, events) -> tuple[list[dict], dict]:
    """Iteration 0 (every lane) and iteration 1's forward pass of one run, and its summary."""
    df = events.to_pandas()
    df = df[df["kind"].isin(["compute", "collective"])]
    next_forward = df[(df["iteration"] == 1) & (df["op"] == "forward")]
    needed = {(int(r.rank), int(r.layer)): r.start_ns for r in next_forward.itertuples()}
    rows = []
    for r in df[(df["iteration"] == 0) | ((df["iteration"] == 1) & (df["op"] == "forward"))].itertuples():
        lane = "allreduce" if r.kind == "collective" else str(r.op)
        need = needed.get((int(r.rank), int(r.layer))) if lane == "allreduce" else None
        rows.append({"figure": name, "bandwidth_gbps": bw, "policy": policy, "barrier": barrier, "rank": int(r.rank),
                     "iteration": int(r.iteration), "lane": lane, "layer": int(r.layer), "group": int(r.group),
                     "ready_ms": r.ready_ns / 1e6, "start_ms": r.start_ns / 1e6, "end_ms": r.end_ns / 1e6,
                     "needed_ms": need / 1e6 if need is not None else float("nan"),
                     "slack_ms": (need - r.end_ns) / 1e6 if need is not None else float("nan")})
    it0 = df[df["iteration"] == 0]
    coll = it0[it0["kind"] == "collective"]
    backward_end = it0[it0["op"] == "backward"]["end_ns"].max()
    first_forward = next_forward[next_forward["layer"] == next_forward["layer"].min()]["start_ns"].min()
    slack = [row["slack_ms"] for row in rows if row["lane"] == "allreduce"]
    summary = {
        "figure": name, "bandwidth_gbps": bw, "policy": policy, "barrier": barrier,
        "backward_end_ms": backward_end / 1e6, "last_allreduce_end_ms": coll["end_ns"].max() / 1e6,
        "next_forward_start_ms": first_forward / 1e6, "wait_after_backward_ms": (first_forward - backward_end) / 1e6,
        "max_queueing_ms": float((coll["start_ns"] - coll["ready_ns"]).max()) / 1e6,
        "min_slack_ms": min(slack), "allreduces": int(coll["group"].nunique()),
    }
    return rows, summary


def _paper(key: str) -> float:
    value = PAPER_VALUES.get(key)
    return value.value if value is not None else float("nan")


def timelines(workers: int = 2, progress: Optional[Progress] = None,
              _counter: Optional[Counter] = None) -> tuple["pd.DataFrame", "pd.DataFrame"]:
    """(rows, summary) of Figs 4.8-4.11: one row per compute and all-reduce
    span, and one summary row per figure with the thesis' numbers beside ours."""
    import pandas as pd

    counter = _counter or Counter(len(TIMELINE_FIGURES), progress)
    rows, summaries = [], []
    for name, bw, policy, barrier in TIMELINE_FIGURES:
        counter.step(f"thesis {name.replace('fig', 'Fig. ').replace('_', '.')}: timeline")
        r = _simulate(scenario(workers, bw, policy, barrier))
        figure_rows, summary = _timeline_rows(name, bw, policy, barrier, r.events)
        rows += figure_rows
        summaries.append(summary)
    if _counter is None:
        counter.finish()
    summary = pd.DataFrame(summaries)
    for column in ("backward_end_ms", "next_forward_start_ms", "wait_after_backward_ms", "max_queueing_ms"):
        summary[f"paper_{column}"] = [_paper(f"{f}.{column}") for f in summary["figure"]]
    gain = dict(zip(summary["figure"], summary["next_forward_start_ms"]))
    summary["gain_vs_fig4_8_ms"] = [gain["fig4_8"] - gain[f] if f == "fig4_9" else float("nan") for f in summary["figure"]]
    summary["paper_gain_vs_fig4_8_ms"] = [_paper(f"{f}.gain_vs_fig4_8_ms") for f in summary["figure"]]
    return pd.DataFrame(rows), paper_beside(summary)


def timeline_figure(rows: "pd.DataFrame", summary_row: dict):
    """A Gantt chart of one figure: per worker, backward, forward and all-reduce lanes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks = sorted(rows["rank"].unique())
    lanes = [(rank, lane) for rank in ranks for lane in ("backward", "forward", "allreduce")]
    colors = {"forward": "#4C72B0", "backward": "#8172B3", "allreduce": "#64B5CD"}
    fig, ax = plt.subplots(figsize=(11, 1.0 + 0.45 * len(lanes)))
    for y, (rank, lane) in enumerate(lanes):
        spans = rows[(rows["rank"] == rank) & (rows["lane"] == lane)]
        ax.broken_barh(list(zip(spans["start_ms"], spans["end_ms"] - spans["start_ms"])), (y - 0.35, 0.7),
                       facecolors=[colors[lane]] * len(spans), edgecolors="white", linewidth=0.8 if lane == "allreduce" else 0)
        if lane == "allreduce":
            needed = spans["needed_ms"].dropna()
            ax.vlines(needed, y - 0.45, y + 0.45, colors="#DD8452", linewidth=1.5,
                      label="data needed (next forward)" if y == 2 else None)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"worker {rank} {lane}" for rank, lane in lanes], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("simulated time (ms)")
    s = summary_row
    ax.set_title(f"{s['figure'].replace('fig', 'Fig. ').replace('_', '.')} with ddlsim: {s['bandwidth_gbps']:g} Gbit/s, "
                 f"{s['policy']} queue, barrier {'on' if s['barrier'] else 'off'} — backward ends "
                 f"{s['backward_end_ms']:.0f} ms, next forward starts {s['next_forward_start_ms']:.0f} ms", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def table4_1() -> "pd.DataFrame":
    """Table 4.1's defaults beside the model and scenario ddlsim runs."""
    import pandas as pd

    from ..simulation.model_build import build_model, layer_times_ns
    from ..simulation.scenario import scenario_from_dict

    sc = scenario_from_dict(scenario(2, 10, "fifo", True))
    model = build_model(sc.model, None)
    from ..simulation.grouping import thesis_fusion

    buffer = sc.strategy.grouping.fusion_buffer_bytes
    ours = {
        "bandwidth_gbps": sc.network.bandwidth_bps / 1e9, "propagation_delay_ms": sc.network.latency_ns / 1e6,
        "layers": len(model.layers), "iterations": ITERATIONS, "model_size_mb": model.size_bytes / 1e6,
        "fusion_buffer_mb": buffer / 1e6, "compute_ms": sum(f + b for f, b in layer_times_ns(model, sc.model)) / 1e6,
        "workers": sc.workers,
    }
    groups = len(thesis_fusion(model, buffer))
    rows = [{"parameter": k, "paper": PAPER_VALUES[f"table4_1.{k}"].value, "ours": v} for k, v in ours.items()]
    rows.append({"parameter": "fused_allreduces", "paper": float("nan"), "ours": groups})
    return pd.DataFrame(rows)


def reproduce(quick: bool = False, progress: Optional[Progress] = None) -> Reproduction:
    """Every table and figure of the thesis' §4.6, ours beside the thesis'."""
    workers = QUICK_WORKERS if quick else WORKERS
    bandwidths = QUICK_BANDWIDTHS_GBPS if quick else BANDWIDTHS_GBPS
    counter = Counter(len(workers) * len(bandwidths) * 4 + len(TIMELINE_FIGURES), progress)
    runs = fig4_7(workers, bandwidths, _counter=counter)
    rows, summary = timelines(_counter=counter)
    counter.finish()
    rep = Reproduction("thesis §4.6 (Figs 4.7-4.11)")
    rep.tables["table4_1"] = table4_1()
    rep.tables["fig4_7_runs"] = runs
    rep.tables["fig4_7"] = fig4_7_comparison(runs)
    rep.tables["fig4_8_11_summary"] = summary
    rep.tables["fig4_8_11_timelines"] = rows
    rep.tables["paper_values"] = paper_values_table()
    rep.figures["fig4_7"] = lambda: fig4_7_figure(runs)
    for s in summary.to_dict("records"):
        rep.figures[s["figure"]] = (lambda s=s: timeline_figure(rows[rows["figure"] == s["figure"]], s))
    return rep


def paper_values_table() -> "pd.DataFrame":
    import pandas as pd

    return pd.DataFrame([{"key": k, "value": v.value, "unit": v.unit, "source": v.source} for k, v in PAPER_VALUES.items()])
