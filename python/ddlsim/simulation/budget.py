"""What a run will cost, known before it starts, and the limits it must fit.

`estimate` counts, from the scenario and its training description alone
(no graph is built), the graph operations, point-to-point transfers, engine
events, event-log rows and peak memory of a run. `check` refuses a run whose
estimate is over budget with a :class:`ScenarioError` that gives the
estimate and the ways forward. The budget and an optional progress callback
come from the caller through `run_control` (the CLI's `--max-memory`,
`--force` and progress bar), so that the API's signature stays the
scenario's.

Calibration (measured on this engine, see README "Cost of a run"): log rows
are exact up to the barrier rows; memory is about 1.1-1.3 kB per log row on
top of the ~150 MB the process starts with (engine log, its copy into
Python, the DataFrame and the analysis); events are one per transfer and
compute op with an analytic network or a ring on a flow network, and grow
with the number of flows sharing a link on a flow network (PS incast: about
1.4 x workers per transfer, measured with 8-32 workers and 1-4 servers).
"""

from __future__ import annotations

import contextvars
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from ..errors import ScenarioError
from ..units import format_bytes
from .lowering import steps_per_iteration
from .scenario import Scenario

# Peak memory per event-log row (engine log + Python copy + DataFrame + analysis + writers).
BYTES_PER_ROW = 1300
# Memory of a started process (interpreter, numpy, pandas, pyarrow, matplotlib).
BASE_BYTES = 150 * 2**20
# Engine speed used for the time estimate (events per second; measured 0.5-2 M/s).
EVENTS_PER_S = 1_000_000
# Without --force, runs above this many engine events (about half an hour) are refused.
MAX_EVENTS = 2_000_000_000
# Default memory budget when the machine's memory cannot be read.
FALLBACK_MEMORY = 8 * 2**30

# progress(sim_now_ns, events, ops_done, ops_total)
ProgressCallback = Callable[[int, int, int, int], None]


