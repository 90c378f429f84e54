"""Replay at scale: each simulated rank draws whole captured (rank, iteration)
vectors of per-layer compute times (``rank_times = "sampled"``), so that a
large job waits for its slowest rank as a real one does."""

from __future__ import annotations

import math
import random

import numpy as np
import forked_cli
import pytest
from typer.testing import CliRunner

import ddlsim
from ddlsim.cli.app import app
from ddlsim.errors import DdlsimError
from ddlsim.trace import event_log_from_rows, write_event_log

US = 1_000
LENET = ["conv1", "conv2", "fc1", "fc2", "fc3"]
FWD_US = {"conv1": 300, "conv2": 500, "fc1": 200, "fc2": 100, "fc3": 100}
BWD_US = {"conv1": 400, "conv2": 800, "fc1": 300, "fc2": 200, "fc3": 100}
RANKS, ITERATIONS = 4, 26  # iteration 0 is the warm-up: 4 x 25 = 100 pooled (rank, iteration) vectors
# the replay's network: fast and closed-form, so that 1024 ranks take seconds
FAST = dict(network="analytic", collective_model="closed-form", bandwidth="400Gbps", latency="1us", overheads=False)  # overheads: tests/test_replay_overheads.py


def spread_capture(path, *, spread=True, seed=7):
    """A hand-built 4-rank DDP capture of lenet5 with known spread: rank r's iteration i has every layer's time
    x s(r, i) (one slowness for the whole step, so layers are correlated) times a small per-layer wobble, both seeded;
    iteration 0 is a 10x warm-up (left out of the pool). Returns the rows' per-(rank, iteration, layer, op) ns."""
    rng = random.Random(seed)
    rows, t, truth = [], 0, {}
    for iteration in range(ITERATIONS):
        end = t
        for rank in range(RANKS):
            slow = 10.0 if iteration == 0 else (1.0 + rng.expovariate(4.0) if spread else 1.0)
            now = t
            for op, order, table in (("forward", LENET, FWD_US), ("backward", LENET[::-1], BWD_US)):
                for layer in order:
                    wobble = rng.uniform(0.95, 1.05) if spread else 1.0
                    d = round(table[layer] * US * slow * wobble)
                    truth[rank, iteration, layer, op] = d
                    rows.append(dict(id=len(rows), iteration=iteration, rank=rank, role="worker", kind="compute", op=op,
                                     name=layer, start_ns=now, end_ns=now + d))
                    now += d
            end = max(end, now)
        t = end + 100 * US
    params = [{"name": x.name, "elements": x.elements, "bytes": x.bytes} for x in ddlsim.load_model("lenet5").tensors]
    meta = {"source": "capture", "job": "ddp", "model": "lenet5", "bucket_cap_mb": 25, "parameters": params,
            "ranks": {str(r): {} for r in range(RANKS)},
            "buckets": [{"bucket": 0, "group": 0, "tensors": [9, 8, 7, 6, 5, 4], "bytes": 4 * 59134},
                        {"bucket": 1, "group": 1, "tensors": [3, 2, 1, 0], "bytes": 4 * 2572}]}
    write_event_log(event_log_from_rows(rows, metadata=meta), path)
    return truth


def pooled_totals(truth) -> list[int]:
    """The captured steps' compute (all forwards and backwards), pooled over ranks and the non-warm-up iterations."""
    return [sum(truth[r, i, layer, op] for layer in LENET for op in ("forward", "backward"))
            for r in range(RANKS) for i in range(1, ITERATIONS)]


def max_of_draws(samples, n):
    """E and Var of the max of n iid uniform draws from the empirical distribution of `samples`, from its CDF:
    P(max <= v) = F(v)^n with F(v) = #{x <= v} / m, summed over the distinct values (worked out independently of
    ddlsim.simulation.variation.expected_max)."""
    m = len(samples)
    mean = second = 0.0
    below = 0
    for v in sorted(set(samples)):
        at = sum(1 for x in samples if x == v)
        p = ((below + at) / m) ** n - (below / m) ** n
        mean, second = mean + p * v, second + p * v * v
        below += at
    return mean, max(0.0, second - mean * mean)


def compute_parts(result) -> np.ndarray:
    """Per iteration, first forward start to last backward end over the workers, read from the replay's own log."""
    ev = result.events.to_pandas()
    rows = ev[(ev["kind"] == "compute") & ev["op"].isin(["forward", "backward"])]
    g = rows.groupby("iteration")
    return (g["end_ns"].max() - g["start_ns"].min()).to_numpy(dtype=float)


def test_at_the_captured_rank_count_each_rank_replays_its_own_captured_steps(tmp_path):
    """Exact: rank r's iteration i in the replay has captured rank r's (i + 1)-th step's layer times (the warm-up left
    out, cycled), so every iteration's compute part is the slowest captured rank's step of that iteration."""
    truth = spread_capture(tmp_path / "events.parquet")
    r = ddlsim.replay(tmp_path / "events.parquet", rank_times="sampled", iterations=30, **FAST)
    ev = r.events.to_pandas()
    rows = ev[(ev["kind"] == "compute") & ev["op"].isin(["forward", "backward"])]
    for row in rows.itertuples():
        captured = 1 + row.iteration % (ITERATIONS - 1)
        assert row.end_ns - row.start_ns == truth[row.rank, captured, row.name, row.op]
    expected = [max(sum(truth[rank, 1 + i % (ITERATIONS - 1), layer, op] for layer in LENET for op in ("forward", "backward"))
                    for rank in range(RANKS)) for i in range(30)]
    assert compute_parts(r).tolist() == expected


