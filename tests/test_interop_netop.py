"""The network-operator paper's send traces (section 5) read into an event log."""

from pathlib import Path

import forked_cli
import pytest

from ddlsim.errors import TraceError
from ddlsim.trace import read_netop_trace

FRAGMENT = Path(__file__).parent / "data" / "netop_vgg_fragment.txt"


def test_fragment_becomes_send_rows():
    log = read_netop_trace(FRAGMENT)
    frame = log.to_pandas()
    # ranks: workers 0, 1 then ps0 -> 2, ps1 -> 3
    got = [tuple(r) for r in frame[["rank", "role", "kind", "op", "name", "tensor", "peer", "message", "bytes", "start_ns", "end_ns"]]
           .itertuples(index=False)]
    assert got == [
        (2, "server", "send", "pull_response", "conv1_1/weights/read", 0, 0, 0, 6912, 0, 0),
        (2, "server", "send", "pull_response", "conv1_1/weights/read", 0, 1, 1, 6912, 0, 0),
        (2, "server", "send", "pull_response", "conv1_1/biases/read", 1, 0, 2, 256, 150_000, 150_000),
        (1, "worker", "send", "push_request", "gradients/fc8/weights", 2, 3, 3, 16_388_000, 412_000_037, 412_000_037),
        (0, "worker", "send", "push_request", "gradients/conv1_1/weights", 3, 2, 4, 6912, 412_500_000, 412_500_000),
    ]
    assert frame["ready_ns"].tolist() == frame["start_ns"].tolist()
    assert frame["deps"].isna().all() and (frame["iteration"] == -1).all()
    assert set(frame["x_trace_file"]) == {FRAGMENT.name}
    assert log.metadata["source"] == "netop"


@pytest.mark.parametrize("line, expected", [
    ("0.1 w 10 worker0", "expected 5 fields (time, parameter, bytes, source, destination), found 4"),
    ("abc w 10 worker0 ps0", "time 'abc' is not a number of seconds"),
    ("-1 w 10 worker0 ps0", "time '-1' must be a number of seconds >= 0"),
    ("0.1 w 1e3 worker0 ps0", "size '1e3' is not a whole number of bytes"),
    ("0.1 w 10 gpu0 ps0", "source device 'gpu0' is not worker<N>, ps<N>"),
    ("0.1 w 10 worker0 /job:chief/task:0", "destination device '/job:chief/task:0'"),
    ("0.1 w 10 ps0 ps0", "source and destination are both ps0"),
])
def test_malformed_lines_name_file_and_line(tmp_path, line, expected):
    path = tmp_path / "trace.txt"
    path.write_text("# header comment\n0.0 a 1 worker0 ps0\n" + line + "\n")
    with pytest.raises(TraceError) as caught:
        read_netop_trace(path)
    assert str(caught.value).startswith(f"{path}:3: ") and expected in str(caught.value), str(caught.value)


def test_missing_file_and_no_files(tmp_path):
    with pytest.raises(TraceError, match="no such trace file"):
        read_netop_trace(tmp_path / "none.txt")
    with pytest.raises(TraceError, match="no trace files given"):
        read_netop_trace([])


def test_two_traces_are_one_log(tmp_path):
    aggregation, distribution = tmp_path / "agg.txt", tmp_path / "dist.txt"
    aggregation.write_text("0 g/w 40 worker0 ps0\n0.5 g/w 40 worker1 ps0\n")
    distribution.write_text("0 w 40 ps0 worker1\n")
    frame = read_netop_trace([aggregation, distribution]).to_pandas()
    assert frame["x_trace_file"].tolist() == ["agg.txt", "agg.txt", "dist.txt"]
    assert frame["op"].tolist() == ["push_request", "push_request", "pull_response"]


def test_replay_of_a_converted_trace_says_why_not_in_one_line(tmp_path):
    """A network-operator trace holds only send events (when each parameter was queued), no compute rows: replay
    cannot take layer times from it, and says so with the command that simulates the trace's job (2 workers and
    2 servers in the fragment: ps1 only receives, so it has no rows of its own)."""
    import os

    import ddlsim

    env = {**os.environ, "PYTHONPATH": str(Path(ddlsim.__file__).resolve().parents[1])}

    def cli(*args):
        return forked_cli.run([*map(str, args)], cwd=tmp_path, env=env)

    assert cli("convert", FRAGMENT, "netop.parquet", "--from", "netop").returncode == 0
    replay = cli("replay", "netop.parquet", "--model", "vgg16")
    assert replay.returncode == 2 and "Traceback" not in replay.stderr
    lines = replay.stderr.strip().splitlines()
    assert len(lines) == 1, replay.stderr
    assert "network-operator trace records only when each parameter was queued to send" in lines[0]
    assert lines[0].endswith("ddlsim simulate --model MODEL --strategy ps --workers 2 --servers 2")
