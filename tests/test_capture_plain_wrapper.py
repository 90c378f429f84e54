"""``capture ddp --layer-every K``: un-sampled iterations run through a second DDP wrapper of the same module without
the Python comm hook (docs/capture.md, "What sampling does not remove"). Checked on 2 gloo ranks
(tests/ddp_twin_job.py): the trained weights and BatchNorm buffers are bit for bit those of one plain DDP, each
iteration's buckets are all-reduced once (torch.profiler's count of the process group's all-reduces), the comm hook
runs on the sampled iterations only and their rows are those of the previous capture; and the readers take what
they measure from all-reduce rows over the iterations that carry them (a full log with the others' all-reduce rows
taken out gives what the full log gives over the same iterations)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the DDP capture needs PyTorch (pip install ddlsim[capture])")

from ddlsim.capture.ddp_hooks import DdpHooks  # noqa: E402
from ddlsim.capture.launch import free_port  # noqa: E402
from ddlsim.capture.recorder import RankRecorder  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SAMPLED = [0, 1, 4, 7]  # ddp_twin_job.py: K = 3 after one warm-up iteration, 9 iterations
ITERATIONS = 9
MODES = ("plain", "hooked", "twin", "twin-list")


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """Both ranks' results of tests/ddp_twin_job.py (every mode), and its directory."""
    out = tmp_path_factory.mktemp("twin")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
    procs = [subprocess.Popen([sys.executable, str(ROOT / "tests" / "ddp_twin_job.py"), str(out), ",".join(MODES)],
                              env={**env, "RANK": str(rank)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(2)], out


def test_the_twin_trains_the_weights_of_one_plain_ddp_bit_for_bit(job):
    """Parameters and BatchNorm buffers after 9 iterations (momentum SGD, switching wrappers at 1 -> 2, 4 -> 5, ...,
    each wrapper rebuilding its buckets after its own first iteration) equal one plain DDP's, on both ranks."""
    results, _ = job
    for ranks in results:  # (each rank's BatchNorm running stats are its own last batch's)
        assert {mode: ranks[mode]["digest"] for mode in ranks if mode != "twin-list"} == {
            mode: ranks["plain"]["digest"] for mode in ("plain", "hooked", "twin")}
        if "twin-list" in ranks:  # a plan's bucket_cap_mb_list (ddp-buckets path): the same weights
            assert ranks["twin-list"]["digest"] == ranks["plain"]["digest"]


def test_each_iteration_all_reduces_its_buckets_once(job):
    """The process group's all-reduces per iteration: one per bucket of the wrapper whose forward ran, its
    provisional buckets (P) on that wrapper's first iteration, the rebuilt ones (B) after; a second all-reduce of
    the same gradients would add B."""
    results, _ = job
    for ranks in results:
        plain = ranks["plain"]["allreduces"]
        provisional, rebuilt = plain[0], plain[1]
        assert plain == [provisional] + [rebuilt] * (ITERATIONS - 1) and rebuilt >= 2
        first_plain = min(i for i in range(ITERATIONS) if i not in SAMPLED)
        expected = [provisional if i in (0, first_plain) else rebuilt for i in range(ITERATIONS)]
        assert ranks["twin"]["allreduces"] == expected
        assert ranks["hooked"]["allreduces"] == plain
        if "twin-list" in ranks:  # DDP builds the plan's buckets from the first iteration on: 2 per iteration
            buckets = len(ranks["twin-list"]["facts"]["layouts"][-1]["buckets"])
            assert ranks["twin-list"]["allreduces"] == [buckets] * ITERATIONS


def test_the_python_comm_hook_runs_on_the_sampled_iterations_only(job):
    results, _ = job
    for ranks in results:
        for mode in ("twin", "twin-list"):
            if mode not in ranks:
                continue
            calls, allreduces = ranks[mode]["hook_calls"], ranks[mode]["allreduces"]
            assert [c for i, c in enumerate(calls) if i not in SAMPLED] == [0] * (ITERATIONS - len(SAMPLED))
            assert [calls[i] for i in SAMPLED] == [allreduces[i] for i in SAMPLED]
            assert ranks[mode]["collective_iterations"] == SAMPLED == ranks[mode]["facts"]["collective_iterations"]
        assert ranks["hooked"]["hook_calls"] == ranks["hooked"]["allreduces"]  # the previous capture: every iteration
        assert "collective_iterations" not in ranks["hooked"]["facts"]


def _rows(path: str) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.startswith('{"id"')]


def _shape(row: dict) -> tuple:
    """A row without its ids and times (and the collective counter, which counts the rank's recorded all-reduces)."""
    return tuple(sorted((k, json.dumps(v)) for k, v in row.items()
                        if k not in ("id", "deps", "start_ns", "end_ns", "collective")))


def test_the_sampled_iterations_keep_the_rows_of_the_previous_capture(job):
    results, _ = job
    for ranks in results:
        hooked, twin = _rows(ranks["hooked"]["rows"]), _rows(ranks["twin"]["rows"])
        for iteration in range(ITERATIONS):
            before = sorted(_shape(r) for r in hooked if r["iteration"] == iteration)
            after = sorted(_shape(r) for r in twin if r["iteration"] == iteration)
            if iteration in SAMPLED:
                assert after == before
            else:  # the same rows less the all-reduces
                assert after == sorted(_shape(r) for r in hooked if r["iteration"] == iteration and r["kind"] != "collective")
        assert sorted({r["iteration"] for r in twin if r["kind"] == "collective"}) == SAMPLED
        ids = sorted(r["collective"] for r in twin if r["kind"] == "collective")
        assert ids == list(range(1, len(ids) + 1))  # the rank's recorded all-reduces, numbered alike on every rank
        assert ranks["twin"]["facts"]["layouts"] == ranks["hooked"]["facts"]["layouts"]


def test_a_twin_needs_sampling_no_merger_and_a_second_wrapper(tmp_path, one_rank, small_cnn):
    from torch.nn.parallel import DistributedDataParallel

    from ddlsim.capture.ddp_plan import PlanMerger

    module = small_cnn()
    ddp, twin = DistributedDataParallel(module), DistributedDataParallel(module)
    rec = RankRecorder(tmp_path, 0, "worker")
    with pytest.raises(ValueError, match="layer_every > 1"):
        DdpHooks(ddp, rec, plain=twin)
    with pytest.raises(ValueError, match="plan merger"):
        DdpHooks(ddp, rec, layer_every=3, plain=twin, merger=PlanMerger([[i] for i in range(len(list(module.parameters())))]))
    other = DistributedDataParallel(small_cnn())
    with pytest.raises(ValueError, match="second DDP wrapper"):
        DdpHooks(other, rec, layer_every=3, plain=twin)
    with pytest.raises(ValueError, match="bucket_bytes_cap differs"):
        DdpHooks(ddp, rec, layer_every=3, plain=DistributedDataParallel(module, bucket_cap_mb=1))
    static = small_cnn()
    with pytest.raises(ValueError, match="static_graph"):
        DdpHooks(DistributedDataParallel(static, static_graph=True), rec, layer_every=3,
                 plain=DistributedDataParallel(static, static_graph=True))
    rec.close()


def test_layer_every_one_keeps_one_wrapper_and_every_iterations_all_reduce_rows(tmp_path, one_rank, small_cnn):
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(small_cnn(), bucket_cap_mb=0.002)
    hooks = DdpHooks(ddp, RankRecorder(tmp_path, 0, "worker"))
    x, y = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 2])
    for iteration in range(3):
        hooks.begin_iteration(iteration)
        assert hooks.model is ddp
        torch.nn.functional.cross_entropy(hooks.model(x), y).backward()
        hooks.end_iteration()
    assert hooks.collective_iterations == [0, 1, 2] and "collective_iterations" not in hooks.facts()
    hooks.rec.close()
    rows = _rows(str(hooks.rec.path))
    assert sorted({r["iteration"] for r in rows if r["kind"] == "collective"}) == [0, 1, 2]


