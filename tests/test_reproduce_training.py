"""`ddlsim reproduce thesis` and `ddlsim reproduce mg-wfbp`: the quick runs
write every promised file, the transcribed paper values match a second,
independent transcription, and what the papers state holds on our outputs."""

import os
import random
import subprocess
from fractions import Fraction
from pathlib import Path

import pandas as pd
import forked_cli
import pytest

from ddlsim.plan.cost import Sample, fit
from ddlsim.reproduce import mg_wfbp, thesis

ROOT = Path(__file__).resolve().parent.parent

THESIS_FILES = {f"{t}.csv" for t in ("table4_1", "fig4_7_runs", "fig4_7", "fig4_8_11_summary", "fig4_8_11_timelines",
                                     "paper_values")} | {f"{f}.{ext}" for f in ("fig4_7", "fig4_8", "fig4_9", "fig4_10", "fig4_11")
                                                         for ext in ("png", "svg")}
MG_FILES = {f"{t}.csv" for t in ("fig9_runs", "fig9", "allreduce_microbenchmark", "costmodel_fit", "paper_values")} | {
    f"{f}.{ext}" for f in ("fig9", "costmodel_fit") for ext in ("png", "svg")}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "COLUMNS": "150"}
    return forked_cli.run([*args], cwd=cwd, env=env, timeout=300)


# The README's own quick reproductions, word for word: run once per session (conftest.ddlsim_once), test_readme
# runs the same commands and these tests read what they wrote.
@pytest.fixture(scope="module")
def thesis_out(ddlsim_once):
    run, cwd = ddlsim_once("reproduce", "thesis", "--quick", "--out", "repro-thesis")
    assert run.returncode == 0, run.stderr[-2000:]
    return cwd / "repro-thesis", run


@pytest.fixture(scope="module")
def mg_out(ddlsim_once):
    run, cwd = ddlsim_once("reproduce", "mg-wfbp", "--quick", "--out", "repro-mgwfbp")
    assert run.returncode == 0, run.stderr[-2000:]
    return cwd / "repro-mgwfbp", run


# ----------------------------------------------------------------- files and printing


