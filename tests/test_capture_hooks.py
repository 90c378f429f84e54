"""The DDP capture's hooks keep the host work out of the iteration (the
capture overhead, benchmarks/bench_capture_overhead.py) without changing the
rows: nothing is formatted or written while the iteration runs, a GPU
iteration ends with no device synchronisation, and the rows keep their
structure (every layer's forward in layer order and backward in reverse,
each compute row after the previous one, all-reduces after their layers'
backward rows, the optimizer after the all-reduces, the marker last; ids in
causal order; times monotone) and their JSON bytes."""

import json

import pytest

torch = pytest.importorskip("torch", reason="the DDP capture needs PyTorch (pip install ddlsim[capture])")

from ddlsim.capture.ddp_hooks import DdpHooks  # noqa: E402
from ddlsim.capture.recorder import RankRecorder  # noqa: E402

ITERATIONS = 3


def _lines(path):
    return [line for line in path.read_text().splitlines() if line.startswith('{"id"')]


def test_ddp_rows_keep_their_structure_and_bytes(tmp_path, one_rank, small_cnn, train_small):
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(small_cnn(), bucket_cap_mb=0.002)  # several buckets
    rec = RankRecorder(tmp_path, 0, "worker")
    hooks = DdpHooks(ddp, rec)
    train_small(ddp, hooks, ITERATIONS)
    rec.close()
    lines = _lines(rec.path)
    rows = [json.loads(line) for line in lines]
    assert lines == [json.dumps(r, separators=(",", ":")) for r in rows]  # the fast formatter writes json's bytes
    head = ["id", "kind", "op", "start_ns", "end_ns", "deps", "iteration"]
    orders = {"forward": head + ["stream", "name", "layer"], "backward": head + ["stream", "name", "layer"],
              "optimizer_step": head + ["stream", "name"], "iteration": head + ["name"],
              "allreduce": head + ["stream", "group", "bytes", "collective", "coll_type", "algorithm", "name"]}
    assert all(list(r) == orders[r["op"]] for r in rows)  # the keys in the order json.dumps of the row dict had them
    names = [n for n, _ in hooks.layers]
    assert names == ["0", "1", "4", "6"]
    ids = [r["id"] for r in rows]
    assert len(set(ids)) == len(ids)
    by_id = {r["id"]: r for r in rows}
    for iteration in range(ITERATIONS):
        mine = sorted((r for r in rows if r["iteration"] == iteration), key=lambda r: r["id"])
        compute = [r for r in mine if r["kind"] == "compute"]
        assert [(r["op"], r.get("name")) for r in compute] == (
            [("forward", n) for n in names] + [("backward", n) for n in reversed(names)] + [("optimizer_step", "optimizer")])
        assert [r["layer"] for r in compute[:-1]] == [0, 1, 2, 3, 3, 2, 1, 0]
        for before, row in zip(compute, compute[1:]):
            assert row["deps"][0] == before["id"]  # each compute row after the previous one
            assert before["end_ns"] <= row["start_ns"]
        collectives = [r for r in mine if r["kind"] == "collective"]
        assert collectives and [r["collective"] for r in collectives] == sorted(r["collective"] for r in collectives)
        backward = {r["layer"]: r["id"] for r in compute if r["op"] == "backward"}
        layouts = [lay for lay in hooks.layouts if lay["from_iteration"] <= iteration][-1]["buckets"]
        for row in collectives:
            bucket = next(b for b in layouts if b["group"] == row["group"])
            layers = sorted({hooks.layer_of_param[t] for t in bucket["tensors"]})
            assert row["deps"] == sorted(backward[layer] for layer in layers)  # after its layers' backward rows
            assert row["bytes"] == sum(bucket["tensor_bytes"])
        assert set(r["id"] for r in collectives) <= set(compute[-1]["deps"])  # the optimizer waits for them
        assert mine[-1]["kind"] == "marker" and mine[-1]["name"] == f"iteration {iteration}"
        assert mine[-1]["start_ns"] <= compute[0]["start_ns"] and compute[-1]["end_ns"] <= mine[-1]["end_ns"]
    for row in rows:
        assert row["start_ns"] <= row["end_ns"]
        assert all(d < row["id"] and by_id[d]["end_ns"] <= row["end_ns"] for d in row["deps"])  # causal order


def test_nothing_is_formatted_or_written_while_the_iteration_runs(tmp_path, one_rank, monkeypatch, small_cnn, train_small):
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(small_cnn())
    rec = RankRecorder(tmp_path, 0, "worker")
    hooks = DdpHooks(ddp, rec)
    written = []

    def between(iteration):  # after forward, backward and step, before end_iteration
        rec.flush()
        written.append(len(_lines(rec.path)))

    encoded = []
    encode = getattr(rec, "_encode", None)
    monkeypatch.setattr(rec, "_encode", lambda obj: ("id" in obj and encoded.append(obj)) or encode(obj), raising=False)
    train_small(ddp, hooks, ITERATIONS, check_between=between)
    rec.close()
    per_iteration = len(_lines(rec.path)) // ITERATIONS
    assert written == [k * per_iteration for k in range(ITERATIONS)]  # only earlier iterations' rows
    # every row of an iteration (layers, buckets, optimizer, marker) is formatted by a template, none through json
    assert encoded == [] and len(_lines(rec.path)) > ITERATIONS * 2 * len(hooks.layers)


