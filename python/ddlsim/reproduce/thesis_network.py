"""The thesis' ns-3 experiments (chapter 5, §5.4), regenerated with ddlsim.

"Friendlier DDNN training in the datacenter" (thesis), chapter 5: a Horovod
job (ring all-reduce, tensor fusion) of 8 workers on one top-of-rack switch
(10 Gbit/s, 10 us links) shares the fabric with Poisson web-search
background flows. The background flows are always in the top priority band;
the job runs in the same band ("same") or a lower one ("lower"). For
computation-to-network ratios R = 16, 8, 4, 2 (Table 5.3) and background
rates of 23, 46, 92, 184 flows/s per sending host (Table 5.4), three seeds,
the chapter reports the job's iteration time and the background flows' mean
flow completion time (FCT) by size, same against lower band (Figs 5.5-5.18),
summarised as the operating-boundary map of Fig. 5.19.

Every run goes through :func:`ddlsim.sweep.run_grid` (one grid per R, in
``RUNS_DIR/R<ratio>``, plus the job alone in ``RUNS_DIR/R<ratio>-alone``), so
an interrupted reproduction resumes where it stopped and can run on a Ray
cluster. :data:`PAPER_VALUES` holds every number the chapter prints, with
where; docs/reproduction/thesis-network.md explains how each was read and
each disagreement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

from .training_common import PaperValue, Progress, Reproduction

if TYPE_CHECKING:
    import pandas as pd

# Table 5.3: computation-to-network ratio -> iteration time (ms). Compute is scaled to it (not Table 5.1's 900 ms files).
RATIOS = (16, 8, 4, 2)
ITERATION_MS = {16: 2240, 8: 1120, 4: 560, 2: 280}
# Table 5.4: Poisson arrival rate of web-search flows, per SENDING host (flows/s); 8 hosts send.
RATES = (23, 46, 92, 184)
SEEDS = (1, 2, 3)
# Linux pfifo_fast's priomap (ns-3 PfifoFastQueueDisc, Socket::IpTos2Priority): ToS 0x10 (IPTOS_LOWDELAY) ->
# priority 6 (interactive) -> band 0; ToS 0x08 (IPTOS_THROUGHPUT) -> priority 2 (bulk) -> band 2.
# Background flows: ToS 0x10, band 0. The job: "same" = ToS 0x10, band 0; "lower" = ToS 0x08, band 2.
BANDS = {"same": 0, "lower": 2}
WORKERS = 8
LAYERS = 50
MODEL_SIZE = "100MB"
FUSION_BUFFER_BYTES = 5_333_329  # Table 5.1
BANDWIDTH_BPS = 10e9
LATENCY = "10us"
THESIS_FLOW_MB = 1.7  # Eq. 5.3: the thesis' mean web-search flow size (MB)
# ns-3 point-to-point links frame a packet with a 2-byte PPP header; 3 bands of 1000 packets (pfifo_fast, §5.3).
PACKET = {"framing": "ppp", "bands": 3, "queue_limit": 1000, "queue_limit_unit": "packets", "queue_scope": "band"}
SIZE_CLASSES = ("small", "medium", "large")


@dataclass(frozen=True)
class Plan:
    ratios: tuple[int, ...] = RATIOS
    rates: tuple[int, ...] = RATES
    seeds: tuple[int, ...] = SEEDS
    duration_s: float = 12.0  # Table 5.2: simulation time 12 s
    warmup_s: float = 2.0  # §5.4.5: "a two-second warm-up and a two-second cool-down"
    cooldown_s: float = 2.0
    fidelity: str = "packet"
    quick: bool = False


FULL = Plan()
QUICK = Plan(ratios=(4,), rates=(23, 92), seeds=(1,), duration_s=3.0, warmup_s=0.5, cooldown_s=0.5, fidelity="flow",
             quick=True)

_T51 = "Table 5.1 (initial Horovod configuration)"
_T52 = "Table 5.2 (default values for network-related parameters)"
_T53 = "Table 5.3 (iteration time and Horovod link utilization at different R_cp_to_nw)"
_T54 = "Table 5.4 (link utilization at different flow rates and R_cp_to_nw)"
_T55 = "Table 5.5 (flow counts for R_cp_to_nw = 16, 23 flows/s)"

PAPER_VALUES: dict[str, PaperValue] = {
    "table5_1.workers": PaperValue(8, "workers", f"{_T51}: num_workers 8"),
    "table5_1.layers": PaperValue(50, "layers", f"{_T51}: num_layers 50"),
    "table5_1.model_size_mb": PaperValue(100, "MB", f"{_T51}: layer_size_file layer_weight_model_size_100.0MB.csv"),
    "table5_1.fusion_buffer_bytes": PaperValue(5_333_329, "bytes", f"{_T51}: fusion_buffer_size 5333329 bytes"),
    "table5_1.compute_file_ms": PaperValue(900, "ms", f"{_T51}: fp/bp_compute_iter_time_900.0.ms.csv (Table 5.3 overrides)"),
    "table5_1.horovod_initial_priority": PaperValue(0x10, "ToS", f"{_T51}: horovod_initial_priority 0x10"),
    "table5_2.simulation_time_s": PaperValue(12, "s", f"{_T52}: simulation time (s) 12"),
    "table5_2.priority_queues": PaperValue(1, "queues", f"{_T52}: number of priority queues 1"),
    "table5_2.link_bandwidth_gbps": PaperValue(10, "Gbit/s", f"{_T52}: link bandwidth (Gbit/s) 10"),
    "table5_2.link_delay_ns": PaperValue(10_000, "ns", f"{_T52}: link delay (ns) 10000"),
    "table5_2.link_max_queue_packets": PaperValue(1, "packets", f"{_T52}: link max queue size (packet) 1"),
    "section5_3.droptail_queue_packets": PaperValue(1000, "packets", "§5.3: each pfifo_fast band a droptail queue of 1000 packets"),
    "section5_4_5.warmup_s": PaperValue(2, "s", "§5.4.5: 'a two-second warm-up'"),
    "section5_4_5.cooldown_s": PaperValue(2, "s", "§5.4.5: 'and a two-second cool-down time'"),
    "section5_4_4.seeds": PaperValue(3, "runs", "§5.4.4: 'Each configuration is run three times with different seeds'"),
}
for _r, _ms in ITERATION_MS.items():
    PAPER_VALUES[f"table5_3.iteration_ms.R{_r}"] = PaperValue(_ms, "ms", f"{_T53}: R {_r}, iteration_time_ms {_ms}")
    PAPER_VALUES[f"table5_3.u_horovod_pct.R{_r}"] = PaperValue(100 / _r, "%", f"{_T53}: R {_r}, U_Horovod {100 / _r:g}%")
_U_PFABRIC = {23: 3.125, 46: 6.25, 92: 12.5, 184: 25.0}
_U_TOTAL = {16: (9.375, 12.5, 18.75, 31.25), 8: (15.63, 18.76, 25.01, 37.5), 4: (28.13, 31.25, 37.51, 50.02),
            2: (53.13, 56.25, 72.5, 75.0)}
_R_P = {16: (0.5, 1, 2, 4), 8: (0.25, 0.5, 1, 2), 4: (0.125, 0.25, 0.5, 1), 2: (0.0625, 0.125, 0.25, 0.5)}
for _r in RATIOS:
    for _i, _rate in enumerate(RATES):
        PAPER_VALUES[f"table5_4.u_pfabric_pct.R{_r}.{_rate}"] = PaperValue(_U_PFABRIC[_rate], "%", f"{_T54}: R {_r}, {_rate} flows/s")
        PAPER_VALUES[f"table5_4.u_total_pct.R{_r}.{_rate}"] = PaperValue(_U_TOTAL[_r][_i], "%", f"{_T54}: R {_r}, {_rate} flows/s")
        PAPER_VALUES[f"table5_4.r_p_to_hrvd.R{_r}.{_rate}"] = PaperValue(_R_P[_r][_i], "ratio", f"{_T54}: R {_r}, {_rate} flows/s")
_T55_COUNTS = {"all": {"all": 4341, "small": 2345, "medium": 1867, "large": 129},
               0: {"all": 1467, "small": 820, "medium": 609, "large": 38},
               1: {"all": 1458, "small": 792, "medium": 623, "large": 43},
               2: {"all": 1416, "small": 733, "medium": 635, "large": 48}}
for _run, _counts in _T55_COUNTS.items():
    for _cls, _n in _counts.items():
        PAPER_VALUES[f"table5_5.completed.run{_run}.{_cls}"] = PaperValue(_n, "flows", f"{_T55}: run index {_run}, {_cls} flows completed = collected, ratio 100%")

# Numbers the text gives about the figures, each tied to a cell (R, flows/s) and a metric of ours:
#   iteration_change_pct: the job's mean iteration time, lower band against same band (+ = slower in the lower band);
#   small/large_fct_change_pct: the background small/large flows' mean FCT, lower against same (- = faster);
#   iteration_lower_s, iteration_same_s: the job's mean iteration time (s) in that band.
CLAIMS: dict[str, tuple[int, int, str, PaperValue]] = {
    "fig5_5.small_fct_change_pct.R16.23": (16, 23, "small_fct_change_pct", PaperValue(
        -40, "%", "§5.4.5 (Fig. 5.5, R 16): 'a 40% reduction of average-flow-completion-time for small flows ... when "
        "the size of network traffic of Horovod is twice the amount of the background flows' (23 flows/s)")),
    "fig5_5.large_fct_change_pct.R16.23": (16, 23, "large_fct_change_pct", PaperValue(
        -10, "%", "§5.4.5 (Fig. 5.5, R 16): '... and 10% for large flows' (23 flows/s)")),
    "fig5_5.small_fct_change_pct.R16.184": (16, 184, "small_fct_change_pct", PaperValue(
        -10, "%", "§5.4.5 (Fig. 5.5): the small-flow gain 'levels out below 10%' as background grows (read at 184 flows/s)")),
    "fig5_5.large_fct_change_pct.R16.184": (16, 184, "large_fct_change_pct", PaperValue(
        -15, "%", "§5.4.5 (Fig. 5.5): large flows 'see an increased reduction ... close to 15%' (read at 184 flows/s)")),
    "fig5_5.iteration_change_pct.R16.23": (16, 23, "iteration_change_pct", PaperValue(
        0, "%", "§5.4.5 (Fig. 5.5): 'safe to run all Horovod traffic at a lower priority and expect no performance "
        "degradation' while background is at most twice Horovod's (23-92 flows/s; read at 23)")),
    "fig5_6.small_fct_change_pct.R16.23.seed2": (16, 23, "small_fct_change_pct.seed2", PaperValue(
        -72.8, "%", "§5.4.5 (Fig. 5.6): second run, 'total reduction of average flow completion time is about 72.8%, "
        "3 times higher than ... the third run'")),
    "fig5_8.iteration_lower_s.R8.92": (8, 92, "iteration_lower_s", PaperValue(
        1.4, "s", "§5.4.5 (Fig. 5.8, R 8): 'a jump in Horovod iteration time from 1.4s' (92 flows/s, lower band)")),
    "fig5_8.iteration_lower_s.R8.184": (8, 184, "iteration_lower_s", PaperValue(
        3.06, "s", "§5.4.5 (Fig. 5.8, R 8): '... to 3.06s, a 118.5 % difference comparing to the previous run with 92 "
        "flows/s' (184 flows/s, lower band)")),
    "fig5_8.iteration_change_pct.R8.184": (8, 184, "iteration_change_pct", PaperValue(
        117.2, "%", "§5.4.5 (Fig. 5.8): '117.2% longer than running at a higher priority' (184 flows/s)")),
    "fig5_8.small_fct_change_pct.R8.23": (8, 23, "small_fct_change_pct", PaperValue(
        -70, "%", "§5.4.5 (Fig. 5.8): 'as high as 70% when Horovod transmits four times more traffic than the background "
        "flows' (23 flows/s)")),
    "fig5_9.small_fct_change_pct.R8.23.seed1": (8, 23, "small_fct_change_pct.seed1", PaperValue(
        -66, "%", "Fig. 5.9 caption: the three runs' small-flow gains 'of 66%, 74% and 26% respectively' (run 1)")),
    "fig5_9.small_fct_change_pct.R8.23.seed2": (8, 23, "small_fct_change_pct.seed2", PaperValue(
        -74, "%", "Fig. 5.9 caption: run 2, 74%")),
    "fig5_9.small_fct_change_pct.R8.23.seed3": (8, 23, "small_fct_change_pct.seed3", PaperValue(
        -26, "%", "Fig. 5.9 caption: run 3, 26%")),
    "fig5_10.small_fct_change_pct.R4.46": (4, 46, "small_fct_change_pct", PaperValue(
        -50, "%", "§5.4.5 (Fig. 5.10, R 4): small flows improved 'by at least 50%' while Horovod's traffic is at least "
        "four times the background (23 and 46 flows/s; read at 46)")),
    "fig5_10.large_fct_change_pct.R4.46": (4, 46, "large_fct_change_pct", PaperValue(
        -25, "%", "§5.4.5 (Fig. 5.10, R 4): 'large flows by at least 25%' (read at 46 flows/s)")),
    "fig5_10.iteration_change_pct.R4.46": (4, 46, "iteration_change_pct", PaperValue(
        0, "%", "§5.4.5 (Fig. 5.10, R 4): 'without compromising the performance of Horovod' (read at 46 flows/s)")),
    "fig5_14.iteration_change_pct.R2.46": (2, 46, "iteration_change_pct", PaperValue(
        5, "%", "§5.4.5 (Fig. 5.14, 46 flows/s): 'as we ramp up Horovod to 50% of the link bandwidth ... a 5% "
        "performance degradation'")),
    "fig5_15.iteration_change_pct.R4.92": (4, 92, "iteration_change_pct", PaperValue(
        12.5, "%", "§5.4.5 (Fig. 5.15, 92 flows/s): 'when Horovod's compute-to-network ratio drops to 4 ... a 12.5% "
        "performance degradation' (Fig. 5.19's map says 15.61% for the same cell)")),
    "fig5_15.iteration_change_pct.R2.92": (2, 92, "iteration_change_pct", PaperValue(
        23, "%", "§5.4.5 (Fig. 5.15): 'The degradation can go up to 23% when ... ratio drops to 2'")),
    "fig5_16.iteration_change_pct.R16.184": (16, 184, "iteration_change_pct", PaperValue(
        29, "%", "§5.4.5 (Fig. 5.16, 184 flows/s): 'Even if Horovod is heavily compute-bound with a compute-to-network "
        "ratio of 16 ... at least a 29% performance degradation'")),
    "fig5_19.iteration_change_pct.R4.92": (4, 92, "iteration_change_pct", PaperValue(
        15.61, "%", "§5.4.6 (Fig. 5.19): 'Horovod at 25% of link utilization and background flows at 12.5% ... a 15.61% "
        "performance degradation'")),
    "fig5_19.iteration_change_pct.R2.92": (2, 92, "iteration_change_pct", PaperValue(
        23.11, "%", "§5.4.6 (Fig. 5.19): 'the yellow cell with a Horovod slowdown of 23.11% when the expected Horovod link "
        "utilization is at 50% ... background flows is at 12.5%'")),
    "fig5_19.small_fct_change_pct.R2.184": (2, 184, "small_fct_change_pct", PaperValue(
        -6.19, "%", "§5.4.6 (Fig. 5.19, middle plot): 'the top right two blocks on the last column ... with gains of "
        "6.19% and 7.41%' (read as 184 flows/s, U_Horovod 50% and 25%)")),
    "fig5_19.small_fct_change_pct.R4.184": (4, 184, "small_fct_change_pct", PaperValue(
        -7.41, "%", "§5.4.6 (Fig. 5.19, middle plot): the second of the two top-right blocks, 7.41%")),
    "fig5_20.iterations_in_12s.R4.92": (4, 92, "iterations_in_duration_same", PaperValue(
        18, "iterations", "§5.4.6 (Fig. 5.20, R 4, background 12.5%, same band): 'There are 18 iterations completed "
        "during the 12s simulation run'")),
}
for _key, (_r, _rate, _metric, _value) in CLAIMS.items():
    PAPER_VALUES[_key] = _value


# ----------------------------------------------------------------- scenarios and grids


def iterations_for(ratio: int, duration_s: float) -> int:
    """Iterations that cover the run: ceil(duration / the ratio's iteration time)."""
    return max(1, math.ceil(duration_s * 1000 / ITERATION_MS[ratio] - 1e-9))


def tenant(rate: int) -> dict:
    """The web-search background: `rate` flows/s per sending host, every host to a random other host, band 0.
    Its seed is the scenario's (so the same and lower band runs of a seed see the same arrivals)."""
    return {"name": "websearch", "sizes": "websearch", "flows_per_second_per_host": rate, "band": 0}


def scenario(ratio: int, rate: int, band: str, seed: int, plan: Plan = FULL) -> dict:
    """One run of the chapter: the job at computation-to-network ratio `ratio`, background at `rate` flows/s per
    host (0: none), the job in `band` ("same" or "lower")."""
    network: dict[str, Any] = {"bandwidth": "10Gbps", "latency": LATENCY, "topology": "star", "fidelity": plan.fidelity,
                               "job_band": BANDS[band], "record_flows": True}
    if plan.fidelity == "packet":
        network["packet"] = dict(PACKET)
    return {
        "workers": WORKERS,
        "iterations": iterations_for(ratio, plan.duration_s),
        "seed": seed,
        "model": {"name": "synthetic", "synthetic": {"profile": "thesis-simulator", "layers": LAYERS, "model_size": MODEL_SIZE,
                                                      "compute": f"{ITERATION_MS[ratio]}ms"}},
        "strategy": {"kind": "ring", "algorithm": "ring",
                     "grouping": {"kind": "thesis-fusion", "fusion_buffer_size": FUSION_BUFFER_BYTES}},
        "network": network,
        "tenant": [tenant(rate)] if rate else [],
    }


def grids(plan: Plan) -> list[tuple[str, int, Any]]:
    """(sub-directory, ratio, grid) for every grid of the plan: per ratio the tenants grid (axes: background,
    job band, seed) and the job alone (one run)."""
    from ..simulation.scenario import scenario_from_dict
    from ..sweep.grid import Axis, expand

    out = []
    for ratio in plan.ratios:
        base = scenario_from_dict(scenario(ratio, plan.rates[0], "same", plan.seeds[0], plan), origin="thesis-network")
        axes = [Axis("tenant", [[tenant(r)] for r in plan.rates], "thesis-network"),
                Axis("network.job_band", [BANDS["same"], BANDS["lower"]], "thesis-network"),
                Axis("seed", list(plan.seeds), "thesis-network")]
        out.append((f"R{ratio}", ratio, expand(base, axes).keyed()))
        alone = scenario_from_dict(scenario(ratio, 0, "same", plan.seeds[0], plan), origin="thesis-network")
        out.append((f"R{ratio}-alone", ratio, expand(alone, []).keyed()))
    return out


def _point_labels(ratio: int, point: Any) -> dict:
    values = point.values
    tenants = values.get("tenant", [])
    rate = int(tenants[0]["flows_per_second_per_host"]) if tenants else 0
    band = {v: k for k, v in BANDS.items()}[values.get("network.job_band", 0)] if rate else "alone"
    return {"ratio": ratio, "rate": rate, "band": band, "seed": int(values.get("seed", point.scenario.seed))}


def run_all(plan: Plan, runs_dir: "str | Path", jobs: int = 1, ray: Optional[str] = None,
            progress: Optional[Progress] = None) -> "pd.DataFrame":
    """Runs (or finds done) every grid of the plan under `runs_dir`; one row per run with its metrics."""
    from ..sweep.runner import run_grid

    runs_dir = Path(runs_dir)
    todo = grids(plan)
    total = sum(len(g.points) for _, _, g in todo)
    offset = 0
    for sub, _ratio, grid in todo:
        def on_progress(done: int, n: int, label: str, offset: int = offset, sub: str = sub) -> None:
            if progress is not None:
                progress(offset + done, total, f"thesis chapter 5 {sub}: {label}")

        run_grid(grid, runs_dir / sub, jobs=jobs, ray=ray, on_progress=on_progress, option="--runs")
        offset += len(grid.points)
    if progress is not None:
        progress(total, total, "done")
    return collect(plan, runs_dir, todo)


def _run_metrics(plan: Plan, flows: "pd.DataFrame") -> dict:
    """The background flows (tenant 1) started inside the window [warm-up, duration - cool-down]: counts and mean FCT
    per size class (small < 100 KB, large > 10 MB, as ddlsim.analyze.fct), and their offered link utilisation."""
    import numpy as np

    from ..analyze.fct import size_classes

    first, last = plan.warmup_s * 1e9, (plan.duration_s - plan.cooldown_s) * 1e9
    t = flows[(flows["tenant"] == 1) & (flows["start_ns"] >= first) & (flows["start_ns"] <= last)]
    classes = size_classes(t["bytes"].to_numpy()) if len(t) else np.array([], dtype=object)
    end = t["end_ns"].to_numpy(dtype=float, na_value=np.nan)
    fct_ms = (end - t["start_ns"].to_numpy(dtype=float)) / 1e6
    out: dict[str, Any] = {}
    for cls in (*SIZE_CLASSES, "all"):
        mask = (classes == cls) if cls != "all" else np.ones(len(t), dtype=bool)
        done = mask & np.isfinite(fct_ms)
        out[f"{cls}_flows"] = int(mask.sum())
        out[f"{cls}_finished"] = int(done.sum())
        out[f"{cls}_fct_mean_ms"] = float(fct_ms[done].mean()) if done.any() else float("nan")
    window_s = (last - first) / 1e9
    out["u_pfabric_measured_pct"] = 100 * float(t["bytes"].sum()) * 8 / (WORKERS * window_s * BANDWIDTH_BPS) if window_s > 0 else float("nan")
    job = flows[flows["tenant"] == 0]
    out["job_bytes"] = int(job["bytes"].sum())
    return out


#: what the chapter's tables read of each run (ddlsim.sweep.store.RunDataset.read_run checks them)
SUMMARY_COLUMNS = {"iteration_time_s": "positive", "wall_s": "number"}
ITERATION_COLUMNS = {"time_s": "number"}
FLOW_COLUMNS = {"tenant": "number", "bytes": "number", "start_ns": "number", "end_ns": "number"}


def collect(plan: Plan, runs_dir: "str | Path", todo: Optional[list] = None) -> "pd.DataFrame":
    """One row per run of the plan found in `runs_dir`: ratio, rate, band, seed, the job's iteration time and
    link utilisation, the background flows' counts and mean FCT per size class."""
    import pandas as pd

    from ..sweep.store import RunDataset

    rows = []
    for sub, ratio, grid in (todo if todo is not None else grids(plan)):
        dataset = RunDataset(Path(runs_dir) / sub)
        done = dataset.done()
        for point in grid.points:
            if point.key not in done:
                continue
            summary = dataset.read_run("summary", point.key, SUMMARY_COLUMNS, rows=1).iloc[0]
            iterations = dataset.read_run("iterations", point.key, ITERATION_COLUMNS, min_rows=1)["time_s"].to_numpy()
            flows = dataset.read_run("flows", point.key, FLOW_COLUMNS)
            row = _point_labels(ratio, point)
            iteration_s = float(summary["iteration_time_s"])
            row.update({"fidelity": plan.fidelity, "iterations": int(len(iterations)), "iteration_ms": iteration_s * 1e3,
                        # iterations finished within the run's duration (Fig. 5.20 counts 18 in 12 s)
                        "iterations_in_duration": int((iterations.cumsum() <= plan.duration_s + 1e-9).sum())})
            row.update(_run_metrics(plan, flows))
            row["u_horovod_measured_pct"] = 100 * row.pop("job_bytes") * 8 / (WORKERS * len(iterations) * iteration_s * BANDWIDTH_BPS)
            rows.append(row)
    return pd.DataFrame(rows)


def small_flow_cdf(plan: Plan, runs_dir: "str | Path", ratio: Optional[int] = None, rate: Optional[int] = None) -> "pd.DataFrame":
    """Fig. 5.6 (Fig. 5.9, 5.11 for other ratios): the CDF of the small background flows' FCT in the window, per
    seed, same band and lower band, at (`ratio`, `rate`) (default: the plan's first ratio and rate: R 16 at 23
    flows/s for the full plan). One row per flow: seed, band, fct_ms, fraction."""
    import numpy as np
    import pandas as pd

    from ..analyze.fct import size_classes
    from ..sweep.store import RunDataset

    ratio = plan.ratios[0] if ratio is None else ratio
    rate = plan.rates[0] if rate is None else rate
    parts = []
    for sub, r, grid in grids(replace(plan, ratios=(ratio,))):
        if sub.endswith("-alone"):
            continue
        dataset = RunDataset(Path(runs_dir) / sub)
        done = dataset.done()
        for point in grid.points:
            labels = _point_labels(r, point)
            if labels["rate"] != rate or point.key not in done:
                continue
            f = dataset.read_run("flows", point.key, FLOW_COLUMNS)
            first, last = plan.warmup_s * 1e9, (plan.duration_s - plan.cooldown_s) * 1e9
            f = f[(f["tenant"] == 1) & (f["start_ns"] >= first) & (f["start_ns"] <= last) & f["end_ns"].notna()]
            f = f[size_classes(f["bytes"].to_numpy()) == "small"]
            fct = np.sort((f["end_ns"].to_numpy(dtype=float) - f["start_ns"].to_numpy(dtype=float)) / 1e6)
            parts.append(pd.DataFrame({"ratio": r, "rate": rate, "seed": labels["seed"], "band": labels["band"], "fct_ms": fct,
                                       "fraction": np.arange(1, len(fct) + 1) / max(1, len(fct))}))
    columns = ["ratio", "rate", "seed", "band", "fct_ms", "fraction"]
    return pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)


