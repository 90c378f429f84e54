"""Result directories are all or nothing, staged inside the target."""


import pytest

import ddlsim
from ddlsim import output
from ddlsim.errors import DdlsimError


def test_staging_happens_inside_the_target_directory(tmp_path, monkeypatch):
    from ddlsim import _core

    seen = []
    real = _core.create_scratch

    def spy(path, *args):
        seen.append(str(path))
        return real(path, *args)

    monkeypatch.setattr(_core, "create_scratch", spy)  # every directory safe_io makes
    out = tmp_path / "parent" / "run"
    ddlsim.simulate(model="lenet5", workers=2, iterations=1).save(out, timeline=False)
    # the output directory itself, then scratch only inside it, never in the parent: it may be read-only or another
    # filesystem (files written atomically inside the staging directory have their scratch directories in it)
    assert len(seen) > 2 and seen[0] == str(out) and all(d.startswith(str(out) + "/") for d in seen[1:])
    assert sorted(p.name for p in out.iterdir()) == ["events.parquet", "groups.parquet", "iterations.csv", "summary.json", "trace.json"]


def test_a_failed_write_into_a_new_directory_leaves_nothing(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(output, "write_chrome_trace", boom)
    out = tmp_path / "new"
    with pytest.raises(KeyboardInterrupt):
        ddlsim.simulate(model="lenet5", workers=2, iterations=1).save(out)
    assert not out.exists()


def test_a_failed_write_into_an_existing_directory_keeps_its_files_and_leaves_no_scratch(tmp_path, monkeypatch):
    out = tmp_path / "existing"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")

    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(output, "write_chrome_trace", boom)
    with pytest.raises(DdlsimError, match="No space left on device"):
        ddlsim.simulate(model="lenet5", workers=2, iterations=1).save(out)
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


def test_out_into_the_current_directory_works(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ddlsim.simulate(model="lenet5", workers=2, iterations=1).save(".", timeline=False)
    assert (tmp_path / "events.parquet").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_out_onto_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(DdlsimError, match="exists and is not a directory"):
        ddlsim.simulate(model="lenet5", workers=2, iterations=1).save(tmp_path / "f")


def test_a_long_run_keeps_the_perfetto_trace_bounded_and_says_what_it_shows(tmp_path, monkeypatch):
    import json

    monkeypatch.setattr(output, "CHROME_ROW_LIMIT", 100)
    r = ddlsim.simulate(model="lenet5", workers=2, iterations=6, trace_detail="collective")
    paths = r.save(tmp_path / "o", timeline=False)
    slices = [e for e in json.loads(paths["chrome_trace"].read_text())["traceEvents"] if e.get("ph") == "X"]
    per_iteration = len(r.events) // 6
    assert len(r.events) > 100 and 0 < len(slices) <= 100
    kept = 100 // per_iteration
    assert any(f"shows iterations 0-{kept - 1} of 6" in n for n in r.notes), r.notes
    assert len(ddlsim.trace.read_event_log(paths["events"])) == len(r.events)  # Parquet keeps everything


def test_summary_json_carries_the_resolved_scenario(tmp_path):
    import json

    r = ddlsim.simulate(model="lenet5", workers=3, iterations=1, strategy="ps", servers=2)
    summary = json.loads(r.save(tmp_path / "o", timeline=False)["summary"].read_text())
    assert summary["scenario"]["strategy"] == {**summary["scenario"]["strategy"], "kind": "ps", "servers": 2}
    assert summary["scenario"]["workers"] == 3 and summary["scenario"]["network"]["bandwidth"] == "10Gbps"


def test_record_flows_writes_one_flow_per_transfer_beside_the_events(tmp_path):
    import pyarrow.parquet as pq

    r = ddlsim.simulate(model="lenet5", workers=3, iterations=1, strategy="ps", servers=1, record_flows=True)
    paths = r.save(tmp_path / "o", timeline=False)
    flows = pq.read_table(tmp_path / "o" / "flows.parquet").to_pandas()
    log = r.events.to_pandas()
    sends = log[log["kind"] == "send"]
    assert len(flows) == len(sends) == r.stats["transfers"]
    recv_end = log[log["kind"] == "recv"].set_index("message")["end_ns"]
    merged = flows.set_index("message").join(recv_end.rename("recv_end"))
    assert (merged["end_ns"] == merged["recv_end"]).all() and (merged["end_ns"] > merged["start_ns"]).all()
    assert ddlsim.trace.read_event_log(paths["events"]).flows.num_rows == len(flows)


def test_without_record_flows_there_is_no_flows_file(tmp_path):
    ddlsim.simulate(model="lenet5", workers=2, iterations=1).save(tmp_path / "o", timeline=False)
    assert not (tmp_path / "o" / "flows.parquet").exists()


@pytest.mark.parametrize("kwargs", [dict(model="lenet5", workers=2, iterations=2),
                                    dict(model="lenet5", workers=4, iterations=2, strategy="ps", jitter=0.1, seed=3)])
def test_identical_inputs_give_byte_identical_files(tmp_path, kwargs):
    # before: summary.json held the engine's wall time (wall_s), different in every run
    outs = [tmp_path / f"run{k}" for k in range(2)]
    for out in outs:
        ddlsim.simulate(**kwargs).save(out, timeline=True)
    names = sorted(p.name for p in outs[0].iterdir())
    assert "summary.json" in names and "timeline.png" in names
    assert names == sorted(p.name for p in outs[1].iterdir())
    for name in names:
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name


def test_the_wall_time_is_in_the_result_not_in_the_file(tmp_path):
    import json

    result = ddlsim.simulate(model="lenet5", workers=2, iterations=1)
    result.save(tmp_path / "run", timeline=False)
    assert result.summary()["wall_s"] == result.wall_s > 0
    assert "wall_s" not in json.loads((tmp_path / "run" / "summary.json").read_text())
