"""Pictures: per-rank timelines and iteration-time breakdowns (PNG/SVG)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .plot_text import plain_text  # noqa: E402,F401  (re-exported: every figure's user text goes through it)

COLORS = {"compute": "#4C72B0", "communication": "#DD8452", "sync": "#8C8C8C", "update": "#55A868"}
MAX_RANKS = 16


def _lanes(rank: np.ndarray, role: np.ndarray) -> tuple[list[int], dict[int, str], int]:
    """Ranks drawn (the first MAX_RANKS workers and servers), their roles, and how many ranks there are."""
    ranks, first = np.unique(rank, return_index=True)
    roles = {int(r): str(x) for r, x in zip(ranks, role[first])}
    workers = sorted(r for r, x in roles.items() if x == "worker")
    others = sorted(r for r, x in roles.items() if x != "worker")
    return workers[:MAX_RANKS] + others[:MAX_RANKS], roles, len(roles)


def timeline_figure(log: Any, title: str = "") -> plt.Figure:
    """Each rank gets two lanes: compute (top) and communication (bottom).

    `log` is an event log (:class:`ddlsim.trace.EventLog`). Communication is
    the sender's send rows and the receiver's recv rows; when the log has
    collective rows their steps are not drawn separately.
    """
    kind, op = log.column("kind"), log.column("op")
    rank, start, end = log.column("rank"), log.column("start_ns"), log.column("end_ns")
    step = log.column("step")
    lanes, roles, total = _lanes(rank, log.column("role"))
    fig, ax = plt.subplots(figsize=(12, 0.55 * len(lanes) + 1.6))
    has_collectives = bool((kind == "collective").any())
    comm = np.isin(kind, ("send", "recv", "collective"))
    if has_collectives:
        comm &= ~(np.isin(kind, ("send", "recv")) & (step >= 0))
    compute = kind == "compute"
    update = compute & (op == "update")
    drawn = set()
    for y, r in enumerate(lanes):
        mine = rank == r
        for mask, color, label in ((compute & ~update, COLORS["compute"], "compute"), (update, COLORS["update"], "update")):
            sel = mine & mask
            if sel.any():
                drawn.add(label)
                ax.broken_barh(list(zip(start[sel] / 1e6, (end[sel] - start[sel]) / 1e6)), (y + 0.05, 0.4), facecolors=color)
        sel = mine & comm
        if sel.any():
            drawn.add("communication")
            ax.broken_barh(
                list(zip(start[sel] / 1e6, (end[sel] - start[sel]) / 1e6)),
                (y + 0.5, 0.4),
                facecolors=COLORS["communication"],
                alpha=0.6,
            )
    for t in np.unique(end[kind == "barrier"]):
        drawn.add("barrier")
        ax.axvline(t / 1e6, color=COLORS["sync"], linestyle="--", linewidth=0.8)
    ax.set_yticks([y + 0.5 for y in range(len(lanes))])
    ax.set_yticklabels([plain_text(f"{roles[r]} {r}") for r in lanes])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    shown = f" ({len(lanes)} of {total} ranks shown)" if len(lanes) < total else ""
    ax.set_title(plain_text((title or "timeline") + shown))
    legend = [(k, label) for k, label in (("compute", "compute"), ("update", "update"), ("communication", "communication"),
                                          ("barrier", "barrier")) if k in drawn]
    handles = [
        plt.Line2D([0], [0], color=COLORS["sync"], linestyle="--") if k == "barrier" else plt.Rectangle((0, 0), 1, 1, color=COLORS[k])
        for k, _ in legend
    ]
    if handles:
        ax.legend(handles, [label for _, label in legend], loc="upper right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def breakdown_figure(summaries: dict[str, dict], title: str = "") -> plt.Figure:
    """Stacked bars per scenario: overlapped compute, compute alone, exposed communication, idle."""
    labels = [plain_text(k) for k in summaries]
    rows = list(summaries.values())
    overlap = np.array([s["overlap_s"] for s in rows]) * 1e3
    compute_only = np.array([s["compute_s"] for s in rows]) * 1e3 - overlap
    exposed = np.array([s["exposed_communication_s"] for s in rows]) * 1e3
    idle = np.array([s["idle_s"] for s in rows]) * 1e3
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
    ax.set_title(plain_text(title or "iteration time breakdown"))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def save_figure(fig: plt.Figure, path: Path) -> None:
    from .figures import save_deterministic

    save_deterministic(fig, path)
    plt.close(fig)