def cdf_figure(cdf: "pd.DataFrame", quick: bool = False):
    """Fig. 5.6 with ddlsim: one panel per seed, the small flows' FCT CDF with the job in the same and the lower band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds = sorted(cdf["seed"].unique())
    fig, axes = plt.subplots(1, len(seeds), figsize=(4.2 * len(seeds), 3.4), squeeze=False)
    for ax, seed in zip(axes[0], seeds):
        for band, color in (("same", "#4C72B0"), ("lower", "#DD8452")):
            line = cdf[(cdf["seed"] == seed) & (cdf["band"] == band)]
            ax.step(line["fct_ms"], line["fraction"], where="post", color=color, label=f"job in {band} band")
        ax.set_xscale("log")
        ax.set_xlabel("small flow FCT (ms)")
        ax.set_ylabel("fraction of small flows")
        ax.set_title(f"seed {seed}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    r = cdf.iloc[0] if len(cdf) else None
    where = f"R {int(r['ratio'])}, {int(r['rate'])} flows/s per host" if r is not None else ""
    fig.suptitle(f"Thesis Fig. 5.6 with ddlsim: small flows' FCT CDF, {where}" + (" (quick subset)" if quick else ""),
                 fontsize=10)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------- the chapter's tables and figures


def _pct(a: float, b: float) -> float:
    return 100 * (a / b - 1) if b and math.isfinite(a) and math.isfinite(b) else float("nan")


def cells(runs: "pd.DataFrame") -> "pd.DataFrame":
    """Per (ratio, rate): lower band against same band, each seed's change averaged over the seeds (§5.4.4: 'the
    results are averaged among all three runs'); the iteration times in each band and alone."""
    import numpy as np
    import pandas as pd

    rows = []
    if runs.empty:
        return pd.DataFrame()
    alone = {int(r.ratio): r.iteration_ms for r in runs[runs["band"] == "alone"].itertuples()}
    with_bg = runs[runs["band"] != "alone"]
    for (ratio, rate), cell in with_bg.groupby(["ratio", "rate"], sort=False):
        per_seed = []
        for seed, pair in cell.groupby("seed"):
            same, lower = pair[pair["band"] == "same"], pair[pair["band"] == "lower"]
            if same.empty or lower.empty:
                continue
            s, lo = same.iloc[0], lower.iloc[0]
            per_seed.append({"seed": seed, "iteration_change_pct": _pct(lo.iteration_ms, s.iteration_ms),
                             "small_fct_change_pct": _pct(lo.small_fct_mean_ms, s.small_fct_mean_ms),
                             "large_fct_change_pct": _pct(lo.large_fct_mean_ms, s.large_fct_mean_ms),
                             "same_ms": s.iteration_ms, "lower_ms": lo.iteration_ms,
                             "in_duration_same": s.iterations_in_duration})
        if not per_seed:
            continue
        p = pd.DataFrame(per_seed)
        row = {"ratio": int(ratio), "rate": int(rate), "u_horovod_pct": 100 / ratio, "u_pfabric_pct": _U_PFABRIC.get(int(rate), float("nan")),
               "seeds": len(p), "iteration_alone_ms": alone.get(int(ratio), float("nan")),
               "iteration_same_ms": float(p["same_ms"].mean()), "iteration_lower_ms": float(p["lower_ms"].mean()),
               "iterations_in_duration_same": float(p["in_duration_same"].mean())}
        for metric in ("iteration_change_pct", "small_fct_change_pct", "large_fct_change_pct"):
            row[metric] = float(np.nanmean(p[metric])) if p[metric].notna().any() else float("nan")
            row[f"{metric}_min"] = float(p[metric].min())
            row[f"{metric}_max"] = float(p[metric].max())
            for s in p.itertuples():
                row[f"{metric}.seed{s.seed}"] = getattr(s, metric)
        row["same_vs_alone_pct"] = _pct(row["iteration_same_ms"], row["iteration_alone_ms"])
        row["lower_vs_alone_pct"] = _pct(row["iteration_lower_ms"], row["iteration_alone_ms"])
        rows.append(row)
    return pd.DataFrame(rows).sort_values(["ratio", "rate"], ascending=[False, True]).reset_index(drop=True)


