"""Flow completion times (issue 18): the flows table's tenant shape (host-only
ends, unfinished flows), the FCT / ideal time / slowdown definitions of
ddlsim.analyze.fct, the windowed summaries and comparisons, and `ddlsim
analyze`'s FCT section.

Oracles: numpy percentiles and order statistics on seeded random FCTs; the
ideal times by hand (docs/packet-model.md's frame sizes) and against a
frame-by-frame store-and-forward recursion; a real engine run at flow
fidelity, where a flow alone on its path takes exactly its ideal time."""

import json
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import forked_cli
import pytest
from typer.testing import CliRunner

from ddlsim.cli.app import app

import ddlsim
from ddlsim import _core
from ddlsim.analyze import Analysis, open_analysis
from ddlsim.analyze.fct import (PathModel, compare_fct, compare_iteration_time, fct_summary, flow_table, in_window,
                                interaction, path_model, size_classes)
from ddlsim.errors import TraceError
from ddlsim.simulation.bridge import _flows_table
from ddlsim.trace import read_event_log, write_event_log
from ddlsim.trace.schema import validate_event_log

U32_NONE, U64_NONE = 2**32 - 1, 2**64 - 1
STAR_10G = {"fidelity": "flow", "bandwidth": "10Gbps", "latency": "10us", "topology": "star"}


@pytest.fixture(scope="module")
def job_log():
    return ddlsim.simulate(model="lenet5", workers=2, iterations=2, record_flows=True, network="flow").events


def _with_flows(log, flows):
    return validate_event_log(log.replace(flows=flows), check_causality=False)


def _synthetic(rng, n, tenant=1, start_span=10**9, unfinished=0):
    """A contract-shaped background tenant's flows: host-only ends, message -1, some unfinished (null end)."""
    sizes = rng.integers(1, 30_000_000, n)
    starts = np.sort(rng.integers(0, start_span, n))
    fct = rng.integers(10_000, 50_000_000, n)
    end = pa.array(starts + fct, mask=np.arange(n) < unfinished)
    hosts = rng.integers(0, 8, (2, n))
    hosts[1] = (hosts[0] + 1 + rng.integers(0, 7, n)) % 8
    return {"flow": np.arange(n), "message": np.full(n, -1), "src": np.full(n, -1), "dst": np.full(n, -1),
            "src_host": hosts[0], "dst_host": hosts[1], "bytes": sizes, "band": np.zeros(n, int),
            "tenant": np.full(n, tenant), "start_ns": starts, "end_ns": end}


# ------------------------------------------------------------------ the flows table


def test_the_bridge_maps_the_engines_none_values_and_unfinished_flows():
    u = lambda dtype, values: (dtype, np.asarray(values, dtype=dtype).tobytes())  # noqa: E731
    out = {"message": u("<u8", [0, U64_NONE, U64_NONE]), "src": u("<u4", [1, U32_NONE, U32_NONE]),
           "dst": u("<u4", [0, U32_NONE, U32_NONE]), "bytes": u("<u8", [100, 2000, 3000]), "band": u("u1", [0, 0, 1]),
           "tenant": u("<u4", [0, 1, 2]), "start_ns": u("<u8", [5, 6, 7]), "tx_end_ns": u("<u8", [50, 60, U64_NONE]),
           "delivered_ns": u("<u8", [90, 100, U64_NONE]), "src_host": u("<u4", [1, 2, 3]), "dst_host": u("<u4", [0, 3, 2])}
    table = _flows_table(out)
    assert table["src"].tolist() == [1, -1, -1] and table["dst"].tolist() == [0, -1, -1]
    assert table["message"].tolist() == [0, -1, -1]
    assert table["src_host"].tolist() == [1, 2, 3] and table["dst_host"].tolist() == [0, 3, 2]
    end = table["end_ns"]
    assert np.ma.getmaskarray(end).tolist() == [False, False, True] and end[:2].tolist() == [90, 100]
    # engine builds without host columns: the ranks' hosts
    del out["src_host"], out["dst_host"]
    out["src"], out["dst"] = u("<u4", [1, 0, 2]), u("<u4", [0, 1, 1])
    table = _flows_table(out, host_of_rank=[4, 5, 6])
    assert table["src_host"].tolist() == [5, 4, 6] and table["dst_host"].tolist() == [4, 5, 5]


