"""Kineto (PyTorch profiler) JSON: layout of the export, Holistic Trace Analysis on it, import.

The import is tested here on a fixture written by hand after the
profiler's layout (tests/data/kineto_fixture) and on our export; on a trace
recorded by torch in tests/test_capture_kineto.py.
"""

import json
import math
from pathlib import Path

import pytest

import ddlsim
from ddlsim.analyze.breakdown import rank_iteration_table
from ddlsim.errors import TraceError
from ddlsim.trace import read_kineto, write_kineto

FIXTURE = Path(__file__).parent / "data" / "kineto_fixture"


@pytest.fixture(scope="module")
def ring_log():
    return ddlsim.simulate(model="resnet50", workers=4, strategy="ring", iterations=3).events


@pytest.fixture(scope="module")
def ps_log():
    return ddlsim.simulate(model="resnet50", workers=2, strategy="ps", servers=1, iterations=3).events


def union(intervals):
    """Sorted disjoint union of (start, end) pairs, by a plain sweep."""
    out = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


def length(intervals):
    return sum(end - start for start, end in intervals)


def intersection_length(a, b):
    total = 0
    for start, end in a:
        for s, e in b:
            total += max(0, min(end, e) - max(start, s))
    return total


def exported_intervals(log):
    """Per rank: the compute and communication kernels our export writes, (ts, ts + dur) in microseconds."""
    frame = log.to_pandas(["rank", "kind", "collective", "start_ns", "end_ns"])
    out = {}
    for rank, rows in frame.groupby("rank"):
        spans = set(rows.loc[rows["kind"] == "collective", "collective"])
        comm_rows = rows[(rows["kind"] == "collective") | (rows["kind"].isin(["send", "recv"]) & ~rows["collective"].isin(spans))]
        comp_rows = rows[rows["kind"] == "compute"]

        def us(rows_):
            return [(s / 1000.0, s / 1000.0 + (e - s) / 1000.0) for s, e in zip(rows_["start_ns"], rows_["end_ns"])]
        out[int(rank)] = us(comp_rows), us(comm_rows)
    return out


def hta(trace_dir, monkeypatch, rounding):
    trace_analysis = pytest.importorskip("hta.trace_analysis", reason="HolisticTraceAnalysis is not installed "
                                         "(pip install -e '.[interop]'); the HTA test needs it")
    if not rounding:
        monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    analysis = trace_analysis.TraceAnalysis(trace_dir=str(trace_dir), include_last_profiler_step=True)
    breakdown = analysis.get_temporal_breakdown(visualize=False).set_index("rank")
    overlap = analysis.get_comm_comp_overlap(visualize=False).set_index("rank")
    return breakdown, overlap


