"""write_chrome_trace against the Trace Event Format's rules, on simulated ring and PS logs.

Rules checked (Trace Event Format, the JSON format Perfetto and chrome://tracing read):
complete events ("X") carry name, ph, ts, dur, pid, tid with numeric ts / dur >= 0; slices of one
thread nest (no partial overlap; times compared in whole nanoseconds, as Perfetto reads them); "B"/"E" pairs balance per thread; a flow start ("s") lies inside a
slice of its thread, and a flow end ("f") with "bp": "e" inside a slice of its thread (its enclosing
slice); each flow id has one start and one end, the start no later than the end; metadata ("M")
events are process_name / process_sort_index / thread_name / thread_sort_index with the args each needs.
"""

import json
import numbers

import pytest

import ddlsim
from ddlsim.trace import write_chrome_trace

METADATA_ARGS = {"process_name": "name", "process_sort_index": "sort_index",
                 "thread_name": "name", "thread_sort_index": "sort_index"}


@pytest.fixture(scope="module", params=["ring", "ps"])
def trace(request, tmp_path_factory):
    if request.param == "ring":
        log = ddlsim.simulate(model="resnet50", workers=4, strategy="ring", iterations=2).events
    else:
        log = ddlsim.simulate(model="resnet50", workers=2, strategy="ps", servers=2, iterations=2).events
    path = tmp_path_factory.mktemp("chrome") / "trace.json"
    write_chrome_trace(log, path)
    return json.loads(path.read_text())


def is_number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def test_every_event_has_a_known_phase_and_numeric_time(trace):
    for event in trace["traceEvents"]:
        assert event["ph"] in ("X", "B", "E", "s", "f", "M"), event
        assert isinstance(event["pid"], int)
        if event["ph"] != "M":
            assert is_number(event["ts"]) and isinstance(event["tid"], int) and isinstance(event["name"], str), event


def test_complete_events(trace):
    for event in (e for e in trace["traceEvents"] if e["ph"] == "X"):
        assert {"name", "ts", "dur", "pid", "tid"} <= set(event)
        assert is_number(event["dur"]) and event["dur"] >= 0


def ns(microseconds):
    """As Perfetto's JSON importer reads a time: microseconds to whole nanoseconds."""
    return round(microseconds * 1000)


def slices_by_thread(trace):
    out = {}
    for event in trace["traceEvents"]:
        if event["ph"] == "X":
            out.setdefault((event["pid"], event["tid"]), []).append((ns(event["ts"]), ns(event["ts"]) + ns(event["dur"])))
    return out


def test_slices_of_a_thread_nest(trace):
    for thread, slices in slices_by_thread(trace).items():
        stack = []
        for start, end in sorted(slices, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], (thread, start, end, stack[-1])
            stack.append(end)


def test_begin_end_pairs_balance(trace):
    depth = {}
    for event in sorted((e for e in trace["traceEvents"] if e["ph"] in "BE"), key=lambda e: e["ts"]):
        key = (event["pid"], event["tid"])
        depth[key] = depth.get(key, 0) + (1 if event["ph"] == "B" else -1)
        assert depth[key] >= 0
    assert all(value == 0 for value in depth.values())


def test_flow_events_bind_to_enclosing_slices(trace):
    slices = slices_by_thread(trace)
    flows = {}
    for event in (e for e in trace["traceEvents"] if e["ph"] in ("s", "f")):
        assert {"id", "name", "cat", "ts", "pid", "tid"} <= set(event)
        flows.setdefault(event["id"], []).append(event)
        if event["ph"] == "f":
            assert event.get("bp") == "e"  # binds to the enclosing slice, not the next one
        thread = slices.get((event["pid"], event["tid"]), [])
        assert any(start <= ns(event["ts"]) <= end for start, end in thread), event
    assert flows
    for events in flows.values():
        assert sorted(e["ph"] for e in events) == ["f", "s"]
        start = next(e for e in events if e["ph"] == "s")
        end = next(e for e in events if e["ph"] == "f")
        assert start["ts"] <= end["ts"]


def test_metadata_events(trace):
    named_threads = set()
    for event in (e for e in trace["traceEvents"] if e["ph"] == "M"):
        assert event["name"] in METADATA_ARGS
        assert METADATA_ARGS[event["name"]] in event["args"]
        if event["name"].startswith("thread"):
            assert isinstance(event["tid"], int)
            named_threads.add((event["pid"], event["tid"]))
    assert set(slices_by_thread(trace)) <= named_threads
