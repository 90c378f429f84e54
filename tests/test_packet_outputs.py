"""The packet-level outputs on the Python side (issue 17), from engine output
shaped as the contract states it: the flows table's retransmits, timeouts,
drops and ECN marks (0 when reading files written before them), the queues
table, the port and network counters in the metadata, the summary and the
terminal, queue occupancy as Perfetto counter tracks and in the analysis.

The engine of this build may not have the packet model yet: `fake_engine`
runs the real engine at flow level and adds the packet-level keys, so that
every step after the engine is exercised now."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import ddlsim
from ddlsim import _core
from ddlsim.simulation.bridge import network_stats, queues_table
from ddlsim.trace import read_event_log
from ddlsim.trace.chrome import queue_counter_events, to_chrome_trace
from ddlsim.trace.schema import validate_event_log

from test_packet_config import CONTRACT_DEFAULTS

# Two workers on a star: links 0..3 (each host's NIC towards the switch, the switch's port to each host).
PORT_NAMES = ["host 0 -> star", "star -> host 0", "host 1 -> star", "star -> host 1"]
PORTS = {"port": ("<i4", np.arange(4, dtype="<i4").tobytes()), "node": ("<i4", np.array([0, 2, 1, 2], "<i4").tobytes()),
         "name": PORT_NAMES,
         "packets": ("<u8", np.array([100, 90, 80, 70], "<u8").tobytes()),
         "bytes": ("<u8", np.array([153800, 138420, 123040, 107660], "<u8").tobytes()),
         "drops": ("<u8", np.array([0, 3, 0, 1], "<u8").tobytes()),
         "ecn_marks": ("<u8", np.array([0, 0, 5, 0], "<u8").tobytes()),
         "max_packets": ("<u8", np.array([10, 20, 30, 40], "<u8").tobytes()),
         "max_bytes": ("<u8", np.array([15380, 30760, 46140, 61520], "<u8").tobytes())}
NETWORK = {"packets_forwarded": 340, "drops": 4, "ecn_marks": 5, "retransmits": 4, "timeouts": 1, "queues_truncated": False}
# (time_ns, node, port, band, bytes, packets)
QUEUE_ROWS = [(0, 0, 0, 0, 1538, 1), (1000, 2, 1, 0, 3076, 2), (1500, 2, 1, 1, 1538, 1), (3000, 2, 1, 0, 0, 0),
              (4000, 0, 0, 0, 0, 0)]
QUEUE_TYPES = {"time_ns": "<i8", "node": "<i4", "port": "<i4", "band": "<i4", "bytes": "<i8", "packets": "<i8"}


def _queues():
    columns = list(zip(*QUEUE_ROWS))
    return {name: (dtype, np.asarray(values, dtype=dtype).tobytes()) for (name, dtype), values in zip(QUEUE_TYPES.items(), columns)}


def _flow_counters(n):
    k = np.arange(n, dtype="<u8")
    return {"retransmits": k % 3, "timeouts": k % 2, "drops": k % 5, "ecn_marks": k % 7}


@pytest.fixture
def fake_engine(monkeypatch):
    """The real engine at flow level, its output extended as the packet model's would be."""
    real = _core.simulate_training_json
    seen = []

    def run(training, network, detail, progress=None):
        net = json.loads(network)
        seen.append(net)
        assert net["fidelity"] == "packet" and set(net["packet"]) == set(CONTRACT_DEFAULTS)
        net["fidelity"] = "flow"
        del net["packet"]
        out = real(training, json.dumps(net), detail, progress)
        n = len(np.frombuffer(out["flows"]["message"][1], dtype="<u8"))
        out["flows"].update({name: ("<u8", values.tobytes()) for name, values in _flow_counters(n).items()})
        out["queues"] = _queues()
        out["ports"] = dict(PORTS)
        out["network"] = dict(NETWORK)
        return out

    monkeypatch.setattr(_core, "simulate_training_json", run)
    return seen


def _simulate(**kw):
    return ddlsim.simulate(model="lenet5", workers=2, iterations=1, network="packet", record_flows=True,
                           queue_sample="1us", **kw)


def test_the_flows_table_carries_the_packet_counters(fake_engine):
    r = _simulate()
    flows = r.events.flows
    n = flows.num_rows
    assert n > 0
    for name, values in _flow_counters(n).items():
        assert flows.column(name).to_numpy().tolist() == values.astype(np.int64).tolist(), name
        assert flows.schema.field(name).type == pa.int64()