@pytest.mark.parametrize("which", ["ring_log", "ps_log"])
@pytest.mark.parametrize("rounding", [False, True])
def test_hta_reads_our_export_and_agrees(which, rounding, request, tmp_path, monkeypatch):
    """HTA per rank: compute_time = union of compute kernels; non_compute_time = kernel union minus
    compute = communication not hidden behind compute; idle = first-to-last kernel span minus the kernel
    union; overlap ratio = (compute n communication) / communication. Our analysis sums the same unions
    over iteration windows that tile the run, so without HTA's rounding they are equal; with it every kernel
    is cut to whole microseconds (start rounded up, end down: pytorch/pytorch#122425), so each kernel
    moves each sum by less than 2 us (a kernel inside one microsecond even counts -1 us)."""
    log = request.getfixturevalue(which)
    write_kineto(log, tmp_path)
    breakdown, overlap = hta(tmp_path, monkeypatch, rounding)
    table = rank_iteration_table(log)  # what ddlsim.analyze.Analysis(log).iterations() averages
    sums = table.groupby("rank")[["compute_ns", "communication_ns", "overlap_ns", "exposed_communication_ns"]].sum()
    for rank, (compute, communication) in exported_intervals(log).items():
        slack = 2.0 * (len(compute) + len(communication)) if rounding else 1e-6
        comp, comm, every = union(compute), union(communication), union(compute + communication)
        expected = {
            "compute_time(us)": length(comp),
            "non_compute_time(us)": length(every) - length(comp),
            "idle_time(us)": (every[-1][1] - every[0][0]) - length(every),
        }
        got = breakdown.loc[rank]
        for column, value in expected.items():
            assert got[column] == pytest.approx(value, abs=slack), (rank, column)
        if comm and not rounding:
            # HTA returns the percentage rounded to 2 decimals
            assert overlap.loc[rank, "comp_comm_overlap_pctg"] == pytest.approx(
                round(100 * intersection_length(comp, comm) / length(comm), 2), abs=0.0100001)
        elif comm:
            assert overlap.loc[rank, "comp_comm_overlap_pctg"] == pytest.approx(
                100 * intersection_length(comp, comm) / length(comm), abs=100 * 2 * slack / length(comm) + 0.01)
        if not rounding:  # and our own analysis says the same
            assert got["compute_time(us)"] == pytest.approx(sums.loc[rank, "compute_ns"] / 1000, abs=1e-6)
            assert got["non_compute_time(us)"] == pytest.approx(sums.loc[rank, "exposed_communication_ns"] / 1000, abs=1e-6)
            if sums.loc[rank, "communication_ns"]:
                assert overlap.loc[rank, "comp_comm_overlap_pctg"] == pytest.approx(
                    100 * sums.loc[rank, "overlap_ns"] / sums.loc[rank, "communication_ns"], abs=0.005001)


def test_export_layout(ps_log, tmp_path):
    paths = write_kineto(ps_log, tmp_path)
    assert [p.name for p in paths] == ["rank0.json", "rank1.json", "rank2.json"]
    for rank, path in enumerate(paths):
        text = path.read_text()
        assert f'"rank": {rank}' in text  # HTA finds the rank with the pattern '"rank":\s+(\d+)'
        trace = json.loads(text)
        assert trace["distributedInfo"] == {"backend": "nccl", "rank": rank, "world_size": 3}
        events = trace["traceEvents"]
        kernels = [e for e in events if e.get("cat") == "kernel"]
        runtime = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
        cpu_ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op"}
        flows = {(e["ph"], e["id"]): e for e in events if e.get("cat") == "ac2g"}
        assert kernels and len(runtime) == len(kernels) == len(cpu_ops)
        for kernel in kernels:
            args = kernel["args"]
            assert (kernel["pid"], kernel["tid"]) == (args["device"], args["stream"])
            launch = runtime[args["correlation"]]
            assert launch["name"] == "cudaLaunchKernel" and launch["ts"] <= kernel["ts"]
            assert cpu_ops[args["External id"]]["ts"] == launch["ts"]
            start, finish = flows[("s", args["correlation"])], flows[("f", args["correlation"])]
            assert (start["pid"], start["tid"], start["ts"]) == (launch["pid"], launch["tid"], launch["ts"])
            assert (finish["pid"], finish["tid"], finish["ts"], finish["bp"]) == (kernel["pid"], kernel["tid"], kernel["ts"], "e")
            is_comm = kernel["name"].startswith("nccl")
            assert is_comm == (args["ddlsim"]["kind"] != "compute")
        by_stream = {}
        for kernel in kernels:  # a stream runs one kernel at a time
            by_stream.setdefault(kernel["tid"], []).append((kernel["args"]["ddlsim"]["start_ns"], kernel["args"]["ddlsim"]["end_ns"]))
        for spans in by_stream.values():
            spans.sort()
            assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
        steps = [e for e in events if e["name"].startswith("ProfilerStep#")]
        assert [e["name"] for e in steps] == ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]


