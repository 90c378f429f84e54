"""The command line, run as a user would (subprocess), including bad input."""

import json

import pandas as pd
import forked_cli
import pytest

from ddlsim.trace import read_event_log


def ddlsim(*args, cwd=None):
    return forked_cli.run(list(args), cwd=cwd)


def test_simulate_json_summary():
    p = ddlsim("simulate", "--model", "resnet50", "--workers", "8", "--strategy", "ps", "--servers", "2",
               "--bandwidth", "10Gbps", "--latency", "10us", "--network", "flow", "--iterations", "2", "--json")
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    assert summary["strategy"] == "ps" and summary["servers"] == 2 and summary["workers"] == 8
    assert summary["iteration_time_s"] == pytest.approx(sum(summary["iteration_times_s"]) / 2)
    assert summary["iteration_time_s"] > 0


def test_simulate_writes_outputs(tmp_path):
    out = tmp_path / "run"
    p = ddlsim("simulate", "--model", "lenet5", "--workers", "4", "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert "iteration" in p.stdout
    names = sorted(f.name for f in out.iterdir())
    assert names == ["events.parquet", "groups.parquet", "iterations.csv", "summary.json", "timeline.png", "trace.json"]
    log = read_event_log(out / "events.parquet")
    assert log.metadata["source"] == "simulate" and log.metadata["scenario"]["workers"] == 4
    assert log.groups is not None and len(log.groups) == 10  # LeNet-5: one group per tensor
    trace = json.loads((out / "trace.json").read_text())
    assert any(e.get("ph") == "X" for e in trace["traceEvents"])
    assert len(pd.read_csv(out / "iterations.csv")) == 3


def test_scenario_file_with_flag_override(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('workers = 4\n[model]\nname = "lenet5"\n')
    p = ddlsim("simulate", str(f), "--workers", "2", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["workers"] == 2


def test_models_lists_the_zoo():
    p = ddlsim("models")
    assert p.returncode == 0
    assert "resnet50" in p.stdout and "25,557,032" in p.stdout and "161" in p.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "resnet51"], "unknown model 'resnet51'"),
        (["--workers", "0"], "workers"),
        (["--bandwidth", "-10Gbps"], "bandwidth must be positive"),
        (["--strategy", "allgather"], "strategy"),
        (["--latency", "soon"], "latency"),
    ],
)
def test_bad_input_fails_clearly_and_writes_nothing(tmp_path, args, message):
    out = tmp_path / "out"
    p = ddlsim("simulate", *args, "--out", str(out))
    assert p.returncode != 0
    assert message in p.stderr
    assert "Traceback" not in p.stderr
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_malformed_scenario_file_fails_clearly(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text("workers = [\n")
    out = tmp_path / "out"
    p = ddlsim("simulate", str(f), "--out", str(out))
    assert p.returncode != 0
    assert "bad.toml: not valid TOML" in p.stderr and "Traceback" not in p.stderr
    assert not out.exists()


def test_large_step_logs_keep_the_perfetto_trace_small(tmp_path, monkeypatch):
    import ddlsim
    from ddlsim import output

    monkeypatch.setattr(output, "CHROME_STEP_LIMIT", 100)
    r = ddlsim.simulate(model="lenet5", workers=4, iterations=1)
    paths = r.save(tmp_path / "o")
    trace = json.loads(paths["chrome_trace"].read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "allreduce" in " ".join(str(n) for n in names)
    assert not any("ring_step" in str(e.get("args", {}).get("op", "")) for e in trace["traceEvents"])
    assert any("collective-step rows left out" in n for n in r.notes)
    log = read_event_log(paths["events"])
    sends = log.column("kind") == "send"
    assert (sends & (log.column("op") == "ring_step")).sum() == 4 * 2 * 3 * 10  # all steps stay in the Parquet log


def test_export_converts_a_ps_log_to_sketchdlc_chrome_and_csv(tmp_path):
    run = tmp_path / "run"
    assert ddlsim("simulate", "--model", "lenet5", "--workers", "2", "--strategy", "ps", "--iterations", "1",
                  "--out", str(run)).returncode == 0
    p = ddlsim("export", str(run / "events.parquet"), "--format", "sketchdlc", "--out", str(tmp_path / "dlc"))
    assert p.returncode == 0, p.stderr
    assert sorted(f.name for f in (tmp_path / "dlc").iterdir()) == ["s0.txt", "w0.txt", "w1.txt"]
    text = (tmp_path / "dlc" / "w0.txt").read_text()
    for operation in ("Push_Send_Worker", "Push_Recv_Worker", "Pull_Send_Worker", "Pull_Recv_Worker"):
        assert operation in text
    assert ddlsim("export", str(run / "events.parquet"), "-f", "chrome", "-o", str(tmp_path / "t.json")).returncode == 0
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert ddlsim("export", str(run / "events.parquet"), "-f", "csv", "-o", str(tmp_path / "e.csv")).returncode == 0
    assert len(pd.read_csv(tmp_path / "e.csv")) == len(read_event_log(run / "events.parquet"))


def test_export_of_a_missing_or_broken_log_fails_clearly(tmp_path):
    p = ddlsim("export", str(tmp_path / "nope.parquet"), "-f", "chrome", "-o", str(tmp_path / "t.json"))
    assert p.returncode == 2 and "nope.parquet" in p.stderr and "Traceback" not in p.stderr
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    p = ddlsim("export", str(bad), "-f", "chrome", "-o", str(tmp_path / "t.json"))
    assert p.returncode == 2 and "bad.parquet" in p.stderr
    assert not (tmp_path / "t.json").exists()


def test_profile_flag_is_relative_to_the_working_directory(tmp_path):
    (tmp_path / "prof.csv").write_text(
        "layer,fwd_ms,bwd_ms\n" + "\n".join(f"{n},1,2" for n in ["conv1", "conv2", "fc1", "fc2", "fc3"]) + "\n"
    )
    p = ddlsim("simulate", "--model", "lenet5", "--workers", "2", "--profile", "prof.csv", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["compute_s"] == pytest.approx(0.015)


def test_version_and_format_in_any_case(tmp_path):
    p = ddlsim("--version")
    assert p.returncode == 0 and p.stdout.startswith("ddlsim ") and "engine" in p.stdout
    run = tmp_path / "run"
    assert ddlsim("simulate", "--model", "LeNet5", "--workers", "2", "--strategy", "PS", "--iterations", "1",
                  "--out", str(run)).returncode == 0
    p = ddlsim("export", str(run / "events.parquet"), "--format", "CSV", "--out", str(tmp_path / "e.csv"))
    assert p.returncode == 0, p.stderr


def test_the_summary_table_fits_80_columns_and_never_cuts_a_number():
    import io

    from rich.console import Console

    from ddlsim.cli.report import _number, summary_table

    big = {"iteration_time_s": 12345.678, "compute_s": 0.00000923, "communication_s": 999.99, "overlap_s": 3.2,
           "exposed_communication_s": 0.5, "idle_s": 0.0, "throughput_samples_per_s": 1234567.0,
           "bytes_sent_per_worker_per_iteration": 987654321098.0}
    summaries = {"PS, 8 servers": big, "halving-doubling all-reduce": dict(big, idle_s=7.0)}
    buffer = io.StringIO()
    Console(file=buffer, width=80, color_system=None).print(summary_table(summaries, "t"))
    text = buffer.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    for value in ("12,346", _number(0.00000923), "1,000", "1,235", "988"):
        assert value in text, (value, text)


def test_help_shows_the_scenario_defaults_and_no_bool_placeholders():
    p = ddlsim("simulate", "--help")
    assert p.returncode == 0 and "<bool>" not in p.stdout
    text = " ".join(p.stdout.split())
    assert "(default: 10Gbps)" in text and "(default: 8)" in text and "--barrier / --no-barrier" in text


def test_the_defaults_shown_in_help_are_the_scenario_defaults():
    from ddlsim.cli.app import SIMULATE_DEFAULTS
    from ddlsim.simulation.scenario import FLAT_KEYS, PSStrategy, Scenario

    data = Scenario().model_dump()
    shown = {"on": True, "off": False}
    for key, text in SIMULATE_DEFAULTS.items():
        if key in ("servers", "placement"):  # options of the ps strategy
            actual = getattr(PSStrategy(), key)
            text = text.split(" ")[0]
        elif key in FLAT_KEYS:
            section, field = FLAT_KEYS[key]
            actual = data[section][field]
        else:
            actual = data[key]
        if isinstance(actual, dict):
            actual = actual["kind"]
        assert shown.get(text, text) == actual or text == str(actual), (key, text, actual)


@pytest.mark.parametrize("command", ["simulate", "plan"])
def test_the_device_help_lists_every_preset(command):
    # before: plan's --device help stopped at H100 (H200 and B200 were added to the presets, not to that line)
    from typer.testing import CliRunner

    from ddlsim.cli.app import app
    from ddlsim.workload.devices import DEVICES

    text = " ".join(CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400"}).output.split())
    assert " | ".join(DEVICES) in text


def test_the_device_presets_load_without_numpy():
    # the CLI reads them for its help at every start: the workload package loads its other modules on first use
    import subprocess
    import sys

    code = "import sys; import ddlsim.workload.devices; print('numpy' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "False", run.stderr
