"""The forked runs of the tests (forked_cli) are what `python -m ddlsim` does: the same exit status, standard output
and standard error, in the working directory and environment given, for a refusal, a usage error, a small
simulation's JSON and a written output; what one run changes is not seen by the next."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import forked_cli
import pytest

ROOT = Path(__file__).resolve().parent.parent
SIM = ["simulate", "-m", "lenet5", "-n", "2", "-i", "2", "--network", "analytic"]


def fresh(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddlsim", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("args", [
    ["simulate", "-m", "lenet5", "-n", "2", "--bandwidth", "0"],      # ddlsim's one-line refusal, status 2
    ["simulate", "--no-such-flag"],                                    # typer's usage error
    ["nosuchcommand"],
    [*SIM, "--json"],                                                  # a run's JSON on standard output
    ["models"],                                                        # a table as wide as COLUMNS
    ["replay", "missing/events.parquet"],
])
def test_a_forked_run_prints_and_ends_as_a_fresh_interpreter_does(tmp_path, args):
    env = {"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "93"}
    want, got = fresh(args, tmp_path, env), forked_cli.run(args, cwd=tmp_path, env=env)
    assert (got.returncode, got.stderr) == (want.returncode, want.stderr)
    if args[-1] != "--json":
        assert got.stdout == want.stdout
        return
    want, got = json.loads(want.stdout), json.loads(got.stdout)  # the same run but for how long it took
    assert want.pop("wall_s") > 0 and got.pop("wall_s") > 0
    assert got == want


def test_a_forked_run_writes_where_it_runs_and_its_changes_stay_in_it(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "COLUMNS": "120"}
    run = forked_cli.run([*SIM, "--out", "run"], cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "run" / "events.parquet").is_file()
    (tmp_path / "mine").write_text("mine")
    refused = forked_cli.run([*SIM, "--out", "mine"], cwd=tmp_path, env=env)  # a file, not a directory
    assert refused.returncode == 2 and refused.stderr.startswith("error: --out mine"), refused.stderr
    assert (tmp_path / "mine").read_text() == "mine"
    # the environment given is the run's whole environment, and this process's stays as it was
    for columns in ("200", "40"):  # one after the other: the second is not the first's width (78 and 50 characters wide)
        given = {**env, "COLUMNS": columns}
        help = ["simulate", "--help"]  # as wide as COLUMNS
        assert forked_cli.run(help, cwd=tmp_path, env=given).stdout == fresh(help, tmp_path, given).stdout
    assert os.getcwd() != str(tmp_path) and os.environ.get("COLUMNS") != "40"


@pytest.mark.parametrize("code", [
    "import ddlsim, sys\nr = ddlsim.simulate(model='lenet5', workers=2, iterations=2, network='analytic')\n"
    "print(sorted(r.summary()) if hasattr(r, 'summary') else type(r).__name__, __name__, sys.argv)",
    "import os\nprint(os.getcwd().endswith('here'), os.environ['ONLY'], sorted(os.environ))",
    "import sys\nprint('to stderr', file=sys.stderr)\nsys.exit(3)",
    "raise ValueError('a snippet that fails')",
    "def f():\n    return g()\nf()",  # a NameError's traceback names <string> and the lines
    "import sys; sys.exit('a message')",
])
def test_forked_code_runs_as_python_dash_c_does(tmp_path, code):
    (tmp_path / "here").mkdir()
    env = {"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ONLY": "this"}
    want = subprocess.run([sys.executable, "-c", code], cwd=tmp_path / "here", env=env, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    got = forked_cli.run_code(code, cwd=tmp_path / "here", env=env)
    assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr)