def test_our_export_reads_back_exactly(ps_log, tmp_path):
    write_kineto(ps_log, tmp_path)
    back = read_kineto(tmp_path)
    columns = [c for c in back.column_names if c != "deps"]
    expected = ps_log.to_pandas().query("kind not in ['barrier', 'marker']").sort_values("id").reset_index(drop=True)
    got = back.to_pandas().sort_values("id").reset_index(drop=True)
    assert got[columns].equals(expected[columns])
    barrier_ids = set(ps_log.to_pandas().query("kind == 'barrier'")["id"])
    for new, old in zip(got["deps"], expected["deps"]):  # deps on the left-out barriers go to what they waited for
        assert {d for d in old if d not in barrier_ids} <= set(new) and not barrier_ids & set(new)


def test_fixture_in_the_profilers_layout():
    log = read_kineto(FIXTURE)
    frame = log.to_pandas()
    got = [tuple(r) for r in frame[["rank", "iteration", "kind", "op", "stream", "device", "coll_type", "start_ns", "end_ns"]]
           .itertuples(index=False)]
    gemm = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3"
    nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
    per_rank = [
        (5, "compute", gemm, "stream 7", "cuda:0", "", 1_030_000, 1_130_250),
        (5, "collective", nccl, "stream 20", "cuda:0", "allreduce", 1_150_000, 1_450_000),
        (5, "compute", "Memcpy DtoH (Device -> Pageable)", "stream 7", "cuda:0", "", 1_460_000, 1_468_000),
        # aten::addmm is inside aten::linear; nccl:all_reduce launched a kernel; aten::zero_ took no time
        (5, "compute", "aten::linear", "cpu 4242", "", "", 1_010_000, 1_050_000),
        (6, "collective", "gloo:all_reduce", "cpu 4243", "", "allreduce", 1_510_000, 1_710_000),
    ]
    assert got == [(0, *r) for r in per_rank] + [(1, *r) for r in per_rank]
    assert frame["deps"].isna().all() and frame["ready_ns"].isna().all()
    assert log.metadata["source"] == "kineto"


def _write(tmp_path, text, name="rank0.json"):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, expected", [
    ('{"traceEvents": [', ":1:18: not valid JSON"),
    ('[1, 2]', "a Kineto trace is a JSON object with a 'traceEvents' list"),
    ('{"traceEvents": [{"ph": "X", "name": "k", "ts": "10", "dur": 1}]}', "traceEvents[0]: 'ts' is '10', expected a number"),
    ('{"traceEvents": [{"ph": "X", "name": "k", "ts": 1}, 5]}', "traceEvents[0]: 'dur' is None"),
    ('{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 1}, 5]}', "traceEvents[1]: is int, expected an event object"),
    ('{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": -2}]}', "traceEvents[0]: 'dur' is -2"),
    ('{"traceEvents": [{"ph": "X", "ts": 1, "dur": 2}]}', "traceEvents[0]: complete event without a 'name'"),
    ('{"distributedInfo": {"rank": -1}, "traceEvents": []}', "distributedInfo.rank is -1"),
])
def test_malformed_traces_name_the_file_and_event(tmp_path, text, expected):
    path = _write(tmp_path, text)
    with pytest.raises(TraceError) as caught:
        read_kineto(path)
    assert str(caught.value).startswith(str(path)) and expected in str(caught.value), str(caught.value)


def test_two_files_of_one_rank_and_a_partial_export(tmp_path, ps_log):
    _write(tmp_path, '{"distributedInfo": {"rank": 3}, "traceEvents": []}', "a.json")
    _write(tmp_path, '{"distributedInfo": {"rank": 3}, "traceEvents": []}', "b.json")
    with pytest.raises(TraceError, match="b.json: rank 3 again"):
        read_kineto(tmp_path)
    out = tmp_path / "export"
    write_kineto(ps_log, out)
    with pytest.raises(TraceError, match="whose trace was not given; pass the traces of all ranks"):
        read_kineto(out / "rank2.json")
