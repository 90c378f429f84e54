"""The adaptive band policy on the thesis' chapter 5 setting (docs/adaptive-priority.md): the job in the tenants'
band ("same"), in a lower band ("lower") and adaptive, per cell (R, flows/s) and seed.

Reads run directories written by `ddlsim sweep examples/sweep/adaptive-priority.toml` (or by `ddlsim reproduce
thesis-network`, whose runs are the same scenarios): every complete run's summary, iterations and flows. Each run
is labelled from its own scenario (compute -> R, the tenant's rate, job_band / band_policy -> band, seed), so runs
from several directories and engine builds can be pooled. The metrics are those of `reproduce.thesis_network`
(the background flows started in the 2-10 s window, mean FCT per size class).

    python -m ddlsim.reproduce.adaptive_priority OUT_DIR RUN_DIR [RUN_DIR ...]

writes OUT_DIR/runs.csv, cells.csv, table.md and adaptive-priority.png.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from ..errors import DdlsimError
from .thesis_network import FULL, ITERATION_MS, _run_metrics

if TYPE_CHECKING:
    import pandas as pd

_RATIO_OF_MS = {ms: r for r, ms in ITERATION_MS.items()}
BAND_LABELS = ("same", "lower", "adaptive")


def label(scenario: dict) -> dict:
    """(ratio, rate, band, seed) of one run from its canonical scenario; band "alone" without tenants."""
    from ..units import parse_duration_ns

    compute_ms = round(parse_duration_ns(scenario["model"]["synthetic"]["compute"]) / 1e6)
    tenants = scenario.get("tenant") or []
    rate = int(tenants[0]["flows_per_second_per_host"]) if tenants else 0
    net = scenario["network"]
    if net.get("band_policy", "fixed") == "adaptive":
        band = "adaptive"
    else:
        band = {0: "same", 2: "lower"}.get(int(net.get("job_band", 0)), f"band{net.get('job_band')}")
    return {"ratio": _RATIO_OF_MS.get(compute_ms, -1), "rate": rate, "band": band if rate else "alone",
            "seed": int(scenario["seed"])}


def collect(run_dirs: Sequence["str | Path"]) -> "pd.DataFrame":
    """One row per complete run found in the directories (a run seen twice, e.g. under two engine builds, once:
    the first directory's)."""
    import numpy as np
    import pandas as pd

    from ..sweep.store import RunDataset
    from .thesis_network import FLOW_COLUMNS, SUMMARY_COLUMNS

    rows, seen = [], set()
    for d in run_dirs:
        dataset = RunDataset(d)
        for key in sorted(dataset.done()):
            summary = dataset.read_run("summary", key, {**SUMMARY_COLUMNS, "scenario": "text"}, rows=1).iloc[0]
            try:
                row = label(json.loads(summary["scenario"]))
            except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError) as exc:
                raise DdlsimError(f"{dataset.path('summary', key)}: its scenario is not one of a ddlsim sweep "
                                  f"({type(exc).__name__}: {str(exc)[:120]}); {dataset.redo(key)}") from None
            ident = (row["ratio"], row["rate"], row["band"], row["seed"])
            if ident in seen:
                continue
            seen.add(ident)
            flows = dataset.read_run("flows", key, {**FLOW_COLUMNS, "band": "number", "timeouts": "number",
                                                     "drops": "number"})
            row["iteration_ms"] = float(summary["iteration_time_s"]) * 1e3
            row.update(_run_metrics(FULL, flows))
            row.pop("job_bytes", None)
            first, last = FULL.warmup_s * 1e9, (FULL.duration_s - FULL.cooldown_s) * 1e9
            t = flows[(flows["tenant"] == 1) & (flows["start_ns"] >= first) & (flows["start_ns"] <= last)
                      & (flows["bytes"] < 100_000) & flows["end_ns"].notna()]
            fct = (t["end_ns"].to_numpy(dtype=float) - t["start_ns"].to_numpy(dtype=float)) / 1e6
            row["small_fct_p90_ms"] = float(np.percentile(fct, 90)) if len(fct) else float("nan")
            job = flows[flows["tenant"] == 0]
            row["job_timeouts"] = int(job["timeouts"].sum())
            row["job_drops"] = int(job["drops"].sum())
            row["job_low_band_bytes_pct"] = 100 * float(job.loc[job["band"] > 0, "bytes"].sum()) / max(1, float(job["bytes"].sum()))
            row["wall_s"] = float(summary["wall_s"])
            row["dir"], row["key"] = str(d), key
            rows.append(row)
    return pd.DataFrame(rows)


