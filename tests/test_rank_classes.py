"""Rank classes (closed form): alike workers simulated and logged once per
class. The oracle is the per-rank run of the same scenario (rank_classes =
"off"): the class run must give the same iteration times to the ns, the same
per-rank byte counts and summary, and its log, expanded, must be the
per-rank log row for row (ids and dependencies included). Where workers
differ (jitter, stagger) or the model is step by step, the run stays per rank.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ddlsim
from ddlsim.simulation import budget
from ddlsim.trace.classes import KEY, expand, rank_weights, runs_of, values_of

ROOT = Path(__file__).resolve().parent.parent


def _pair(**kw):
    base = dict(model="resnet50", iterations=2, network="analytic", collective_model="closed-form", bandwidth="25Gbps")
    base.update(kw)
    per_rank = ddlsim.simulate(**base, rank_classes="off")
    classes = ddlsim.simulate(**base)
    return per_rank, classes


CASES = [
    dict(workers=12, algorithm="ring"),
    dict(workers=7, algorithm="ring", barrier=False),
    dict(workers=16, algorithm="binary-tree"),
    dict(workers=24, algorithm="double-binary-tree"),
    dict(workers=12, algorithm="halving-doubling"),
    dict(workers=20, algorithm="recursive-doubling", barrier=False),
    dict(workers=9, algorithm="butterfly"),
    dict(workers=10, algorithm="ring", partition_bytes="1MB", gamma_ns_per_byte=0.01),
    dict(workers=33, algorithm="binary-tree", grouping="ddp:bucket_cap_mb=25", barrier=False),
]


@pytest.mark.parametrize("kw", CASES, ids=lambda kw: f"{kw['algorithm']}-{kw['workers']}")
def test_a_class_run_is_the_per_rank_run(kw):
    per_rank, classes = _pair(**kw)
    assert KEY not in per_rank.columns.metadata
    info = classes.columns.metadata[KEY]
    assert sum(info["sizes"]) == kw["workers"] and len(info["sizes"]) < kw["workers"]
    assert len(classes.columns) < len(per_rank.columns)
    # the same iteration times, to the ns
    assert list(classes.iterations["time_s"]) == list(per_rank.iterations["time_s"])
    assert classes.stats["makespan_ns"] == per_rank.stats["makespan_ns"]
    assert classes.stats["bytes_sent"] == per_rank.stats["bytes_sent"]
    assert classes.stats["bytes_received"] == per_rank.stats["bytes_received"]
    # the same summary (breakdown weighted by class size) but for the counts of what ran
    a, b = per_rank.summary(), classes.summary()
    for key in ("events", "log_rows", "wall_s", "notes", "scenario"):
        a.pop(key), b.pop(key)
    assert a == b
    # the log, expanded, is the per-rank log
    expanded = expand(classes.events)
    assert expanded.table.equals(per_rank.events.table)
    sizes = classes.events.column("class_size")
    kinds = classes.events.column("kind")
    assert (sizes[kinds == "barrier"] == 1).all()
    assert int(sizes[kinds != "barrier"].sum()) == int((per_rank.events.column("kind") != "barrier").sum())


def test_the_class_log_holds_the_representatives_rows_of_the_per_rank_log():
    per_rank, classes = _pair(workers=16, algorithm="binary-tree")
    a, b = per_rank.events.table, classes.events.table
    ids = a.column("id").to_numpy()
    rows = np.searchsorted(ids, b.column("id").to_numpy())
    for name in a.column_names:
        if name not in ("class_size", "deps"):  # what differs: the ranks each row stands for
            assert a.column(name).take(rows).equals(b.column(name)), name
    # dependencies too, but for the barrier's: it waits for the representatives only
    per_rank_row = classes.events.column("kind") != "barrier"
    assert per_rank_row.sum() == len(b) - 2
    deps_a, deps_b = a.column("deps").take(rows).to_pylist(), b.column("deps").to_pylist()
    assert [d for d, keep in zip(deps_a, per_rank_row) if keep] == [d for d, keep in zip(deps_b, per_rank_row) if keep]


@pytest.mark.parametrize("kw", [dict(jitter=0.05), dict(stagger="1ms"), dict(stagger="1ms", stagger_mode="random"),
                                dict(collective_model="steps"), dict(rank_classes="off"),
                                # their per-rank byte counts walk O(n) stages per rank: they stay per rank
                                dict(algorithm="direct"), dict(algorithm="hierarchical-ring", ranks_per_host=4)])
def test_workers_that_differ_stay_per_rank(kw):
    base = dict(model="resnet50", workers=8, iterations=1, network="analytic", collective_model="closed-form")
    base.update(kw)
    r = ddlsim.simulate(**base)
    assert KEY not in r.columns.metadata
    assert sorted(set(r.events.column("rank").tolist())) == list(range(8))
    assert (r.events.column("class_size") == 1).all()


def test_analysis_of_a_class_log_is_the_analysis_of_the_per_rank_log(tmp_path):
    from ddlsim.analyze import Analysis

    per_rank, classes = _pair(workers=12, algorithm="halving-doubling")
    a, b = Analysis(per_rank.events), Analysis(classes.events)
    assert len(b.log) == len(per_rank.events)
    assert b.iterations().equals(a.iterations())
    assert b.collectives().equals(a.collectives())
    assert b.critical_path().equals(a.critical_path())


def test_cli_per_rank_flag_and_convert_expand(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    args = [sys.executable, "-m", "ddlsim", "simulate", "--model", "resnet50", "--workers", "12", "--iterations", "1",
            "--network", "analytic", "--collective-model", "closed-form", "--algorithm", "binary-tree", "-q"]
    subprocess.run(args + ["-o", str(tmp_path / "c")], check=True, env=env, capture_output=True)
    subprocess.run(args + ["-o", str(tmp_path / "p"), "--per-rank"], check=True, env=env, capture_output=True)
    done = subprocess.run([sys.executable, "-m", "ddlsim", "convert", str(tmp_path / "c" / "events.parquet"),
                           str(tmp_path / "x.parquet"), "--expand"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    import pyarrow.parquet as pq

    per_rank = pq.read_table(tmp_path / "p" / "events.parquet")
    assert pq.read_table(tmp_path / "c" / "events.parquet").num_rows < per_rank.num_rows
    assert pq.read_table(tmp_path / "x.parquet").equals(per_rank)


def test_runs_encode_any_sequence():
    rng = np.random.default_rng(19)
    for _ in range(200):
        n = int(rng.integers(1, 60))
        pieces = []
        while sum(len(p) for p in pieces) < n:
            length = int(rng.integers(1, 8))
            pieces.append(int(rng.integers(-5, 5)) + int(rng.integers(-2, 3)) * np.arange(length))
        values = np.concatenate(pieces)[:n]
        runs = runs_of(values)
        assert values_of(runs, n).tolist() == values.tolist()
        assert len(runs) <= n


def test_an_old_log_without_class_size_reads_with_one():
    from ddlsim.trace.schema import validate_event_log

    r = ddlsim.simulate(model="lenet5", workers=2, iterations=1)
    table = r.events.table.drop_columns(["class_size"])
    log = validate_event_log(table)
    assert (log.column("class_size") == 1).all()
    assert rank_weights(log, np.array([0, 1])).tolist() == [1, 1]


def _estimate(scenario: dict):
    seen = []
    with budget.run_control(on_start=lambda sc, est: seen.append(est)):
        r = ddlsim.simulate(scenario)
    (est,) = seen
    return r, est


@pytest.mark.parametrize("algorithm,workers", [("ring", 64), ("binary-tree", 40), ("halving-doubling", 48)])
def test_the_estimate_counts_the_class_rows(algorithm, workers):
    r, est = _estimate({"model": {"name": "resnet50"}, "workers": workers, "iterations": 2,
                        "strategy": {"kind": "ring", "algorithm": algorithm},
                        "network": {"fidelity": "analytic", "collective_model": "closed-form"}})
    assert KEY in r.columns.metadata
    assert est.log_rows >= len(r.columns)
    assert est.log_rows <= 1.05 * len(r.columns)


CHILD = r"""
import json, resource, sys
import ddlsim
from ddlsim.simulation import budget
seen = []
with budget.run_control(on_start=lambda sc, est: seen.append(est)):
    r = ddlsim.simulate(model="resnet50", workers=int(sys.argv[1]), iterations=1, network="analytic",
                        collective_model="closed-form", algorithm=sys.argv[2])
