"""GPU capture without a device synchronisation on un-sampled iterations
(``--layer-every K``, docs/capture.md "Sampled layer rows"): only a sampled
iteration (and the recorder's close) synchronises; every other iteration
takes its anchor's host time when the training stream is idle, or relays it
from the previous anchor, and converts its events lazily once
``event.query()`` says they completed, a bounded number of rows per
iteration. The rows are the same whatever the GPU's lag: checked on the
fake GPU of conftest.py, whose clock ticks 0.5 ms per recorded event, whose
events complete at a synchronisation or `lag` events later, and which
raises when an event is converted before it completed."""

import json

import pytest

torch = pytest.importorskip("torch", reason="the DDP capture needs PyTorch (pip install ddlsim[capture])")

from ddlsim.capture import layer_hooks  # noqa: E402
from ddlsim.capture.ddp_hooks import DdpHooks  # noqa: E402
from ddlsim.capture.recorder import RankRecorder  # noqa: E402

K = 3
ITERATIONS = 8
SAMPLED = [0, 1, 4, 7]
OFF = 10**12  # the fake host clock: OFF + 0.5 ms per event recorded (the GPU's clock, as if it ran in step)
TICK_NS = 500_000


def _capture(tmp_path, monkeypatch, gpu, small_cnn, train_small, lag, convert_rows=None, name="run"):
    """Trains ITERATIONS iterations with layer rows every K; returns (row lines, per iteration: (synchronisations seen
    after its optimizer step, rows written after its end, host ns at its begin))."""
    from torch.nn.parallel import DistributedDataParallel

    gpu.lag, gpu.ticks, gpu.synced_to = lag, 0, 0  # a fresh GPU clock: runs compare
    monkeypatch.setattr(layer_hooks, "now_ns", lambda: OFF + gpu.ticks * TICK_NS)
    ddp = DistributedDataParallel(small_cnn(), bucket_cap_mb=0.002)  # several buckets
    rec = RankRecorder(tmp_path / name, 0, "worker")
    hooks = DdpHooks(ddp, rec, cuda=True, layer_every=K, layer_warmup=1)
    if convert_rows is not None:
        hooks.convert_rows = convert_rows

    def all_reduce(buffer):  # one rank: the sum is the buffer; done at once, so the callback runs on this thread
        future = torch.futures.Future()
        future.set_result([buffer])
        return future

    monkeypatch.setattr(hooks, "_all_reduce", all_reduce)  # (gloo's thread would interleave its events with ours)
    seen, written, begun = [], [], []
    real_begin, real_end = hooks.begin_iteration, hooks.end_iteration

    def begin_iteration(iteration):
        begun.append(OFF + gpu.ticks * TICK_NS)  # what the host clock reads as the iteration begins
        real_begin(iteration)

    def end_iteration():
        changed = real_end()
        rec.flush()
        written.append(len(_lines(rec.path)))
        return changed

    monkeypatch.setattr(hooks, "begin_iteration", begin_iteration)
    monkeypatch.setattr(hooks, "end_iteration", end_iteration)
    train_small(ddp, hooks, ITERATIONS, check_between=lambda iteration: seen.append(len(gpu)))
    before_close = len(gpu)
    rec.close()
    assert len(gpu) == before_close + 1  # the close synchronises once for the rows left
    hooks.remove()
    return _lines(rec.path), list(zip(seen, written, begun))


def _lines(path):
    return [line for line in path.read_text().splitlines() if line.startswith('{"id"')]