def _metric_value(cell: dict, metric: str) -> float:
    if metric == "iteration_lower_s":
        return cell["iteration_lower_ms"] / 1e3
    if metric == "iteration_same_s":
        return cell["iteration_same_ms"] / 1e3
    return float(cell.get(metric, float("nan")))


def claims_table(cell_frame: "pd.DataFrame") -> "pd.DataFrame":
    """Every number the text prints about the figures, ours beside it (NaN: that cell was not run)."""
    import pandas as pd

    by_cell = {(int(r["ratio"]), int(r["rate"])): r for r in cell_frame.to_dict("records")} if not cell_frame.empty else {}
    rows = []
    for key, (ratio, rate, metric, value) in CLAIMS.items():
        cell = by_cell.get((ratio, rate))
        ours = _metric_value(cell, metric) if cell else float("nan")
        rows.append({"claim": key, "ratio": ratio, "rate": rate, "metric": metric, "ddlsim": ours, "paper": value.value,
                     "unit": value.unit})
    return pd.DataFrame(rows)


def fig5_19_table(cell_frame: "pd.DataFrame") -> "pd.DataFrame":
    """The operating-boundary map as a table: per cell, ours beside the thesis' value where the text prints one."""
    import pandas as pd

    paper = {(r, rate, metric): v.value for r, rate, metric, v in CLAIMS.values()}
    rows = []
    for r in cell_frame.to_dict("records"):
        row = {"ratio": r["ratio"], "rate": r["rate"], "u_horovod_pct": r["u_horovod_pct"], "u_pfabric_pct": r["u_pfabric_pct"],
               "seeds": r["seeds"]}
        for metric in ("iteration_change_pct", "small_fct_change_pct", "large_fct_change_pct"):
            row[metric] = r[metric]
            row[f"paper_{metric}"] = paper.get((r["ratio"], r["rate"], metric), float("nan"))
        rows.append(row)
    return pd.DataFrame(rows)