def test_thesis_quick_writes_every_promised_file(thesis_out):
    out, run = thesis_out
    assert {p.name for p in out.iterdir()} == THESIS_FILES  # no staging directory left either
    assert all((out / name).stat().st_size > 0 for name in THESIS_FILES)
    assert (out / "fig4_7.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in (out / "fig4_8.svg").read_text(encoding="utf-8")[:2000]
    assert "fig4_7" in run.stdout and "paper" in run.stdout and "wrote 16 files" in run.stdout
    assert run.stderr == ""  # no progress bar when stderr is not a terminal


def test_mg_wfbp_quick_writes_every_promised_file(mg_out):
    out, run = mg_out
    assert {p.name for p in out.iterdir()} == MG_FILES
    assert "fig9" in run.stdout and "costmodel_fit" in run.stdout and "wrote 9 files" in run.stdout
    assert run.stderr == ""


def test_quiet_prints_the_tables_only_and_the_samples_feed_ddlsim_fit(mg_out, tmp_path):
    out, _ = mg_out
    run = _cli("reproduce", "thesis", "--quick", "--quiet", "--out", "q", cwd=tmp_path)
    assert run.returncode == 0 and "fig4_7" in run.stdout and "wrote" not in run.stdout and run.stderr == ""
    assert {p.name for p in (tmp_path / "q").iterdir()} == THESIS_FILES
    fit = _cli("fit", str(out / "allreduce_microbenchmark.csv"), "--time-unit", "ns", "--json", cwd=tmp_path)
    assert fit.returncode == 0, fit.stderr


def test_an_out_path_that_is_a_file_is_refused_before_simulating(tmp_path):
    (tmp_path / "taken").write_text("x", encoding="utf-8")
    run = _cli("reproduce", "mg-wfbp", "--quick", "--out", "taken", cwd=tmp_path)
    assert run.returncode == 2 and "--out taken: exists and is not a directory" in run.stderr
    assert "Traceback" not in run.stderr and (tmp_path / "taken").read_text(encoding="utf-8") == "x"


# ----------------------------------------------------------------- paper values, transcribed again


def test_thesis_paper_values_match_an_independent_transcription():
    # Read off the thesis text again: Table 4.1, the captions of Figs 4.7-4.9.
    again = {"table4_1.bandwidth_gbps": 10, "table4_1.propagation_delay_ms": 0.01, "table4_1.layers": 100,
             "table4_1.model_size_mb": 100, "table4_1.fusion_buffer_mb": 6.28, "table4_1.compute_ms": 900,
             "table4_1.workers": 2, "table4_1.iterations": 2, "fig4_7.priority_reduction_1gbps": 0.12,
             "fig4_8.backward_end_ms": 900, "fig4_8.next_forward_start_ms": 1100, "fig4_8.wait_after_backward_ms": 200,
             "fig4_9.next_forward_start_ms": 950, "fig4_9.gain_vs_fig4_8_ms": 150}
    for key, value in again.items():
        assert thesis.PAPER_VALUES[key].value == value, key
        assert thesis.PAPER_VALUES[key].source


def test_mg_wfbp_paper_values_match_an_independent_transcription():
    again = {"startup_us.2": 90.52, "startup_us.4": 271.56, "startup_us.8": 633.64,
             "googlenet.64.mg_vs_wfbp": 1.78, "googlenet.64.mg_vs_synceasgd": 1.35,
             "resnet50.64.mg_vs_wfbp": 1.75, "resnet50.64.mg_vs_synceasgd": 1.45,
             "resnet50.64.efficiency.wfbp": 0.55, "8.mg_vs_wfbp": 1.2, "8.mg_vs_synceasgd": 1.36,
             "googlenet.batch": 64, "resnet50.batch": 32}
    for key, value in again.items():
        assert mg_wfbp.PAPER_VALUES[key].value == value, key
    # Every startup time is 2(N-1) alpha with one alpha: 45.26 us.
    assert all(abs(a - 45.26) < 1e-9 for a in mg_wfbp.alpha_from_paper().values())


def test_paper_values_sit_beside_ours_in_the_tables(thesis_out, mg_out):
    fig47 = pd.read_csv(thesis_out[0] / "fig4_7.csv")
    cell = fig47[(fig47.workers == 2) & (fig47.bandwidth_gbps == 1)].iloc[0]
    assert cell.paper_reduction_no_barrier == 0.12
    fig9 = pd.read_csv(mg_out[0] / "fig9.csv")
    cell = fig9[(fig9.model == "googlenet") & (fig9.nodes == 64)].iloc[0]
    assert (cell.paper_mg_vs_wfbp, cell.paper_mg_vs_synceasgd) == (1.78, 1.35)
    columns = list(fig9.columns)
    assert columns.index("paper_mg_vs_wfbp") == columns.index("mg_vs_wfbp") + 1


# ----------------------------------------------------------------- what the thesis states


def test_priority_is_never_later_than_fifo_without_the_barrier(thesis_out):
    runs = pd.read_csv(thesis_out[0] / "fig4_7_runs.csv")
    off = runs[~runs.barrier].pivot_table(index=["workers", "bandwidth_gbps"], columns="policy", values="iteration_ms")
    assert (off["priority"] <= off["fifo"]).all()
    # Fig. 4.7: a gain at 1 Gbit/s, none from 2 Gbit/s up (2 workers).
    two = off.loc[2]
    assert two.loc[1, "priority"] < two.loc[1, "fifo"]
    assert (two.loc[two.index >= 2, "priority"] == two.loc[two.index >= 2, "fifo"]).all()


def test_timelines_show_what_the_captions_say(thesis_out):
    out = thesis_out[0]
    summary = pd.read_csv(out / "fig4_8_11_summary.csv").set_index("figure")
    rows = pd.read_csv(out / "fig4_8_11_timelines.csv")
    # Fig. 4.8, barrier: the next forward starts when the last all-reduce ends, after the backward pass.
    f48 = summary.loc["fig4_8"]
    assert f48.next_forward_start_ms == f48.last_allreduce_end_ms > f48.backward_end_ms
    # Fig. 4.9, no barrier: it starts once the all-reduce holding layer 0 is done, earlier than Fig. 4.8.
    f49 = rows[(rows.figure == "fig4_9") & (rows.lane == "allreduce") & (rows.iteration == 0)]
    layer0_done = f49[f49.layer == 0].end_ms.max()
    assert summary.loc["fig4_9"].next_forward_start_ms == pytest.approx(layer0_done, abs=1e-9)
    assert summary.loc["fig4_9"].next_forward_start_ms < f48.next_forward_start_ms
    # Figs 4.10/4.11 (5 Gbit/s): no all-reduce waits for another.
    assert summary.loc["fig4_10"].max_queueing_ms == 0 and summary.loc["fig4_11"].max_queueing_ms == 0
    # Every compute span and all-reduce of both workers is drawn.
    assert set(rows["lane"]) == {"forward", "backward", "allreduce"} and set(rows["rank"]) == {0, 1}


# ----------------------------------------------------------------- what MG-WFBP states


def test_mg_wfbp_is_never_slower_than_wfbp_or_synceasgd(mg_out):
    runs = pd.read_csv(mg_out[0] / "fig9_runs.csv")
    t = runs.pivot_table(index=["model", "nodes"], columns="strategy", values="iteration_ms")
    assert (t["mg-wfbp"] <= t["wfbp"]).all() and (t["mg-wfbp"] <= t["synceasgd"]).all()
    # The crossing of Fig. 9: WFBP ahead of SyncEASGD on 4 nodes, behind on 64, for both CNNs.
    for model in ("googlenet", "resnet50"):
        assert t.loc[(model, 4), "wfbp"] < t.loc[(model, 4), "synceasgd"]
        assert t.loc[(model, 64), "synceasgd"] < t.loc[(model, 64), "wfbp"]


def test_fit_recovers_the_simulated_rings_closed_form_exactly():
    rng = random.Random(8)
    parameters = tuple(sorted(rng.sample(range(1, 20_000), 5)))
    parameters = tuple(80 * p for p in parameters)  # M / N x 0.8 ns is a whole number of ns for N = 2, 4, 8
    samples, fits = mg_wfbp.costmodel_fit((2, 4, 8), parameters)
    alpha_ns, beta = 45_260, Fraction(8, 10)  # the paper's alpha; 10 Gbit/s
    for s in samples.itertuples():
        n = s.workers
        assert s.time_ns == 2 * (n - 1) * (alpha_ns + Fraction(s.size, n) * beta)
    exact = fit([Sample(Fraction(s.size), Fraction(s.time_ns), s.workers) for s in samples.itertuples()])
    for f in exact.fits:
        n = f.workers
        assert f.a_ns == 2 * (n - 1) * alpha_ns and f.b_ns_per_byte == float(Fraction(2 * (n - 1), n) * beta)
    for f in fits.itertuples():
        n = f.workers
        assert f.b_ns_per_byte == float(Fraction(2 * (n - 1), n) * beta)
        assert f.alpha_us == pytest.approx(45.26, rel=0, abs=1e-12) and f.beta_ns_per_byte == pytest.approx(0.8, rel=0, abs=1e-15)
        assert f.r2 == 1.0 and f.max_relative_error == 0.0
        assert f.a_us == pytest.approx(f.paper_a_us, rel=0, abs=1e-9)
