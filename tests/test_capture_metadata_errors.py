"""A capture's metadata with a wrong fact (found by tools/fuzz_readers.py's ``replay`` target, which changes one
field of a real capture's metadata): `ddlsim replay` and `ddlsim plan --profile` failed with a Python exception
deep in their arithmetic (``int('two')``, ``[1, 2].values()``, ``inf`` to int, a string divided by a float), or
replayed the nonsense (a negative bucket, zero cores). Each must be one line naming the file and the field, exit 2,
where the log is read; the valid captures' facts, and every other key, pass as they are."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow.parquet as pq
import forked_cli
import pytest

from ddlsim.errors import TraceError
from ddlsim.trace.parquet import METADATA_KEY, read_log_metadata

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_replay_ddp_training_rate import US, one_bucket_capture  # noqa: E402

DURATIONS = [9_000 * US, 5_000 * US, 8_000 * US, 6_000 * US, 7_000 * US, 4_000 * US]


def with_metadata(path: Path, target: Path, change: dict, drop: tuple = ()) -> Path:
    table = pq.read_table(path)
    meta = {**json.loads(table.schema.metadata[METADATA_KEY.encode()]), **change}
    for key in drop:
        meta.pop(key, None)
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, METADATA_KEY.encode(): json.dumps(meta).encode()}),
                   target)
    return target


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    """A DDP capture of LeNet-5 on 2 CPU ranks of a 2-core host, unshaped (the facts `plan`'s shared-cores caveat reads)."""
    where = tmp_path_factory.mktemp("cap")
    one_bucket_capture(where / "bare.parquet", DURATIONS, hosts=["vm", "vm"], small_mean=300 * US, bandwidth=None)
    return with_metadata(where / "bare.parquet", where / "events.parquet",
                         {"device": "cpu", "processes": 2, "host_cores": 2, "threads": 1})


BAD = [  # (change, the field the error names)
    # a Python exception from `ddlsim replay` or `plan --profile` of this capture before
    ({"workers": "two"}, "workers"),                                  # ValueError: int('two')
    ({"ranks": [1, 2]}, "ranks"),                                     # AttributeError: list has no .values()
    ({"ranks": 5}, "ranks"),
    ({"ranks": {"0": {"host": ["vm"]}, "1": {"host": "vm"}}}, "ranks.0.host"),   # TypeError: unhashable list
    ({"allreduce_small_ns": "x"}, "allreduce_small_ns"),              # TypeError: str / float
    ({"bucket_cap_mb": [25]}, "bucket_cap_mb"), ({"bucket_cap_mb": "25"}, "bucket_cap_mb"),  # f"{cap:g}"
    # the same from a PS capture's (the fuzzer's finds; the check is the same)
    ({"ranks": {"0": {"rpc_round_trip_ns": "x"}}}, "ranks.0.rpc_round_trip_ns"),  # float('x')
    ({"servers": [1]}, "servers"), ({"servers": "\u0000"}, "servers"),  # int() of a list, of a string
    # read as they were before, into a replay of nonsense
    ({"buckets": [{"bytes": -1, "tensors": [0]}]}, "buckets.0.bytes"),
    ({"buckets": [{"bytes": 10 ** 30, "tensors": [0]}]}, "buckets.0.bytes"),
    ({"buckets": "zz"}, "buckets"),
    ({"host_cores": 0}, "host_cores"), ({"threads": True}, "threads"), ({"processes": 2.0}, "processes"),
    ({"gamma_ns_per_byte": -1}, "gamma_ns_per_byte"),
    ({"parameters": [{"bytes": 4}]}, "parameters.0.name"),
]


@pytest.mark.parametrize("change, field", BAD, ids=[f for _, f in BAD])
def test_a_wrong_fact_is_refused_where_the_log_is_read_naming_the_field(capture, tmp_path, change, field):
    path = with_metadata(capture, tmp_path / "events.parquet", change)
    with pytest.raises(TraceError, match=f"{path}: the capture's metadata field '{field}'"):
        read_log_metadata(path)
    for argv in (["replay", str(path)], ["plan", "--profile", str(path), "--model", "lenet5", "--workers", "2"]):
        run = forked_cli.run(argv)
        assert run.returncode == 2, (argv, run.stderr[-2000:])
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and f"'{field}'" in lines[0] and "capture again" in lines[0], run.stderr


def test_the_facts_as_capture_writes_them_pass_and_so_do_unknown_keys_and_missing_ones(capture, tmp_path):
    assert read_log_metadata(capture)["workers"] == 2
    extra = with_metadata(capture, tmp_path / "extra.parquet", {"a_future_fact": [1, "x"], "bandwidth": None,
                                                                "ranks": {"0": {"host": None, "pid": "x"}}})
    assert read_log_metadata(extra)["a_future_fact"] == [1, "x"]
    older = with_metadata(capture, tmp_path / "older.parquet", {}, drop=("workers", "buckets", "allreduce_small_mean_ns"))
    assert "workers" not in read_log_metadata(older)
    # a simulated log's metadata is not a capture's: its keys mean other things and are not checked here
    simulated = with_metadata(capture, tmp_path / "sim.parquet", {"source": "simulate", "workers": "two"})
    assert read_log_metadata(simulated)["workers"] == "two"


def test_a_parquet_file_whose_column_names_are_not_utf8_is_refused_in_one_line(capture, tmp_path):
    """pyarrow decodes the column paths of the file's schema as UTF-8 when it opens it: a damaged name raised
    UnicodeDecodeError from read_log_metadata (found by the fuzzer)."""
    data = capture.read_bytes()
    assert data.count(b"end_ns") >= 1
    damaged = tmp_path / "events.parquet"
    damaged.write_bytes(data.replace(b"end_ns", b"\xe1nd_ns"))
    with pytest.raises(TraceError, match="not a readable Parquet event log"):
        read_log_metadata(damaged)
    run = forked_cli.run(["replay", str(damaged)])
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr


@pytest.mark.parametrize("field", ["servers", "workers", "allreduce_small_ns", "bucket_cap_mb", "host_cores",
                                   "server_cost"])
def test_a_checked_fact_may_be_absent_but_not_null(capture, tmp_path, field):
    """`int(meta.get("servers", 1))` of a PS capture raised TypeError on a null (the fuzzer, seed 3): a fact no
    capture writes as null is refused so, and read as absent when it is absent."""
    with pytest.raises(TraceError, match=f"field '{field}'"):
        read_log_metadata(with_metadata(capture, tmp_path / "null.parquet", {field: None}))
    assert field not in read_log_metadata(with_metadata(capture, tmp_path / "absent.parquet", {}, drop=(field,)))


def test_analyze_refuses_a_parquet_file_whose_column_names_are_not_utf8_in_one_line(capture, tmp_path):
    """`ddlsim analyze` counted the file's rows with pyarrow before reading it, and pyarrow's UnicodeDecodeError
    escaped (the fuzzer's replay target, seed 5): every reader now catches what pyarrow raises on a damaged file
    (``ddlsim.trace.parquet.PARQUET_ERRORS``)."""
    damaged = tmp_path / "events.parquet"
    damaged.write_bytes(capture.read_bytes().replace(b"end_ns", b"\xe1nd_ns"))
    from ddlsim.analyze.streaming import open_analysis

    with pytest.raises(TraceError):
        open_analysis(damaged)
    run = forked_cli.run(["analyze", str(damaged)])
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    import ddlsim

    out = tmp_path_factory.mktemp("sim") / "run"
    ddlsim.simulate(model="lenet5", workers=2, iterations=2).save(out, timeline=False)
    return out / "events.parquet"


@pytest.mark.parametrize("scenario, field", [("x", "scenario"), ({"model": True}, "scenario.model"),
                                             ({"network": "10Gbps"}, "scenario.network"),
                                             ({"strategy": [1]}, "scenario.strategy")])
def test_a_simulated_log_whose_scenario_is_not_an_object_is_refused_naming_the_field(simulated, tmp_path, scenario,
                                                                                     field):
    """`analyze` called .get on a scenario given as a string, and replay .items() on a model given as a boolean (the
    fuzzer's replay target on simulated logs, seed 8): every log's scenario and its model, network and strategy
    must be objects (the values inside are the scenario parser's to check)."""
    change = {"scenario": scenario if isinstance(scenario, str) else
              {**json.loads(pq.read_table(simulated).schema.metadata[METADATA_KEY.encode()])["scenario"], **scenario}}
    path = with_metadata(simulated, tmp_path / "events.parquet", change)
    with pytest.raises(TraceError, match=f"the log's metadata field '{field}'"):
        read_log_metadata(path)
    for argv in (["analyze", str(path)], ["replay", str(path)]):
        run = forked_cli.run(argv)
        assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1 and f"'{field}'" in run.stderr, \
            (argv, run.stderr[-2000:])


def test_the_iterations_a_mean_describes_are_named_without_counting_through_the_gap_between_them():
    """A damaged log's iteration numbers 0 and 2**62 made the description of the mean build a list of 2**62
    numbers (MemoryError; the fuzzer, seed 8). The description against a brute force over seeded short lists."""
    import random

    import numpy as np

    from ddlsim.analyze.breakdown import describe_mean

    assert describe_mean(np.array([1, 2 ** 62]), np.array([0])) == \
        f"mean of iterations 1, {2 ** 62}, warm-up iteration 0 excluded"
    rng = random.Random(8)
    for _ in range(2000):
        numbers = sorted(rng.sample(range(-3, 12), rng.randint(1, 6)))
        contiguous = all(b == a + 1 for a, b in zip(numbers, numbers[1:]))
        expected = (f"iteration {numbers[0]}" if len(numbers) == 1 else
                    f"iterations {numbers[0]}-{numbers[-1]}" if contiguous else
                    "iterations " + ", ".join(map(str, numbers)))
        assert describe_mean(np.array(numbers), np.array([])) == f"mean of {expected}, no warm-up excluded"