# -- the readers: a full log less the un-sampled iterations' all-reduce rows ---------------------------------------
@pytest.fixture(scope="module")
def logs(job):
    """(full, sampled): the merged 2-rank log of the previous capture (all-reduce rows on every iteration) and the
    same log with the un-sampled iterations' all-reduce rows taken out and ``collective_iterations`` in its
    metadata, as ``capture ddp --layer-every K`` now writes it."""
    import pyarrow.compute as pc

    from ddlsim.capture.merge import merge_capture
    from ddlsim.trace.schema import EventLog

    _, out = job
    full = merge_capture(out / "hooked", metadata={"job": "ddp", "workers": 2, "layer_every": 3,
                                                   "layer_iterations": SAMPLED})
    table = full.table
    keep = pc.or_(pc.not_equal(table.column("kind"), "collective"), pc.is_in(table.column("iteration"),
                                                                             value_set=__import__("pyarrow").array(SAMPLED)))
    sampled = EventLog(table.filter(keep), metadata={**full.metadata, "collective_iterations": SAMPLED})
    assert len(sampled.table) < len(full.table)
    return full, sampled


COUNTED = [i for i in SAMPLED if i >= 1]  # iteration 0 is the warm-up


def test_analyze_breaks_down_the_iterations_with_all_reduce_rows(logs):
    from ddlsim.analyze import Analysis
    from ddlsim.analyze.breakdown import iteration_arrays

    full, sampled = logs
    head = Analysis(sampled).headline()
    arrays = iteration_arrays(full)
    on = np.isin(arrays["iteration"], COUNTED)
    for part in ("compute_s", "communication_s", "overlap_s", "exposed_communication_s", "idle_s", "overlap_ratio"):
        assert head[part] == pytest.approx(float(np.mean(arrays[part][on])), rel=1e-12, abs=1e-15)
    assert head["breakdown_iterations"] == COUNTED
    assert head["iteration_time_s"] == pytest.approx(float(np.mean(arrays["time_s"][1:])), rel=1e-12)
    assert any("all-reduce rows on 4 iterations only" in n for n in head["notes"])
    expected = Analysis(full).collectives()
    got = Analysis(sampled).collectives()
    expected = expected[expected.iteration.isin(SAMPLED)].reset_index(drop=True)
    assert got[["collective", "group", "iteration", "bytes", "time_ns"]].equals(
        expected[["collective", "group", "iteration", "bytes", "time_ns"]])
    items = Analysis(sampled)._per_item()
    comm = sampled.to_pandas()
    comm = comm[comm.kind == "collective"]
    total = float((comm.end_ns - comm.start_ns).sum()) / 1e9 / (2 * len(SAMPLED))
    assert float(items[items.scope == "communication"].t.sum()) == pytest.approx(total, rel=1e-9)
    # the critical paths of the iterations with all-reduce rows, shares of their windows
    path = Analysis(sampled).critical_path()
    path = path[path.iteration.isin(SAMPLED)]
    summary = Analysis(sampled).critical_path_summary(top=1000)
    assert int(summary["time_ns"].sum()) == int(path["duration_ns"].sum())
    windows = arrays["end_s"] - arrays["start_s"]
    assert float(summary["share"].sum()) == pytest.approx(
        path["duration_ns"].sum() / 1e9 / float(windows[np.isin(arrays["iteration"], SAMPLED)].sum()), rel=1e-6)


