"""A sweep's --out directory damaged or hand-edited (found by tools/fuzz_readers.py's ``sweep`` target, which reads
it as ``ddlsim sweep --status`` and ``ddlsim.read_sweep`` do): before, a result table that is not Parquet escaped
as pyarrow's ArrowInvalid or OSError, two runs' tables whose columns differ in type as ArrowTypeError, a manifest
whose runs are not objects as a TypeError, one nested too deeply as a RecursionError. Each is now a one-line
error naming the file and the fix; a manifest the reader cannot use only loses the runs' order."""

import json
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import forked_cli
import pytest

from ddlsim.errors import DdlsimError
from ddlsim.sweep.grid import load_grid
from ddlsim.sweep.runner import run_grid
from ddlsim.sweep.store import MANIFEST, SUMMARY_TABLE, RunDataset, read_sweep

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sweep") / "out"
    run_grid(load_grid(ROOT / "examples" / "sweep" / "small-grid.toml"), out)
    return out


@pytest.fixture
def sweep(finished, tmp_path) -> Path:
    import shutil

    copy = tmp_path / "out"
    shutil.copytree(finished, copy)
    return copy


def status(directory: Path) -> subprocess.CompletedProcess:
    return forked_cli.run(["sweep", "--status", str(directory)], timeout=120, env={"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin"})


def test_an_intact_sweep_reads_in_the_manifests_order(sweep):
    frame = read_sweep(sweep)
    order = [r["key"] for r in json.loads((sweep / MANIFEST).read_text())["runs"]]
    assert list(frame.key) == order and len(order) == 4
    assert status(sweep).returncode == 0


def test_a_result_table_that_is_not_parquet_is_named_with_the_fix(sweep):
    victim = sorted((sweep / SUMMARY_TABLE).glob("*.parquet"))[1]
    victim.write_bytes(victim.read_bytes()[:-9])  # the footer cut: ArrowInvalid before
    with pytest.raises(DdlsimError) as caught:
        read_sweep(sweep)
    message = str(caught.value)
    assert message.startswith(f"{victim}: cannot read this run's summary table (") and "\n" not in message
    assert message.endswith(f"remove {victim} (the run's done mark) and run the command that wrote it again: it "
                            "redoes that run")
    run = status(sweep)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr
    assert victim.exists()  # nothing removed: the user decides


def test_a_damaged_side_table_names_the_runs_summary_and_following_the_fix_brings_the_table_back(sweep):
    # before, the fix named the side table itself: removed, the run still counted as done (its summary is its done
    # mark), so the sweep skipped it and the run had no iterations table from then on
    victim = sorted((sweep / "iterations").glob("*.parquet"))[1]
    victim.write_bytes(b"not parquet")
    with pytest.raises(DdlsimError) as caught:
        RunDataset(sweep).read("iterations")
    summary = sweep / SUMMARY_TABLE / victim.name
    assert str(caught.value).startswith(f"{victim}: cannot read this run's iterations table (")
    assert f"remove {summary} (the run's done mark)" in str(caught.value)
    summary.unlink()
    run_grid(load_grid(ROOT / "examples" / "sweep" / "small-grid.toml"), sweep)
    keys = set(RunDataset(sweep).read("iterations").column("key").to_pylist())
    assert victim.stem in keys and len(keys) == 4


def test_text_that_is_not_utf8_in_a_result_table_is_refused_naming_it(sweep):
    victim = sorted((sweep / SUMMARY_TABLE).glob("*.parquet"))[0]
    table = pq.read_table(victim)
    index = table.schema.get_field_index("scenario")
    pq.write_table(table.set_column(index, "scenario", pa.array([b"\xff"], pa.binary()).view(pa.string())), victim)
    with pytest.raises(DdlsimError, match=r"cannot read this run's summary table \(.*Invalid UTF8 sequence"):
        read_sweep(sweep)  # pyarrow's ArrowException ("Wrapping ... failed") where pandas took the value, before


