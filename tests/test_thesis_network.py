"""`network.job_band` (the whole job in one priority band) and `ddlsim reproduce thesis-network` (thesis chapter 5)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import forked_cli
import pytest

import ddlsim
from ddlsim.errors import ScenarioError


def _job(job_band=None, compute="40ms", iterations=2, tenants=True, fidelity="flow"):
    network = {"bandwidth": "10Gbps", "latency": "10us", "fidelity": fidelity, "record_flows": True}
    if job_band is not None:
        network["job_band"] = job_band
    sc = {"workers": 4, "iterations": iterations, "seed": 5,
          "model": {"name": "synthetic", "synthetic": {"profile": "thesis-simulator", "layers": 10, "model_size": "10MB",
                                                        "compute": compute}},
          "strategy": {"kind": "ring", "grouping": {"kind": "thesis-fusion", "fusion_buffer_size": "2MB"}},
          "network": network}
    if tenants:
        sc["tenant"] = [{"sizes": "websearch", "flows_per_second_per_host": 300, "band": 0, "stop": "80ms"}]
    return ddlsim.simulate(sc)


def _flows(result):
    return result.events.flows.to_pandas()


@pytest.mark.parametrize("band", [0, 1, 2, 7])
def test_job_band_puts_every_job_transfer_in_that_band(band):
    f = _flows(_job(job_band=band))
    assert set(f[f["tenant"] == 0]["band"]) == {band}
    assert set(f[f["tenant"] == 1]["band"]) == {0}
    assert (f["tenant"] == 0).sum() > 0 and (f["tenant"] == 1).sum() > 0


def test_job_band_defaults_to_zero():
    f = _flows(_job())
    assert set(f[f["tenant"] == 0]["band"]) == {0}


def test_job_band_out_of_range_is_refused():
    with pytest.raises(ScenarioError, match="job_band"):
        _job(job_band=8)


def test_a_lower_band_job_is_invisible_to_band_0_tenants_at_flow_level():
    """Strict priority: band-0 tenant flows take what they need first, so their
    completion times do not depend on a band-1 job at all (here: jobs of
    different compute, hence different traffic timing, give identical tenant
    flows), while a band-0 job slows some of them down."""
    def tenant_flows(**kw):
        f = _flows(_job(iterations=3, **kw))
        t = f[f["tenant"] == 1].sort_values(["start_ns", "src_host", "dst_host"])
        return t[["src_host", "dst_host", "bytes", "start_ns", "end_ns"]].reset_index(drop=True)

    a = tenant_flows(job_band=1, compute="40ms")
    b = tenant_flows(job_band=1, compute="25ms")
    assert len(a) > 20
    assert a.equals(b)
    same = tenant_flows(job_band=0, compute="40ms")
    assert same[["bytes", "start_ns"]].equals(a[["bytes", "start_ns"]])  # the same arrivals (the tenant's seed)
    fct_lower = (a["end_ns"] - a["start_ns"]).to_numpy(dtype=float)
    fct_same = (same["end_ns"] - same["start_ns"]).to_numpy(dtype=float)
    assert fct_same.sum() > fct_lower.sum()


# ----------------------------------------------------------------- ddlsim reproduce thesis-network

from ddlsim.reproduce import thesis_network as tn  # noqa: E402


def test_the_chapter_setting_as_scenarios():
    from ddlsim.simulation.lowering import network_document
    from ddlsim.simulation.scenario import scenario_from_dict

    # iterations cover the 12-second run: ceil(12000 / iteration ms)
    assert [tn.iterations_for(r, 12.0) for r in tn.RATIOS] == [6, 11, 22, 43]
    for ratio in tn.RATIOS:
        sc = scenario_from_dict(tn.scenario(ratio, 46, "lower", 2))
        assert sc.workers == 8 and sc.network.bandwidth_bps == 10e9 and sc.network.latency_ns == 10_000
        assert sc.network.job_band == 2 and sc.seed == 2 and sc.network.fidelity == "packet"
        assert sc.strategy.grouping.fusion_buffer_bytes == 5_333_329
        doc = network_document(sc)["tenants"][0]
        assert doc["rate_per_host"] == 46  # per host, as the thesis gives it: not divided by the 8 hosts
        assert doc["band"] == 0
    # "same" puts the job in the tenants' band; the job alone has no tenants
    assert scenario_from_dict(tn.scenario(4, 23, "same", 1)).network.job_band == 0
    assert scenario_from_dict(tn.scenario(4, 0, "same", 1)).tenant == []


def test_table5_4_utilisations_follow_eqs_5_2_and_5_3_and_show_the_72_5_misprint():
    t = tn.table5_3_4(__import__("pandas").DataFrame(), tn.FULL)
    for r in t.itertuples():
        assert r.u_horovod_pct == pytest.approx(100 / r.ratio)  # 100 MB x 2 x 7/8 x 8 / (iteration x 10 Gbit/s)
        assert r.u_pfabric_pct == pytest.approx(r.rate * 1.7e6 * 8 / 1e10 * 100)
        assert r.u_total_pct == pytest.approx(r.u_horovod_pct + r.u_pfabric_pct)
        if (r.ratio, r.rate) != (2, 92):
            assert r.u_total_pct == pytest.approx(r.paper_u_total_pct, abs=0.05)
    bad = t[(t["ratio"] == 2) & (t["rate"] == 92)].iloc[0]
    assert bad.paper_u_total_pct == 72.5 and bad.u_total_pct == pytest.approx(62.51, abs=0.01)


def test_cells_average_each_seeds_change_lower_against_same():
    import pandas as pd

    rows = []
    for seed, (same, lower, s_small, l_small) in {1: (100.0, 110.0, 2.0, 1.0), 2: (100.0, 130.0, 4.0, 3.0)}.items():
        for band, it, small in (("same", same, s_small), ("lower", lower, l_small)):
            rows.append({"ratio": 4, "rate": 92, "band": band, "seed": seed, "iteration_ms": it, "iterations_in_duration": 3,
                         "small_fct_mean_ms": small, "large_fct_mean_ms": 10.0})
    rows.append({"ratio": 4, "rate": 0, "band": "alone", "seed": 1, "iteration_ms": 50.0, "iterations_in_duration": 3,
                 "small_fct_mean_ms": float("nan"), "large_fct_mean_ms": float("nan")})
    c = tn.cells(pd.DataFrame(rows)).iloc[0]
    assert c.iteration_change_pct == pytest.approx((10 + 30) / 2)
    assert c.small_fct_change_pct == pytest.approx((-50 + -25) / 2)
    assert c.large_fct_change_pct == pytest.approx(0)
    assert c.same_vs_alone_pct == pytest.approx(100) and c.lower_vs_alone_pct == pytest.approx(140)
    claims = tn.claims_table(tn.cells(pd.DataFrame(rows)))
    row = claims[claims["claim"] == "fig5_19.iteration_change_pct.R4.92"].iloc[0]
    assert row.ddlsim == pytest.approx(20) and row.paper == 15.61


def _cli(*args, cwd):
    return forked_cli.run(["reproduce", "thesis-network", *args], cwd=cwd, timeout=600)


def test_quick_reproduction_end_to_end_resumes_and_is_deterministic(tmp_path):
    r = _cli("--quick", "--out", "a", "--runs", "runs", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "fig5_19" in r.stdout and "per SENDING host" in r.stdout and "72.5" in r.stdout and "wrote " in r.stdout
    runs = __import__("pandas").read_csv(tmp_path / "a" / "runs.csv")
    assert sorted(set(runs["band"])) == ["alone", "lower", "same"] and set(runs["rate"]) == {0, 23, 92}
    assert (runs["fidelity"] == "flow").all() and (runs.loc[runs["band"] != "alone", "all_flows"] > 0).all()
    # every background flow started in the window finished (the thesis' 100 % completion ratio)
    assert (runs["all_flows"] == runs["all_finished"]).all()
    # strict priority at flow level: the same arrivals, and no background flow slower with the job below it
    pair = runs[runs["rate"] == 92].set_index("band")
    assert pair.loc["same", "all_flows"] == pair.loc["lower", "all_flows"]
    assert pair.loc["lower", "all_fct_mean_ms"] <= pair.loc["same", "all_fct_mean_ms"]
    cdf = __import__("pandas").read_csv(tmp_path / "a" / "fig5_6_cdf.csv")
    assert set(cdf["band"]) == {"same", "lower"} and set(cdf["rate"]) == {23}
    for _, g in cdf.groupby(["seed", "band"]):  # one CDF per seed and band, over the window's small flows
        assert g["fraction"].iloc[-1] == 1 and g["fct_ms"].is_monotonic_increasing
        assert len(g) == int(runs[(runs["rate"] == 23) & (runs["band"] == g["band"].iloc[0])]["small_finished"].iloc[0])
    done = sorted(p.name for p in (tmp_path / "runs" / "R4" / "summary").iterdir())
    assert len(done) == 4 and len(list((tmp_path / "runs" / "R4-alone" / "summary").iterdir())) == 1
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").rglob("*.parquet")}
    r2 = _cli("--quick", "--out", "b", "--runs", "runs", cwd=tmp_path)
    assert r2.returncode == 0, r2.stderr
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").rglob("*.parquet")} == stamps  # nothing re-simulated
    for name in ("fig5_19.svg", "fig5_5_12.svg", "fig5_6.svg", "fig5_6_cdf.csv", "cells.csv", "claims.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_two_fresh_reproductions_write_the_same_bytes(tmp_path):
    # simulated twice (two runs directories), not read from one cache; before: runs.csv held each run's
    # simulation_wall_s, different every time
    for k in (1, 2):
        r = _cli("--quick", "--out", f"out{k}", "--runs", f"runs{k}", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in (tmp_path / "out1").iterdir())
    assert "runs.csv" in names and names == sorted(p.name for p in (tmp_path / "out2").iterdir())
    for name in names:
        assert (tmp_path / "out1" / name).read_bytes() == (tmp_path / "out2" / name).read_bytes(), name


@pytest.mark.parametrize("args, words", [
    (["--ratios", "3"], "--ratios 3"),
    (["--rates", "x"], "--rates"),
    (["--fidelity", "fluid"], "--fidelity"),
    (["--jobs", "0"], "--jobs"),
])
def test_bad_options_are_one_line_errors(tmp_path, args, words):
    r = _cli("--quick", "--out", "o", "--runs", "runs", *args, cwd=tmp_path)
    assert r.returncode == 2
    assert words in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists() and not (tmp_path / "runs").exists()
