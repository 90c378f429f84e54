"""DDP capture on GPUs: rows timed by CUDA events and written on the host
clock through the iteration's anchor (checked here with scripted events, no
GPU needed), NCCL on a real GPU where there is one, and clear refusals."""

import json

import pytest

torch = pytest.importorskip("torch", reason="the DDP capture needs PyTorch (pip install ddlsim[capture])")

from typer.testing import CliRunner  # noqa: E402

from ddlsim.capture import layer_hooks  # noqa: E402
from ddlsim.capture.ddp import job_config  # noqa: E402
from ddlsim.capture.layer_hooks import LayerHooks  # noqa: E402
from ddlsim.capture.recorder import RankRecorder  # noqa: E402
from ddlsim.cli.app import app  # noqa: E402
from ddlsim.errors import DdlsimError  # noqa: E402

HOST_NS = 10**12  # host clock at the anchor
STEP_MS = 1.5  # each scripted event is recorded 1.5 ms of GPU time after the one before


class FakeEvent:
    def __init__(self, t_ms: float):
        self.t_ms = t_ms

    def query(self) -> bool:  # complete: the test resolves after synchronising
        return True

    def elapsed_time(self, other: "FakeEvent") -> float:
        return other.t_ms - self.t_ms


def _rows(path):
    return [r for r in (json.loads(line) for line in path.read_text().splitlines()) if "id" in r]


def test_gpu_rows_are_written_on_the_host_clock_through_the_anchor(tmp_path, monkeypatch):
    marks = []

    def mark(self):
        marks.append(FakeEvent(100.0 + STEP_MS * len(marks)))  # GPU clock: 100 ms at the anchor
        return marks[-1]

    monkeypatch.setattr(LayerHooks, "mark", mark)
    monkeypatch.setattr(layer_hooks, "now_ns", lambda: HOST_NS)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a, **k: None)  # events then record on the current stream
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    rec = RankRecorder(tmp_path, 0, "worker")
    hooks = LayerHooks(model, rec, cuda=True)
    hooks.begin_iteration(0)  # anchor = marks[0]
    model(torch.ones(5, 4)).sum().backward()
    rec.flush()
    assert _rows(rec.path) == []  # nothing written before the resolve
    hooks.resolve_gpu_rows()
    rec.close()
    rows = _rows(rec.path)
    # marks: anchor, fwd0 start/end, fwd1 start/end, bwd1 start/end, bwd0 start/end
    assert [(r["op"], r["name"]) for r in rows] == [("forward", "0"), ("forward", "1"), ("backward", "1"), ("backward", "0")]
    for k, row in enumerate(rows):
        start_ms, end_ms = STEP_MS * (1 + 2 * k), STEP_MS * (2 + 2 * k)  # after the anchor
        assert row["start_ns"] == HOST_NS + round(start_ms * 1e6)
        assert row["end_ns"] == HOST_NS + round(end_ms * 1e6)
        assert row["deps"] == ([] if k == 0 else [rows[k - 1]["id"]])
        assert row["iteration"] == 0 and row["stream"] == "compute"
    assert hooks.backward_row(1) == rows[2]["id"]  # ids handed out before the rows were written


def test_gpu_events_are_recorded_in_order_and_reused_across_iterations(tmp_path, monkeypatch):
    created = []

    class FakeCudaEvent:  # a GPU clock that ticks 0.25 ms per recorded event
        ticks = 0

        def __init__(self, enable_timing=False):
            assert enable_timing
            created.append(self)

        def record(self):
            FakeCudaEvent.ticks += 1
            self.t_ms = 0.25 * FakeCudaEvent.ticks

        def query(self):  # complete: each iteration is resolved after a synchronisation
            return True

        def elapsed_time(self, other):
            return other.t_ms - self.t_ms

    monkeypatch.setattr(torch.cuda, "Event", FakeCudaEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a, **k: None)  # events then record on the current stream
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    rec = RankRecorder(tmp_path, 0, "worker")
    hooks = LayerHooks(model, rec, cuda=True)
    per_iteration = []
    for iteration in range(3):
        hooks.begin_iteration(iteration)
        model(torch.ones(5, 4)).sum().backward()
        hooks.resolve_gpu_rows()
        per_iteration.append(len(created))
    rec.close()
    # anchor + 8, then one more: the last converted anchor is held (a later anchor's host time may be relayed from it)
    assert per_iteration == [9, 10, 10]  # created once, then reused
    rows = _rows(rec.path)
    assert len(rows) == 12
    for iteration in range(3):
        mine = [r for r in rows if r["iteration"] == iteration]
        assert [r["op"] for r in mine] == ["forward", "forward", "backward", "backward"]
        # each row spans 0.25 ms, one tick after the previous row ends (anchor first)
        for k, r in enumerate(mine):
            assert r["end_ns"] - r["start_ns"] == 250_000
            if k:
                assert r["start_ns"] - mine[k - 1]["end_ns"] == 250_000


