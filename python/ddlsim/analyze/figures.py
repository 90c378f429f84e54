"""Pictures of an :class:`~ddlsim.analyze.analysis.Analysis`, each a
matplotlib Figure (matplotlib is imported on the first call). Each helper
returns None when the log has nothing to draw."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .plot_text import plain_text


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _cdf(ax, values, *style, scale: float = 1.0, at_least: float | None = None, **kw) -> bool:
    """Draws the empirical CDF of `values` / `scale` (raised to `at_least`, for log axes); False if there are none."""
    v = np.sort(np.asarray(values, dtype=float)) / scale
    if not len(v):
        return False
    if at_least is not None:
        v = np.maximum(v, at_least)
    ax.step(v, np.arange(1, len(v) + 1) / len(v), *style, where="post", **kw)
    return True


def save_deterministic(fig, target, fmt: str | None = None, dpi: float = 110) -> None:
    """`fig.savefig` that gives the same bytes for the same figure: no date in
    SVG or PDF, no software string in PNG, and SVG element ids from a fixed
    hash salt (matplotlib otherwise salts them with random data). `target`: a
    path or a binary file; `fmt`: the format (default: the path's suffix)."""
    import matplotlib

    fmt = (fmt or str(target).rsplit(".", 1)[-1]).lower()
    metadata = {"svg": {"Date": None}, "pdf": {"CreationDate": None, "ModDate": None}, "png": {"Software": None}}.get(fmt)
    with matplotlib.rc_context({"svg.hashsalt": "ddlsim"}):
        fig.savefig(target, format=fmt, dpi=dpi, metadata=metadata)


COINCIDENT_MARKERS = ("s", "^", "D", "v", "P", "X", "*")
COINCIDENT_STYLES = ("--", ":", "-.")


def mark_coincident(ax, rtol: float = 1e-9) -> list[tuple[str, str]]:
    """Keeps lines that draw over each other visible: a labelled line whose
    points equal an earlier one's (same x, y within `rtol`) gets its own
    hollow, larger marker and a dashed style, and its legend label says
    "(same as <earlier>)". Call it before ``ax.legend()``. Returns the
    (hidden, shown) label pairs."""
    groups: list[list[Any]] = []
    for line in ax.get_lines():
        if str(line.get_label()).startswith("_"):
            continue
        x, y = (np.asarray(v, dtype=float) for v in line.get_data())
        for group in groups:
            gx, gy = (np.asarray(v, dtype=float) for v in group[0].get_data())
            if x.shape == gx.shape and y.shape == gy.shape and np.allclose(x, gx, rtol=rtol, atol=0, equal_nan=True) \
                    and np.allclose(y, gy, rtol=rtol, atol=0, equal_nan=True):
                group.append(line)
                break
        else:
            groups.append([line])
    pairs = []
    for group in groups:
        first = str(group[0].get_label())
        size = group[0].get_markersize()
        for k, line in enumerate(group[1:]):
            line.set_marker(COINCIDENT_MARKERS[k % len(COINCIDENT_MARKERS)])
            line.set_markerfacecolor("none")
            line.set_markersize(size + 3 * (k + 1))
            line.set_linestyle(COINCIDENT_STYLES[k % len(COINCIDENT_STYLES)])
            pairs.append((str(line.get_label()), first))
            line.set_label(f"{line.get_label()} (same as {first})")
    return pairs


def _titled(ax, title: str) -> None:
    ax.set_title(plain_text(title), fontsize=10)
    ax.grid(alpha=0.3)


def iterations_figure(analysis: Any):
    """Per iteration (mean over workers): compute, overlap, exposed
    communication, idle (stacked), and SketchDLC's phases 1-3."""
    t = analysis.iterations()
    mean = t[t["rank"] == -1] if len(t) and "compute_s" in t else pd.DataFrame()
    if mean.empty:
        return None
    plt = _plt()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 3.6))
    x = mean["iteration"].to_numpy()
    parts = [("compute only", mean["compute_s"] - mean["overlap_s"], "#4C72B0"),
             ("overlap", mean["overlap_s"], "#9370DB"),
             ("exposed comm.", mean["exposed_communication_s"], "#DD8452"),
             ("idle", mean["idle_s"], "#8C8C8C")]
    bottom = np.zeros(len(x))
    for label, values, color in parts:
        ax.bar(x, values * 1e3, bottom=bottom, label=label, color=color)
        bottom += values.to_numpy() * 1e3
    ax.set_xticks(x)
    ax.set_xlabel("iteration")
    ax.set_ylabel("ms (mean over workers)")
    ax.legend(fontsize=7)
    _titled(ax, "iteration time breakdown")
    if "phase1_s" in mean and mean["phase1_s"].notna().any():
        width = 0.27
        for k, (col, color) in enumerate((("phase1_s", "#4C72B0"), ("phase2_s", "#9370DB"), ("phase3_s", "#DD8452"))):
            bx.bar(x + (k - 1) * width, mean[col] * 1e3, width, label=col.replace("_s", ""), color=color)
        bx.set_xticks(x)
        bx.set_xlabel("iteration")
        bx.set_ylabel("ms")
        bx.legend(fontsize=7)
    _titled(bx, "SketchDLC phases 1-3 (Fig. 9)")
    fig.tight_layout()
    return fig


