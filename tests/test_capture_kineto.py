"""A real PyTorch-profiler (Kineto) trace, recorded here: a 2-process gloo DDP job
(tests/kineto_ddp_job.py, CPU activities), imported with read_kineto, converted
by the CLI, and exported again for Holistic Trace Analysis."""

import json
import os
import subprocess
import sys
from pathlib import Path

import forked_cli
import pytest

from ddlsim.capture.launch import free_port
from ddlsim.trace import read_kineto, write_kineto
from ddlsim.trace.schema import validate_event_log

JOB = Path(__file__).with_name("kineto_ddp_job.py")
STEPS = (1, 2, 3)  # ProfilerStep#1..#3 (step 0 is the profiler's warm-up)


@pytest.fixture(scope="module")
def real_trace(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("kineto_real")
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, str(JOB), str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "RANK": str(r), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                   "MASTER_PORT": port, "OMP_NUM_THREADS": "1"})
             for r in range(2)]
    logs = [p.communicate(timeout=180)[0] for p in procs]
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-3000:]
    return out


def _raw(trace_dir, rank):
    return json.loads((trace_dir / f"rank{rank}.json").read_text())


def test_the_real_trace_imports_as_a_valid_log(real_trace):
    log = read_kineto(real_trace)
    validate_event_log(log, source="imported real Kineto trace", check_causality=False)
    frame = log.to_pandas()
    assert log.metadata["source"] == "kineto" and sorted(frame["rank"].unique()) == [0, 1]
    for rank in (0, 1):
        raw = _raw(real_trace, rank)
        assert raw["distributedInfo"]["backend"] == "gloo" and raw["distributedInfo"]["rank"] == rank
        events = [e for e in raw["traceEvents"] if e.get("ph") == "X"]
        steps = {e["name"]: (e["ts"] * 1000, (e["ts"] + e["dur"]) * 1000) for e in events if e["name"].startswith("ProfilerStep#")}
        assert sorted(steps) == [f"ProfilerStep#{i}" for i in STEPS]
        window = (min(s for s, _ in steps.values()), max(e for _, e in steps.values()))
        rows = frame[frame["rank"] == rank]
        compute, coll = rows[rows["kind"] == "compute"], rows[rows["kind"] == "collective"]
        # compute: the main thread's outermost ops, DDP's forward and the autograd functions among them
        assert len(compute) >= 10 and compute["op"].eq("DistributedDataParallel.forward").sum() == len(STEPS)
        assert compute["op"].str.startswith("autograd::engine::evaluate_function").any()
        main_tid = next(e["tid"] for e in events if e["name"] == "ProfilerStep#1")
        main = compute[compute["stream"] == f"cpu {main_tid}"].sort_values("start_ns")
        assert len(main) == len(compute) and (main["start_ns"].values[1:] >= main["end_ns"].values[:-1]).all()
        # communication: what gloo ran on its pt_gloo_runloop threads, one all-reduce of DDP's one bucket per step
        gloo = [e for e in events if e["name"].startswith("gloo:")]
        assert sorted(coll["op"]) == sorted(e["name"] for e in gloo) and "gloo:all_reduce" in set(coll["op"])
        reduces = coll[coll["op"] == "gloo:all_reduce"]
        assert sorted(reduces["iteration"]) == list(STEPS) and set(reduces["coll_type"]) == {"allreduce"}
        assert set(coll["stream"]).isdisjoint(compute["stream"])  # other threads than the main one
        # the c10d:: ops that enqueued them are in the raw trace, but are not collectives of their own
        assert sum(e["name"] == "c10d::allreduce_" for e in events) == len(STEPS)
        assert not coll["op"].str.startswith("c10d::").any()
        # times: every row starts inside the profiled window, in the iteration whose step holds its start; a gloo
        # thread's op may be closed a little after the main thread left the last step (seen under load), so ends get
        # 10 ms of slack: a unit error (us read as ns or the reverse) would be off by a factor of 1000
        assert (rows["start_ns"] >= window[0] - 1).all() and (rows["start_ns"] <= window[1]).all()
        assert (rows["end_ns"] <= window[1] + 10_000_000).all()
        assert (rows["end_ns"] >= rows["start_ns"]).all()
        for row in reduces.itertuples():
            start, end = steps[f"ProfilerStep#{row.iteration}"]
            assert start - 1 <= row.start_ns < end


def test_the_cli_converts_the_real_trace(real_trace, tmp_path):
    target = tmp_path / "events.parquet"
    done = forked_cli.run(["convert", str(real_trace), str(target), "--from", "kineto"], timeout=120)
    assert done.returncode == 0, done.stderr
    import pyarrow.parquet as pq

    assert pq.read_table(target).num_rows == len(read_kineto(real_trace).to_pandas())


