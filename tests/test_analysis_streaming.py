"""Streamed analysis (ddlsim.analyze.streaming): the same tables, exactly,
as the in-memory Analysis, on logs whose rows are shuffled and cut into
small row groups; the watermark is a true lower bound; the outputs of
`ddlsim analyze --out` (CSV, Parquet, PNG, SVG) read back; edge cases are
messages at the CLI in both modes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import ddlsim
from ddlsim.analyze import Analysis
from ddlsim.analyze.scan import EventLogFile
from ddlsim.analyze.streaming import StreamedAnalysis, open_analysis
from ddlsim.cli.app import app
from ddlsim.errors import DdlsimError
from ddlsim.trace import empty_event_log, event_log_from_rows, write_event_log

from test_analysis import collective_log, hand_ps_log, path_rows

runner = CliRunner()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("streaming")
    cases = {
        "ring-step": dict(strategy="ring", trace_detail="step", jitter=0.05, seed=3),
        "ring": dict(strategy="ring", jitter=0.05, seed=4),
        "ps": dict(strategy="ps", servers=2, jitter=0.05, seed=5),
    }
    paths = {}
    for label, extra in cases.items():
        run = ddlsim.simulate(model="resnet50", workers=4, iterations=3, **extra)
        paths[label] = write_event_log(run.events, d / f"{label}.parquet")
    paths["hand"] = write_event_log(hand_ps_log(iterations=3), d / "hand.parquet")
    return paths


def shuffled(path, target, seed: int):
    """The same rows in a seeded random order, in row groups of a seeded
    random size (metadata kept): the streamed reader must not rely on order."""
    rng = np.random.default_rng(seed)
    table = pq.read_table(path)
    metadata = {k: v for k, v in table.schema.metadata.items() if k != b"ddlsim.side_tables"}  # no side files copied
    table = table.take(pa.array(rng.permutation(table.num_rows))).replace_schema_metadata(metadata)
    pq.write_table(table, target, row_group_size=int(rng.integers(7, max(8, table.num_rows // 5))))
    return target


@pytest.mark.parametrize("label", ["ring-step", "ring", "ps", "hand"])
@pytest.mark.parametrize("seed", [0, 1])
def test_streamed_tables_equal_the_in_memory_ones(runs, label, seed, tmp_path):
    path = shuffled(runs[label], tmp_path / "events.parquet", seed) if seed else runs[label]
    memory, streamed = Analysis(path), StreamedAnalysis(path)
    assert streamed.rows == len(memory.log)
    for method in ("iterations", "phases", "collectives", "collectives_by_group"):
        pd.testing.assert_frame_equal(getattr(memory, method)(), getattr(streamed, method)(), check_exact=True, obj=method)
    last = int(memory.iterations()["iteration"].max())
    assert streamed.iteration == last
    path_memory = memory.critical_path()
    path_memory = path_memory[path_memory["iteration"] == last].reset_index(drop=True)
    assert len(path_memory)
    pd.testing.assert_frame_equal(path_memory, streamed.critical_path(), check_exact=True)
    a, b = memory.headline(), streamed.headline()
    for key in ("rows", "workers", "servers", "iterations", "iteration_time_s", "compute_s", "communication_s", "overlap_s",
                "exposed_communication_s", "idle_s", "overlap_ratio", "sketchdlc_overlap_ratio", "collectives"):
        assert a.get(key) == b.get(key), key
    assert any("streamed" in note for note in b["notes"])


@pytest.mark.parametrize("seed", [2, 3])
def test_the_slice_is_exactly_the_rows_of_the_iteration(runs, seed, tmp_path):
    path = shuffled(runs["ps"], tmp_path / "events.parquet", seed)
    whole = pq.read_table(path)
    for iteration in (0, 2):
        want = whole.filter(pa.compute.equal(whole.column("iteration"), iteration)).to_pandas()
        got = EventLogFile(path).slice(iteration).table.to_pandas()
        pd.testing.assert_frame_equal(want.reset_index(drop=True), got.reset_index(drop=True))
        # the row-level tables of the streamed analysis are those of that iteration's rows
        streamed = StreamedAnalysis(path, iteration=iteration)
        pd.testing.assert_frame_equal(streamed.rpc_latency(), Analysis(EventLogFile(path).slice(iteration)).rpc_latency())
        assert set(streamed.rpc_latency()["iteration"]) == {iteration}


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_the_watermark_is_below_every_later_start(runs, seed, tmp_path):
    """Brute force: after each batch, every row still to come starts at or
    after the batch's watermark (else closing intervals early would be wrong)."""
    path = shuffled(runs["ring-step"], tmp_path / "events.parquet", seed)
    starts = pq.read_table(path, columns=["start_ns"]).column("start_ns").to_numpy()
    later_min = np.minimum.accumulate(starts[::-1])[::-1]
    closed = 0
    for batch in EventLogFile(path).batches(["start_ns", "host"], batch_rows=50):
        after = batch.first_row + len(batch)
        if batch.watermark is not None:
            assert after < len(starts) and batch.watermark <= later_min[after]
            closed += 1
    assert closed > 0


