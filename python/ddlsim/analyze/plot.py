"""Pictures: per-rank timelines and iteration-time breakdowns (PNG/SVG)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

COLORS = {"compute": "#4C72B0", "communication": "#DD8452", "sync": "#8C8C8C", "update": "#55A868"}
MAX_RANKS = 16


def _lanes(events: pd.DataFrame) -> list[int]:
    workers = sorted(events.loc[events["role"] == "worker", "rank"].unique())
    servers = sorted(events.loc[events["role"] == "server", "rank"].unique())
    shown = workers[:MAX_RANKS] + servers[:MAX_RANKS]
    return [int(r) for r in shown]


def timeline_figure(events: pd.DataFrame, title: str = "") -> plt.Figure:
    """Each rank gets two lanes: compute (top) and communication (bottom)."""
    lanes = _lanes(events)
    fig, ax = plt.subplots(figsize=(12, 0.55 * len(lanes) + 1.6))
    comm_kinds = {"transfer", "collective"}
    ev = events[events["op"] != "ring_step"] if (events["kind"] == "collective").any() else events
    for y, rank in enumerate(lanes):
        mine = ev[ev["rank"] == rank]
        compute = mine[mine["kind"] == "compute"]
        colors = [COLORS["update"] if op == "update" else COLORS["compute"] for op in compute["op"]]
        ax.broken_barh(
            list(zip(compute["start_ns"] / 1e6, (compute["end_ns"] - compute["start_ns"]) / 1e6)),
            (y + 0.05, 0.4),
            facecolors=colors,
        )
        comm = ev[ev["kind"].isin(comm_kinds) & ((ev["rank"] == rank) | (ev["peer"] == rank))]
        ax.broken_barh(
            list(zip(comm["start_ns"] / 1e6, (comm["end_ns"] - comm["start_ns"]) / 1e6)),
            (y + 0.5, 0.4),
            facecolors=COLORS["communication"],
            alpha=0.6,
        )
    for _, barrier in ev[ev["kind"] == "barrier"].iterrows():
        ax.axvline(barrier["end_ns"] / 1e6, color=COLORS["sync"], linestyle="--", linewidth=0.8)
    roles = dict(zip(events["rank"], events["role"]))
    ax.set_yticks([y + 0.5 for y in range(len(lanes))])
    ax.set_yticklabels([f"{roles[r]} {r}" for r in lanes])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_title(title or "timeline")
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[k]) for k in ("compute", "update", "communication")]
    ax.legend(handles, ["compute", "server update", "communication"], loc="upper right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def breakdown_figure(summaries: dict[str, dict], title: str = "") -> plt.Figure:
    """Stacked bars per scenario: overlapped compute, compute alone, exposed communication, idle."""
    labels = list(summaries)
    overlap = np.array([summaries[k]["overlap_s"] for k in labels]) * 1e3
    compute_only = np.array([summaries[k]["compute_s"] for k in labels]) * 1e3 - overlap
    exposed = np.array([summaries[k]["exposed_communication_s"] for k in labels]) * 1e3
    idle = np.array([summaries[k]["idle_s"] for k in labels]) * 1e3
    fig, ax = plt.subplots(figsize=(2.2 * len(labels) + 3, 4))
    bottom = np.zeros(len(labels))
    for values, name, color in (
        (compute_only, "compute only", COLORS["compute"]),
        (overlap, "compute + communication", "#9370DB"),
        (exposed, "exposed communication", COLORS["communication"]),
        (idle, "idle", COLORS["sync"]),
    ):
        ax.bar(labels, values, bottom=bottom, label=name, color=color)
        bottom += values
    for x, total in enumerate(bottom):
        ax.text(x, total, f"{total:.1f} ms", ha="center", va="bottom")
    ax.set_ylim(0, bottom.max() * 1.12 if len(bottom) and bottom.max() > 0 else 1)
    ax.set_ylabel("time per iteration (ms)")
    ax.set_title(title or "iteration time breakdown")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def save_figure(fig: plt.Figure, path: Path) -> None:
    fig.savefig(path, dpi=110)
    plt.close(fig)