def test_hta_loads_our_export_of_the_imported_trace(real_trace, tmp_path, monkeypatch):
    trace_analysis = pytest.importorskip("hta.trace_analysis", reason="HolisticTraceAnalysis is not installed "
                                         "(pip install -e '.[interop]'); the HTA test needs it")
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    log = read_kineto(real_trace)
    write_kineto(log, tmp_path)
    analysis = trace_analysis.TraceAnalysis(trace_dir=str(tmp_path), include_last_profiler_step=True)
    breakdown = analysis.get_temporal_breakdown(visualize=False).set_index("rank")
    frame = log.to_pandas()
    assert sorted(breakdown.index) == [0, 1]
    for rank in (0, 1):
        compute = frame[(frame["rank"] == rank) & (frame["kind"] == "compute")]
        # compute rows of one thread do not overlap, so HTA's compute time is their plain sum
        expected_us = (compute["end_ns"] - compute["start_ns"]).sum() / 1000
        assert breakdown.loc[rank, "compute_time(us)"] == pytest.approx(expected_us, rel=1e-6, abs=0.01)
        # HTA's non-compute time: communication not hidden behind compute. Whether a real gloo all-reduce
        # sticks out of the main thread's compute depends on the machine's load, so the oracle is the log's
        # own exposure (collective time outside every compute interval), computed here independently.
        coll = frame[(frame["rank"] == rank) & (frame["kind"] == "collective")]
        spans = sorted(zip(compute["start_ns"], compute["end_ns"]))
        exposed_ns = 0
        for a, b in zip(coll["start_ns"], coll["end_ns"]):
            covered = sum(max(0, min(b, e) - max(a, s)) for s, e in spans)
            exposed_ns += (b - a) - covered
        if exposed_ns > 1_000_000:  # over a millisecond of all-reduce outside compute
            assert breakdown.loc[rank, "non_compute_time(us)"] > 0
        assert breakdown.loc[rank, "non_compute_time(us)"] >= 0


def test_gloo_enqueue_ops_are_not_collectives_of_their_own(tmp_path):
    """Reader bug found on the real trace: with gloo, torch 2.x records c10d::allreduce_ on the calling
    thread (it only enqueues, returning at once or after a while) and gloo:all_reduce on a gloo thread;
    the reader made both collective rows, two all-reduces for one."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 9, "tid": 9, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: AccumulateGrad", "pid": 9, "tid": 9, "ts": 10, "dur": 30},
        {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 9, "tid": 9, "ts": 20, "dur": 15},
        {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 9, "tid": 12, "ts": 22, "dur": 50},
    ]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"distributedInfo": {"rank": 0}, "traceEvents": events}))
    frame = read_kineto(path).to_pandas()
    got = [tuple(r) for r in frame[["kind", "op", "stream", "start_ns", "end_ns"]].itertuples(index=False)]
    assert got == [("compute", "autograd::engine::evaluate_function: AccumulateGrad", "cpu 9", 10_000, 40_000),
                   ("collective", "gloo:all_reduce", "cpu 12", 22_000, 72_000)]
    # without gloo work in the trace (another backend's CPU collectives), c10d:: ops stay collectives
    path.write_text(json.dumps({"distributedInfo": {"rank": 0}, "traceEvents": events[:3]}))
    assert list(read_kineto(path).to_pandas()["kind"]) == ["compute", "collective"]


def test_hta_loads_a_small_export(tmp_path, monkeypatch):
    """Export bug found on the real trace: HTA 0.5 downcast our correlation ids (1..n) to int8 when a rank had
    under 128 rows, then failed to store event indexes in that column ("Invalid value ... for dtype 'int8'")."""
    trace_analysis = pytest.importorskip("hta.trace_analysis", reason="HolisticTraceAnalysis is not installed "
                                         "(pip install -e '.[interop]'); the HTA test needs it")
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 9, "tid": 9, "ts": 0, "dur": 1000}]
    events += [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "pid": 9, "tid": 9, "ts": 20 * i, "dur": 10} for i in range(40)]
    events += [{"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 9, "tid": 12, "ts": 900, "dur": 50}]
    source = tmp_path / "in"
    source.mkdir()
    for rank in (0, 1):
        (source / f"rank{rank}.json").write_text(json.dumps({"distributedInfo": {"rank": rank}, "traceEvents": events}))
    write_kineto(read_kineto(source), tmp_path / "out")
    analysis = trace_analysis.TraceAnalysis(trace_dir=str(tmp_path / "out"), include_last_profiler_step=True)
    breakdown = analysis.get_temporal_breakdown(visualize=False).set_index("rank")
    assert list(breakdown["compute_time(us)"]) == pytest.approx([400.0, 400.0])
    assert list(breakdown["non_compute_time(us)"]) == pytest.approx([50.0, 50.0])