def test_a_sorted_log_keeps_few_intervals_open(tmp_path):
    """On a log written in start order the watermark follows the rows, so
    the open state stays small however many rows there are."""
    from ddlsim.analyze import streaming

    rows = [dict(id=i, iteration=i // 100, rank=i % 2, role="worker", kind="compute" if i % 3 else "send", op="x",
                 peer=-1 if i % 3 else 1 - i % 2, message=-1 if i % 3 else i, start_ns=10 * i, end_ns=10 * i + 15)
            for i in range(1000)]
    rows += [dict(id=1000 + i, iteration=r["iteration"], rank=r["peer"], role="worker", kind="recv", op="x", peer=r["rank"],
                  message=r["message"], start_ns=r["end_ns"], end_ns=r["end_ns"] + 1) for i, r in enumerate(rows) if r["kind"] == "send"]
    rows.sort(key=lambda r: r["start_ns"])
    table = event_log_from_rows(rows).table
    pq.write_table(table, tmp_path / "sorted.parquet", row_group_size=50)
    seen = []
    original = streaming.merge_intervals

    def spy(starts, ends):
        seen.append(len(starts))
        return original(starts, ends)

    streaming.merge_intervals = spy
    try:
        streamed = StreamedAnalysis(tmp_path / "sorted.parquet").iterations()
    finally:
        streaming.merge_intervals = original
    assert max(seen) <= 60  # one row group (50 rows) plus the few intervals still open
    pd.testing.assert_frame_equal(Analysis(event_log_from_rows(rows)).iterations(), streamed, check_exact=True)


def test_a_chosen_iteration_and_a_missing_one(runs):
    streamed = StreamedAnalysis(runs["hand"], iteration=1)
    assert set(streamed.critical_path()["iteration"]) == {1}
    with pytest.raises(DdlsimError, match="no rows of iteration 9"):
        StreamedAnalysis(runs["hand"], iteration=9)
    assert isinstance(open_analysis(runs["hand"]), Analysis) and not isinstance(open_analysis(runs["hand"]), StreamedAnalysis)
    assert isinstance(open_analysis(runs["hand"], iteration=0), StreamedAnalysis)


# ------------------------------------------------------------------ outputs


@pytest.mark.parametrize("table_format", ["both", "csv", "parquet"])
def test_out_writes_tables_and_figures_that_read_back(runs, table_format, tmp_path):
    out = tmp_path / "analysis"
    result = runner.invoke(app, ["analyze", str(runs["ps"]), "--out", str(out), "--format", table_format])
    assert result.exit_code == 0, result.output
    a = Analysis(runs["ps"])
    frames = {"iterations": a.iterations(), "rpc_latency": a.rpc_latency(), "sketchdlc_overheads": a.sketchdlc_overheads(),
              "hot_keys": a.hot_keys(), "critical_path": a.critical_path()}
    for name, frame in frames.items():
        assert len(frame)
        csv, parquet = out / f"{name}.csv", out / f"{name}.parquet"
        assert csv.exists() == (table_format != "parquet") and parquet.exists() == (table_format != "csv")
        if parquet.exists():
            pd.testing.assert_frame_equal(pd.read_parquet(parquet), frame, check_exact=True, check_dtype=False, obj=name)
        if csv.exists():
            back = pd.read_csv(csv, keep_default_na=False, na_values=[""])
            assert list(back.columns) == list(frame.columns)
            for column in frame.columns:
                if pd.api.types.is_numeric_dtype(frame[column]) and not pd.api.types.is_bool_dtype(frame[column]):
                    np.testing.assert_allclose(back[column].to_numpy(float), frame[column].to_numpy(float, na_value=np.nan),
                                               rtol=1e-15, equal_nan=True, err_msg=f"{name}.{column}")
                else:
                    assert back[column].astype(str).tolist() == frame[column].astype(str).tolist(), f"{name}.{column}"
    for name in ("iterations", "rpc_latency", "hot_keys", "critical_path"):
        assert (out / f"{name}.png").read_bytes().startswith(b"\x89PNG")
        root = ElementTree.parse(out / f"{name}.svg").getroot()
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert json.loads((out / "headline.json").read_text())["rows"] == len(a.log)


