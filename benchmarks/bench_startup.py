"""Start-up benchmark: whole-process wall time of small commands.

Each command runs REPEATS times in a fresh process; the median is printed
with its ratio to the baseline (a bare `python -c pass`, measured in the
same run). Target (issue 6): `ddlsim simulate --json` for an 8-rank
ResNet-50 iteration under 0.25 s.

    python benchmarks/bench_startup.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

REPEATS = 7
COMMANDS = {
    "python -c pass (baseline)": [sys.executable, "-c", "pass"],
    "import numpy, pydantic (floor)": [sys.executable, "-c", "import numpy, pydantic"],
    "+ typer (floor)": [sys.executable, "-c", "import numpy, pydantic, typer"],
    "import ddlsim": [sys.executable, "-c", "import ddlsim"],
    "ddlsim --version": [sys.executable, "-m", "ddlsim", "--version"],
    "simulate 8 ranks --json": [sys.executable, "-m", "ddlsim", "simulate", "--workers", "8", "--iterations", "1", "--json"],
    "simulate 8 ranks (table)": [sys.executable, "-m", "ddlsim", "simulate", "--workers", "8", "--iterations", "1"],
}


# As a user's machine runs it: bytecode cached (a development shell may set PYTHONDONTWRITEBYTECODE).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def median_wall(command: list[str]) -> float:
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)  # warm: .pyc, page cache
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    base = None
    print(f"{'command':<32}{'median s':>10}{'vs base':>9}")
    for label, command in COMMANDS.items():
        t = median_wall(command)
        base = base or t
        print(f"{label:<32}{t:>10.3f}{t / base:>9.1f}", flush=True)


if __name__ == "__main__":
    main()
