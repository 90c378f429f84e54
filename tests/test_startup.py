"""Start-up stays light: the small-run paths import none of the heavy libraries
(their time is measured by benchmarks/bench_startup.py, not here)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("pandas", "pyarrow", "matplotlib", "rich")

PROBE = """
import json, runpy, sys
sys.argv = {argv!r}
try:
    runpy.run_module("ddlsim", run_name="__main__")
except SystemExit:
    pass
sys.stdout.flush()
print("\\n" + json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)), file=sys.stderr)
"""


def _heavy_modules_after(argv: list[str]) -> tuple[list[str], str]:
    script = PROBE.format(argv=["ddlsim", *argv], heavy=HEAVY)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    return json.loads(out.stderr.strip().splitlines()[-1]), out.stdout


@pytest.mark.parametrize("argv", [
    ["simulate", "--workers", "8", "--iterations", "1", "--json"],
    ["simulate", "--strategy", "ps", "--workers", "4", "--iterations", "1", "--json"],
    ["--version"],
])
def test_small_commands_import_no_heavy_library(argv):
    loaded, stdout = _heavy_modules_after(argv)
    assert loaded == []
    if "--json" in argv:
        assert json.loads(stdout)["iteration_time_s"] > 0


def test_import_ddlsim_and_simulate_in_python_stay_light():
    script = ("import sys, ddlsim\nr = ddlsim.simulate(workers=4, iterations=1)\nr.summary()\n"
              f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_the_event_log_is_still_there_when_asked_for():
    import ddlsim

    r = ddlsim.simulate(workers=4, iterations=2)
    assert len(r.events) == r.summary()["log_rows"]
    assert r.events.is_validated
