"""The reproduced figures (matplotlib Agg): one line per mechanism over the swept quantity."""

from __future__ import annotations

from typing import Any

LABELS = {"baseline": "PS (baseline)", "aggregation": "in-network aggregation", "multicast": "multicast",
          "multiagg": "multicast + aggregation", "ring": "ring-reduce", "ring_multicast": "ring-reduce + multicast",
          "butterfly": "butterfly mixing"}
X_LABELS = {"bandwidth_gbps": "host bandwidth (Gbit/s)", "workers": "workers", "modules_added": "Inception modules added",
            "conv_speedup": "convolution speedup (x)"}


def figure_for(name: str, frame: Any, caption: str, quick: bool = False):
    """Figs 3-8 plot iteration time (the paper's 'training time'), Figs 9-12 the speedup over the baseline PS."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..analyze.figures import mark_coincident
    from ..analyze.plot_text import plain_text

    x = next(c for c in frame.columns if c in X_LABELS)
    speedup = x in ("modules_added", "conv_speedup")
    y = "ddlsim_speedup" if speedup else "ddlsim_s"
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for mechanism, rows in frame.groupby("mechanism", sort=False):
        if speedup and mechanism == "baseline":
            continue
        rows = rows.sort_values(x)
        ax.plot(rows[x], rows[y], marker="o", label=plain_text(LABELS.get(mechanism, mechanism)))
    ax.set_xlabel(X_LABELS[x])
    ax.set_ylabel("speedup over the baseline PS (x)" if speedup else "iteration time (s)")
    if not speedup:
        from matplotlib.ticker import FormatStrFormatter

        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
        ax.tick_params(axis="y", which="minor", labelsize=7)
    if x in ("bandwidth_gbps", "workers"):
        from matplotlib.ticker import FormatStrFormatter

        ax.set_xscale("log", base=2 if x == "workers" else 10)
        ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.set_xticks(sorted(frame[x].unique()))
        ax.xaxis.set_minor_formatter(FormatStrFormatter(""))
    ax.set_title(plain_text(f"ddlsim: {caption}" + (" (quick subset)" if quick else "")), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    mark_coincident(ax)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