def default_max_memory() -> int:
    """Half of the machine's physical memory (8 GiB when it cannot be read)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return FALLBACK_MEMORY
    return total // 2 if total > 0 else FALLBACK_MEMORY


@dataclass(frozen=True)
class RunControl:
    """Limits and hooks of the runs started inside `run_control(...)`."""

    max_memory: Optional[int] = None  # bytes; None: default_max_memory()
    force: bool = False
    progress: Optional[ProgressCallback] = None
    # Called with the resolved scenario and its estimate once a run is admitted.
    on_start: Optional[Callable[[Scenario, "Estimate"], None]] = None


_CONTROL: contextvars.ContextVar[RunControl] = contextvars.ContextVar("ddlsim_run_control", default=RunControl())


@contextmanager
def run_control(max_memory: Optional[int] = None, force: bool = False,
                progress: Optional[ProgressCallback] = None,
                on_start: Optional[Callable[[Scenario, "Estimate"], None]] = None) -> Iterator[RunControl]:
    """Runs started inside get this budget (`max_memory` bytes, or no
    budget with `force`), this progress callback and this start callback."""
    control = RunControl(max_memory=max_memory, force=force, progress=progress, on_start=on_start)
    token = _CONTROL.set(control)
    try:
        yield control
    finally:
        _CONTROL.reset(token)


def current_control() -> RunControl:
    return _CONTROL.get()


@dataclass(frozen=True)
class Estimate:
    ops: int
    transfers: int
    events: int
    log_rows: int
    memory_bytes: int

    @property
    def engine_s(self) -> float:
        return self.events / EVENTS_PER_S

    def describe(self) -> str:
        return (f"about {self.transfers:,} transfers, {self.events:,} engine events, {self.log_rows:,} log rows, "
                f"{format_bytes(self.memory_bytes)} of memory and {_duration(self.engine_s)} in the engine")


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s" if seconds >= 1 else "under a second"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86400 * 2:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:,.0f} days"


def estimate(scenario: Scenario, layers: int, group_bytes: list[int], detail: str) -> Estimate:
    """The cost of simulating `scenario` whose model has `layers` layers and
    gradient groups of `group_bytes`, logging at `detail` ("step" or
    "collective"). Event log v2: a message is a send row and a recv row."""
    n = scenario.workers
    iters = scenario.iterations
    strategy = scenario.strategy
    groups = len(group_bytes)
    compute = 2 * layers * n
    if strategy.kind == "ps":
        # The lowering's messages: one per group, per server share with placement "split", each cut
        # into chunk_bytes pieces (crates/ddlsim-core/src/lower/training.rs, ps_pieces).
        pieces = sum(ps_piece_count(b, strategy.servers, strategy.placement == "split", strategy.chunk_bytes) for b in group_bytes)
        updates = n if strategy.asynchronous else 1
        sync_ops = pieces * (4 * n + updates)  # push, update(s), push ack, pull request, pull response
        sync_ops += 1 if strategy.distribution != "immediate" and scenario.barrier else 0  # distribution's server barrier
        transfers = pieces * 4 * n
        step_rows = transfers  # the recv row of each transfer op
    else:
        sync_ops = groups * n
        closed_form = scenario.network.collective_model == "closed-form"
        transfers = 0 if closed_form else n * steps_per_iteration(scenario, group_bytes)
        step_rows = 2 * transfers if detail == "step" else 0
    barrier = 1 if scenario.barrier else 0
    ops = iters * (compute + sync_ops + barrier)
    transfers *= iters
    rows = ops + iters * step_rows
    # Flows sharing a bottleneck make a flow-level network recompute rates on every arrival and departure.
    per_transfer = 1.0
    if scenario.network.fidelity == "flow" and strategy.kind == "ps":
        per_transfer = max(1.0, 1.4 * n)
    events = int(iters * compute + transfers * per_transfer)
    memory = BASE_BYTES + rows * BYTES_PER_ROW
    return Estimate(ops=ops, transfers=transfers, events=events, log_rows=rows, memory_bytes=memory)


def ps_piece_count(group_bytes: int, servers: int, split: bool, chunk_bytes: int) -> int:
    """Messages a group of `group_bytes` travels as under PS, as the engine's
    lowering cuts it (`ps_pieces`): one share per server with `split` (the
    first `bytes % servers` one byte larger, empty shares dropped), else one,
    each cut into messages of at most `chunk_bytes` (0: whole)."""
    def messages(b: int) -> int:
        return 1 if chunk_bytes <= 0 or b <= chunk_bytes else -(-b // chunk_bytes)

    k = max(servers, 1)
    if not split or k == 1:
        return messages(group_bytes)
    q, r = divmod(group_bytes, k)
    if q == 0:
        return r if r else 1  # r one-byte shares (or one empty message)
    return r * messages(q + 1) + (k - r) * messages(q)


def check(est: Estimate, scenario: Scenario, detail: str, control: Optional[RunControl] = None) -> None:
    """Refuses (ScenarioError) a run over its memory or event budget, unless
    forced; tells `control.on_start` about a run it admits."""
    control = control or current_control()
    _refuse_over_budget(est, scenario, detail, control)
    if control.on_start is not None:
        control.on_start(scenario, est)


def _refuse_over_budget(est: Estimate, scenario: Scenario, detail: str, control: RunControl) -> None:
    if control.force:
        return
    limit = control.max_memory if control.max_memory is not None else default_max_memory()
    over = []
    if est.memory_bytes > limit:
        over.append(f"the memory budget of {format_bytes(limit)}")
    if est.events > MAX_EVENTS:
        over.append(f"the limit of {MAX_EVENTS:,} engine events")
    if not over:
        return
    ways = []
    if detail == "step" and scenario.strategy.kind == "ring":
        ways.append("log collectives, not their steps (--trace-detail collective)")
    if scenario.iterations > 1:
        ways.append(f"simulate fewer iterations (--iterations, now {scenario.iterations})")
    ways.append("fewer workers (--workers)")
    if est.memory_bytes > limit:
        ways.append(f"raise the budget (--max-memory, e.g. {format_bytes(_round_up(est.memory_bytes))})")
    ways.append("run anyway (--force)")
    raise ScenarioError(
        f"this run would take {est.describe()}, over {' and '.join(over)}; "
        f"to go on: {'; '.join(ways)}"
    )


def _round_up(n: int) -> int:
    """n rounded up to 2 significant digits, so the suggested budget is enough."""
    s = 10 ** max(0, len(str(n)) - 2)
    return -(-n // s) * s