def setting_table(plan: Plan) -> "pd.DataFrame":
    """Tables 5.1 and 5.2 beside the scenario ddlsim runs."""
    import pandas as pd

    from ..simulation.grouping import thesis_fusion
    from ..simulation.model_build import build_model, layer_times_ns
    from ..simulation.scenario import scenario_from_dict

    sc = scenario_from_dict(scenario(plan.ratios[0], plan.rates[0], "lower", plan.seeds[0], plan))
    model = build_model(sc.model, None)
    largest = max(sum(t.bytes for t in layer.tensors) for layer in model.layers)
    buffer = sc.strategy.grouping.fusion_buffer_bytes
    ours = [
        ("table5_1.workers", sc.workers, ""), ("table5_1.layers", len(model.layers), ""),
        ("table5_1.model_size_mb", model.size_bytes / 1e6, "thesis-simulator profile: 100 MB exactly"),
        ("table5_1.fusion_buffer_bytes", buffer, f"Table 5.1's value, above the largest layer ({largest:,} bytes); {len(thesis_fusion(model, buffer))} fused all-reduces"),
        ("table5_1.compute_file_ms", sum(f + b for f, b in layer_times_ns(model, sc.model)) / 1e6,
         f"compute scaled to Table 5.3's iteration time (here R {plan.ratios[0]})"),
        ("table5_1.horovod_initial_priority", 0x10, "ToS 0x10 -> pfifo_fast band 0 ('same'); 'lower' is ToS 0x08 -> band 2"),
        ("table5_2.simulation_time_s", plan.duration_s, "the job runs ceil(duration / iteration) iterations; background until it ends"),
        ("table5_2.priority_queues", PACKET["bands"], "read as one device queue under the 3-band pfifo_fast queue disc"),
        ("table5_2.link_bandwidth_gbps", sc.network.bandwidth_bps / 1e9, ""),
        ("table5_2.link_delay_ns", sc.network.latency_ns, ""),
        ("table5_2.link_max_queue_packets", float("nan"), "the device queue; ddlsim's ports are the queue disc itself"),
        ("section5_3.droptail_queue_packets", PACKET["queue_limit"], "per band (queue_scope band)"),
        ("section5_4_5.warmup_s", plan.warmup_s, ""), ("section5_4_5.cooldown_s", plan.cooldown_s, ""),
        ("section5_4_4.seeds", len(plan.seeds), ""),
    ]
    return pd.DataFrame([{"parameter": k, "paper": PAPER_VALUES[k].value, "ours": v, "note": note} for k, v, note in ours])


