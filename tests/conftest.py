import pytest

import ddlsim


@pytest.fixture(scope="session")
def resnet_runs():
    """ResNet-50 on 8 workers, both strategies, with jitter (shared by invariant tests)."""
    common = dict(model="resnet50", workers=8, iterations=2, jitter=0.05, seed=7)
    return {
        "ring": ddlsim.simulate(strategy="ring", **common),
        "ps": ddlsim.simulate(strategy="ps", servers=2, **common),
        # ByteScheduler: partitions side by side on each comm stream, priority order negotiated across ranks
        "bytescheduler": ddlsim.simulate(strategy="ring", stream_policy="priority", partition_bytes="4MB", credit_bytes="16MB",
                                         barrier=False, trace_detail="step", **common),
    }


@pytest.fixture
def one_rank(tmp_path):
    """A one-rank gloo process group for the capture-hook tests (torch needed)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.fixture
def small_cnn():
    """Makes the small seeded CNN the capture-hook tests wrap in DDP (a convolution, a batch norm, two linears)."""
    import torch

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten(),
                                   torch.nn.Linear(4 * 6 * 6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))

    return make


@pytest.fixture
def fake_gpu(monkeypatch):
    """torch.cuda as the capture uses it, without a GPU: Event a clock that ticks 0.5 ms per recorded event,
    synchronize counted (the list returned), current_stream None."""
    import torch

    class FakeCudaEvent:
        ticks = 0

        def __init__(self, enable_timing=False):
            assert enable_timing
            self.t_ms = None

        def record(self, stream=None):
            FakeCudaEvent.ticks += 1
            self.t_ms = 0.5 * FakeCudaEvent.ticks

        def synchronize(self):
            assert self.t_ms is not None

        def elapsed_time(self, other):
            return other.t_ms - self.t_ms

    syncs = []
    monkeypatch.setattr(torch.cuda, "Event", FakeCudaEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: syncs.append(1))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a, **k: None)
    return syncs


@pytest.fixture
def train_small():
    """Trains a DDP-wrapped small_cnn under capture hooks for `iterations` (SGD, one seeded batch of two 8x8 images),
    as a capture's loop calls the hooks; `check_between(iteration)` runs after the optimizer step's row."""
    import torch

    def train(ddp, hooks, iterations, check_between=None):
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
        x, y = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 2])
        for iteration in range(iterations):
            hooks.begin_iteration(iteration)
            optimizer.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
            start = hooks.mark()
            optimizer.step()
            hooks.optimizer_step_row(start, hooks.mark())
            if check_between is not None:
                check_between(iteration)
            hooks.end_iteration()

    return train
