"""`ddlsim.apply_plan` (and `ddlsim plan --apply`) checks every argument before its first capture starts: a bad one
is ddlsim's own one-line error and nothing is written. Found when this test was written: workers=0 ran a capture
that failed with "no rank wrote a file" and left DIR/before; workers="2" left DIR/before and raised TypeError;
entry="x" ran a whole capture and the plan before it was refused; bandwidth="fast" raised ValueError; a plan option
such as latency="soon" was refused only after the first capture; `plan --apply --workers 0` ran with 2 workers."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import ddlsim
from ddlsim.cli.app import app
from ddlsim.errors import DdlsimError


@pytest.mark.parametrize("kwargs, message", [
    (dict(workers=0), "workers (--workers) must be a whole number from 2"),
    (dict(workers=1), "workers (--workers) must be a whole number from 2"),
    (dict(workers="2"), "workers (--workers) must be a whole number"),
    (dict(workers=2.5), "workers (--workers) must be a whole number"),
    (dict(workers=5000), "from 2 to 4,096"),
    (dict(iterations=1), "iterations (--capture-iterations"),
    (dict(iterations="6"), "iterations (--capture-iterations"),
    (dict(repeats=0), "repeats (--repeats"),
    (dict(repeats=True), "repeats (--repeats"),
    (dict(timeout_s=-1), "timeout_s must be a finite number"),
    (dict(timeout_s=float("nan")), "timeout_s must be a finite number"),
    (dict(entry="x"), "--plan-entry 'x'"),
    (dict(bandwidth="fast"), "cannot read bandwidth 'fast'"),
    (dict(batch_size=0), "batch_size must be a positive integer"),
    (dict(model="nope"), "unknown model 'nope'"),
    (dict(plan_options={"latency": "soon"}), "soon"),
    (dict(plan_options={"algorithm": "telepathy"}), "telepathy"),
    (dict(plan_options=[1]), "plan_options must be a dict"),
])
def test_a_bad_argument_is_refused_before_anything_runs_or_is_written(tmp_path, kwargs, message):
    out = tmp_path / "applied"
    with pytest.raises(DdlsimError) as caught:
        ddlsim.apply_plan(out, **{"model": "lenet5", **kwargs})
    text = str(caught.value)
    assert message in text
    # one line, except the scenario checker's "invalid scenario:" followed by one line per field (its format everywhere)
    assert "\n" not in text or text.split("\n")[0].endswith("invalid scenario:"), text
    assert not out.exists()


def test_the_cli_passes_workers_zero_on_instead_of_taking_the_default(tmp_path):
    result = CliRunner().invoke(app, ["plan", "--apply", str(tmp_path / "applied"), "--model", "lenet5", "--workers", "0"])
    assert result.exit_code != 0 and isinstance(result.exception, DdlsimError)
    assert "workers (--workers) must be a whole number from 2" in str(result.exception)
    assert not (tmp_path / "applied").exists()


def test_a_file_where_the_directory_should_be_is_refused_and_kept(tmp_path):
    target = tmp_path / "applied"
    target.write_text("mine")
    with pytest.raises(DdlsimError, match="not a directory"):
        ddlsim.apply_plan(target, model="lenet5")
    assert target.read_text() == "mine"