def table5_3_4(runs: "pd.DataFrame", plan: Plan) -> "pd.DataFrame":
    """Tables 5.3 and 5.4: expected utilisations (Eqs 5.2-5.5) with the thesis' 1.7 MB and with the web-search
    CDF's own mean (1,711,250 B), and those measured (job alone; background in the window)."""
    import pandas as pd

    from ..workload import flow_sizes

    mean_b = flow_sizes.mean_bytes(flow_sizes.WEBSEARCH)
    alone = {int(r.ratio): r for r in runs[runs["band"] == "alone"].itertuples()} if not runs.empty else {}
    measured = runs[runs["band"] != "alone"].groupby(["ratio", "rate"])["u_pfabric_measured_pct"].mean().to_dict() if not runs.empty else {}
    rows = []
    for ratio in RATIOS:
        for rate in RATES:
            u_h = 100 * 100e6 * 2 * (1 - 1 / WORKERS) * 8 / (ITERATION_MS[ratio] / 1e3 * BANDWIDTH_BPS)
            u_p = 100 * rate * THESIS_FLOW_MB * 1e6 * 8 / BANDWIDTH_BPS
            u_p_cdf = 100 * rate * mean_b * 8 / BANDWIDTH_BPS
            a = alone.get(ratio)
            rows.append({
                "ratio": ratio, "rate": rate, "iteration_ms": ITERATION_MS[ratio],
                "paper_iteration_ms": PAPER_VALUES[f"table5_3.iteration_ms.R{ratio}"].value,
                "u_horovod_pct": u_h, "paper_u_horovod_pct": PAPER_VALUES[f"table5_3.u_horovod_pct.R{ratio}"].value,
                "u_horovod_measured_alone_pct": a.u_horovod_measured_pct if a is not None else float("nan"),
                "u_pfabric_pct": u_p, "paper_u_pfabric_pct": PAPER_VALUES[f"table5_4.u_pfabric_pct.R{ratio}.{rate}"].value,
                "u_pfabric_websearch_cdf_pct": u_p_cdf, "u_pfabric_measured_pct": measured.get((ratio, rate), float("nan")),
                "u_total_pct": u_h + u_p, "paper_u_total_pct": PAPER_VALUES[f"table5_4.u_total_pct.R{ratio}.{rate}"].value,
                "r_p_to_hrvd": u_p / u_h, "paper_r_p_to_hrvd": PAPER_VALUES[f"table5_4.r_p_to_hrvd.R{ratio}.{rate}"].value,
            })
    return pd.DataFrame(rows)