def test_the_all_reduce_fit_and_validate_take_the_same_iterations_as_the_full_log(logs):
    from ddlsim.analyze.allreduce_fit import allreduce_points
    from ddlsim.validation import operation_means

    full, sampled = logs
    points = allreduce_points(full)
    assert allreduce_points(sampled) == [p for p, it in zip(points, range(1, ITERATIONS)) if it in COUNTED]
    assert operation_means(sampled, list(range(1, ITERATIONS)))["worker collective/allreduce"] == pytest.approx(
        operation_means(full, COUNTED)["worker collective/allreduce"], rel=1e-12)


def test_replays_optimizer_step_and_bucket_skew_follow_the_all_reduce_rows(logs):
    """The optimizer step is measured from the iteration's last all-reduce end (computed here from the rows, on the
    iterations that carry them); the bucket skew over those iterations equals the full log's where the previous
    iteration carries its all-reduce rows too, and exists (not empty) on the sampled log."""
    from ddlsim.simulation.overheads import _worker_rows, bucket_skew, framework_overheads

    full, sampled = logs
    df = sampled.to_pandas()
    steps = []
    for r in df[df.op == "optimizer_step"].itertuples():
        if r.iteration not in COUNTED:
            continue
        mine = df[(df["rank"] == r.rank) & (df.kind == "collective") & (df.iteration == r.iteration)]
        steps.append(r.end_ns - mine.end_ns.max())
    assert framework_overheads(sampled)["optimizer_s"] == pytest.approx(float(np.mean(steps)) / 1e9, rel=1e-9)
    skew = framework_overheads(sampled)["buckets"]
    assert len(skew) == len(framework_overheads(full)["buckets"]) >= 2
    assert bucket_skew(_worker_rows(sampled), {1}) == bucket_skew(_worker_rows(full), {1})