def test_cpu_rows_keep_the_host_clock(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 3))
    rec = RankRecorder(tmp_path, 0, "worker")
    hooks = LayerHooks(model, rec)
    hooks.begin_iteration(0)
    model(torch.ones(2, 4)).sum().backward()
    hooks.resolve_gpu_rows()  # a no-op on the CPU
    rec.close()
    assert [r["op"] for r in _rows(rec.path)] == ["forward", "backward"]


def test_device_must_be_cpu_or_cuda():
    with pytest.raises(ValueError, match='device must be "cpu" or "cuda"'):
        job_config({"model": "lenet5", "device": "tpu"})
    assert job_config({"model": "lenet5"})["device"] == "cpu"


def test_cli_refuses_cuda_without_a_gpu(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = CliRunner().invoke(app, ["capture", "ddp", "--model", "lenet5", "--device", "cuda", "--out", str(tmp_path / "run")])
    assert isinstance(result.exception, DdlsimError) and "torch sees no GPU" in str(result.exception)
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here: the NCCL capture runs only where torch sees a GPU")
def test_a_one_rank_nccl_capture_records_gpu_timed_rows(tmp_path):
    from ddlsim.capture.ddp_run import run_ddp_capture

    log, failure = run_ddp_capture({"model": "lenet5", "iterations": 3, "batch_size": 8, "device": "cuda"}, 1, tmp_path)
    assert failure is None
    kind, op = log.column("kind"), log.column("op")
    assert ((kind == "compute") & (op == "forward")).sum() == 3 * 5
    assert ((kind == "compute") & (op == "backward")).sum() == 3 * 5
    assert (kind == "collective").sum() >= 3
    assert (log.column("end_ns") >= log.column("start_ns")).all()
    sidecar = json.loads((tmp_path / "0.ddp.json").read_text())
    assert sidecar["job"]["backend"] == "nccl" and sidecar["job"]["timing"] == "cuda events"


def test_the_after_training_all_reduce_timings_use_the_gpu_and_wait_for_it_on_nccl(monkeypatch):
    """NCCL takes only GPU tensors and returns once an all-reduce is queued: the small all-reduce and the ring-rate
    timings of a GPU capture put their buffer on the rank's GPU and end each time at a device synchronisation
    (scripted torch.distributed and CUDA calls, no GPU needed)."""
    from ddlsim.capture import allreduce_rate

    calls = []
    monkeypatch.setattr(torch.distributed, "get_backend", lambda group=None: "nccl")
    monkeypatch.setattr(torch.distributed, "barrier", lambda: calls.append("barrier"))
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda x: calls.append(("all_reduce", x.numel())))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append("sync"))
    made = []
    real_zeros = torch.zeros

    def zeros(*size, device=None, **kw):
        made.append(device)
        return real_zeros(*size, **kw)

    monkeypatch.setattr(torch, "zeros", zeros)
    allreduce_rate.median_allreduce_ns(5, repeats=3)
    assert made == [torch.device("cuda", 1)]
    # the warm-up all-reduce and each timed one are followed by a synchronisation before the clock is read
    reduces = [i for i, c in enumerate(calls) if c == ("all_reduce", 5)]
    assert len(reduces) == 4 and all(calls[i + 1] == "sync" for i in reduces)