def table5_5(runs: "pd.DataFrame") -> "pd.DataFrame":
    """Table 5.5: background flows started in the window and finished, by size class, for R 16 at 23 flows/s
    (lower band, as the thesis' counts do not depend on the band), per seed and summed; paper beside."""
    import pandas as pd

    sel = runs[(runs["ratio"] == 16) & (runs["rate"] == 23) & (runs["band"] == "lower")].sort_values("seed") if not runs.empty else runs
    rows = []
    for cls in ("all", *SIZE_CLASSES):
        row: dict[str, Any] = {"size_class": cls}
        for i, r in enumerate(sel.itertuples()):
            row[f"run{i}_completed"] = getattr(r, f"{cls}_finished")
            row[f"paper_run{i}_completed"] = _T55_COUNTS[i][cls] if i in _T55_COUNTS else float("nan")
            row[f"run{i}_started"] = getattr(r, f"{cls}_flows")
        if len(sel):
            row["all_runs_completed"] = int(sel[f"{cls}_finished"].sum())
            row["paper_all_runs_completed"] = _T55_COUNTS["all"][cls]
        rows.append(row)
    return pd.DataFrame(rows)


def fig5_19_figure(cell_frame: "pd.DataFrame", quick: bool = False):
    """Fig. 5.19 with ddlsim: three maps over (background, Horovod) utilisation: the job's iteration-time change and
    the small and large flows' mean-FCT change, lower band against same band; the thesis' value in brackets."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    paper = {(r, rate, m): v.value for r, rate, m, v in CLAIMS.values()}
    ratios = sorted(cell_frame["ratio"].unique())  # 2 (U 50%) at the bottom? the thesis puts high U_Horovod on top
    rates = sorted(cell_frame["rate"].unique())
    fig, axes = plt.subplots(1, 3, figsize=(13, 1.6 + 0.9 * len(ratios)))
    titles = {"iteration_change_pct": "job iteration time change (%)", "small_fct_change_pct": "small flows mean FCT change (%)",
              "large_fct_change_pct": "large flows mean FCT change (%)"}
    for ax, (metric, title) in zip(axes, titles.items()):
        grid = np.full((len(ratios), len(rates)), np.nan)
        for r in cell_frame.to_dict("records"):
            grid[ratios.index(r["ratio"]), rates.index(r["rate"])] = r[metric]
        limit = max(10.0, float(np.nanmax(np.abs(grid)))) if np.isfinite(grid).any() else 10.0
        ax.imshow(grid, cmap="RdYlGn_r", vmin=-limit, vmax=limit, aspect="auto", origin="upper")
        for i, ratio in enumerate(ratios):
            for j, rate in enumerate(rates):
                text = "-" if not np.isfinite(grid[i, j]) else f"{grid[i, j]:+.1f}"
                p = paper.get((ratio, rate, metric))
                if p is not None:
                    text += f"\n(thesis {p:+g})"
                ax.text(j, i, text, ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(rates)))
        ax.set_xticklabels([f"{_U_PFABRIC.get(r, float('nan')):g}%\n{r}/s" for r in rates], fontsize=7)
        ax.set_yticks(range(len(ratios)))
        ax.set_yticklabels([f"{100 / r:g}% (R {r})" for r in ratios], fontsize=7)
        ax.set_xlabel("background utilisation (flows/s per host)", fontsize=8)
        ax.set_ylabel("Horovod utilisation", fontsize=8)
        ax.set_title(title, fontsize=9)
    fig.suptitle("Thesis Fig. 5.19 with ddlsim: job in the lower band vs the same band as the background"
                 + (" (quick subset)" if quick else ""), fontsize=10)
    fig.tight_layout()
    return fig


def performance_figure(runs: "pd.DataFrame", quick: bool = False):
    """Figs 5.5/5.8/5.10/5.12 with ddlsim: per ratio, the small and large flows' mean FCT and the job's iteration
    time against the background rate, same band vs lower band (mean over seeds), the job alone dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with_bg = runs[runs["band"] != "alone"]
    ratios = sorted(with_bg["ratio"].unique(), reverse=True)
    fig, axes = plt.subplots(len(ratios), 3, figsize=(12, 2.8 * len(ratios)), squeeze=False)
    for row, ratio in zip(axes, ratios):
        cell = with_bg[with_bg["ratio"] == ratio]
        mean = cell.groupby(["band", "rate"]).mean(numeric_only=True).reset_index()
        for band, color in (("same", "#4C72B0"), ("lower", "#DD8452")):
            line = mean[mean["band"] == band].sort_values("rate")
            row[0].plot(line["rate"], line["small_fct_mean_ms"], marker="o", color=color, label=f"job in {band} band")
            row[1].plot(line["rate"], line["large_fct_mean_ms"], marker="o", color=color, label=f"job in {band} band")
            row[2].plot(line["rate"], line["iteration_ms"], marker="o", color=color, label=f"job in {band} band")
        alone = runs[(runs["band"] == "alone") & (runs["ratio"] == ratio)]
        if len(alone):
            row[2].axhline(float(alone["iteration_ms"].iloc[0]), color="grey", ls="--", label="job alone")
        for ax, label in zip(row, ("small flows mean FCT (ms)", "large flows mean FCT (ms)", "iteration time (ms)")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted(cell["rate"].unique()))
            ax.set_xticklabels([str(r) for r in sorted(cell["rate"].unique())])
            ax.set_xlabel("background flows/s per host")
            ax.set_ylabel(label)
            ax.set_title(f"R {ratio} (U_Horovod {100 / ratio:g}%)", fontsize=9)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle("Thesis Figs 5.5, 5.8, 5.10, 5.12 with ddlsim" + (" (quick subset)" if quick else ""), fontsize=10)
    fig.tight_layout()
    return fig