def test_tenant_flows_validate_round_trip_and_old_files_read(tmp_path, job_log):
    rng = np.random.default_rng(1)
    log = _with_flows(job_log, _synthetic(rng, 20, unfinished=3))
    flows = log.flows
    assert flows.column("end_ns").null_count == 3 and flows.schema.field("end_ns").nullable
    write_event_log(log, tmp_path / "events.parquet")
    back = read_event_log(tmp_path / "events.parquet")
    assert back.flows.equals(flows)
    # a file written before src_host / dst_host: -1 there, and the FCT analysis takes the ranks' hosts
    (tmp_path / "old").mkdir()
    write_event_log(job_log, tmp_path / "old" / "events.parquet")
    pq.write_table(job_log.flows.drop(["src_host", "dst_host"]), tmp_path / "old" / "flows.parquet")
    back = read_event_log(tmp_path / "old" / "events.parquet")
    assert set(back.flows.column("src_host").to_pylist()) == {-1}
    frame = flow_table(back)
    assert frame["src_host"].tolist() == frame["src"].tolist()  # lenet5 on 2 workers: rank r on host r
    assert frame["ideal_ns"].notna().all() and (frame["slowdown"] == 1.0).all()


def test_the_flows_table_refuses_an_end_with_neither_rank_nor_host(job_log):
    bad = _synthetic(np.random.default_rng(2), 4)
    bad["src_host"] = np.array([0, -1, 2, 3])
    with pytest.raises(TraceError, match=r"flows table: column 'src_host', row 1: src and src_host are both -1"):
        _with_flows(job_log, bad)
    early = _synthetic(np.random.default_rng(2), 4)
    early["end_ns"] = pa.array([0, None, 0, 0], type=pa.int64())
    with pytest.raises(TraceError, match=r"end_ns=0 is before start_ns"):
        _with_flows(job_log, {**early, "start_ns": np.array([5, 5, 5, 5])})


# ------------------------------------------------------------------ definitions


def test_size_classes_at_their_boundaries():
    sizes = [0, 99_999, 100_000, 100_001, 9_999_999, 10_000_000, 10_000_001]
    assert size_classes(sizes).tolist() == ["small", "small", "medium", "medium", "medium", "medium", "large"]