def test_svg_figures_are_the_same_on_a_second_run(runs, tmp_path):
    for target in ("a", "b"):
        assert runner.invoke(app, ["analyze", str(runs["hand"]), "--out", str(tmp_path / target)]).exit_code == 0
    assert (tmp_path / "a" / "iterations.svg").read_bytes() == (tmp_path / "b" / "iterations.svg").read_bytes()


def test_streamed_cli_matches_in_memory(runs, tmp_path):
    memory = runner.invoke(app, ["analyze", str(runs["ring-step"]), "--json", "--in-memory"])
    streamed = runner.invoke(app, ["analyze", str(runs["ring-step"]), "--json", "--stream", "--out", str(tmp_path / "o")])
    assert memory.exit_code == 0 and streamed.exit_code == 0, streamed.output
    a, b = json.loads(memory.stdout)["headline"], json.loads(streamed.stdout)["headline"]
    for key in ("rows", "iterations", "iteration_time_s", "overlap_ratio", "collectives"):
        assert a[key] == b[key]
    assert b["streamed"]["row_level_iteration"] == 2
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "o" / "iterations.parquet"), Analysis(runs["ring-step"]).iterations(),
                                  check_exact=True, check_dtype=False)


# ------------------------------------------------------------------ edge cases


def edge_logs(tmp_path):
    one_iteration = hand_ps_log(iterations=1)
    unknown_deps = event_log_from_rows(path_rows(unknown_deps=True))
    return {
        "empty": (empty_event_log(), "no row has an iteration number"),
        "one-iteration": (one_iteration, "one iteration"),
        "no-ps": (collective_log(), "no parameter-server rows"),
        "unknown-deps": (unknown_deps, "deps are unknown"),
    }


@pytest.mark.parametrize("mode", ["--in-memory", "--stream"])
def test_edge_cases_are_notes_at_the_cli(mode, tmp_path):
    for label, (log, message) in edge_logs(tmp_path).items():
        path = write_event_log(log, tmp_path / f"{label}.parquet")
        result = runner.invoke(app, ["analyze", str(path), mode, "--out", str(tmp_path / label)])
        assert result.exit_code == 0 and result.exception is None, (label, result.output)
        assert message in " ".join(result.output.split()), (label, result.output)
        assert (tmp_path / label / "headline.json").exists() and (tmp_path / label / "report.html").exists()
        if mode == "--stream":
            from ddlsim.cli.analyze_command import tables

            a = open_analysis(path, stream=True)
            tables(a, 1_000_000, 10_000_000)
            assert any(message in n for n in a.headline().get("notes", [])), label


def refused(*args) -> str:
    """The message of a refused command (a DdlsimError: printed without a traceback by ddlsim's main)."""
    result = runner.invoke(app, ["analyze", *map(str, args)])
    assert result.exit_code != 0 and isinstance(result.exception, DdlsimError), result.output
    return " ".join(str(result.exception).split())


def test_streaming_refuses_what_it_cannot_read(runs, tmp_path):
    from ddlsim.trace import write_sketchdlc

    write_sketchdlc(hand_ps_log(), tmp_path / "trace")
    assert "SketchDLC traces are read in memory" in refused(tmp_path / "trace", "--stream")
    assert "SketchDLC traces are read in memory" in refused(tmp_path / "trace", "--iteration", 0)
    assert "no rows of iteration 7" in refused(runs["hand"], "--iteration", 7)
    assert "--format xlsx" in refused(runs["hand"], "--out", tmp_path / "x", "--format", "xlsx")
    assert not (tmp_path / "x").exists()
    (tmp_path / "bad.parquet").write_text("not parquet")
    assert "not a readable Parquet file" in refused(tmp_path / "bad.parquet", "--stream")
