"""Type stubs of the Rust engine extension `ddlsim._core` (src/lib.rs).

Column buffers travel as `(dtype, bytes)` pairs: a numpy dtype string
("<i8", "u1", ...) and the little-endian bytes of the column.
"""

from os import PathLike
from typing import Any, Callable, Optional, Union

Column = tuple[str, bytes]
ProgressCallback = Callable[[int, int, int, int], object]
"""progress(sim_now_ns, events, ops_done, ops_total); an exception it raises stops the run."""

KIND_NAMES: list[str]
ALGORITHM_NAMES: list[str]
__version__: str

class EngineError(Exception):
    """An error of the engine; `kind` names its ErrorKind."""

    kind: Optional[str]

class BadInputError(EngineError, ValueError):
    """The input (a graph, a training or network description) is invalid."""

class OutOfRangeError(BadInputError):
    """A time or size lies beyond the engine's range (about 146 years of simulated time)."""

class StuckGraphError(BadInputError):
    """The workload graph cannot finish (a dependency cycle, a collective member that never joins)."""

class EngineMemoryError(EngineError, MemoryError):
    """An allocation the run needs failed."""

class InterruptedRunError(EngineError):
    """The run's progress hook stopped it."""

class InternalEngineError(EngineError, RuntimeError):
    """A broken invariant of the engine (or of its own lowering): a bug."""

ERROR_KINDS: dict[str, type[EngineError]]
"""Exception class of each engine error kind, by the kind's name."""

def simulate_training_json(
    training_json: str,
    network_json: str,
    trace_detail: str,
    progress: Optional[ProgressCallback] = None,
) -> dict[str, Any]:
    """Lowers a training description and runs it. Returns a dict with
    `columns` (name -> Column of the event log), `op_names`, `stream_names`,
    `events`, `transfers`, `recomputations`, `makespan_ns`, `bytes_sent`,
    `bytes_received` (per rank) and `flows` (name -> Column)."""

def simulate_jobs_json(
    jobs_json: str,
    network_json: str,
    trace_detail: str,
    progress: Optional[ProgressCallback] = None,
) -> dict[str, Any]:
    """Lowers several jobs (`{"jobs": [{"start_ns": ..., "training": {...}}, ...]}`) into one graph and runs it.
    Returns what `simulate_training_json` returns plus `jobs`: `first_rank` (each job's first global rank),
    `job_of_rank`, and `contention` (one dict per link flows of two or more jobs crossed: `link`, `name`,
    `shared_ns`, `uses` = [(kind "job" | "tenant", id, bytes, flows, busy_ns)])."""

def rank_class_sizes(training_json: str, network_json: str) -> Optional[list[int]]:
    """The sizes of the rank classes a closed-form run of this training
    simulates one worker each of (``"rank_classes": true`` in the training
    description, every worker alike); None: every worker on its own. The
    run's dict then has ``rank_classes``: ``workers``, ``class_of`` (per
    rank), ``representatives`` and ``sizes`` (per class), ``compute_stride``
    and ``collective_stride`` (see ddlsim.trace.classes)."""

def lower_training_json(training_json: str, network_json: Optional[str] = None) -> dict[str, Any]:
    """The workload graph `simulate_training_json` runs, as columns (name ->
    Column, release times as `release_ops`/`release_ns`, wake-ups as
    `wakeup_ops`/`wakeup_ns`, continuations (a server thread's update right after
    its last push) as `continuation_ops`, plus `op_names`,
    `stream_names`, `preempt_at_messages` and
    `closed_form`: None or (latency_ns, bandwidth_bps, None or
    (intra_latency_ns, intra_bandwidth_bps))). The closed-form collective
    model needs `network_json`."""

def run_graph_columns(
    graph: dict[str, Any],
    network_json: str,
    trace_detail: str,
    progress: Optional[ProgressCallback] = None,
) -> dict[str, Any]:
    """Runs a workload graph given as columns (as `lower_training_json`
    returns them; raw bytes are accepted too); returns what
    `simulate_training_json` returns."""

def arm_interrupt_watchdog(grace_ms: int) -> None:
    """After the first Ctrl-C or SIGTERM, ends the process `grace_ms` later if it is still alive."""

def unregister_scratch(path: Union[str, PathLike[str]]) -> None:
    """Forgets a directory made by `create_scratch`, without removing it (it holds a finished output now)."""

def create_scratch(path: Union[str, PathLike[str]], mode: int = 0o777) -> None:
    """Makes the directory `path` (`mode` less the umask; not its parents) and registers
    it for removal (see `remove_registered_scratch`), in one call no Python signal handler interrupts.
    OSError (FileExistsError, ...) as os.mkdir."""

def remove_scratch(path: Union[str, PathLike[str]]) -> bool:
    """Removes the directory `path` (if there; never following a symbolic link)
    and forgets it, in one call no Python signal handler interrupts."""

def remove_registered_scratch() -> int:
    """Removes every directory made by `create_scratch` and not yet removed or forgotten (those
    there) and forgets them all; returns how many it removed."""

def tbf_transit(sent_ns: list[int], sender: list[int], receiver: list[int], wire_bytes: list[float],
                rate_bps: float, bucket_bytes: float) -> list[float]:
    """Each message's time (ns) on a capture's shaped links, re-run on its own send times
    (python/ddlsim/simulation/tbf_queue.py wraps it)."""

def algorithms() -> list[dict[str, Any]]:
    """The engine's all-reduce algorithms, one dict each: name, code, step_op,
    closed_form, min_ranks, folds_non_power_of_two, uses_hosts, partitions
    (python/ddlsim/simulation/algorithms.py wraps it)."""

def encode_row(
    kind: Any,
    op: Any,
    start_ns: Any,
    end_ns: Any,
    ready_ns: Any,
    deps: Any,
    row_id: Any,
    fields: dict[str, Any],
    encode: Callable[[Any], str],
) -> Optional[str]:
    """One capture row's JSON line (src/rows.rs): the bytes of json.dumps of {"id", "kind", "op", "start_ns",
    "end_ns", "deps"[, "ready_ns"], **fields} with the times, id and deps through int(); values other than exact
    ints, strings, None and booleans go through `encode`. None where a field is named like a row key."""

def encode_rows(rows: list[Any], encode: Callable[[Any], str], general: Callable[..., str]) -> str:
    """The recorder's held rows as one text, a line each ending in a newline (src/rows.rs): a str as it is; a tuple
    (kind, op, start_ns, end_ns, ready_ns, deps, row_id, fields, columns) as encode_row writes it with the fields
    {**fields, **columns} (columns None: fields); where a field is named like a row key, general(*row)."""
