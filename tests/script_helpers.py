"""Running a Python script in a child process the way the tests of your own DDP script do: ddlsim from this
checkout, one thread, a HOME of the test's own, and a free port for torch.distributed's rendezvous."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from ddlsim.capture.launch import free_port  # the launcher's pick, for the tests' own jobs

ROOT = Path(__file__).resolve().parent.parent


def run_python(args: list[str], home: Path, timeout: float = 240, **env: str) -> subprocess.CompletedProcess:
    """``python ARGS`` (a script and its arguments, or ``-c CODE``) with ddlsim importable from this checkout and
    `env` added; its output captured."""
    base = {"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": str(home)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env={**base, **env})


def python_blocks(doc: Path) -> list[str]:
    """The ```python blocks of a Markdown file, in order (as test_doc_snippets runs them)."""
    return re.findall(r"^```python\n(.*?)^```", doc.read_text(encoding="utf-8"), flags=re.S | re.M)


__all__ = ["ROOT", "free_port", "python_blocks", "run_python"]