def test_a_gpu_iteration_ends_without_a_device_synchronisation(tmp_path, one_rank, monkeypatch, small_cnn, fake_gpu, train_small):
    """The rows of iteration k are written at the end of iteration k + 1 (the events completed by then: k + 1 began
    with a synchronisation) or when the recorder closes, with the same rows as written at once."""
    from torch.nn.parallel import DistributedDataParallel

    syncs = fake_gpu
    ddp = DistributedDataParallel(small_cnn())
    rec = RankRecorder(tmp_path, 0, "worker")
    hooks = DdpHooks(ddp, rec, cuda=True)
    seen = []

    def between(iteration):
        seen.append(len(syncs))

    optimizer_ends = []
    real_end = hooks.end_iteration

    def end_iteration():
        changed = real_end()
        rec.flush()
        optimizer_ends.append((len(syncs), len(_lines(rec.path))))
        return changed

    monkeypatch.setattr(hooks, "end_iteration", end_iteration)
    train_small(ddp, hooks, ITERATIONS, check_between=between)
    assert seen == [1, 2, 3]  # one synchronisation per iteration: at its beginning
    assert [s for s, _ in optimizer_ends] == [1, 2, 3]  # none at its end
    written = [n for _, n in optimizer_ends]
    assert written[0] == 0 and 0 < written[1] < written[2]  # one iteration behind
    rec.close()  # writes the last iteration's rows (and synchronises for them)
    rows = [json.loads(line) for line in _lines(rec.path)]
    assert len(rows) == 3 * written[1]
    for iteration in range(ITERATIONS):
        mine = sorted((r for r in rows if r["iteration"] == iteration), key=lambda r: r["id"])
        assert [r["op"] for r in mine if r["kind"] == "compute"] == ["forward"] * 4 + ["backward"] * 4 + ["optimizer_step"]
        marker = mine[-1]
        assert marker["kind"] == "marker"
        # every row lies within the marker, on a 0.5 ms GPU tick grid from the anchor (the marker's start)
        for row in mine:
            assert marker["start_ns"] <= row["start_ns"] <= row["end_ns"] <= marker["end_ns"]
            assert (row["start_ns"] - marker["start_ns"]) % 500_000 == 0
        compute = [r for r in mine if r["kind"] == "compute"]
        for before, row in zip(compute, compute[1:]):
            assert row["deps"][0] == before["id"] and before["end_ns"] <= row["start_ns"]


def test_a_plan_groups_all_reduce_rows_are_on_the_gpu_clock_with_the_layers(tmp_path, one_rank, monkeypatch, small_cnn, fake_gpu, train_small):
    """With a merge plan (the hook path of `capture ddp --plan`) on a GPU, each plan group's all-reduce row is timed by
    events on the iteration's clock like the layer rows, and written with them: within the iteration's marker, on
    the 0.5 ms tick grid, after the backward rows it depends on."""
    from torch.nn.parallel import DistributedDataParallel

    from ddlsim.capture.ddp_plan import PlanMerger

    model = small_cnn()
    count = len(list(model.parameters()))
    ddp = DistributedDataParallel(model, bucket_cap_mb=1e-6)  # a bucket per parameter, as the hook path runs DDP
    rec = RankRecorder(tmp_path, 0, "worker")
    hooks = DdpHooks(ddp, rec, cuda=True, merger=PlanMerger([list(range(count // 2, count)), list(range(count // 2))]))
    train_small(ddp, hooks, ITERATIONS)
    rec.close()
    rows = [json.loads(line) for line in _lines(rec.path)]
    by_id = {r["id"]: r for r in rows}
    for iteration in range(1, ITERATIONS):  # the first iteration's provisional bucket travels as DDP's own
        mine = [r for r in rows if r["iteration"] == iteration]
        marker = next(r for r in mine if r["kind"] == "marker")
        groups = [r for r in mine if r["kind"] == "collective"]
        assert sorted(r["name"] for r in groups) == ["plan group 0", "plan group 1"]
        for row in groups:
            assert marker["start_ns"] <= row["start_ns"] <= row["end_ns"] <= marker["end_ns"]
            assert (row["start_ns"] - marker["start_ns"]) % 500_000 == 0
            assert row["deps"] and all(by_id[d]["end_ns"] <= row["start_ns"] for d in row["deps"])