def test_runs_whose_tables_disagree_in_a_columns_type_are_refused_naming_one(sweep):
    victim = sorted((sweep / SUMMARY_TABLE).glob("*.parquet"))[2]
    table = pq.read_table(victim)
    index = table.schema.get_field_index("workers")
    pq.write_table(table.set_column(index, "workers", table.column("workers").cast(pa.int32())), victim)
    with pytest.raises(DdlsimError, match=r"summary: the runs' summary tables do not agree \(Unable to merge: Field "
                                          r"workers has incompatible types: int64 vs int32\), e\.g\. "
                                          + victim.name.replace(".", r"\.")):
        read_sweep(sweep)  # ArrowTypeError before


@pytest.mark.parametrize("manifest", [
    lambda m: json.dumps({**m, "runs": [r["key"] for r in m["runs"]]}),  # TypeError before: a string indexed by "key"
    lambda m: json.dumps({**m, "runs": "all"}),
    lambda m: json.dumps([m]),
    lambda m: "[" * 5000 + "]" * 5000,  # RecursionError before
])
def test_a_manifest_the_reader_cannot_use_is_refused_by_status_and_costs_read_sweep_only_the_order(sweep, manifest):
    path = sweep / MANIFEST
    original = json.loads(path.read_text())
    path.write_text(manifest(original))
    with pytest.raises(DdlsimError, match=r"sweep\.json: (not a sweep manifest|cannot read the sweep's manifest)"):
        RunDataset(sweep).read_manifest()
    frame = read_sweep(sweep)  # the runs in key order: every result is still there
    assert sorted(frame.key) == list(frame.key) == sorted(r["key"] for r in original["runs"])
    run = status(sweep)
    assert run.returncode == 2 and "sweep.json" in run.stderr and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("change, why", [
    (lambda m: m["axes"][0].update(key=-10**30), "the axis {'key': -1000000000000000000000000000000"),  # TypeError before
    (lambda m: m["axes"][0].update(values="10Gbps"), "is not a key and a list of values"),
    (lambda m: m.update(axes={"workers": [2, 4]}), "axes = {'workers': [2, 4]} is not a list"),
    (lambda m: m.update(base_dir=["/tmp"]), "base_dir = ['/tmp'] is not a path"),
])
def test_a_manifest_with_a_wrong_axis_or_path_is_refused_by_status_in_one_line(sweep, change, why):
    path = sweep / MANIFEST
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))
    run = status(sweep)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    line = run.stderr.strip()
    assert "\n" not in line and "sweep.json: not a sweep manifest (" in line and why in line, line


# ---------------------------------------------------------------- the results cache (`reproduce --cache`)


@pytest.mark.parametrize("damage", [
    lambda entry: json.dumps({k: v for k, v in entry.items() if k != "iteration_times_s"}),  # KeyError before
    lambda entry: json.dumps({**entry, "iteration_times_s": []}),  # ZeroDivisionError in steady_time before
    lambda entry: json.dumps({**entry, "iteration_times_s": ["0.1"]}),  # TypeError before
    lambda entry: json.dumps([entry]),
    lambda entry: b"\xff\xfe" + json.dumps(entry).encode(),  # UnicodeDecodeError before
    lambda entry: "[" * 5000 + "]" * 5000,  # RecursionError before
])
def test_a_results_cache_entry_of_the_wrong_shape_is_simulated_again_and_replaced(tmp_path, damage):
    from ddlsim.reproduce.network_operator import steady_time
    from ddlsim.simulation.scenario import scenario_from_dict
    from ddlsim.sweep import ResultStore, run_sweep, scenario_key

    scenario = scenario_from_dict({"workers": 2, "iterations": 2, "model": {"name": "lenet5"}})
    store = ResultStore(tmp_path / "cache")
    (first,), _ = run_sweep([scenario], store=store)
    entry = store._path(scenario_key(scenario))
    text = damage(first)
    entry.write_bytes(text if isinstance(text, bytes) else text.encode())
    (again,), stats = run_sweep([scenario], store=store)
    assert stats.simulated == 1 and stats.cached == 0
    assert again["iteration_times_s"] == first["iteration_times_s"] and steady_time(again) == steady_time(first)
    assert store.get(scenario_key(scenario))["iteration_times_s"] == first["iteration_times_s"]  # written again