def paper_values_table() -> "pd.DataFrame":
    import pandas as pd

    return pd.DataFrame([{"key": k, "value": v.value, "unit": v.unit, "source": v.source} for k, v in PAPER_VALUES.items()])


def reproduce(plan: Plan = FULL, runs_dir: "str | Path" = "thesis-network-runs", jobs: int = 1, ray: Optional[str] = None,
              progress: Optional[Progress] = None) -> Reproduction:
    """Runs the plan's grids (resuming what `runs_dir` holds) and builds the chapter's tables and figures."""
    runs = run_all(plan, runs_dir, jobs=jobs, ray=ray, progress=progress)
    return build(plan, runs, small_flow_cdf(plan, runs_dir))


def build(plan: Plan, runs: "pd.DataFrame", cdf: "Optional[pd.DataFrame]" = None) -> Reproduction:
    cell_frame = cells(runs)
    rep = Reproduction(f"thesis chapter 5 (§5.4, Figs 5.5-5.19) at {plan.fidelity} fidelity")
    rep.tables["setting"] = setting_table(plan)
    rep.tables["table5_3_4"] = table5_3_4(runs, plan)
    rep.tables["table5_5"] = table5_5(runs)
    rep.tables["runs"] = runs
    rep.tables["cells"] = cell_frame
    rep.tables["fig5_19"] = fig5_19_table(cell_frame)
    rep.tables["claims"] = claims_table(cell_frame)
    rep.tables["paper_values"] = paper_values_table()
    if not cell_frame.empty:
        rep.figures["fig5_19"] = lambda: fig5_19_figure(cell_frame, plan.quick)
        rep.figures["fig5_5_12"] = lambda: performance_figure(runs, plan.quick)
    if cdf is not None and len(cdf):
        rep.tables["fig5_6_cdf"] = cdf
        rep.figures["fig5_6"] = lambda: cdf_figure(cdf, plan.quick)
    rep.notes.append(f"background rates are per SENDING host ({WORKERS} hosts send): {', '.join(map(str, plan.rates))} flows/s "
                     "per host, not in total")
    rep.notes.append("'lower' band: the job in pfifo_fast band 2 (ToS 0x08), background in band 0 (ToS 0x10); 'same': both band 0")
    rep.notes.append("Table 5.4 prints U_total 72.5% for R 2 at 92 flows/s; its own columns give 50 + 12.5 = 62.5%")
    if plan.fidelity == "flow":
        rep.notes.append("flow fidelity: max-min sharing with strict-priority bands, no queues; a band-0 flow never waits for "
                         "the job in the lower band (docs/tenants.md)")
    return rep


def parse_plan(quick: bool, fidelity: Optional[str] = None, ratios: Optional[Sequence[int]] = None,
               rates: Optional[Sequence[int]] = None, seeds: Optional[Sequence[int]] = None) -> Plan:
    """The full plan (or the quick one) with the given subsets; a value the chapter does not have is a ValueError."""
    plan = QUICK if quick else FULL
    if ratios:
        bad = [r for r in ratios if r not in ITERATION_MS]
        if bad:
            raise ValueError(f"--ratios {bad[0]}: the chapter's ratios are {', '.join(map(str, RATIOS))}")
        plan = replace(plan, ratios=tuple(ratios))
    if rates:
        if any(r <= 0 for r in rates):
            raise ValueError("--rates: give positive flows/s per host, e.g. 23,46")
        plan = replace(plan, rates=tuple(rates))
    if seeds:
        plan = replace(plan, seeds=tuple(seeds))
    if fidelity:
        plan = replace(plan, fidelity=fidelity)
    return plan

