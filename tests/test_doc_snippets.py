"""Every Python snippet (```python block) of the README and of docs/**/*.md runs
as written, each in a scratch directory of its own, after the ddlsim
commands that make the files it reads (the doc's own shell lines, at small
sizes)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import forked_cli
import pytest
from script_helpers import free_port, python_blocks

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "reproduction").glob("*.md"))]
SIM = ["simulate", "--model", "lenet5", "--workers", "2", "--iterations", "2", "--network", "analytic"]
PS = [*SIM, "--strategy", "ps"]

# (doc, index of the python block in it) -> ddlsim commands to run first in the scratch directory.
SETUP = {
    ("README.md", 0): [[*SIM, "--out", "cap"], [*PS, "--out", "cap-ps"]],
    ("README.md", 1): [],
    ("docs/adaptive-priority.md", 0): [],
    ("docs/allreduce-algorithms.md", 0): [],
    ("docs/analysis.md", 0): [[*PS, "--out", "run-ps"], [*SIM, "--out", "run-ring"]],
    ("docs/analysis.md", 1): [[*SIM, "--record-flows", "--out", "run-flows"]],
    ("docs/capture-shaping.md", 0): [],
    ("docs/capture.md", 0): [],
    ("docs/capture.md", 1): [],
    ("docs/event-log.md", 0): [],
    ("docs/grouping.md", 0): [],
    ("docs/interop.md", 0): [[*PS, "--out", "ps1"], ["convert", "ps1/events.parquet", "hta/", "--to", "kineto"]],
    ("docs/interop.md", 1): [[*PS, "--out", "ps1"], ["convert", "ps1/events.parquet", "hta/", "--to", "kineto"]],
    ("docs/parameter-server.md", 0): [],
    ("docs/parameter-server.md", 1): [],
    ("docs/parameter-server.md", 2): [],
    ("docs/parameter-server.md", 3): [],
    ("docs/planning.md", 0): [],
    ("docs/planning.md", 1): [],
    ("docs/planning.md", 2): [],
    ("docs/reproduction/mg-wfbp.md", 0): [],
    ("docs/reproduction/network-operator.md", 0): [],
    ("docs/reproduction/thesis.md", 0): [],
    ("docs/reproduction/thesis-network.md", 0): [],
    ("docs/tenants.md", 0): [],
    ("docs/validation.md", 0): [],
    ("docs/jobs.md", 0): [],
    ("docs/jobs.md", 1): [],
    ("docs/sweep.md", 0): [["sweep", "examples/sweep/small-grid.toml", "--out", "sweep-out", "--jobs", "1"]],
}


def _snippets() -> dict[tuple[str, int], str]:
    return {(str(doc.relative_to(ROOT)), i): block for doc in DOCS for i, block in enumerate(python_blocks(doc))}


SNIPPETS = _snippets()
# Snippets that read no file made before them and that another test runs word for word (the README's Python API
# block: test_readme; docs/validation.md's `validate(quick=True)`: test_validate reads what it wrote): run once per
# session (conftest.snippet_once).
ONCE = {("README.md", 1), ("docs/validation.md", 0)}


def test_every_snippet_is_run_below():
    # a new snippet gets an entry in SETUP (the files it reads), so that it is run
    assert set(SNIPPETS) == set(SETUP)


def _can_shape() -> bool:
    return os.geteuid() == 0 and all(
        subprocess.run(["which", tool], capture_output=True).returncode == 0 for tool in ("ip", "tc"))


@pytest.fixture(scope="session")
def simulated(tmp_path_factory):
    """`simulated(argv, into)`: the output directory of the setup command `ddlsim simulate ... --out X`, copied to
    `into`. Each simulation is run once per session (SIM and PS serve several snippets): a simulation's files do not
    depend on the name of its --out directory, nor on the run."""
    done: dict[tuple[str, ...], Path] = {}

    def copy(argv: list[str], into: Path) -> None:
        key = tuple(argv[:-1])
        if key not in done:
            cwd = tmp_path_factory.mktemp("simulated")
            (cwd / "examples").symlink_to(ROOT / "examples")
            run = forked_cli.run([*key, "out"], cwd=cwd, env={**os.environ, "COLUMNS": "100"}, timeout=300)
            assert run.returncode == 0, (argv, run.stderr[-2000:])
            done[key] = cwd / "out"
        shutil.copytree(done[key], into)

    return copy


@pytest.mark.parametrize("doc,index", sorted(SETUP), ids=[f"{d}#{i}" for d, i in sorted(SETUP)])
def test_the_snippet_runs_as_written(doc, index, tmp_path, simulated, snippet_once):
    if (doc, index) in ONCE:
        run, _ = snippet_once(SNIPPETS[(doc, index)])
        assert run.returncode == 0, run.stderr[-3000:]
        return
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "COLUMNS": "100", "MPLBACKEND": "Agg", "MASTER_PORT": str(free_port()),
           "XDG_CACHE_HOME": str(tmp_path / "cache")}  # the sweep's results cache, not the user's
    for argv in SETUP[(doc, index)]:
        if argv[0] == "simulate" and argv[-2] == "--out":
            simulated(argv, tmp_path / argv[-1])
            continue
        run = forked_cli.run(argv, cwd=tmp_path, env=env, timeout=300)
        assert run.returncode == 0, (argv, run.stderr[-2000:])
    run = forked_cli.run_code(SNIPPETS[(doc, index)], cwd=tmp_path, env=env, timeout=600)
    if doc == "docs/capture-shaping.md" and not _can_shape():
        # without root and ip/tc the snippet must stop with ddlsim's clear refusal, not half-way
        assert run.returncode != 0 and "CaptureError" in run.stderr and "root" in run.stderr, run.stderr[-2000:]
        return
    assert run.returncode == 0, run.stderr[-3000:]


def test_ddlsim_trace_without_importing_it():
    code = "import ddlsim\nlog = ddlsim.trace.read_event_log\nprint(sorted(set(ddlsim.SUBPACKAGES) - set(dir(ddlsim))))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == "[]", run.stderr