s = r.summary()
# VmHWM, not ru_maxrss: Linux carries the pre-exec high-water mark (the forked copy of a large pytest process)
# into ru_maxrss, which is not this run's cost
hwm = [line for line in open("/proc/self/status").read().splitlines() if line.startswith("VmHWM:")]
peak = int(hwm[0].split()[1]) * 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"estimate": seen[0].memory_bytes, "peak": peak,
                  "rows": len(r.columns), "sizes": r.columns.metadata["rank_classes"]["sizes"],
                  "iteration_s": s["iteration_time_s"], "sent": s["bytes_sent_per_worker_per_iteration"]}))
"""


@pytest.mark.parametrize("algorithm", ["ring", "halving-doubling"])
def test_65536_workers_run_within_the_estimate(algorithm):
    n = 65536
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    done = subprocess.run([sys.executable, "-c", CHILD, str(n), algorithm], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert sum(out["sizes"]) == n
    assert out["peak"] <= out["estimate"]
    assert out["iteration_s"] > 0
    if algorithm == "ring":
        # every worker alike: one class; ring bytes per worker: 2 (n - 1) / n of every tensor, near enough
        assert out["sizes"] == [n]
        model_bytes = ddlsim.simulate(model="resnet50", workers=2, iterations=1).model.size_bytes
        assert out["sent"] == pytest.approx(2 * (n - 1) / n * model_bytes, rel=1e-3)
    else:
        # power of two: recursive halving and doubling treats every rank alike
        assert out["sizes"] == [n]


def test_graph_columns_hold_every_worker():
    # lower_training_json exports the whole graph (run_graph_columns runs it per rank), classes or not
    from ddlsim import _core
    from ddlsim.simulation.lowering import engine_json, network_document, training_document
    from ddlsim.simulation.model_build import build_model, layer_times_ns
    from ddlsim.simulation.scenario import Scenario, with_overrides

    sc = with_overrides(Scenario(), dict(model="lenet5", workers=6, iterations=1, network="analytic",
                                         collective_model="closed-form"))
    model = build_model(sc.model, sc.base_dir)
    training = training_document(sc, model, layer_times_ns(model, sc.model))
    assert training["rank_classes"] is True
    columns = _core.lower_training_json(engine_json(training), engine_json(network_document(sc)))
    ranks = np.frombuffer(columns["rank"][1], dtype=columns["rank"][0])
    assert sorted(set(ranks.tolist())) == list(range(6))
