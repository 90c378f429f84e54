"""benchmarks/conv_shapes.py, the convolution shape-class microbenchmark: its grid (generic classes, no shape over
the FLOP cap, every class trimmed from its large end by an early stop) and its quick CPU run (the JSON a GPU run
writes, with FLOPs counted independently here)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("conv_shapes", ROOT / "benchmarks" / "conv_shapes.py")
conv_shapes = importlib.util.module_from_spec(spec)
sys.modules["conv_shapes"] = conv_shapes
spec.loader.exec_module(conv_shapes)


def _flops_by_hand(s):
    h_out = (s["hw"] + 2 * s["pad_h"] - s["kh"]) // s["stride"] + 1
    w_out = (s["hw"] + 2 * s["pad_w"] - s["kw"]) // s["stride"] + 1
    return 2 * s["batch"] * s["c_in"] * s["c_out"] * s["kh"] * s["kw"] * h_out * w_out


def test_full_grid_spans_the_classes_and_respects_the_cap():
    g = conv_shapes.grid()
    classes = {s["class"] for s in g}
    assert {"1x1", "1x1s2", "3x3", "3x3s2", "5x5", "1x7", "1x3", "stem7x7s2", "stem11x11s4"} <= classes
    assert {s["batch"] for s in g} == {32, 128}
    assert all(_flops_by_hand(dict(s, batch=1)) <= conv_shapes.MAX_FLOPS_PER_SAMPLE for s in g)
    # round robin: the first shapes of the run cover every class (an early stop trims each class from its large end)
    first = {s["class"] for s in g[: 2 * len(classes)]}
    assert first == classes
    for cls in classes:
        sizes = [_flops_by_hand(dict(s, batch=1)) for s in g if s["class"] == cls]
        assert sizes == sorted(sizes)


def test_quick_cpu_run_writes_every_point(tmp_path):
    torch = pytest.importorskip("torch")
    assert torch is not None
    out = tmp_path / "conv.json"
    assert conv_shapes.main(["--device", "cpu", "--quick", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["stopped_early"] is False and doc["cudnn_benchmark"] is False
    pts = doc["points"]
    assert len(pts) == 5 * 3 and doc["shapes_done"] == 5
    for p in pts:
        assert "error" not in p, p
        assert p["flops"] == _flops_by_hand(p)
        for d in ("fwd", "dgrad", "wgrad"):
            assert p[f"{d}_ms"] > 0
            assert p[f"{d}_tflops"] == pytest.approx(p["flops"] / p[f"{d}_ms"] / 1e9)
    assert {p["precision"] for p in pts} == {"fp32", "tf32", "fp16"}
    assert not (tmp_path / "conv.json.tmp").exists()


def test_budget_stops_early_and_still_writes(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "conv.json"
    assert conv_shapes.main(["--device", "cpu", "--quick", "--budget-s", "0", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["stopped_early"] is True and doc["points"] == []


def test_out_that_is_a_directory_is_refused(tmp_path, capsys):
    assert conv_shapes.main(["--device", "cpu", "--quick", "--out", str(tmp_path)]) == 2
    assert "not a regular file" in capsys.readouterr().err


def test_extra_grid_is_1x1_with_channels_that_are_not_powers_of_two_and_tables_merge(tmp_path, capsys):
    pytest.importorskip("torch")
    extra = conv_shapes.grid(extra=True)
    assert {s["class"] for s in extra} == {"1x1"} and {s["batch"] for s in extra} == {32, 128}
    assert any(s["c_in"] & (s["c_in"] - 1) for s in extra) and any(s["c_out"] & (s["c_out"] - 1) for s in extra)
    main_run, extra_run, norm_run = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "n.json"
    assert conv_shapes.main(["--device", "cpu", "--quick", "--out", str(main_run)]) == 0
    assert conv_shapes.main(["--device", "cpu", "--quick", "--extra", "--out", str(extra_run)]) == 0
    table = tmp_path / "t.json"
    assert conv_shapes.main(["--table", str(main_run), str(extra_run), "--out", str(table)]) == 0
    n_main = len(json.loads(main_run.read_text())["points"])
    n_extra = len(json.loads(extra_run.read_text())["points"])
    assert n_extra == 2 * 3 and len(json.loads(table.read_text())["points"]) == n_main + n_extra
    # a convolution run and a BatchNorm run make separate tables
    assert conv_shapes.main(["--norm", "--device", "cpu", "--quick", "--out", str(norm_run)]) == 0
    capsys.readouterr()
    assert conv_shapes.main(["--table", str(main_run), str(norm_run), "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "another kind" in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "x.json").exists()


def test_table_refuses_its_own_input_a_list_and_an_unwritable_out(tmp_path, capsys):
    pytest.importorskip("torch")
    run = tmp_path / "run.json"
    assert conv_shapes.main(["--device", "cpu", "--quick", "--out", str(run)]) == 0
    before = run.read_bytes()
    capsys.readouterr()
    # the table over its own input: refused, the input untouched
    assert conv_shapes.main(["--table", str(run), "--out", str(tmp_path / "." / "run.json")]) == 2
    assert "one of the --table inputs" in capsys.readouterr().err and run.read_bytes() == before
    # a JSON whose top level is a list
    lst = tmp_path / "list.json"
    lst.write_text("[1, 2]")
    assert conv_shapes.main(["--table", str(lst), "--out", str(tmp_path / "t.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --table") and len(err.strip().splitlines()) == 1
    # an --out in a folder that does not exist: one line, no file, no leftover
    assert conv_shapes.main(["--table", str(run), "--out", str(tmp_path / "nodir" / "t.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "nodir").exists() and not (tmp_path / "t.json").exists()


def test_a_file_beside_the_out_that_the_user_did_not_name_is_kept(tmp_path):
    """The run and --table write through ddlsim's atomic write: before, both wrote `OUT.tmp` beside `--out` and
    renamed it, so a user's file of that name was overwritten and then gone."""
    pytest.importorskip("torch")
    run, table = tmp_path / "run.json", tmp_path / "table.json"
    mine = [tmp_path / "run.json.tmp", tmp_path / "table.json.tmp"]
    for path in mine:
        path.write_text("mine\n")
    assert conv_shapes.main(["--device", "cpu", "--quick", "--out", str(run)]) == 0
    assert conv_shapes.main(["--table", str(run), "--out", str(table)]) == 0
    assert json.loads(table.read_text())["points"]
    assert [path.read_text() for path in mine] == ["mine\n", "mine\n"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["run.json", "table.json"] + [p.name for p in mine])