def test_the_queues_table_and_the_counters_come_through(fake_engine):
    r = _simulate()
    q = r.events.queues
    assert [tuple(row.values()) for row in q.to_pylist()] == QUEUE_ROWS
    stats = r.columns.metadata["network_stats"]
    assert stats["counters"] == NETWORK
    assert stats["ranks"] == 2
    assert stats["ports"]["name"] == PORT_NAMES and stats["ports"]["drops"] == [0, 3, 0, 1]
    summary = r.summary()
    assert summary["packet"]["counters"] == NETWORK
    assert summary["packet"]["ports"][1] == {"port": 1, "node": 2, "name": "star -> host 0", "packets": 90, "bytes": 138420,
                                             "drops": 3, "ecn_marks": 0, "max_packets": 20, "max_bytes": 30760}
    json.dumps(summary)  # JSON-able as written to summary.json


def test_saved_files_read_back_with_everything(fake_engine, tmp_path):
    r = _simulate()
    r.save(tmp_path / "run", timeline=False)
    names = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert "queues.parquet" in names and "flows.parquet" in names
    log = read_event_log(tmp_path / "run" / "events.parquet")
    assert log.queues.equals(r.events.queues) and log.flows.equals(r.events.flows)
    assert log.metadata["network_stats"] == r.columns.metadata["network_stats"]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["packet"]["counters"]["drops"] == 4
    trace = json.loads((tmp_path / "run" / "trace.json").read_text())
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert len(counters) == len(QUEUE_ROWS)
    assert {e["name"] for e in counters} == {"queue host 0 -> star band 0", "queue star -> host 0 band 0",
                                             "queue star -> host 0 band 1"}
    switch = [e for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name" and e["pid"] == 3]
    assert switch == [{"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "switch 0"}}]


def test_the_terminal_summary_shows_drops_and_marks_per_port(fake_engine):
    from ddlsim.cli.app import app

    result = CliRunner().invoke(app, ["simulate", "--model", "lenet5", "--workers", "2", "--iterations", "1",
                                      "--network", "packet", "--queue-sample", "1us"])
    assert result.exit_code == 0, result.output
    text = result.output
    assert "ports (packet level)" in text
    lines = [line for line in text.splitlines() if "->" in line]
    # most drops first: star -> host 0 (3), star -> host 1 (1), then most marks: host 1 -> star (5)
    assert [line.split()[0:3] for line in lines][:3] == [["star", "->", "host"]] * 2 + [["host", "1", "->"]]
    assert lines[0].split()[-4:] == ["90", "3", "0", "20"]
    assert "340 packets forwarded, 4 dropped, 5 ECN-marked, 4 retransmitted, 1 timeouts" in text


def test_no_port_table_at_flow_level():
    from ddlsim.cli.app import app

    result = CliRunner().invoke(app, ["simulate", "--model", "lenet5", "--workers", "2", "--iterations", "1"])
    assert result.exit_code == 0 and "ports (packet level)" not in result.output and "packets forwarded" not in result.output
    r = ddlsim.simulate(model="lenet5", workers=2, iterations=1)
    assert "packet" not in r.summary() and "network_stats" not in r.columns.metadata and r.columns.queues is None


def test_an_engine_without_the_packet_keys_gives_empty_tables(monkeypatch):
    """An older engine build (no queues, ports or network keys, no flow counters): nothing breaks."""
    real = _core.simulate_training_json

    def run(training, network, detail, progress=None):
        net = json.loads(network)
        net["fidelity"] = "flow"
        del net["packet"]
        return real(training, json.dumps(net), detail, progress)

    monkeypatch.setattr(_core, "simulate_training_json", run)
    r = _simulate()
    assert r.events.queues is None and "network_stats" not in r.events.metadata
    assert r.summary()["packet"] == {"counters": {}, "ports": []}
    assert set(r.events.flows.column("drops").to_numpy()) == {0}
    assert network_stats({}) is None and queues_table(None) is None
    assert queues_table({name: (dtype, b"") for name, dtype in QUEUE_TYPES.items()}) is None  # sampled, nothing changed


def test_flows_files_written_before_the_packet_columns_still_read(tmp_path):
    r = ddlsim.simulate(model="lenet5", workers=2, iterations=1, record_flows=True)
    path = tmp_path / "events.parquet"
    from ddlsim.trace import write_event_log

    write_event_log(r.events, path)
    old = pq.read_table(tmp_path / "flows.parquet")
    old = old.drop_columns(["retransmits", "timeouts", "drops", "ecn_marks"])  # as main wrote it before issue 17
    pq.write_table(old, tmp_path / "flows.parquet")
    log = read_event_log(path)
    assert log.flows.num_rows == old.num_rows > 0
    for name in ("retransmits", "timeouts", "drops", "ecn_marks"):
        assert log.flows.column(name).to_pylist() == [0] * old.num_rows
    assert log.flows.select(old.column_names).equals(old)


def test_counter_events_from_a_queues_table():
    stats = {"ports": {"port": [0, 1], "name": ["host 0 -> star", "star -> host 1"]}, "ranks": 2}
    table = {"time_ns": [2000, 500, 500], "node": [2, 0, 2], "port": [1, 0, 1], "band": [0, 0, 2],
             "bytes": [0, 1538, 4614], "packets": [0, 1, -1]}
    events = queue_counter_events(table, {"network_stats": stats}, roles={0: "worker", 1: "worker"})
    assert events == [
        {"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "switch 0"}},
        {"ph": "M", "name": "process_sort_index", "pid": 3, "args": {"sort_index": 2}},
        {"ph": "C", "name": "queue host 0 -> star band 0", "cat": "queue", "pid": 1, "ts": 0.5,
         "args": {"packets": 1, "bytes": 1538}},
        {"ph": "C", "name": "queue star -> host 1 band 2", "cat": "queue", "pid": 3, "ts": 0.5, "args": {"bytes": 4614}},
        {"ph": "C", "name": "queue star -> host 1 band 0", "cat": "queue", "pid": 3, "ts": 2.0,
         "args": {"packets": 0, "bytes": 0}},
    ]
    # without the metadata: ports by number, switches from the ranks the log has
    plain = queue_counter_events(table, None, roles={0: "worker", 1: "worker"})
    assert [e["name"] for e in plain if e["ph"] == "C"] == ["queue port 0 band 0", "queue port 1 band 2", "queue port 1 band 0"]
    assert queue_counter_events(None) == [] and queue_counter_events({"time_ns": []}) == []


def test_the_chrome_trace_has_one_counter_per_sample_and_is_bounded(monkeypatch, tmp_path):
    r = ddlsim.simulate(model="lenet5", workers=2, iterations=1)
    rows = 50
    queues = {"time_ns": np.arange(rows) * 100, "node": np.zeros(rows, np.int32), "port": np.zeros(rows, np.int32),
              "band": np.zeros(rows, np.int32), "bytes": np.arange(rows) * 1538, "packets": np.arange(rows)}
    log = validate_event_log(r.events.replace(queues=queues))
    trace = to_chrome_trace(log)
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert [e["args"]["packets"] for e in counters] == list(range(rows))
    from ddlsim import output

    monkeypatch.setattr(output, "CHROME_COUNTER_LIMIT", 20)
    view, notes = output.chrome_view(log)
    assert view.queues.num_rows == 20 and view.queues.column("time_ns").to_pylist() == [i * 100 for i in range(20)]
    assert any("20 of 50 samples" in n for n in notes)
    assert log.queues.num_rows == rows  # the log itself keeps every sample


def test_queue_occupancy_in_the_analysis():
    from ddlsim.analyze import Analysis
    from ddlsim.analyze.figures import queues_figure

    r = ddlsim.simulate(model="lenet5", workers=2, iterations=1)
    meta = {**r.events.metadata, "network_stats": {"counters": NETWORK, "ports": {"port": [1], "name": ["star -> host 0"]}}}
    # port 1 band 0: 2 packets for 1000 ns, 4 for 3000 ns, then 0 (last sample): time-weighted mean 14 / 4 = 3.5
    queues = {"time_ns": [1000, 2000, 5000, 0], "node": [2, 2, 2, 0], "port": [1, 1, 1, 0], "band": [0, 0, 0, 0],
              "bytes": [3076, 6152, 0, 1538], "packets": [2, 4, 0, 1]}
    a = Analysis(validate_event_log(r.events.replace(metadata=meta, queues=queues)))
    occ = a.queue_occupancy().set_index(["node", "port", "band"])
    row = occ.loc[(2, 1, 0)]
    assert row["port_name"] == "star -> host 0" and row["samples"] == 3 and row["max_packets"] == 4
    assert row["mean_packets"] == pytest.approx(3.5) and row["mean_bytes"] == pytest.approx((3076 + 6152 * 3) / 4)
    assert occ.loc[(0, 0, 0)]["port_name"] == "port 0" and occ.loc[(0, 0, 0)]["mean_packets"] == 1.0
    assert a.headline()["packet_network"] == NETWORK
    fig = queues_figure(a)
    assert fig is not None and len(fig.axes[0].get_lines()) == 2
    plain = Analysis(r.events)
    assert queues_figure(plain) is None and plain.queue_occupancy().empty and "packet_network" not in plain.headline()
