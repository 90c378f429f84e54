"""One size parser (ddlsim.units.parse_size_bytes) behind every size: every
CLI option whose name says it is a size accepts "4MB", and so does every
scenario field that holds bytes."""

import importlib
import json
import re

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from ddlsim.cli import app
from ddlsim.errors import ScenarioError
from ddlsim.simulation.scenario import scenario_from_dict

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent
SIZE_NAME = re.compile(r"bytes|size|memory|partition|credit|cap")
# Options whose names look like sizes but are not byte counts.
NOT_BYTES = {
    "--batch-size": "samples per worker",
    "--image-size": "pixels",
    "--bucket-cap-mb": "PyTorch's bucket_cap_mb, a number of MiB",
    "--bucket-caps": "a list of bucket_cap_mb values (MiB numbers)",
    "--captures": "a directory of captures",
    "--capture-iterations": "a number of iterations",
}
# (command, option) -> extra arguments the command needs beside it.
SIMULATE = ["simulate", "--model", "lenet5", "--workers", "2", "--iterations", "1", "--network", "analytic", "--json"]
EXPECTED = {
    ("simulate", "--chunk-bytes"),
    ("simulate", "--partition"),
    ("simulate", "--credit"),
    ("simulate", "--switch-memory"),
    ("simulate", "--max-memory"),
    ("replay", "--max-memory"),
    ("sweep", "--max-memory"),
    ("analyze", "--switch-memory"),
    ("fit", "--min-size"),
    ("plan", "--slice-sizes"),
    ("plan", "--credits"),
    ("plan", "--partition"),
    ("capture connections", "--request-bytes"),
}


def _size_options():
    command = typer.main.get_command(app)

    def walk(c, path):
        if hasattr(c, "commands"):
            for name, sub in c.commands.items():
                yield from walk(sub, path + [name])
        else:
            for p in c.params:
                if getattr(p, "param_type_name", "") == "option":
                    yield " ".join(path), p.opts[0]

    return {(path, opt) for path, opt in walk(command, []) if SIZE_NAME.search(opt) and opt not in NOT_BYTES}


def test_the_list_of_size_options_is_complete():
    # a new size option must be added to EXPECTED (and so to the test below) or to NOT_BYTES with its reason
    assert _size_options() == EXPECTED


@pytest.fixture(scope="module")
def events(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    result = CliRunner().invoke(app, [*SIMULATE, "--out", str(out / "run")])
    assert result.exit_code == 0, result.output
    return str(out / "run" / "events.parquet")


@pytest.mark.parametrize("command,option", sorted(EXPECTED))
def test_every_size_option_accepts_4MB(command, option, events, tmp_path, monkeypatch):
    argv = {
        "simulate": SIMULATE,
        "replay": ["replay", events, "--iterations", "1", "--json"],
        "sweep": ["sweep", "--set", "iterations=1", "--out", str(tmp_path / "sweep")],
        "analyze": ["analyze", events, "--json"],
        "fit": ["fit", str(ROOT / "examples" / "osu_allreduce_8nodes.txt"), "--workers", "8", "--json"],
        "plan": ["plan", "--model", "lenet5", "--workers", "2", "--network", "analytic", "--bucket-caps", "25",
                 "--slice-sizes", "none", "--credits", "none", "--json"],
        "capture connections": ["capture", "connections", "--out", str(tmp_path / "conn"), "--connections", "1,2",
                                "--requests", "2"],
    }[command]
    if option == "--switch-memory" and command == "simulate":
        argv = [*argv, "--strategy", "ps", "--in-network", "aggregation"]
    seen = {}
    if command == "capture connections":  # the real benchmark starts processes; what it is given is the point here
        connections = importlib.import_module("ddlsim.capture.connections")

        def run_scaling(values, requests, request_bytes, out_dir, **kw):
            seen["request_bytes"] = request_bytes
            return {"table": pd.DataFrame([{"connections": 1, "requests": 2, "server_us": 1.0, "service_us": 1.0, "queue_us": 0.0,
                                            "proc_us": 1.0, "latency_us": 1.0, "total_s": 0.1}]),
                    "fit": {"a": 1.0, "b": 0.0, "r2": 1.0, "service": {"a": 1.0, "b": 0.0, "r2": 1.0}}}

        monkeypatch.setattr(connections, "run_scaling", run_scaling)
    result = CliRunner().invoke(app, [*argv, option, "4MB"])
    text = result.output + (repr(result.exception) if result.exception else "")
    assert "valid integer" not in text and "cannot read size" not in text, text
    if option == "--max-memory":
        # accepted, and applied: 4 MB is below any run's memory, so the run is refused naming that budget
        assert "memory budget of 4.00 MB" in text, text
        return
    assert result.exit_code == 0, text
    if command == "capture connections":
        assert seen["request_bytes"] == 4_000_000
    if command == "simulate" and option == "--chunk-bytes":
        assert json.loads(result.output)["scenario"]["strategy"]["chunk_bytes"] == 4_000_000


@pytest.mark.parametrize("kind,field", [("ring", "chunk_bytes"), ("ps", "chunk_bytes"), ("ps", "header_bytes"),
                                        ("ring", "partition_bytes"), ("ring", "credit_bytes"), ("ps", "switch_memory")])
def test_every_scenario_byte_field_accepts_units(kind, field):
    extra = {"in_network": "aggregation"} if field == "switch_memory" else {}
    value = "4KiB" if field == "header_bytes" else "4MB"
    s = scenario_from_dict({"strategy": {"kind": kind, field: value, **extra}})
    parsed = {"chunk_bytes": lambda st: st.chunk_bytes, "header_bytes": lambda st: st.header_bytes,
              "partition_bytes": lambda st: st.partition_size, "credit_bytes": lambda st: st.credit_size,
              "switch_memory": lambda st: st.switch_memory_bytes}[field](s.strategy)
    assert parsed == (4096 if field == "header_bytes" else 4_000_000)


def test_a_bad_size_names_the_field_and_the_fix():
    with pytest.raises(ScenarioError, match=r"strategy\.chunk_bytes.*(MB|MiB)"):
        scenario_from_dict({"strategy": {"kind": "ring", "chunk_bytes": "4 furlongs"}})
    with pytest.raises(ScenarioError, match=r"strategy\.chunk_bytes"):
        scenario_from_dict({"strategy": {"kind": "ring", "chunk_bytes": "-4MB"}})