def test_a_lone_flow_at_flow_fidelity_takes_exactly_its_ideal_time(job_log):
    frame = flow_table(job_log)
    assert len(frame) == job_log.flows.num_rows > 0 and frame["finished"].all()
    # lenet5 on two workers: each direction of the ring carries one flow at a time, alone on its links
    assert frame["slowdown"].min() == 1.0 and (frame["slowdown"] >= 1.0).all()
    # by hand: 10 Gbit/s, 10 us: ceil(bytes x 0.8) + 10,000 ns
    expected = [-((-b * 8) // 10) + 10_000 for b in frame["bytes"]]
    assert frame["ideal_ns"].astype(int).tolist() == expected


@pytest.mark.parametrize("routing", ["ecmp", "spray"])
def test_the_cross_leaf_bottleneck_is_the_oversubscribed_fabric(routing):
    # one host per leaf, 2 spines, 4:1: a spine link carries bandwidth / 8 (spray: the two together / 4)
    log = ddlsim.simulate(model="lenet5", workers=2, iterations=1, record_flows=True, network="flow", topology="leaf-spine",
                          hosts_per_leaf=1, spines=2, oversubscription=4, routing=routing).events
    frame = flow_table(log)
    assert frame["slowdown"].min() == 1.0 and (frame["slowdown"] >= 1.0).all()
    rate = 10**10 // (8 if routing == "ecmp" else 4)
    b = int(frame["bytes"].iloc[0])
    assert int(frame["ideal_ns"].iloc[0]) == -((-b * 8 * 10**9) // rate) + 20_000


def test_packet_ideal_time_by_hand_and_a_real_run_meets_it():
    log = ddlsim.simulate(model="lenet5", workers=2, iterations=1, record_flows=True, network="packet").events
    frame = flow_table(log)
    first = frame.iloc[0]
    assert first["bytes"] == 1680
    # 1460 + 220 bytes: frames of 1538 and 220 + 40 + 38 = 298 byte times; store and forward over 2 links at
    # 10 Gbit/s (0.8 ns a byte): the first frame twice, the second once after it: (1538 + 1538 + 298) x 0.8 = 2699.2
    assert first["ideal_ns"] == 2700 + 10_000
    assert first["fct_ns"] == 12_700 and first["slowdown"] == 1.0  # the first flow is alone on an idle path
    assert (frame["slowdown"] >= 1.0).all()
    # the literature's normalisation: W / R + RTT0 = 1836 x 0.8 + 2 x 10,000 + 2 x (1538 + 84) x 0.8 = 24,064
    rtt = flow_table(log, ideal="rtt")
    assert rtt["ideal_ns"].iloc[0] == 24_064


def test_packet_ideal_by_hand_with_ppp_timestamps_and_an_oversubscribed_fabric():
    model = path_model({"fidelity": "packet", "bandwidth": "10Gbps", "latency": "10us", "topology": "leaf-spine",
                        "hosts_per_leaf": 2, "spines": 1, "oversubscription": 4.0,
                        "packet": {"mtu": 1500, "framing": "ppp", "tcp_timestamps": True}})
    # MSS 1448, H 52: 3000 bytes = 1448 + 1448 + 104; frames 1502, 1502, 158 byte times; links 10, 5, 5, 10 Gbit/s.
    # The slowest path through (frame, link): frame 1 over all four links, frame 2 on the slowest (5 Gbit/s),
    # frame 3 on the last link: 1201.6 + 2403.2 + 2403.2 + 1201.6 + 2403.2 + 126.4 = 9739.2 ns; 2 x 10 us
    assert model.ideal_ns(3000, 0, 2) == 9740 + 20_000
    assert model.path(0, 1)[0] == "rack" and model.ideal_ns(3000, 0, 1) == math.ceil((1502 * 3 + 158) * 0.8) + 10_000


def _tandem_ps(frames, rates, frame_bytes):
    """Arrival (ps) of the last frame over links of `rates`, frame by frame: a link sends a frame once it has
    arrived and the link is free (no propagation: it adds the same to every path)."""
    ready = [0] * len(frames)
    for r in rates:
        free = 0
        for j, f in enumerate(frames):
            t = -((-frame_bytes(f) * 8 * 10**12) // r) if isinstance(r, int) else math.ceil(Fraction(frame_bytes(f) * 8 * 10**12) / r)
            free = max(free, ready[j]) + t
            ready[j] = free
    return ready[-1]


def test_packet_ideal_matches_a_frame_by_frame_recursion_on_random_paths():
    rng = np.random.default_rng(7)
    for _ in range(60):
        framing = ["ethernet", "ppp"][rng.integers(2)]
        model = PathModel(fidelity="packet", bandwidth_bps=Fraction(int(rng.choice([10, 25, 40, 100])) * 10**9),
                          latency_ns=int(rng.integers(0, 20_000)), topology="leaf-spine", hosts_per_leaf=2,
                          spines=int(rng.integers(1, 4)), oversubscription=Fraction(int(rng.integers(1, 9)), 2),
                          framing=framing, mtu=int(rng.choice([1500, 9000, 600])), tcp_timestamps=bool(rng.integers(2)))
        size = int(rng.choice([0, 1, 10, int(rng.integers(1, 200_000))]))
        src, dst = 0, int(rng.choice([1, 2, 3]))
        kind, rates, latency = model.path(src, dst)
        header = model.mtu - model.mss
        segments = [model.mss] * (size // model.mss) + ([size % model.mss] if size % model.mss or size == 0 else [])
        last_ps = _tandem_ps(segments, rates, lambda seg: model.frame(seg + header))
        assert model.ideal_ns(size, src, dst) == -((-last_ps) // 1000) + latency, (model, size, dst)


def test_the_vectorised_ideal_times_equal_the_scalar_ones():
    rng = np.random.default_rng(8)
    sizes = np.concatenate([[0, 1, 1459, 1460, 1461, 2920, 3 * 10**9], rng.integers(1, 5 * 10**7, 200)])
    for fidelity in ("flow", "packet"):
        for framing, timestamps in (("ethernet", False), ("ppp", True)):
            model = PathModel(fidelity=fidelity, bandwidth_bps=Fraction(25 * 10**9), latency_ns=3_000, topology="leaf-spine",
                              hosts_per_leaf=4, spines=3, oversubscription=Fraction(3), framing=framing,
                              tcp_timestamps=timestamps, intra_host_bandwidth_bps=Fraction(10**12), intra_host_latency_ns=500)
            for src, dst in ((0, 1), (0, 4), (2, 2)):
                for ideal in ("path", "rtt"):
                    many = model.ideal_ns_many(sizes, src, dst, ideal)
                    assert many.tolist() == [model.ideal_ns(int(b), src, dst, ideal) for b in sizes], (fidelity, framing, src, dst, ideal)


# ------------------------------------------------------------------ summaries


def test_summary_percentiles_match_numpy_on_seeded_random_flows(job_log):
    rng = np.random.default_rng(3)
    log = _with_flows(job_log, _synthetic(rng, 400, unfinished=0))
    frame = flow_table(log, network=STAR_10G)
    summary = fct_summary(frame)
    fct_us = (frame["fct_ns"].astype(float) / 1e3).to_numpy()
    for label in ("small", "medium", "large", "all"):
        mask = np.ones(len(frame), bool) if label == "all" else (frame["size_class"] == label).to_numpy()
        row = summary[(summary.tenant == 1) & (summary.size_class == label)].iloc[0]
        v = np.sort(fct_us[mask])
        assert row["flows"] == row["finished"] == mask.sum() > 0
        assert row["fct_mean_us"] == pytest.approx(v.sum() / len(v), rel=1e-12)
        for name, q in (("median", 50), ("p95", 95), ("p99", 99)):
            h = (len(v) - 1) * q / 100  # linear interpolation between order statistics
            lo = int(math.floor(h))
            expected = v[lo] + (h - lo) * (v[min(lo + 1, len(v) - 1)] - v[lo])
            assert row[f"fct_{name}_us"] == pytest.approx(expected, rel=1e-12)
            assert row[f"fct_{name}_us"] == np.percentile(fct_us[mask], q)
        s = frame["slowdown"].to_numpy()[mask]
        assert row["slowdown_p99"] == pytest.approx(np.percentile(s, 99), rel=1e-12)
        assert row["slowdown_mean"] == pytest.approx(s.mean(), rel=1e-12)


def test_the_window_keeps_flows_starting_inside_it_both_ends_included(job_log):
    flows = {"flow": np.arange(6), "message": np.full(6, -1), "src": np.full(6, -1), "dst": np.full(6, -1),
             "src_host": np.zeros(6, int), "dst_host": np.ones(6, int), "bytes": np.full(6, 1000), "tenant": np.ones(6, int),
             "start_ns": np.array([0, 99, 100, 500, 900, 901]),
             "end_ns": pa.array([10, 200, None, 600, None, 1000], type=pa.int64())}
    log = _with_flows(job_log, flows)
    frame = flow_table(log, network=STAR_10G)
    window = in_window(frame, warmup_ns=100, cooldown_ns=100, run_start_ns=0, run_end_ns=1000)
    assert window["flow"].tolist() == [2, 3, 4] and window.attrs["window_ns"] == (100, 900)
    s = fct_summary(frame, warmup_ns=100, cooldown_ns=100, run_start_ns=0, run_end_ns=1000)
    row = s[(s.tenant == 1) & (s.size_class == "all")].iloc[0]
    assert (row["flows"], row["finished"], row["unfinished"]) == (3, 1, 2)
    assert row["completion_ratio"] == pytest.approx(1 / 3) and row["fct_mean_us"] == pytest.approx(0.1)
    # the run's span by default: from the first row (event log or flow) to the last end or start
    whole = fct_summary(frame)
    assert whole.attrs["window_ns"][0] == 0 and whole.attrs["window_ns"][1] >= 1000
    assert whole[(whole.tenant == 1) & (whole.size_class == "all")]["unfinished"].iloc[0] == 2


def test_summary_rows_per_tenant_and_class_and_quantile_buckets(job_log):
    rng = np.random.default_rng(4)
    a, b = _synthetic(rng, 50, tenant=1, unfinished=5), _synthetic(rng, 30, tenant=2)
    both = {k: (pa.concat_arrays([a[k], b[k]]) if isinstance(a[k], pa.Array) else np.concatenate([a[k], b[k]])) for k in a}
    both["flow"] = np.arange(80)
    log = _with_flows(job_log, both)
    frame = flow_table(log)
    s = fct_summary(frame)
    assert list(zip(s.tenant, s.size_class))[:5] == [(1, "small"), (1, "medium"), (1, "large"), (1, "all"), (2, "small")]
    assert s[s.size_class == "all"].set_index("tenant")["flows"].to_dict() == {1: 50, 2: 30}
    assert s[(s.tenant == 1) & (s.size_class == "all")]["unfinished"].iloc[0] == 5
    per_class = s[(s.tenant == 1) & (s.size_class != "all")]["flows"].sum()
    assert per_class == 50
    q = fct_summary(frame, buckets=4, tenants=[1, 2])
    assert set(q.size_class) == {"q1", "q2", "q3", "q4", "all"}
    pooled = frame[frame.tenant.isin([1, 2])]["bytes"].to_numpy()
    counts = q[q.size_class != "all"].groupby("size_class")["flows"].sum()
    assert counts.sum() == 80 and abs(counts.max() - counts.min()) <= 2
    assert q[q.size_class == "q1"]["max_bytes"].max() <= np.quantile(pooled.astype(float), 0.25)


def test_compare_fct_and_iteration_time(job_log):
    rng = np.random.default_rng(5)
    base = _synthetic(rng, 60)
    slower = dict(base)
    slower["end_ns"] = pa.array(np.asarray(base["start_ns"]) + 2 * (np.asarray(base["end_ns"]) - np.asarray(base["start_ns"])))
    alone, shared = _with_flows(job_log, base), _with_flows(job_log, slower)
    table = compare_fct(alone, shared, names=("alone", "shared"))
    assert set(table.tenant) == {1}  # the background tenants by default
    row = table[table.size_class == "all"].iloc[0]
    assert row["flows_a"] == row["flows_b"] == 60
    for stat in ("fct_mean_us", "fct_median_us", "fct_p95_us", "fct_p99_us", "slowdown_mean", "slowdown_p99"):
        assert row[f"{stat}_change"] == pytest.approx(1.0)
    q = compare_fct(alone, shared, buckets=3)
    assert list(q.size_class) == ["q1", "q2", "q3", "all"] and q["flows_a"].tolist() == q["flows_b"].tolist()
    assert q["flows_a"].iloc[:3].sum() == 60 and q["fct_p95_us_change"].to_numpy() == pytest.approx([1.0] * 4)
    slow_net = ddlsim.simulate(model="lenet5", workers=2, iterations=2, record_flows=True, network="flow",
                               bandwidth="1Gbps").events
    t = compare_iteration_time(slow_net, job_log).iloc[0]
    assert t["with_s"] == Analysis(slow_net).headline()["iteration_time_s"]
    assert t["without_s"] == Analysis(job_log).headline()["iteration_time_s"]
    assert t["change"] == pytest.approx(t["with_s"] / t["without_s"] - 1) and t["change"] > 0
    parts = interaction(shared, job_alone=job_log, tenants_alone=alone)
    assert set(parts) == {"fct", "job", "tenants"} and parts["tenants"].attrs["names"] == ("tenants alone", "with the job")


# ------------------------------------------------------------------ the engine output, end to end


@pytest.fixture
def tenant_engine(monkeypatch):
    """The real engine with two rows appended as the contract shapes a background tenant's flows: hosts 2 and 3
    (beyond the ranks' hosts), src / dst u32::MAX, message u64::MAX, one unfinished (delivered u64::MAX)."""
    real = _core.simulate_training_json

    def run(training, network, detail, progress=None):
        out = real(training, network, detail, progress)
        f = out["flows"]
        col = {k: np.frombuffer(raw, dtype=np.dtype(dtype)) for k, (dtype, raw) in f.items()}
        n = len(col["message"])
        extra = {"message": [U64_NONE, U64_NONE], "src": [U32_NONE] * 2, "dst": [U32_NONE] * 2, "bytes": [50_000, 20_000_000],
                 "band": [0, 0], "tenant": [1, 1], "start_ns": [1000, 2000], "tx_end_ns": [41_000, U64_NONE],
                 "delivered_ns": [51_000 + 1000, U64_NONE]}
        for k, v in col.items():
            values = np.concatenate([v, np.asarray(extra.get(k, [0, 0]), dtype=v.dtype)])
            f[k] = (v.dtype.str, values.tobytes())
        hosts = np.concatenate([np.arange(n) % 2, [2, 3]]).astype("<u4")
        f["src_host"], f["dst_host"] = ("<u4", hosts.tobytes()), ("<u4", ((hosts + 1) % 4).astype("<u4").tobytes())
        return out

    monkeypatch.setattr(_core, "simulate_training_json", run)


def test_tenant_flows_from_the_engine_through_simulate_and_analyze(tenant_engine, tmp_path):
    r = ddlsim.simulate(model="lenet5", workers=2, iterations=2, record_flows=True, network="flow")
    r.save(tmp_path / "run")
    frame = flow_table(tmp_path / "run" / "events.parquet")
    tenant = frame[frame.tenant == 1]
    assert tenant["src"].tolist() == [-1, -1] and tenant["message"].tolist() == [-1, -1]
    assert tenant["src_host"].tolist() == [2, 3] and tenant["finished"].tolist() == [True, False]
    assert tenant["fct_ns"].iloc[0] == 51_000 and tenant["ideal_ns"].iloc[0] == 40_000 + 10_000
    assert tenant["slowdown"].iloc[0] == pytest.approx(51_000 / 50_000)
    result = CliRunner().invoke(app, ["analyze", str(tmp_path / "run" / "events.parquet"), "--out",
                                                 str(tmp_path / "a"), "--json"])
    assert result.exit_code == 0, result.output
    headline = json.loads(result.output)["headline"]
    assert headline["fct"]["tenants"]["1"]["all"] == {"flows": 2, "unfinished": 1, "fct_mean_us": 51.0, "fct_p99_us": 51.0,
                                                      "slowdown_mean": 1.02}
    summary = pd.read_csv(tmp_path / "a" / "fct_summary.csv")
    assert summary[(summary.tenant == 1) & (summary.size_class == "large")]["unfinished"].iloc[0] == 1
    page = (tmp_path / "a" / "report.html").read_text()
    assert "<section id='fct'><h2>Flow completion times</h2>" in page and "tenant 1" in page
    for name in ("fct_cdf.svg", "fct_slowdown.svg", "fct_cdf.png", "fct_slowdown.png", "fct_flows.parquet"):
        assert (tmp_path / "a" / name).stat().st_size > 0
    again = CliRunner().invoke(app, ["analyze", str(tmp_path / "run" / "events.parquet"), "--out", str(tmp_path / "b")])
    assert again.exit_code == 0
    for name in ("fct_cdf.svg", "fct_slowdown.svg", "fct_summary.csv", "report.html"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    # streamed, the flows table is read beside the events file
    streamed = open_analysis(tmp_path / "run" / "events.parquet", stream=True)
    assert streamed.flow_completion()["tenant"].tolist() == frame["tenant"].tolist()


def test_analyze_window_options_and_their_errors(job_log, tmp_path):
    write_event_log(job_log, tmp_path / "events.parquet")
    runner = CliRunner()
    result = runner.invoke(app, ["analyze", str(tmp_path / "events.parquet"), "--json", "--warmup", "100us",
                                            "--cooldown", "50us"])
    assert result.exit_code == 0, result.output
    fct = json.loads(result.output)["headline"]["fct"]
    first, last = fct["window_ns"]
    frame = flow_table(job_log)
    assert first == frame.attrs["run_start_ns"] + 100_000 and last == frame.attrs["run_end_ns"] - 50_000
    inside = ((frame.start_ns >= first) & (frame.start_ns <= last)).sum()
    assert fct["tenants"]["0"]["all"]["flows"] == inside < len(frame)
    bad = forked_cli.run(["analyze", str(tmp_path / "events.parquet"), "--warmup", "soon", "--out", str(tmp_path / "a")])
    assert bad.returncode == 2 and "--warmup / --cooldown" in bad.stderr and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and not (tmp_path / "a").exists()


def test_a_log_without_flows_has_no_fct_section(tmp_path):
    log = ddlsim.simulate(model="lenet5", workers=2, iterations=1).events
    assert flow_table(log).empty and "fct" not in Analysis(log).headline()


def test_analyze_compare_puts_both_runs_fct_side_by_side(job_log, tmp_path):
    slow = ddlsim.simulate(model="lenet5", workers=2, iterations=2, record_flows=True, network="flow", bandwidth="1Gbps").events
    for name, log in (("fast", job_log), ("slow", slow)):
        (tmp_path / name).mkdir()
        write_event_log(log, tmp_path / name / "events.parquet")
    result = CliRunner().invoke(app, ["analyze", str(tmp_path / "fast" / "events.parquet"), "--compare",
                                      str(tmp_path / "slow" / "events.parquet"), "--out", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "a" / "fct_compare.csv")
    row = table[(table.tenant == 0) & (table.size_class == "all")].iloc[0]
    assert row["flows_a"] == row["flows_b"] == job_log.flows.num_rows
    fast, slow_flows = flow_table(job_log), flow_table(slow)
    assert row["fct_mean_us_a"] == pytest.approx(fast["fct_ns"].astype(float).mean() / 1e3)
    assert row["fct_mean_us_change"] == pytest.approx(slow_flows["fct_ns"].astype(float).mean() / fast["fct_ns"].astype(float).mean() - 1)
    assert "FCT, a = " in (tmp_path / "a" / "report.html").read_text()


def test_without_a_readable_network_fcts_stay_and_slowdowns_are_nan_with_a_note(job_log):
    log = job_log.replace(metadata={**job_log.metadata, "scenario": {"network": {"bandwidth": "fast"}}})
    frame = flow_table(log)
    assert frame["fct_ns"].notna().all() and frame["slowdown"].isna().all() and frame["ideal_ns"].isna().all()
    assert "pass network=" in frame.attrs["note"]
    given = flow_table(log, network=STAR_10G)
    assert (given["slowdown"] == 1.0).all()
    with pytest.raises(ValueError):
        flow_table(log, network={"bandwidth": "fast"})
