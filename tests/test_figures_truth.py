"""Figures that tell the truth: coincident lines stay visible, the same figure gives the same bytes, and a quick
reproduction's titles say what ran."""

from __future__ import annotations

import hashlib

import pandas as pd
import pytest

from ddlsim.analyze.figures import mark_coincident, save_deterministic
from ddlsim.reproduce.figures import figure_for
from ddlsim.reproduce.network_operator import FIGURES, QUICK, TITLES, Reproduction

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def sweep(identical: bool) -> pd.DataFrame:
    """Iteration time over bandwidth for three mechanisms; multicast's curve equals the baseline's when `identical`."""
    rows = []
    for bw, base in ((10, 2.0), (100, 1.0)):
        rows += [{"bandwidth_gbps": bw, "mechanism": "baseline", "ddlsim_s": base},
                 {"bandwidth_gbps": bw, "mechanism": "multicast", "ddlsim_s": base if identical else base * 0.8},
                 {"bandwidth_gbps": bw, "mechanism": "ring", "ddlsim_s": base * 0.5}]
    return pd.DataFrame(rows)


def drawn(fig):
    ax = fig.axes[0]
    return {line.get_label(): line for line in ax.get_lines()}, [t.get_text() for t in ax.get_legend().get_texts()]


def test_two_identical_curves_both_show_with_their_own_marker_and_a_legend_note():
    fig = figure_for("fig3", sweep(identical=True), "a caption")
    lines, legend = drawn(fig)
    assert "multicast (same as PS (baseline))" in legend
    base, multicast = lines["PS (baseline)"], lines["multicast (same as PS (baseline))"]
    assert multicast.get_marker() != base.get_marker()  # drawn on top, yet the one below shows through
    assert multicast.get_markerfacecolor() == "none" and multicast.get_markersize() > base.get_markersize()
    assert multicast.get_linestyle() != base.get_linestyle()
    assert lines["ring-reduce"].get_marker() == base.get_marker()  # a line that coincides with none keeps its style
    plt.close(fig)


def test_distinct_curves_are_left_alone():
    fig = figure_for("fig3", sweep(identical=False), "a caption")
    lines, legend = drawn(fig)
    assert legend == ["PS (baseline)", "multicast", "ring-reduce"]
    assert {line.get_marker() for line in lines.values()} == {"o"}
    plt.close(fig)


def test_mark_coincident_groups_every_line_equal_to_an_earlier_one():
    fig, ax = plt.subplots()
    for label in ("a", "b", "c"):
        ax.plot([1, 2, 3], [4, 5, 6], marker="o", label=label)
    ax.plot([1, 2, 3], [4, 5, 7], marker="o", label="d")
    assert mark_coincident(ax) == [("b", "a"), ("c", "a")]
    markers = [line.get_marker() for line in ax.get_lines()]
    assert len(set(markers[:3])) == 3 and markers[3] == "o"
    plt.close(fig)


@pytest.mark.parametrize("fmt", ["svg", "png"])
def test_the_same_figure_saves_to_the_same_bytes(tmp_path, fmt):
    digests = []
    for run in range(2):
        fig = figure_for("fig3", sweep(identical=True), "a caption")
        save_deterministic(fig, tmp_path / f"{run}.{fmt}")
        plt.close(fig)
        digests.append(hashlib.sha256((tmp_path / f"{run}.{fmt}").read_bytes()).hexdigest())
    assert digests[0] == digests[1]
    if fmt == "svg":
        text = (tmp_path / "0.svg").read_text()
        assert "<dc:date>" not in text


def test_a_quick_reproduction_writes_byte_identical_figures_twice(tmp_path):
    from ddlsim.reproduce.network_operator import reproduce_network_operator

    files = []
    for run in ("a", "b"):
        rep = reproduce_network_operator(only=["fig3"], quick=True, cache_dir=tmp_path / "cache")
        rep.save(tmp_path / run)
        files.append({p.name: p.read_bytes() for p in sorted((tmp_path / run).iterdir())})
    assert set(files[0]) == {"fig3.csv", "fig3.png", "fig3.svg", "comparison.txt"}
    assert files[0] == files[1]


def test_quick_titles_say_the_workers_that_ran():
    rep = Reproduction(plan=QUICK, tables={name: None for name in (*TITLES, *FIGURES)}, stats=None, notes=[], cache_dir=None)
    assert QUICK.workers == 8
    for name in ("table4", "table6", "table8", "table9", "table10"):
        assert "8 workers" in rep.titles[name] and "32 workers" not in rep.titles[name], rep.titles[name]
    for name in FIGURES:
        assert "32 workers" not in rep.titles[name] and "32 workers" not in rep.caption(name)
    fig = figure_for("fig3", sweep(identical=False), rep.caption("fig3"), quick=True)
    assert fig.axes[0].get_title() == "ddlsim: Varying bandwidth: Inception-v3, 8 workers (quick subset)"
    plt.close(fig)
    full = Reproduction(plan=QUICK.__class__(), tables={"table4": None}, stats=None, notes=[], cache_dir=None)
    assert full.titles["table4"] == "Table 4: speedup of in-network mechanisms over the baseline PS, 32 workers, 25 Gbit/s"
