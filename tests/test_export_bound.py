"""`export --format chrome` and `convert --to chrome` bound the Perfetto trace as `simulate` bounds its trace.json, and
warn about what they leave out."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import ddlsim
import ddlsim.output
from ddlsim.cli.app import app
from ddlsim.trace import read_event_log, write_chrome_trace


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A simulated run written with a small row limit (as if it were a run of millions of rows)."""
    monkeypatch.setattr(ddlsim.output, "CHROME_ROW_LIMIT", 200)
    result = ddlsim.simulate(model="lenet5", workers=4, iterations=3, trace_detail="step")
    assert len(result.events) > 600  # well above the limit: the bound must cut
    result.save(tmp_path / "run", timeline=False)
    return tmp_path


def slices(path):
    data = json.loads(path.read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if e.get("ph") == "X"]


@pytest.mark.parametrize("command", [
    ["export", "{run}/events.parquet", "--format", "chrome", "--out", "{out}"],
    ["convert", "{run}/events.parquet", "{out}", "--to", "chrome"],
])
def test_the_exported_trace_is_bounded_like_simulates_with_a_warning(run, command):
    out = run / "exported.json"
    args = [a.format(run=run / "run", out=out) for a in command]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == (run / "run" / "trace.json").read_bytes()  # the same bound, the same trace
    full = run / "full.json"
    write_chrome_trace(read_event_log(run / "run" / "events.parquet"), full)  # unbounded
    assert len(slices(out)) < len(slices(full)) / 2
    assert "warning: the Perfetto trace shows" in " ".join(result.output.split())


def test_the_python_api_warns_too(run):
    with pytest.warns(UserWarning, match="the Perfetto trace shows"):
        ddlsim.convert(run / "run" / "events.parquet", run / "api.json")
    assert (run / "api.json").read_bytes() == (run / "run" / "trace.json").read_bytes()
