"""`--quiet` means one thing on every command that has it (docs/cli.md,
"Quiet"): no progress bar and none of the lines about the run itself
(timings, counts, cache use, files written); the results, the notes that
qualify them and errors are still printed."""

import importlib
import re
from pathlib import Path

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from ddlsim.cli import app
from ddlsim.cli.consoles import QUIET_HELP

# Lines about the run, not its results.
CHATTER = re.compile(r"^wrote |engine [0-9.]+ s|from the cache|^\s+\w+\s+\S+/\S+$|scenarios: \d+ simulated")
VERBS = {"simulate", "replay", "reproduce thesis", "reproduce mg-wfbp", "reproduce network-operator", "reproduce thesis-network",
         "sweep"}


def _verbs_with_quiet() -> dict[str, object]:
    found = {}

    def walk(c, path):
        if hasattr(c, "commands"):
            for name, sub in c.commands.items():
                walk(sub, path + [name])
        elif any("--quiet" in getattr(p, "opts", ()) for p in c.params):
            found[" ".join(path)] = next(p for p in c.params if "--quiet" in getattr(p, "opts", ()))

    walk(typer.main.get_command(app), [])
    return found


def test_every_quiet_option_has_the_one_meaning():
    found = _verbs_with_quiet()
    assert set(found) == VERBS  # a new verb with --quiet is added here, so the test below covers it
    assert all(p.help == QUIET_HELP for p in found.values())


@pytest.fixture(scope="module")
def events(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim") / "run"
    result = CliRunner().invoke(app, ["simulate", "--model", "lenet5", "--workers", "2", "--iterations", "2",
                                      "--network", "analytic", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return str(out / "events.parquet")


def _fake_reproduction(paper: str):
    from ddlsim.cli.reproduce_training import PRINTED
    from ddlsim.reproduce.training_common import Reproduction

    tables = {name: pd.DataFrame({**{k: [1] for k in keys}, "time_ms": [2.5], "paper_time_ms": [2.0]})
              for name, keys in PRINTED[paper]}
    return Reproduction(title=f"{paper} (fake)", tables=tables, notes=["a note that qualifies the result"])


def _argv(verb: str, events: str, tmp_path, monkeypatch) -> list[str]:
    if verb == "simulate":
        # a scenario in the old strategy form is migrated with a note saying what to write: it must survive --quiet
        tmp_path.mkdir(parents=True, exist_ok=True)
        old_form = tmp_path / "old-form.toml"
        old_form.write_text('strategy = "ps"\nworkers = 2\niterations = 1\n[model]\nname = "lenet5"\n[ps]\nservers = 1\n'
                            '[network]\nfidelity = "analytic"\n')
        return ["simulate", str(old_form), "--out", str(tmp_path / "out")]
    if verb == "sweep":
        tmp_path.mkdir(parents=True, exist_ok=True)
        grid = tmp_path / "grid.toml"
        grid.write_text('iterations = 1\n[model]\nname = "lenet5"\n[network]\nfidelity = "analytic"\n[sweep]\nworkers = [2, 3]\n')
        return ["sweep", str(grid), "--out", str(tmp_path / "out"), "--jobs", "1"]
    if verb == "replay":
        return ["replay", events, "--iterations", "1", "--network", "analytic", "--out", str(tmp_path / "out")]
    if verb in ("reproduce thesis", "reproduce mg-wfbp"):
        paper = verb.split()[1]
        module = importlib.import_module({"thesis": "ddlsim.reproduce.thesis", "mg-wfbp": "ddlsim.reproduce.mg_wfbp"}[paper])
        monkeypatch.setattr(module, "reproduce", lambda quick, progress: _fake_reproduction(paper))
        return ["reproduce", paper, "--quick", "--out", str(tmp_path / "out")]
    if verb == "reproduce thesis-network":
        return ["reproduce", "thesis-network", "--quick", "--out", str(tmp_path / "out"), "--runs", str(tmp_path / "runs")]
    return ["reproduce", "network-operator", "--quick", "--only", "table1", "--out", str(tmp_path / "out"),
            "--cache", str(tmp_path.parent / "no-cache")]


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_quiet_drops_the_chatter_and_keeps_results_and_notes(verb, events, tmp_path, monkeypatch):
    # paths relative to the test's directory: a long one (the scratch directory's under pytest-xdist) was wrapped onto
    # a line of its own, which CHATTER cannot tell from a result
    monkeypatch.chdir(tmp_path)
    loud = CliRunner().invoke(app, _argv(verb, events, Path("loud"), monkeypatch))
    quiet = CliRunner().invoke(app, [*_argv(verb, events, Path("quiet"), monkeypatch), "--quiet"])
    assert loud.exit_code == 0 and quiet.exit_code == 0, (loud.output, quiet.output)
    loud_lines = [line.rstrip() for line in loud.output.splitlines()]
    quiet_lines = [line.rstrip() for line in quiet.output.splitlines()]
    chatter = [line for line in loud_lines if CHATTER.search(line)]
    assert chatter, "the loud run has lines about the run itself"
    assert not [line for line in quiet_lines if CHATTER.search(line)], quiet.output
    # the results: everything else, in the same order
    assert quiet_lines == [line for line in loud_lines if not CHATTER.search(line)]
    assert len(quiet_lines) >= 5  # tables
    if verb in ("simulate", "reproduce thesis", "reproduce mg-wfbp", "reproduce thesis-network"):  # these runs have notes
        assert any("note:" in line for line in quiet_lines), quiet.output