def _pct(a: float, b: float) -> float:
    return 100 * (a / b - 1) if b and math.isfinite(a) and math.isfinite(b) else float("nan")


def cells(runs: "pd.DataFrame") -> "pd.DataFrame":
    """Per (ratio, rate), over the seeds that have all three bands: the seed means of iteration time and small-flow
    FCT per band; the iteration change of adaptive against same (mean of the seeds' changes, and the worst seed);
    and the share of the lower band's small-flow gain that adaptive gets: (same - adaptive) / (same - lower) on
    the seed means (nan where the lower band gains nothing)."""
    import pandas as pd

    out = []
    bg = runs[runs["band"].isin(BAND_LABELS)]
    for (ratio, rate), cell in bg.groupby(["ratio", "rate"], sort=False):
        complete = [s for s, part in cell.groupby("seed") if set(part["band"]) >= set(BAND_LABELS)]
        if not complete:
            continue
        c = cell[cell["seed"].isin(complete)]
        by = {b: c[c["band"] == b].sort_values("seed") for b in BAND_LABELS}
        it_change = [_pct(a, s) for a, s in zip(by["adaptive"]["iteration_ms"], by["same"]["iteration_ms"])]
        lo_change = [_pct(a, s) for a, s in zip(by["lower"]["iteration_ms"], by["same"]["iteration_ms"])]
        mean = {b: by[b].mean(numeric_only=True) for b in BAND_LABELS}
        gain_lower = mean["same"]["small_fct_mean_ms"] - mean["lower"]["small_fct_mean_ms"]
        gain_adaptive = mean["same"]["small_fct_mean_ms"] - mean["adaptive"]["small_fct_mean_ms"]
        share = 100 * gain_adaptive / gain_lower if gain_lower > 0 else float("nan")
        p90_lower = mean["same"]["small_fct_p90_ms"] - mean["lower"]["small_fct_p90_ms"]
        p90_adaptive = mean["same"]["small_fct_p90_ms"] - mean["adaptive"]["small_fct_p90_ms"]
        row = {"ratio": int(ratio), "rate": int(rate), "seeds": len(complete)}
        for b in BAND_LABELS:
            row[f"iteration_ms_{b}"] = mean[b]["iteration_ms"]
        row["iteration_change_lower_pct"] = sum(lo_change) / len(lo_change)
        row["iteration_change_adaptive_pct"] = sum(it_change) / len(it_change)
        row["iteration_change_adaptive_worst_pct"] = max(it_change)
        for b in BAND_LABELS:
            row[f"small_fct_ms_{b}"] = mean[b]["small_fct_mean_ms"]
        row["small_gain_share_pct"] = share
        for b in BAND_LABELS:
            row[f"small_p90_ms_{b}"] = mean[b]["small_fct_p90_ms"]
        row["small_p90_gain_share_pct"] = 100 * p90_adaptive / p90_lower if p90_lower > 0 else float("nan")
        row["job_low_band_bytes_pct"] = mean["adaptive"]["job_low_band_bytes_pct"]
        for b in BAND_LABELS:
            row[f"job_timeouts_{b}"] = mean[b]["job_timeouts"]
        row["goal_iteration"] = row["iteration_change_adaptive_pct"] <= 1.0
        row["goal_fct"] = bool(share >= 80) if math.isfinite(share) else None
        out.append(row)
    frame = pd.DataFrame(out)
    return frame.sort_values(["ratio", "rate"], ascending=[False, True], ignore_index=True) if len(frame) else frame


def _f(x: float, digits: int = 1) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:+.{digits}f}" if digits < 0 else f"{x:.{digits}f}"