def overheads_figure(analysis: Any):
    """SketchDLC overheads: min / mean / max per key (Figs 11, 13, 17) and
    the distribution of computation and wait overheads."""
    table = analysis.sketchdlc_overheads()
    if table.empty:
        return None
    plt = _plt()
    per_key = [o for o in ("update", "search", "synchronization") if (table["overhead"] == o).any()]
    fig, axes = plt.subplots(1, len(per_key) + 1, figsize=(4 * (len(per_key) + 1), 3.4), squeeze=False)
    for ax, name in zip(axes[0], per_key):
        part = table[table["overhead"] == name].reset_index(drop=True)
        x = np.arange(len(part))
        ax.vlines(x, part["min_us"], part["max_us"], color="#8C8C8C", linewidth=1)
        ax.plot(x, part["mean_us"], "o", markersize=2.5, color="#C44E52")
        ax.set_xlabel("key (index in key order)")
        ax.set_ylabel("us")
        _titled(ax, f"{name} overhead per key: min-max, mean")
    ax = axes[0][-1]
    samples = analysis.overhead_samples()
    for name, color in (("computation", "#4C72B0"), ("wait", "#DD8452")):
        _cdf(ax, samples.loc[samples["overhead"] == name, "value_ns"], scale=1e3, label=name, color=color)
    ax.set_xlabel("us")
    ax.set_ylabel("CDF")
    ax.legend(fontsize=7)
    _titled(ax, "computation and wait overheads")
    fig.tight_layout()
    return fig


def rpc_figure(analysis: Any):
    """RPC latency CDF push vs pull, component shares, size CDFs."""
    table = analysis.rpc_latency()
    if table.empty:
        return None
    plt = _plt()
    fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(13, 3.6))
    for kind, part in table.groupby("kind"):
        _cdf(ax, part["total_ns"].dropna(), scale=1e3, label=plain_text(kind))
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlabel("RPC latency (us)")
    ax.set_ylabel("CDF")
    ax.legend(fontsize=7)
    _titled(ax, "latency CDF, push vs pull")
    shares = analysis.rpc_shares()
    cols = [c for c in shares.columns if c.endswith("_share")]
    bottom = np.zeros(len(shares))
    for c in cols:
        bx.bar([plain_text(k) for k in shares["kind"].astype(str)], shares[c].fillna(0), bottom=bottom, label=c.replace("_share", ""))
        bottom += shares[c].fillna(0).to_numpy()
    bx.set_ylabel("share of latency")
    bx.legend(fontsize=7)
    _titled(bx, "where RPC time goes")
    for col, style in (("request_bytes", "-"), ("response_bytes", "--")):
        _cdf(cx, table[col].dropna(), style, at_least=1, label=col.replace("_", " "))
    cx.set_xscale("log")
    cx.set_xlabel("bytes")
    cx.set_ylabel("CDF")
    cx.legend(fontsize=7)
    _titled(cx, "request / response sizes")
    fig.tight_layout()
    return fig


def connections_figure(analysis: Any, t_window_ns: int = 1_000_000):
    """RPC intervals of worker-PS pairs (Fig. 7a) and concurrent
    connections per PS per window (Fig. 7b)."""
    cc = analysis.concurrent_connections(t_window_ns)
    if cc.empty:
        return None
    plt = _plt()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 3.4))
    if _cdf(ax, analysis.rpc_intervals()["interval_ns"], scale=1e3, at_least=1e-3):
        ax.set_xscale("log")
    ax.set_xlabel("interval between consecutive RPCs (us; 0 drawn at 1e-3)")
    ax.set_ylabel("CDF")
    _titled(ax, "RPC intervals per worker-PS pair")
    share = np.bincount(cc["connections"].to_numpy()).astype(float)
    share[0] += cc.attrs.get("empty_windows", 0)  # windows the table leaves out: 0 connections
    bx.bar(np.arange(len(share)), share / share.sum(), width=1.0, color="#55A868")
    bx.set_xlabel(f"concurrent connections per PS per {t_window_ns / 1e6:g} ms")
    bx.set_ylabel("share of windows")
    _titled(bx, "concurrent active connections")
    fig.tight_layout()
    return fig