def test_gpu_events_with_a_twin_sync_on_sampled_iterations_only(tmp_path, one_rank, small_cnn, fake_gpu):
    """On a GPU (CUDA events, faked here) the twin changes nothing but the all-reduce rows: only the sampled
    iterations synchronise the device and carry them, the un-sampled ones keep their event-timed pass rows."""
    from torch.nn.parallel import DistributedDataParallel

    module = small_cnn()
    ddp, twin = DistributedDataParallel(module, bucket_cap_mb=0.002), DistributedDataParallel(module, bucket_cap_mb=0.002)
    rec = RankRecorder(tmp_path, 0, "worker")
    hooks = DdpHooks(ddp, rec, cuda=True, layer_every=3, layer_warmup=1, plain=twin)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.01)
    x, y = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 2])
    for iteration in range(ITERATIONS):
        hooks.begin_iteration(iteration)
        assert hooks.model is (ddp if iteration in SAMPLED else twin)
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(hooks.model(x), y).backward()
        start = hooks.mark()
        optimizer.step()
        hooks.optimizer_step_row(start, hooks.mark())
        hooks.end_iteration()
    assert len(fake_gpu) == len(SAMPLED)  # device synchronisations: the sampled iterations' starts
    rec.close()
    rows = _rows(str(rec.path))
    assert sorted({r["iteration"] for r in rows if r["kind"] == "collective"}) == SAMPLED
    for iteration in range(ITERATIONS):
        mine = [r for r in rows if r["iteration"] == iteration]
        passes = [r["op"] for r in mine if r["kind"] == "compute" and "name" not in r]
        assert passes == ([] if iteration in SAMPLED else ["forward", "backward"])
        marker = [r for r in mine if r["kind"] == "marker"][0]
        assert all(marker["start_ns"] <= r["start_ns"] <= r["end_ns"] <= marker["end_ns"] for r in mine)


@pytest.mark.parametrize("config, carried", [
    ({"layer_every": 3}, [0, 1, 4]),  # the twin: all-reduce rows on the sampled iterations
    ({"layer_every": 1}, None),  # the default: one wrapper, as before
    # a plan's merge hook: every iteration must all-reduce the plan's groups, so one wrapper and the hook throughout
    ({"layer_every": 3, "bucket_cap_mb": 1.0 / (1 << 20), "merge_groups": [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]}, None),
])
def test_the_capture_job_uses_a_twin_only_with_sampling_and_no_merge_hook(tmp_path, config, carried):
    from ddlsim.capture.ddp_run import run_ddp_capture

    log, failure = run_ddp_capture({"model": "lenet5", "iterations": 6, "bucket_cap_mb": 0.05, **config}, 1,
                                   tmp_path / "run", timeout_s=240)
    assert failure is None
    df = log.to_pandas()
    with_rows = sorted(int(i) for i in set(df[df.kind == "collective"].iteration))
    assert with_rows == (carried if carried is not None else list(range(6)))
    assert log.metadata.get("collective_iterations") == carried