def test_without_spread_sampled_ranks_reproduce_the_median_replay_exactly(tmp_path):
    """Every captured step the same: drawing steps changes nothing, at the captured count and at 16x it."""
    spread_capture(tmp_path / "events.parquet", spread=False)
    for workers in (RANKS, 16 * RANKS):
        median = ddlsim.replay(tmp_path / "events.parquet", workers=workers, **FAST)
        sampled = ddlsim.replay(tmp_path / "events.parquet", workers=workers, rank_times="sampled", **FAST)
        assert sampled.summary()["iteration_times_s"] == median.summary()["iteration_times_s"]


@pytest.mark.parametrize("scale, iterations", [(16, 40), (256, 8)])
def test_at_scale_the_compute_part_is_the_expected_maximum_of_that_many_draws(tmp_path, scale, iterations):
    """n = 16x / 256x the captured ranks each draw a step per iteration from the m = 100 pooled ones: an iteration's
    compute part is the max of n iid draws. Its mean over the iterations (independent draws) must be E[max] within
    4 standard errors (sd from the same order statistics, / sqrt(iterations)), plus 1 ns of rounding; the
    mean-per-rank (median) replay, whose compute part is the median step, fails that test."""
    truth = spread_capture(tmp_path / "events.parquet")
    samples = pooled_totals(truth)
    n = scale * RANKS
    mean, var = max_of_draws(samples, n)
    tolerance = 4 * math.sqrt(var / iterations) + 1
    r = ddlsim.replay(tmp_path / "events.parquet", workers=n, rank_times="sampled", iterations=iterations, seed=3, **FAST)
    parts = compute_parts(r)
    assert abs(parts.mean() - mean) <= tolerance, (parts.mean(), mean, tolerance)
    assert set(parts.tolist()) <= set(samples)  # each iteration's slowest rank ran one captured step
    median = ddlsim.replay(tmp_path / "events.parquet", workers=n, iterations=2, **FAST)
    assert abs(compute_parts(median).mean() - mean) > tolerance
    # the engine's own order statistics (the scaling report's "expected" column) agree with this test's
    from ddlsim.simulation.variation import expected_max

    assert expected_max(samples, n)[0] == pytest.approx(mean, rel=1e-12)
    assert expected_max(samples, n)[1] == pytest.approx(math.sqrt(var), rel=1e-6, abs=1e-3)


def test_the_draws_are_seeded(tmp_path):
    spread_capture(tmp_path / "events.parquet")
    runs = [ddlsim.replay(tmp_path / "events.parquet", workers=32, rank_times="sampled", seed=s, **FAST) for s in (1, 1, 2)]
    times = [r.summary()["iteration_times_s"] for r in runs]
    assert times[0] == times[1] and times[0] != times[2]


def test_scaling_report_grows_with_the_rank_count(tmp_path):
    """ddlsim replay --scaling: one row per worker count; the expected compute max grows with the count and the
    simulated compute part follows it."""
    spread_capture(tmp_path / "events.parquet")
    from ddlsim.simulation.replay import replay_scaling

    rows = replay_scaling(tmp_path / "events.parquet", [RANKS, 4 * RANKS, 64 * RANKS], rank_times="sampled", iterations=6, **FAST)
    assert [row["workers"] for row in rows] == [RANKS, 4 * RANKS, 64 * RANKS]
    expected = [row["expected_compute_max_s"] for row in rows[1:]]
    assert expected == sorted(expected)
    assert rows[-1]["iteration_mean_s"] > rows[1]["iteration_mean_s"] > 0
    result = CliRunner().invoke(app, ["replay", str(tmp_path / "events.parquet"), "--rank-times", "sampled", "--scaling",
                                      "4,64", "--iterations", "3", "--network", "analytic", "--collective-model", "closed-form"])
    assert result.exit_code == 0, result.output
    assert "workers" in result.output and "64" in result.output


def test_sampled_rank_times_need_an_event_log(tmp_path):
    spread_capture(tmp_path / "events.parquet")
    with pytest.raises(DdlsimError, match="rank_times"):
        ddlsim.simulate(model="lenet5", rank_times="sampled", workers=2)
    for args, message in ((["--scaling", "4,x"], "--scaling '4,x': 'x' is not a whole number; give worker counts"),
                          (["--straggler", "7:2", "--workers", "2"], "straggler rank 7 is not a worker")):
        p = forked_cli.run(["replay", str(tmp_path / "events.parquet"), *args])
        assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_sampled_steps_of_a_simulated_run_do_not_get_its_jitter_and_stragglers_twice(tmp_path):
    """A simulated log's recorded scenario carries its jitter and stragglers; its steps already contain them, so a
    sampled replay drops them (and says so), a median replay keeps them (the median took them out)."""
    from ddlsim.simulation.replay import replay_plan

    run = ddlsim.simulate(model="lenet5", workers=2, iterations=2, network="analytic", jitter=0.1,
                          straggler=[{"rank": 1, "factor": 2.0}])
    run.save(tmp_path / "run", timeline=False)
    events = tmp_path / "run" / "events.parquet"
    sampled, notes = replay_plan(events, rank_times="sampled")
    assert sampled.jitter == 0 and sampled.straggler == []
    assert any("jitter and straggler not applied again" in n for n in notes)
    median, _ = replay_plan(events)
    assert median.jitter == 0.1 and [(s.rank, s.factor) for s in median.straggler] == [(1, 2.0)]
    # at the recorded count the sampled replay computes what the run computed, rank by rank
    again = ddlsim.replay(events, rank_times="sampled")
    def per_rank(result):
        ev = result.events.to_pandas()
        ev = ev[ev["kind"] == "compute"]
        return (ev["end_ns"] - ev["start_ns"]).groupby([ev["iteration"], ev["rank"]]).sum().tolist()
    assert per_rank(again) == per_rank(run)
