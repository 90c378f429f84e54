"""tools/fuzz_readers.py: a thousand seeded inputs through every reader give only ddlsim's own errors,
and the harness itself catches what a broken reader could do (crash, hang, loop, memory, exception)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "fuzz_readers.py"


def fuzz(*args, timeout=600):
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=timeout)


def _summary(run) -> str:
    return run.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def fuzz_module():
    spec = importlib.util.spec_from_file_location("fuzz_readers", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def samples_dir(fuzz_module, tmp_path_factory):
    """Every reader's samples, made once for this module (two of them are real captures): a campaign whose --out
    already holds ``samples`` starts from them, as a campaign resumed in the same directory does."""
    samples = tmp_path_factory.mktemp("samples") / "samples"
    fuzz_module.make_samples(samples)
    return samples


def _out_with_samples(tmp_path, samples_dir):
    out = tmp_path / "out"
    shutil.copytree(samples_dir, out / "samples", symlinks=True)
    return out


def test_a_thousand_seeded_inputs_give_only_ddlsims_own_errors(tmp_path, samples_dir):
    # the suite's share; each session's campaign runs 10,000 (docs/interop.md, "Fuzzing the readers")
    out = _out_with_samples(tmp_path, samples_dir)
    run = fuzz("--inputs", "1000", "--seed", "20261126", "--workers", "2", "--out", str(out))
    summary = _summary(run)
    assert run.returncode == 0 and " 0 failures (none)" in summary, (summary, run.stderr[-3000:])
    assert summary.startswith("fuzz_readers: 1000 inputs (seed 20261126)")
    read, refused = (int(x) for x in (summary.split("; ")[1].split(" read, ")[0],
                                      summary.split(" read, ")[1].split(" refused")[0]))
    assert read + refused == 1000 and read > 100 and refused > 100  # both outcomes are exercised
    assert not (out / "findings").exists()


def test_the_harness_counts_crashes_hangs_loops_memory_and_exceptions_and_goes_on(tmp_path, samples_dir):
    out = _out_with_samples(tmp_path, samples_dir)
    injected = {"crash": 3, "hang": 4, "slow": 25, "memory": 26, "exception": 27}
    run = fuzz("--inputs", "40", "--seed", "5", "--workers", "2", "--out", str(out), "--time-limit", "2",
               "--hang-limit", "3", "--memory-mb", "256", *[f"--inject={k}:{i}" for k, i in injected.items()])
    summary = _summary(run)
    assert run.returncode == 1, run.stderr[-3000:]
    assert summary.startswith("fuzz_readers: 40 inputs (seed 5), 5 failures (crash 1, exception 1, hang 1, memory 1, "
                              "timeout 1)"), summary
    saved = {json.loads(p.read_text())["index"]: json.loads(p.read_text())["outcome"]
             for p in (out / "findings").glob("*/*/info.json")}
    assert saved == {3: "crash", 4: "hang", 25: "timeout", 26: "memory", 27: "exception"}
    # each saved input is the input itself: written again from (seed, index), every file of its sample
    for info in (out / "findings").glob("*/*/info.json"):
        assert any((info.parent / "input").iterdir())


@pytest.fixture(scope="module")
def tool(fuzz_module, samples_dir):
    return fuzz_module, fuzz_module.load_samples(samples_dir)


def test_inputs_are_a_function_of_seed_and_index(tool):
    module, samples = tool
    first = [module.make_input(samples, 7, index) for index in range(60)]
    module._PARQUET_VARIANTS.clear()
    again = [module.make_input(samples, 7, index) for index in range(60)]
    other = [module.make_input(samples, 8, index) for index in range(60)]
    assert first == again and first != other
    assert {target for target, _, _ in first} == set(module.TARGETS)  # every reader is driven


def test_samples_are_valid_inputs_of_every_reader(tool, tmp_path):
    module, samples = tool
    for target in module.TARGETS:
        for number, files in enumerate(samples[target]):
            module._write_files(tmp_path / f"{target}{number}", files)
            assert module.run_target(target, tmp_path / f"{target}{number}") is not None, target