def hot_keys_figure(analysis: Any):
    """Cumulative share of updates taken by the top-K keys (Fig. 10)."""
    hot = analysis.hot_keys()
    if hot.empty:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    ax.plot(hot["rank"], hot["cumulative_share"], color="#C44E52")
    ax.set_xlabel("top K keys by updates")
    ax.set_ylabel("share of all updates")
    ax.set_ylim(0, 1.02)
    _titled(ax, "hot-parameter skew")
    fig.tight_layout()
    return fig


def collectives_figure(analysis: Any):
    """All-reduce time and bus bandwidth (vs the link rate) against size."""
    c = analysis.collectives()
    if c.empty:
        return None
    plt = _plt()
    fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(14, 3.4))
    size = np.maximum(c["bytes"].to_numpy(dtype=float), 1)
    ax.scatter(size, c["time_ns"] / 1e3, s=6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("bytes")
    ax.set_ylabel("time (us)")
    _titled(ax, "collective time")
    bx.scatter(size, c["busbw_Gbps"], s=6, label="bus bandwidth")
    link = c["link_Gbps"].dropna()
    if len(link):
        bx.axhline(float(link.iloc[0]), color="#C44E52", linestyle="--", label="link rate")
    bx.set_xscale("log")
    bx.set_xlabel("bytes")
    bx.set_ylabel("Gbit/s")
    bx.legend(fontsize=7)
    _titled(bx, "achieved bus bandwidth")
    if not _cdf(cx, c["queue_mean_ns"].dropna(), scale=1e3):
        cx.text(0.5, 0.5, "ready_ns unknown", ha="center", transform=cx.transAxes)
    cx.set_xlabel("queueing delay start - ready (us, mean over ranks)")
    cx.set_ylabel("CDF")
    _titled(cx, "stream queueing delay")
    fig.tight_layout()
    return fig


def compare_figure(table: pd.DataFrame, top: int = 12):
    """Per-iteration times of both logs and the largest per-layer /
    per-transfer differences (output of ``Analysis.compare``)."""
    if table.empty:
        return None
    plt = _plt()
    a_name, b_name = (plain_text(n) for n in table.attrs.get("names", ("a", "b")))
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 3.8))
    it = table[table["scope"] == "iteration"]
    x = np.arange(len(it))
    ax.bar(x - 0.2, it["a_s"] * 1e3, 0.4, label=a_name)
    ax.bar(x + 0.2, it["b_s"] * 1e3, 0.4, label=b_name)
    ax.set_xticks(x)
    ax.set_xticklabels([plain_text(s.replace("iteration ", "")) for s in it["item"]])
    ax.set_xlabel("iteration")
    ax.set_ylabel("ms")
    ax.legend(fontsize=7)
    _titled(ax, "iteration time")
    items = table[table["scope"].isin(["layer", "communication"])]
    items = items.reindex(items["diff_s"].abs().sort_values(ascending=False).index).head(top)[::-1]
    bx.barh(np.arange(len(items)), items["diff_s"] * 1e3, color=np.where(items["diff_s"] > 0, "#C44E52", "#55A868"))
    bx.set_yticks(np.arange(len(items)))
    bx.set_yticklabels([plain_text(str(s)[:40]) for s in items["item"]], fontsize=7)
    bx.set_xlabel(f"{b_name} - {a_name} (ms per worker-iteration)")
    _titled(bx, "largest contributors")
    fig.tight_layout()
    return fig


