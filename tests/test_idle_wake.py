"""benchmarks/idle_wake.py (docs/validation.md): the trial order is balanced and seeded, the summary's medians and
ratios match a brute force written apart, a real short run gives every condition, bad input is one line, exit 2."""

import importlib.util
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "idle_wake.py"
spec = importlib.util.spec_from_file_location("idle_wake", SCRIPT)
idle_wake = importlib.util.module_from_spec(spec)
spec.loader.exec_module(idle_wake)


def test_every_condition_comes_repeats_times_in_a_seeded_order():
    order = idle_wake.trial_order([0, 0.5, 16], ["sleep", "spin"], 7, seed=3)
    assert Counter(order) == {(m, i): 7 for m in ("sleep", "spin") for i in (0, 0.5, 16)}
    assert order == idle_wake.trial_order([0, 0.5, 16], ["sleep", "spin"], 7, seed=3)
    assert order != idle_wake.trial_order([0, 0.5, 16], ["sleep", "spin"], 7, seed=4)


def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def test_the_summary_is_the_median_per_condition_over_the_shortest_idle_s():
    rng = random.Random(11)
    rows = [{"mode": rng.choice(["sleep", "spin"]), "idle_ms": rng.choice([0.0, 2.0, 16.0]),
             "step_ms": rng.uniform(0.1, 1), "forward_ms": rng.uniform(0.5, 2), "backward_ms": rng.uniform(1, 3)}
            for _ in range(300)]
    got = {(s["mode"], s["idle_ms"]): s for s in idle_wake.summary(rows)}
    assert len(got) == 6
    for (mode, idle), s in got.items():
        mine = [r for r in rows if r["mode"] == mode and r["idle_ms"] == idle]
        base = [r for r in rows if r["mode"] == mode and r["idle_ms"] == 0.0]
        assert s["n"] == len(mine)
        for part in ("step", "forward", "backward"):
            assert s[f"{part}_ms"] == _median([r[f"{part}_ms"] for r in mine])
            assert abs(s[f"{part}_ratio"] - s[f"{part}_ms"] / _median([r[f"{part}_ms"] for r in base])) < 1e-12


def _run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd, timeout=300,
                          env={"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin"})


def test_a_short_real_run_writes_every_trial(tmp_path):
    out = tmp_path / "idle.csv"
    run = _run("--repeats", "2", "--idles", "0,1", "--out", str(out))
    assert run.returncode == 0, run.stderr
    lines = out.read_text().splitlines()
    assert lines[0].startswith("trial,mode,idle_ms,step_ms") and len(lines) == 1 + 2 * 2 * 2
    assert run.stdout.count("| sleep |") == 2 and run.stdout.count("| spin |") == 2


def test_bad_input_is_one_line_exit_2_and_an_existing_out_is_kept(tmp_path):
    kept = tmp_path / "kept.csv"
    kept.write_text("mine\n")
    for args in (["--idles", "a,b"], ["--modes", "nap"], ["--repeats", "0"], ["--idles", "-1"],
                 ["--out", str(kept), "--repeats", "1"]):
        run = _run(*args)
        assert run.returncode == 2 and "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1, \
            (args, run.stderr)
    assert kept.read_text() == "mine\n"
