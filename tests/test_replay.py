"""`ddlsim replay`: a recorded run's model, workers and measured layer times,
its communication simulated again under its own or other conditions."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import ddlsim
from ddlsim.cli.app import app
from ddlsim.errors import DdlsimError
from ddlsim.trace import read_event_log, write_event_log


@pytest.mark.parametrize("kw", [
    dict(model="resnet50", workers=4, iterations=2),
    dict(model="vgg16", workers=3, strategy="ps", servers=2, iterations=2, device="T4"),
    # compute_speedup is already in the recorded times: a replay that applied it again would be 2x faster in compute
    dict(model="resnet50", workers=4, iterations=1, compute_speedup=2.0, grow_module="inception-17x17x768", grow_count=2),
])
def test_a_replay_under_its_own_conditions_reproduces_the_run_exactly(kw, tmp_path):
    original = ddlsim.simulate(**kw)
    original.save(tmp_path, timeline=False)
    again = ddlsim.replay(tmp_path / "events.parquet")
    assert again.iteration_time_s == original.iteration_time_s
    assert again.summary()["compute_s"] == original.summary()["compute_s"]


def test_a_replay_under_other_conditions_is_the_simulation_of_those_conditions_with_the_logs_times(tmp_path):
    original = ddlsim.simulate(model="resnet50", workers=4, iterations=1, device="T4")
    original.save(tmp_path, timeline=False)
    replayed = ddlsim.replay(tmp_path / "events.parquet", strategy="ps", servers=2, bandwidth="25Gbps")
    direct = ddlsim.simulate(model="resnet50", workers=4, iterations=1, device="T4", strategy="ps", servers=2, bandwidth="25Gbps")
    assert replayed.iteration_time_s == direct.iteration_time_s  # times from the log equal the T4 FLOP times they came from


def test_a_log_without_its_scenario_needs_the_model(tmp_path):
    original = ddlsim.simulate(model="resnet50", workers=3, iterations=1)
    log = original.events
    log.metadata.pop("scenario"), log.metadata.pop("model")
    path = tmp_path / "foreign.parquet"
    write_event_log(log, path)
    with pytest.raises(DdlsimError, match=r"foreign.parquet: the log does not say which model ran; give it with --model"):
        ddlsim.replay(path)
    replayed = ddlsim.replay(path, model="resnet50")
    assert replayed.scenario.workers == 3  # counted from the log's worker ranks
    assert replayed.summary()["compute_s"] == original.summary()["compute_s"]


def test_cli_replay_prints_the_recorded_time_beside_the_replay(tmp_path):
    ddlsim.simulate(workers=2, iterations=2).save(tmp_path, timeline=False)
    events = str(tmp_path / "events.parquet")
    result = CliRunner().invoke(app, ["replay", events, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["recorded"]["difference"] == 0.0
    assert data["recorded"]["iteration_time_s"] == data["iteration_time_s"]
    faster = json.loads(CliRunner().invoke(app, ["replay", events, "--bandwidth", "100Gbps", "--json"]).output)
    assert faster["iteration_time_s"] < data["iteration_time_s"] and faster["recorded"]["difference"] < 0


@pytest.mark.parametrize("name,message", [("missing.parquet", "event log not found"), ("trace.json", "replay reads an event log in Parquet")])
def test_bad_replay_input_names_the_file(tmp_path, name, message):
    path = tmp_path / name
    if name.endswith(".json"):
        path.write_text("{}")
    result = CliRunner().invoke(app, ["replay", str(path)])
    assert result.exit_code != 0
    with pytest.raises(DdlsimError, match=message):
        ddlsim.replay(path)
