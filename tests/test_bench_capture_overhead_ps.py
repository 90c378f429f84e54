"""benchmarks/bench_capture_overhead_ps.py: the PS capture job run recorded and with nothing recorded, in ABBA order,
each run's iterations timed on rank 0 after its warm-up; bad arguments are refused with status 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the PS capture benchmark needs PyTorch")

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "OMP_NUM_THREADS": "1"}


def test_each_kind_runs_and_each_run_times_its_iterations_after_the_warm_up(tmp_path):
    out = tmp_path / "ps.json"
    run = subprocess.run([sys.executable, "benchmarks/bench_capture_overhead_ps.py", "--runs", "1", "--iterations", "32",
                          "--warmup", "2", "--json", str(out)], cwd=ROOT, env=ENV, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "capture overhead:" in run.stdout and "target < 3 %" in run.stdout
    data = json.loads(out.read_text())
    # one run of each kind; 32 iterations give 31 times (from the second iteration's end on), less the first warm-up one
    assert {kind: [len(r) for r in runs] for kind, runs in data["times_ms"].items()} == {"plain": [30], "recorded": [30]}
    assert all(t > 0 for runs in data["times_ms"].values() for r in runs for t in r)
    # the server flushes every 200 ms: 30 iterations of about 20 ms hold two of its flushes or more
    cpu = data["cpu_ms_per_iteration"]
    assert len(cpu["plain"]) == len(cpu["recorded"]) == 1
    ranks = data["cpu_ms_per_rank"]
    assert [len(r) for kind in ranks for r in ranks[kind]] == [3, 3]  # 2 workers and a server, per run
    if None not in cpu["plain"] + cpu["recorded"]:
        assert "CPU overhead:" in run.stdout and "rank 2 (server)" in run.stdout
        assert all(cpu[kind][0] == pytest.approx(sum(ranks[kind][0])) for kind in cpu)
        # all processes' CPU per iteration: more than nothing, less than the machine's cores for the whole iteration
        for kind in cpu:
            assert 0 < cpu[kind][0] <= (os.cpu_count() or 1) * max(data["times_ms"][kind][0]) * 1.05
    else:
        assert "a rank flushed fewer than twice" in run.stdout


def _bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_capture_overhead_ps
    finally:
        sys.path.pop(0)
    return bench_capture_overhead_ps


def test_cpu_per_iteration_is_the_rate_times_the_iteration_for_any_flush_cadence():
    """A process that burns CPU at a constant rate r (CPU ns per host ns) uses r * T per iteration of T ns, whether it
    flushes once per iteration (a worker) or at its own cadence unrelated to the iterations (the server, every 200 ms)
    and whatever iteration lengths rank 0 has: the closed form, on seeded random cadences."""
    import random

    cpu_per_iteration = _bench().cpu_per_iteration
    rng = random.Random(7)
    for _ in range(200):
        period = rng.randrange(5_000_000, 40_000_000)  # rank 0's iteration, ns
        ends = [10**12 + k * period for k in range(rng.randrange(3, 60))]
        rate = rng.uniform(0.05, 2.0)
        start = 10**12 - rng.randrange(0, 5 * period)
        step = rng.randrange(1_000_000, max(2_000_001, (ends[-1] - ends[0]) // 3))
        flushes = [(t, int(rate * (t - start)) + 7) for t in range(start, ends[-1] + 3 * step, step)]
        got = cpu_per_iteration(ends, flushes)
        inside = [t for t, _ in flushes if ends[0] <= t <= ends[-1]]
        if len(inside) < 2:
            assert got is None
        else:
            # the CPU times are whole ns: their difference is off by under 1 ns, over (t1 - t0) / period iterations
            assert abs(got - rate * period) <= 1e-9 * rate * period + period / (inside[-1] - inside[0])
    # uneven iterations: a flush mid-way through the second iteration counts it as a half
    ends = [0, 10, 30, 40]
    assert cpu_per_iteration(ends, [(0, 0), (20, 100)]) == 100 / 1.5
    assert cpu_per_iteration(ends, [(5, 0)]) is None


def test_too_few_iterations_are_refused():
    run = subprocess.run([sys.executable, "benchmarks/bench_capture_overhead_ps.py", "--iterations", "5", "--warmup", "5"],
                         cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "--iterations must exceed --warmup" in run.stderr


@pytest.mark.parametrize("bench", ["bench_capture_overhead.py", "bench_capture_overhead_ps.py"])
@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_json_path_that_is_not_a_file_is_refused_before_any_run_and_left_alone(tmp_path, bench, kind):
    """The capture-overhead benchmarks' --json goes through ddlsim's output rule: a directory or a FIFO is refused in
    one line, before the minutes of runs, and left as it was (before: a traceback after the runs, or a write into
    the FIFO that blocks)."""
    target = tmp_path / "out.json"
    if kind == "directory":
        target.mkdir()
        (target / "keep").write_text("mine")
    else:
        os.mkfifo(target)
    run = subprocess.run([sys.executable, f"benchmarks/{bench}", "--iterations", "8", "--warmup", "2", "--json",
                          str(target)], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: --json {target}"), run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""
    if kind == "directory":
        assert [p.name for p in target.iterdir()] == ["keep"] and (target / "keep").read_text() == "mine"
    else:
        assert os.path.exists(target) and not os.path.isfile(target)


def test_a_rank_that_fails_ends_the_run_and_leaves_no_rank_behind(monkeypatch):
    """A worker that exits mid-run (the capture's crash switch: status 3 after iteration 1) leaves the server and
    the other worker waiting for it: the run ends with the ranks' exit codes and kills the others, instead of
    waiting 4x the timeout and ending in a traceback (queue.Empty)."""
    import multiprocessing

    from ddlsim.capture.ps import ps_config

    bench = _bench()
    config = ps_config(model="lenet5", workers=2, servers=1, iterations=30, batch_size=4, timeout_s=60.0,
                       crash_rank=1, crash_after_iteration=1)
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.setenv("PYTHONPATH", ENV["PYTHONPATH"])
    with pytest.raises(SystemExit, match=r"a rank failed: exit codes \[.*3.*\]"):
        bench.one_run(config, 3, False, 2)
    assert multiprocessing.active_children() == []


def test_in_an_alternating_run_blocks_take_turns_after_the_warm_up():
    """--alternate B: the warm-up is recorded, then blocks of B iterations, recorded and not in turn, the first
    one recorded or not as asked (worked by hand)."""
    block_recorded = _bench().block_recorded
    assert [block_recorded(i, 2, 3, True) for i in range(12)] == [True, True, True, True, True, False, False, False,
                                                                  True, True, True, False]
    assert [block_recorded(i, 2, 3, False) for i in range(12)] == [True, True, False, False, False, True, True, True,
                                                                   False, False, False, True]


def test_paired_blocks_leave_out_each_block_s_first_iteration_and_pair_complete_neighbours():
    """Rows of a run with warm-up 1 and blocks of 3 (recorded first): blocks 1-3, 4-6, 7-9, 10-12 and a last one
    begun, 13-14. Each block's first iteration is left out of both kinds; a pair is a block and the next, both
    complete; its difference is the recorded block's mean less the other's (the numbers worked by hand)."""
    bench = _bench()
    times = {0: 99.0, 1: 50.0, 2: 10.0, 3: 12.0, 4: 60.0, 5: 9.0, 6: 8.0, 7: 70.0, 8: 20.0, 9: 22.0, 10: 80.0,
             11: 15.0, 12: 19.0, 13: 90.0, 14: 30.0}
    rows = [(i, bench.block_recorded(i, 1, 3, True), t, [1.0, 2.0]) for i, t in sorted(times.items()) if i >= 1]
    recorded, plain, diffs = bench.paired_blocks(rows, 1, 3)
    assert sorted(recorded) == [10.0, 12.0, 20.0, 22.0, 30.0]
    assert sorted(plain) == [8.0, 9.0, 15.0, 19.0]
    assert diffs == [11.0 - 8.5, 21.0 - 17.0]
    # the same run with the unrecorded block first: the pairs' differences change sign
    rows = [(i, bench.block_recorded(i, 1, 3, False), t, [1.0]) for i, t in sorted(times.items()) if i >= 1]
    recorded, plain, diffs = bench.paired_blocks(rows, 1, 3)
    assert sorted(plain) == [10.0, 12.0, 20.0, 22.0, 30.0] and diffs == [8.5 - 11.0, 17.0 - 21.0]


def test_an_alternating_run_times_each_iteration_of_both_kinds(tmp_path):
    out = tmp_path / "alt.json"
    run = subprocess.run([sys.executable, "benchmarks/bench_capture_overhead_ps.py", "--alternate", "2", "--runs", "2",
                          "--iterations", "14", "--warmup", "2", "--phases", "--json", str(out)], cwd=ROOT, env=ENV,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "capture overhead:" in run.stdout and "paired blocks:" in run.stdout
    data = json.loads(out.read_text())
    bench = _bench()
    assert [r["first_recorded"] for r in data["runs"]] == [True, False]
    for r in data["runs"]:
        # an iteration's time is from the previous iteration's end: iterations 2..13
        assert [row[0] for row in r["rows"]] == list(range(2, 14))
        kinds = [bench.block_recorded(i, 2, 2, r["first_recorded"]) for i in range(2, 14)]
        assert [row[1] for row in r["rows"]] == kinds
        assert all(row[2] > 0 and len(row[3]) == 2 and min(row[3]) >= 0 for row in r["rows"])
    # 12 iterations a run in 6 blocks of 2: 3 pairs a run
    assert data["summary"]["pairs"] == 6
    # the server's flushes timed (every 200 ms: in either kind), and their share printed
    assert all(r["server_flush_ms"] >= 0 for r in data["runs"]) and "the server's flushes:" in run.stdout
    # --phases: each worker's phases tile its iterations, flush to flush (rank 0's are the timed iterations)
    assert "recording per worker and iteration by phase" in run.stdout
    for r in data["runs"]:
        assert len(r["phases"]) == 2
        took = {row[0]: row[2] for row in r["rows"]}
        worker0 = {i: (wall, cpu) for i, wall, cpu in r["phases"][0]}
        assert set(took) <= set(worker0)
        for i, t in took.items():
            wall, cpu = worker0[i]
            assert len(wall) == len(cpu) == 6 and min(wall) >= 0 and min(cpu) >= 0
            assert abs(sum(wall) / 1e6 - t) < 1e-6, (i, wall, t)  # the same flushes' host times
            assert all(c <= w + 100_000 for w, c in zip(wall, cpu))  # a thread's CPU time within its wall time


def test_phase_lines_average_each_kind_per_worker_iteration_and_subtract():
    """--phases: warm-up 1, blocks of 2, recorded first: iterations 1-2 recorded, 3-4 not, 5-6 recorded, 7-8 not;
    each block's first (1, 3, 5, 7) left out. Two workers; the means and differences worked by hand."""
    bench = _bench()

    def row(i, scale):
        return (i, [scale * (k + 1) * 1000 for k in range(6)], [scale * 1000] * 6)
    workers = [[row(i, {1: 99, 2: 10, 3: 99, 4: 4, 5: 99, 6: 14, 7: 99, 8: 6}[i]) for i in range(1, 9)],
               [row(i, {1: 99, 2: 12, 3: 99, 4: 2, 5: 99, 6: 16, 7: 99, 8: 8}[i]) for i in range(1, 9)]]
    diff, lines = bench.phase_lines([{"first_recorded": True, "phases": workers}], 1, 2)
    # recorded scales 10, 14, 12, 16: mean 13; not recorded 4, 6, 2, 8: mean 5; difference 8 (x1000 ns = 8 us)
    assert [round(diff[name]["wall"], 6) for name in bench.PHASES] == [8.0 * (k + 1) for k in range(6)]
    assert [round(diff[name]["cpu"], 6) for name in bench.PHASES] == [8.0] * 6
    assert diff["total"] == {"wall": 8.0 * 21, "cpu": 48.0}
    assert lines[0].endswith("in all +168 (+48)") and "forward +16 (+8)" in lines[0]


@pytest.mark.parametrize("args, expected", [
    (["--phases"], "--phases needs --alternate B"),
    (["--alternate", "1"], "--alternate must be 2 or more"),
    (["--alternate", "10", "--iterations", "20", "--warmup", "5"], "--alternate must be 2 or more"),
    (["--alternate", "2", "--model", "sparse-lr"], "--alternate needs --model lenet5")])
def test_an_alternation_without_two_blocks_of_two_or_more_or_a_zoo_model_is_refused(args, expected):
    run = subprocess.run([sys.executable, "benchmarks/bench_capture_overhead_ps.py", *args], cwd=ROOT, env=ENV,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and expected in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("pattern, count", [("ps-capture-overhead-2core-w2-*.json", 3),
                                            ("ps-capture-overhead-2core-w1-*.json", 3),
                                            ("ps-capture-overhead-2core-le10-w2-*.json", 2),
                                            ("ps-capture-overhead-2core-le10-w1-*.json", 2),
                                            ("ps-capture-overhead-2core-srv-before-w1-*.json", 4),
                                            ("ps-capture-overhead-2core-srv-after-w1-*.json", 4),
                                            ("ps-capture-overhead-2core-srv-before-w2-*.json", 8),
                                            ("ps-capture-overhead-2core-srv-after-w2-*.json", 8),
                                            ("ps-capture-overhead-2core-held-before-w1-*.json", 12),
                                            ("ps-capture-overhead-2core-held-after-w1-*.json", 12),
                                            ("ps-capture-overhead-2core-held-before-w2-*.json", 12),
                                            ("ps-capture-overhead-2core-held-after-w2-*.json", 12)])
def test_the_docs_overhead_inside_one_run_is_the_summary_of_the_stored_runs(pattern, count):
    """docs/capture-ps.md's "Inside one run" blocks are --summarize of the stored --alternate runs, line for line."""
    files = sorted(str(p) for p in (ROOT / "docs" / "data").glob(pattern))
    assert len(files) == count
    run = subprocess.run([sys.executable, "benchmarks/bench_capture_overhead_ps.py", "--summarize", *files], cwd=ROOT,
                         env=ENV, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    doc = (ROOT / "docs" / "capture-ps.md").read_text(encoding="utf-8")
    lines = [line for line in run.stdout.splitlines()
             if line.startswith(("capture overhead:", "paired blocks:", "  the server's flushes"))]
    assert len(lines) == 3
    for line in lines:
        assert line in doc, line


def test_summarize_refuses_a_file_that_is_not_an_alternating_run_s_and_mixed_settings(tmp_path):
    other = tmp_path / "abba.json"
    other.write_text(json.dumps({"args": {"model": "lenet5", "alternate": 0}, "times_ms": {}}))
    for files, expected in [([str(other)], "not the --json of an --alternate run"),
                            ([f"docs/data/ps-capture-overhead-2core-{n}.json" for n in ("w2-1", "w1-1")],
                             "another job or setting")]:
        run = subprocess.run([sys.executable, "benchmarks/bench_capture_overhead_ps.py", "--summarize", *files],
                             cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
        lines = [line for line in run.stderr.splitlines() if line.strip()]
        assert run.returncode == 2 and len(lines) == 1 and expected in lines[0] and run.stdout == "", run.stderr


def test_summarize_refuses_a_fifo_and_malformed_or_empty_runs_in_one_line(tmp_path):
    """Before: a FIFO blocked --summarize for ever, a row that is not (iteration, recorded, ms, [cpu]) or a file
    without a timed iteration of each kind ended in a traceback. Now each is one line, exit 2, the file untouched."""
    args = {"model": "lenet5", "workers": 2, "servers": 1, "batch_size": 16, "layer_every": 1, "warmup": 5,
            "alternate": 5}
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    bad, empty = tmp_path / "bad.json", tmp_path / "empty.json"
    bad.write_text(json.dumps({"args": args, "runs": [{"first_recorded": True, "rows": [["x", True, 1.0, []]]}]}))
    empty.write_text(json.dumps({"args": args, "runs": []}))
    before = {p: p.read_bytes() for p in (bad, empty)}
    for path, expected in [(fifo, "not a regular file"), (bad, "invalid literal"), (empty, "no timed iteration")]:
        run = subprocess.run([sys.executable, "benchmarks/bench_capture_overhead_ps.py", "--summarize", str(path)],
                             cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60)
        lines = [line for line in run.stderr.splitlines() if line.strip()]
        assert run.returncode == 2 and len(lines) == 1 and expected in lines[0] and "Traceback" not in run.stderr
    assert {p: p.read_bytes() for p in (bad, empty)} == before and not fifo.is_file()


@pytest.mark.parametrize("phases, expected", [([[[10, [1, 2], [1, 2, 3, 4, 5, 6]]]], "without 6 times of each kind"),
                                              ([[["x", [1] * 6, [1] * 6]]], "invalid literal"),
                                              (5, "not iterable")])
def test_summarize_refuses_malformed_phases_in_one_line(tmp_path, phases, expected):
    """--phases rows that are not (iteration, 6 host ns, 6 CPU ns) per worker: one line, exit 2, no traceback."""
    data = json.loads((ROOT / "docs" / "data" / "ps-capture-overhead-2core-srv-after-w1-1.json").read_text())
    data["runs"][0]["phases"] = phases
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    run = subprocess.run([sys.executable, "benchmarks/bench_capture_overhead_ps.py", "--summarize", str(bad)], cwd=ROOT,
                         env=ENV, capture_output=True, text=True, timeout=120)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode == 2 and len(lines) == 1 and expected in lines[0] and run.stdout == "", run.stderr