def table_markdown(c: "pd.DataFrame") -> str:
    head = ("| R | flows/s | seeds | iteration same / lower / adaptive (ms) | adaptive vs same (mean; worst seed) | "
            "lower vs same | small FCT mean same / lower / adaptive (ms) | adaptive's share of lower's gain | "
            "small p90 share | job bytes in low band | job timeouts same / lower / adaptive | goal |")
    lines = [head, "|" + "---|" * 12]
    for r in c.itertuples():
        lines.append(
            f"| {r.ratio} | {r.rate} | {r.seeds} | {r.iteration_ms_same:.0f} / {r.iteration_ms_lower:.0f} / "
            f"{r.iteration_ms_adaptive:.0f} | {r.iteration_change_adaptive_pct:+.1f} %; {r.iteration_change_adaptive_worst_pct:+.1f} % | "
            f"{r.iteration_change_lower_pct:+.1f} % | {r.small_fct_ms_same:.3f} / {r.small_fct_ms_lower:.3f} / "
            f"{r.small_fct_ms_adaptive:.3f} | {_share(r.small_gain_share_pct)} | {_share(r.small_p90_gain_share_pct)} | "
            f"{r.job_low_band_bytes_pct:.0f} % | {r.job_timeouts_same:.1f} / {r.job_timeouts_lower:.1f} / {r.job_timeouts_adaptive:.1f} | {_goal(r)} |")
    return "\n".join(lines)


def _goal(r) -> str:
    """yes: iteration within +1 % of same (seed mean) and at least 80 % of the lower band's small-flow gain."""
    misses = [] if r.goal_iteration else ["iteration"]
    if r.goal_fct is None or (isinstance(r.goal_fct, float) and math.isnan(r.goal_fct)):
        return "n/a (" + ", ".join(misses + ["no gain to share"]) + ")"
    if not r.goal_fct:
        misses.append("FCT")
    return "yes" if not misses else "no (" + ", ".join(misses) + ")"


def _share(x: float) -> str:
    return "n/a (lower gains nothing)" if not math.isfinite(x) else f"{x:.0f} %"


def figure(c: "pd.DataFrame", title: str = "", variants: "Optional[dict[str, pd.DataFrame]]" = None):
    """Two panels per cell: the job's iteration change against the same band, and the small flows' mean FCT
    change against the same band, for the lower band and adaptive (and further adaptive `variants`: label ->
    cells of the same grid)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    labels = [f"R{r.ratio}\n{r.rate}/s" for r in c.itertuples()]
    x = np.arange(len(c))
    series = [("lower band", c, "lower", "#DD8452"), ("adaptive", c, "adaptive", "#55A868")]
    colors = ["#4C72B0", "#8172B3", "#937860"]
    for i, (name, frame) in enumerate((variants or {}).items()):
        frame = frame.set_index(["ratio", "rate"]).reindex(list(zip(c["ratio"], c["rate"]))).reset_index()
        series.append((name, frame, "adaptive", colors[i % len(colors)]))
    width = 0.8 / len(series)
    fig, axes = plt.subplots(2, 1, figsize=(max(6, 0.7 * len(c) + 2), 6.4), sharex=True)
    for k, (name, frame, band, color) in enumerate(series):
        offset = (k - (len(series) - 1) / 2) * width
        iteration = frame["iteration_change_lower_pct"] if band == "lower" else frame["iteration_change_adaptive_pct"]
        small = 100 * (frame[f"small_fct_ms_{band}"] / frame["small_fct_ms_same"] - 1)
        axes[0].bar(x + offset, iteration, width, color=color, label=name)
        axes[1].bar(x + offset, small, width, color=color, label=name)
    for ax, ylabel in ((axes[0], "job iteration vs same band (%)"), (axes[1], "tenants' small-flow mean FCT vs same band (%)")):
        ax.axhline(0, color="black", lw=0.6)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].axhline(1, color="grey", ls="--", lw=0.6)
    axes[1].set_xticks(x, labels, fontsize=7)
    fig.suptitle(title or "Adaptive band policy, thesis chapter 5 setting (seed means)", fontsize=10)
    fig.tight_layout()
    return fig


def main(argv: Sequence[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m ddlsim.reproduce.adaptive_priority OUT_DIR RUN_DIR [RUN_DIR ...]", file=sys.stderr)
        return 2
    from ..safe_io import check_directory_target, staged_directory

    out = Path(argv[0])
    try:
        check_directory_target(out, option="OUT_DIR")
        runs = collect(argv[1:])
        c = cells(runs)
        inputs = [p for d in argv[1:] for p in Path(d).glob("*/*.parquet")]
        with staged_directory(out, option="OUT_DIR", inputs=inputs) as stage:  # all or nothing, never over an input
            runs.to_csv(stage / "runs.csv", index=False)
            c.to_csv(stage / "cells.csv", index=False)
            (stage / "table.md").write_text(table_markdown(c) + "\n")
            if len(c):
                figure(c).savefig(stage / "adaptive-priority.png", dpi=110)
    except DdlsimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(table_markdown(c))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
