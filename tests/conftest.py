import os
import subprocess
import sys
from pathlib import Path

import forked_cli
import pytest

import ddlsim

ROOT = Path(__file__).resolve().parent.parent

# `make test` runs the suite on two processes (pytest-xdist, -n 2): each test file goes to one of them whole (its
# module fixtures, such as a capture made once for the file's tests, are made once), and the files below go
# together to one process, one after the other:
SHARED = {
    # they read runs made once per process by ddlsim_once / snippet_once (the README's `demo` and `plan --apply`,
    # docs/validation.md's validate): on one process, each is made once
    "test_readme.py": "runs made once", "test_doc_snippets.py": "runs made once",
    "test_capture_plan.py": "runs made once", "test_analyze_report.py": "runs made once",
    "test_validate.py": "runs made once", "test_reproduce_training.py": "runs made once",
    # they compare the machine's network namespaces and links before and after shaped captures (as root)
    "test_capture_shaping.py": "machine's network namespaces",
    "test_capture_interrupt.py": "machine's network namespaces",
    # a local Ray instance, whose workers the test finds in /proc and kills
    "test_sweep_ray.py": "local Ray",
}


# The units that take a minute or more (make test prints the slowest tests) start first, longest first: xdist
# starts those with the most tests first, and the fuzz campaign's four tests (two minutes) started last, on one
# process while the other had nothing left.
FIRST = ("runs made once", "tests/test_fuzz_readers.py", "tests/test_output_safety.py",
         "tests/test_analysis_streaming.py", "machine's network namespaces")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Scopes of work for pytest-xdist: a test file, or the group of SHARED files it belongs to; FIRST first."""
    from xdist.scheduler import LoadScopeScheduling

    class FileScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = nodeid.split("::", 1)[0]
            return SHARED.get(Path(file).name, file)

        def _assign_work_unit(self, node) -> None:
            for scope in reversed(FIRST):
                if scope in self.workqueue:
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return FileScheduling(config, log)


@pytest.fixture(scope="session")
def ddlsim_once(tmp_path_factory):
    """`ddlsim_once(*argv)` runs `python -m ddlsim ARGV` as a user would (a subprocess in a fresh scratch directory
    with an `examples` link to the checkout's, COLUMNS=150, stderr not a terminal) the first time a test asks for that
    exact argv, and returns (the CompletedProcess, the directory) to every test that asks again. For the expensive
    commands that several tests run word for word (the README's `ddlsim demo`, the quick reproductions): the tests
    only read what it wrote, so the run is made once per session instead of once per test."""
    done: dict[tuple[str, ...], tuple[subprocess.CompletedProcess, Path]] = {}

    def run(*argv: str) -> tuple[subprocess.CompletedProcess, Path]:
        if argv not in done:
            cwd = tmp_path_factory.mktemp("ddlsim_once")
            (cwd / "examples").symlink_to(ROOT / "examples")
            env = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "COLUMNS": "150"}
            done[argv] = (subprocess.run([sys.executable, "-m", "ddlsim", *argv], cwd=cwd, capture_output=True,
                                         text=True, env=env, timeout=600), cwd)
        return done[argv]

    return run


@pytest.fixture(scope="session")
def snippet_once(tmp_path_factory):
    """`snippet_once(code)` runs `python -c CODE` as a reader of the docs would (forked_cli.run_code: a process of its
    own, in a fresh scratch directory with an `examples` link, COLUMNS=100, MPLBACKEND=Agg, a free MASTER_PORT, the
    sweep's cache inside the scratch directory) the first time a test asks for that exact code, and returns (the
    CompletedProcess, the directory) to every test that asks again. For a doc's Python block that reads no file made
    before it and that two tests run word for word (the README's Python API block: test_readme and
    test_doc_snippets): both only read what it printed and wrote, so it runs once per session."""
    from ddlsim.capture.launch import free_port

    done: dict[str, tuple[subprocess.CompletedProcess, Path]] = {}

    def run(code: str) -> tuple[subprocess.CompletedProcess, Path]:
        if code not in done:
            cwd = tmp_path_factory.mktemp("snippet_once")
            (cwd / "examples").symlink_to(ROOT / "examples")
            env = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "COLUMNS": "100", "MPLBACKEND": "Agg",
                   "MASTER_PORT": str(free_port()), "XDG_CACHE_HOME": str(cwd / "cache")}
            done[code] = (forked_cli.run_code(code, cwd=cwd, env=env, timeout=600), cwd)
        return done[code]

    return run


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


class FakeGpu(list):
    """The fake GPU's record: one item per device synchronisation (the list), and

    * ``lag``: when an event completes: None (the default) only at a device synchronisation; n >= 0 also once n
      events were recorded after it (the GPU n events behind the host);
    * ``event_syncs``: calls of ``Event.synchronize``; ``elapsed``: calls of ``Event.elapsed_time``;
    * converting an event that has not completed (``elapsed_time``) raises AssertionError (a real GPU raises too)."""

    def __init__(self):
        super().__init__()
        self.lag = None
        self.event_syncs = 0
        self.elapsed = 0
        self.ticks = 0  # events recorded so far: the GPU clock is 0.5 ms per event
        self.synced_to = 0  # the tick up to which a synchronisation completed the events

    def complete(self, tick):
        return tick <= self.synced_to or (self.lag is not None and self.ticks - tick >= self.lag)


@pytest.fixture
def fake_gpu(monkeypatch):
    """torch.cuda as the capture uses it, without a GPU: Event a clock that ticks 0.5 ms per recorded event, an event
    complete at a synchronisation (or `lag` events later, see FakeGpu), synchronize counted (the list returned),
    current_stream a stream whose query() says whether every event recorded completed."""
    import torch

    gpu = FakeGpu()

    class FakeCudaEvent:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.tick = None

        @property
        def t_ms(self):
            return None if self.tick is None else 0.5 * self.tick

        def record(self, stream=None):
            gpu.ticks += 1
            self.tick = gpu.ticks

        def query(self):
            assert self.tick is not None
            return gpu.complete(self.tick)

        def synchronize(self):
            assert self.tick is not None
            gpu.event_syncs += 1
            gpu.synced_to = max(gpu.synced_to, self.tick)

        def elapsed_time(self, other):
            gpu.elapsed += 1
            assert self.tick is not None and other.tick is not None
            assert gpu.complete(self.tick) and gpu.complete(other.tick), "elapsed_time of an event not completed"
            return other.t_ms - self.t_ms

    class FakeStream:
        def query(self):
            return gpu.complete(gpu.ticks)

    def synchronize(*args, **kwargs):
        gpu.append(1)
        gpu.synced_to = gpu.ticks

    stream = FakeStream()
    monkeypatch.setattr(torch.cuda, "Event", FakeCudaEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a, **k: stream)
    return gpu


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