@pytest.mark.parametrize("lag", [None, 0, 1, 7])
def test_unsampled_iterations_never_synchronise_and_the_rows_stay_the_same(tmp_path, monkeypatch, one_rank, small_cnn,
                                                                           fake_gpu, train_small, lag):
    """Whatever the GPU's lag (None: its events complete only at a synchronisation), a device synchronisation happens
    only as a sampled iteration begins; no event is synchronised or converted before it completed (the fake raises);
    and every row is there with the values a synchronisation at every iteration's beginning gives: the marker
    starts at the host time of the iteration's beginning, each row on the GPU's 0.5 ms tick grid from it."""
    lines, per_iteration = _capture(tmp_path, monkeypatch, fake_gpu, small_cnn, train_small, lag)
    assert [s for s, _, _ in per_iteration] == [sum(1 for i in SAMPLED if i <= it) for it in range(ITERATIONS)]
    assert fake_gpu.event_syncs == 0
    reference, _ = _capture(tmp_path, monkeypatch, fake_gpu, small_cnn, train_small, 0, name="reference")
    # the same rows, byte for byte, as with a GPU that is always done (every anchor taken at once)
    assert lines == reference
    rows = [json.loads(line) for line in lines]
    assert len({r["id"] for r in rows}) == len(rows)
    buckets = None
    for iteration in range(ITERATIONS):
        mine = sorted((r for r in rows if r["iteration"] == iteration), key=lambda r: r["id"])
        compute = [r for r in mine if r["kind"] == "compute"]
        layers = [(r["op"], r["name"]) for r in compute if r.get("name") not in (None, "optimizer")]
        if iteration in SAMPLED:
            assert layers == [("forward", n) for n in ("0", "1", "4", "6")] + [("backward", n) for n in ("6", "4", "1", "0")]
        else:
            assert layers == [] and [r["op"] for r in compute if "name" not in r] == ["forward", "backward"]
        assert compute[-1]["op"] == "optimizer_step"
        collectives = [r for r in mine if r["kind"] == "collective"]
        if iteration >= 1:  # DDP's rebuilt buckets: the same on every later iteration
            buckets = buckets or len(collectives)
            assert len(collectives) == buckets > 1
        marker = mine[-1]
        assert marker["kind"] == "marker" and marker["start_ns"] == per_iteration[iteration][2]
        for row in mine:
            assert marker["start_ns"] <= row["start_ns"] <= row["end_ns"] <= marker["end_ns"]
            assert (row["start_ns"] - OFF) % TICK_NS == 0 and (row["end_ns"] - OFF) % TICK_NS == 0
        for before, row in zip(compute, compute[1:]):
            assert row["deps"][0] == before["id"] and before["end_ns"] <= row["start_ns"]


def test_a_gpu_that_lags_gets_its_rows_written_once_its_events_completed(tmp_path, monkeypatch, one_rank, small_cnn,
                                                                         fake_gpu, train_small):
    """With events completing only at a synchronisation, an un-sampled iteration's rows wait (nothing is written at its
    end) until the next sampled iteration's synchronisation completed them; with a GPU that is always done each
    iteration's rows are written at the end of the next one at the latest."""
    _, lagging = _capture(tmp_path, monkeypatch, fake_gpu, small_cnn, train_small, None)
    written = [w for _, w, _ in lagging]
    for iteration in range(1, ITERATIONS):
        if iteration not in SAMPLED and iteration - 1 not in SAMPLED:
            assert written[iteration] == written[iteration - 1]  # nothing completed: nothing converted
    assert written[4] > written[3]  # iteration 4 synchronised: 1..3 written at its end
    _, done = _capture(tmp_path, monkeypatch, fake_gpu, small_cnn, train_small, 0, name="done")
    written = [w for _, w, _ in done]
    assert all(b > a for a, b in zip(written, written[1:]))  # something written at every iteration's end


def test_a_sampled_iterations_rows_are_converted_over_the_following_iterations(tmp_path, monkeypatch, one_rank, small_cnn,
                                                                                fake_gpu, train_small):
    """At most max(convert_rows, rows of the ending iteration) rows are converted at an iteration's end, so a backlog
    (here: iterations 1-3, completed by iteration 4's synchronisation) spreads over the next iterations; the file ends
    the same."""
    lines, per_iteration = _capture(tmp_path, monkeypatch, fake_gpu, small_cnn, train_small, None, convert_rows=2,
                                    name="spread")
    reference, ref_iteration = _capture(tmp_path, monkeypatch, fake_gpu, small_cnn, train_small, None, name="reference")
    assert lines == reference
    rows = [json.loads(line) for line in lines]
    count = {i: sum(1 for r in rows if r["iteration"] == i) for i in range(ITERATIONS)}

    def steps(per):
        written = [w for _, w, _ in per]
        return [b - a for a, b in zip([0] + written, written)]

    spread, default = steps(per_iteration), steps(ref_iteration)
    assert all(step <= max(2, count[i]) for i, step in enumerate(spread))
    assert spread[4] == count[4] and spread[5] == count[5]  # the backlog of 1-3 goes at that pace
    assert default[4] == count[1] + count[2] + count[3]  # (64 rows by default: all of it at once)
