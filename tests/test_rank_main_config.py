"""`python -m ddlsim.capture.rank_main JOB --config job.json --out DIR`, the entry point that torchrun starts on
each node (docs/capture-ps.md, "torchrun"): a job description it cannot use was a Python traceback per rank (json's
JSONDecodeError, FileNotFoundError, AttributeError for a list, DdlsimError and ValueError raised out of the job).
Now one line per rank naming the file or the field, exit status 2, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def rank(job: str, config: Path, out: Path) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin", "RANK": "0", "WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}  # never reached: the description is refused first
    return subprocess.run([sys.executable, "-m", "ddlsim.capture.rank_main", job, "--config", str(config), "--out",
                           str(out)], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("text, why", [
    ("not json", "cannot read the job description (Expecting value"),
    ("[]", "not a job description (a JSON object)"),
    ("[" * 5000 + "]" * 5000, "cannot read the job description (maximum recursion depth"),
    (b"\xff{}", "cannot read the job description ('utf-8' codec can't decode"),
    (None, "job description not found"),
    ("fifo", "is a FIFO (named pipe), not a job description"),
])
def test_a_job_description_it_cannot_read_is_one_line(tmp_path, text, why):
    config = tmp_path / "job.json"
    if text == "fifo":
        os.mkfifo(config)  # would block the read before
    elif isinstance(text, bytes):
        config.write_bytes(text)
    elif text is not None:
        config.write_text(text)
    run = rank("ps", config, tmp_path / "out")
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    line = run.stderr.strip()
    assert "\n" not in line and line.startswith(f"error: rank 0: --config {config}") and why in line, line
    assert "give the job.json that ddlsim capture wrote" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("job, text, why", [
    ("ps", '{"job": "ps", "workers": "x"}', "ps capture: workers = 'x'; give a whole number"),
    ("ps", '{"job": "ps", "workers": 3}', "ps capture: world size 2 != workers 3 + servers 1"),
    ("ddp", '{"model": "nope"}', "ddp capture: unknown model 'nope'"),
    ("ddp", '{"model": "lenet5", "device": "tpu"}', 'ddp capture: device must be "cpu" or "cuda"'),  # ValueError before
    # accepted before, and failed after the rendezvous (torch.manual_seed's TypeError, a timedelta's OverflowError)
    # or trained with them (a learning rate of NaN, a bucket of inf MiB)
    ("ddp", '{"seed": "x"}', "ddp capture: seed must be a whole number from 0 to 2^63 - 1, got 'x'"),
    ("ddp", '{"timeout_s": 1e300}', "ddp capture: timeout_s must be a positive number of seconds below 86400000000000, got 1e+300"),
    ("ddp", '{"lr": NaN}', "ddp capture: lr must be a positive number, got nan"),
    ("ddp", '{"bucket_cap_mb": Infinity}', "ddp capture: bucket_cap_mb must be a positive number of MiB, got inf"),
    ("ddp", '{"merge": "yes"}', "ddp capture: merge must be true or false, got 'yes'"),
])
def test_a_job_description_the_job_refuses_is_one_line(tmp_path, job, text, why):
    pytest.importorskip("torch")
    config = tmp_path / "job.json"
    config.write_text(text)
    run = rank(job, config, tmp_path / "out")
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    line = run.stderr.strip()
    assert "\n" not in line and line.startswith("error: rank 0: ") and why in line, line
    assert not (tmp_path / "out").exists()
