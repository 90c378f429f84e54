"""The Python API's path arguments given something that is not a path (an int, None, bytes, an empty name) are
refused with ddlsim's own one-line error naming the argument: `ArgumentTypeError`, a DdlsimError and a TypeError.
Before, each raised Python's "expected str, bytes or os.PathLike object, not int" from deep inside, naming nothing,
and `fit_cost_model("table.txt")` read the characters of the name as file names."""

from __future__ import annotations

from pathlib import Path

import pytest

import ddlsim
from ddlsim.errors import ArgumentTypeError, DdlsimError

ROOT = Path(__file__).resolve().parent.parent

CALLS = {
    "events": [lambda v: ddlsim.replay(v), lambda v: ddlsim.replay_scaling(v, [2])],
    "out": [lambda v: ddlsim.validate(v, quick=True), lambda v: ddlsim.convert(ROOT / "examples" / "none.parquet", v)],
    "captures": [lambda v: ddlsim.validate("unused-out", captures=v)],
    "out_dir": [lambda v: ddlsim.apply_plan(v), lambda v: ddlsim.measure_plan(v, before="a", after="b")],
    "source": [lambda v: ddlsim.convert(v, "out.csv")],
    "path": [lambda v: ddlsim.load_scenario(v), lambda v: ddlsim.trace.read_event_log(v),
             lambda v: ddlsim.analyze.open_analysis(v)],
    "paths[0]": [lambda v: ddlsim.fit_cost_model([v], workers=[8])],
}
CASES = [(name, call) for name, calls in CALLS.items() for call in calls]


@pytest.mark.parametrize("value", [123, None, b"run/events.parquet", 2.5, ["a"], ""])
@pytest.mark.parametrize("name, call", CASES, ids=[f"{name}-{i}" for i, (name, _) in enumerate(CASES)])
def test_a_path_argument_that_is_no_path_is_named(tmp_path, monkeypatch, name, call, value):
    if name == "captures" and value is None:
        return  # None is validate's own default: capture the grid
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ArgumentTypeError) as caught:
        call(value)
    assert isinstance(caught.value, DdlsimError) and isinstance(caught.value, TypeError)
    text = str(caught.value)
    assert text.startswith(f"{name} must ") and "\n" not in text
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_one_table_named_as_a_string_is_one_table():
    table = str(ROOT / "examples" / "osu_allreduce_8nodes.txt")
    assert ddlsim.fit_cost_model(table, workers=[8]) == ddlsim.fit_cost_model([table], workers=[8])