def critical_path_figure(analysis: Any, top: int = 12):
    """Time on the critical paths by (kind, op, name)."""
    s = analysis.critical_path_summary(top)
    if s.empty:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 0.3 * len(s) + 1.5))
    labels = [plain_text(f"{k} {o} {n}"[:50]) for k, o, n in zip(s["kind"], s["op"], s["name"])][::-1]
    ax.barh(np.arange(len(s)), s["share"][::-1] * 100, color="#4C72B0")
    ax.set_yticks(np.arange(len(s)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xlabel("% of iteration time on the critical path")
    _titled(ax, "critical path: what sets the iteration time")
    fig.tight_layout()
    return fig


FIGURES = {
    "iterations": iterations_figure,
    "critical_path": critical_path_figure,
    "sketchdlc_overheads": overheads_figure,
    "rpc_latency": rpc_figure,
    "connections": connections_figure,
    "hot_keys": hot_keys_figure,
    "collectives": collectives_figure,
}


# Ports and bands drawn in the queue figure: those with the highest peak occupancy.
QUEUE_FIGURE_TRACKS = 8


def queues_figure(analysis: Any, tracks: int = QUEUE_FIGURE_TRACKS):
    """Queue occupancy over time (packet level): one step line per port and
    band, the `tracks` with the highest peaks; packets, or bytes where
    packets were not counted."""
    q = analysis.queue_samples()
    if q.empty:
        return None
    plt = _plt()
    counted = bool((q["packets"] >= 0).all())
    value = "packets" if counted else "bytes"
    peaks = q.groupby(["node", "port", "band"], sort=True)[value].max().sort_values(ascending=False, kind="stable")
    shown = list(peaks.index[:tracks])
    fig, ax = plt.subplots(figsize=(11, 3.6))
    end = float(q["time_ns"].max()) / 1e6
    for node, port, band in shown:
        g = q[(q["node"] == node) & (q["port"] == port) & (q["band"] == band)]
        x = np.append(g["time_ns"].to_numpy(dtype=float) / 1e6, end)
        y = np.append(g[value].to_numpy(dtype=float), float(g[value].iloc[-1]))
        ax.step(x, y, where="post", label=plain_text(f"{g['port_name'].iloc[0]}, band {band}"))
    ax.set_xlabel("time (ms)")
    ax.set_ylabel(f"queued {value}")
    ax.legend(fontsize=7, loc="upper right")
    more = f" ({len(shown)} of {len(peaks)} port-bands, highest peaks)" if len(peaks) > len(shown) else ""
    _titled(ax, f"queue occupancy per port and band{more}")
    fig.tight_layout()
    return fig


def _tenant_label(tenant: int) -> str:
    return "job" if int(tenant) == 0 else f"tenant {int(tenant)}"


def fct_figure(analysis: Any, warmup_ns: int = 0, cooldown_ns: int = 0):
    """FCT CDF per tenant and size class: the finished flows that start in
    the measurement window (log x axis)."""
    from .fct import SIZE_CLASSES

    cdf = analysis.fct_cdf(warmup_ns, cooldown_ns)
    if cdf.empty:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.8))
    order = {label: i for i, label in enumerate(SIZE_CLASSES)}
    keys = sorted({(int(t), str(c)) for t, c in zip(cdf["tenant"], cdf["size_class"])}, key=lambda k: (k[0], order.get(k[1], 9), k[1]))
    for tenant, label in keys:
        g = cdf[(cdf["tenant"] == tenant) & (cdf["size_class"] == label)]
        ax.step(g["fct_us"].to_numpy(dtype=float), g["fraction"].to_numpy(dtype=float), where="post",
                label=plain_text(f"{_tenant_label(tenant)}, {label} ({len(g):,})"))
    ax.set_xscale("log")
    ax.set_xlabel("flow completion time (us)")
    ax.set_ylabel("CDF")
    ax.legend(fontsize=7, loc="lower right")
    _titled(ax, "flow completion times (flows starting in the window)")
    fig.tight_layout()
    return fig


def slowdown_figure(analysis: Any, warmup_ns: int = 0, cooldown_ns: int = 0):
    """Slowdown (FCT / ideal time alone on the path) against flow size, one
    colour per tenant: the finished flows that start in the window."""
    from .fct import LARGE_ABOVE, SMALL_BELOW, in_window

    flows = analysis.flow_completion()
    if flows.empty:
        return None
    window = in_window(flows, warmup_ns, cooldown_ns)
    window = window[window["finished"] & np.isfinite(window["slowdown"].to_numpy(dtype=float))]
    if window.empty:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.8))
    for tenant, g in window.groupby("tenant", sort=True):
        ax.scatter(np.maximum(g["bytes"].to_numpy(dtype=float), 1), g["slowdown"].to_numpy(dtype=float), s=6,
                   alpha=0.6, label=plain_text(f"{_tenant_label(tenant)} ({len(g):,})"))
    for edge in (SMALL_BELOW, LARGE_ABOVE):
        ax.axvline(edge, color="0.7", lw=0.8, ls=":")
    ax.axhline(1.0, color="0.5", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("flow size (bytes; dotted: 100 KB and 10 MB)")
    ax.set_ylabel("slowdown (FCT / ideal)")
    ax.legend(fontsize=7, loc="upper right")
    _titled(ax, "slowdown against flow size")
    fig.tight_layout()
    return fig
