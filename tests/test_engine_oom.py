"""A run whose memory the machine cannot give gets a ddlsim error (exit 2),
not an aborted interpreter: the engine grows its event log and sizes its
operation tables with try_reserve. The child process caps its address space
(RLIMIT_AS) 100 MiB above what it uses once ddlsim and its libraries are
loaded, then logs every step of a 64-worker ResNet-50 ring (2.6 M rows,
several hundred MiB). Before, Rust's allocation failure aborted Python
(exit 134, "memory allocation of ... bytes failed").
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = r"""
import resource, runpy, sys
import ddlsim, numpy, pandas, pyarrow  # loaded before the limit
import ddlsim.cli
extra = 100 * 2**20
vm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (vm + extra, vm + extra))
sys.argv = ["ddlsim"] + sys.argv[1:]
runpy.run_module("ddlsim", run_name="__main__")
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc to size the address-space limit")
def test_a_failed_engine_allocation_is_a_ddlsim_error_with_exit_2(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent / "python"), RUST_BACKTRACE="0")
    args = ["simulate", "--model", "resnet50", "--workers", "64", "--iterations", "1", "--trace-detail", "step", "--force", "--json"]
    proc = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "out of memory" in lines[0] and "event log" in lines[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
