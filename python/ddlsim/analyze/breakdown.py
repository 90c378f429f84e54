"""Where the time of an iteration goes, per rank, from the raw rows.

Iteration windows: iteration i ends with its last row (the latest ``end_ns``
of the rows with ``iteration == i``, on the reference clock); its window
starts where the previous one ended (the first at the log's earliest start).

Per rank and window, every row of the rank clipped to the window:
- compute: the union of its ``compute`` rows;
- communication: the union of its ``send`` rows (it is the sender: start of
  transmission to last byte out), ``recv`` rows (it is the receiver: until
  delivered) and ``collective`` rows; steps inside a collective are covered
  by the collective row, so nothing is counted twice;
- overlap: both at once (SketchDLC's phase 2); exposed communication:
  communication while not computing (phase 3); idle: neither.

Times are put on the reference clock with the metadata's ``clocks`` offsets
(``ddlsim.trace.aligned_times``), so windows compare across hosts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..trace.coerce import as_columns
from ..trace.classes import rank_weights
from ..trace.columns import KINDS, aligned_times

if TYPE_CHECKING:
    import pandas as pd

    from ..trace.schema import EventLog

_COMPUTE = KINDS.index("compute")
_COMMUNICATION = [KINDS.index(k) for k in ("send", "recv", "collective")]


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of [starts, ends) as sorted disjoint intervals (empty ones dropped)."""
    keep = ends > starts
    s, e = np.asarray(starts)[keep], np.asarray(ends)[keep]
    if not len(s):
        return s.astype(np.int64), e.astype(np.int64)
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new_group = np.empty(len(s), dtype=bool)
    new_group[0] = True
    new_group[1:] = s[1:] > reach[:-1]
    last_of_group = np.append(np.flatnonzero(new_group)[1:] - 1, len(s) - 1)
    return s[new_group], reach[last_of_group]


def union_length(starts: np.ndarray, ends: np.ndarray) -> int:
    """Total length covered by the intervals [starts, ends)."""
    s, e = merge_intervals(starts, ends)
    return int((e - s).sum())


def covered(starts: np.ndarray, ends: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Length of the union of [starts, ends) inside each window [a, b)."""
    s, e = merge_intervals(starts, ends)
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    if not len(s):
        return np.zeros(len(a), dtype=np.int64)
    cumulative = np.concatenate([[0], np.cumsum(e - s)])

    def up_to(t: np.ndarray) -> np.ndarray:  # covered length before time t
        j = np.searchsorted(s, t, side="right") - 1
        inside = np.clip(t - s[j.clip(0)], 0, (e - s)[j.clip(0)])
        return np.where(j >= 0, cumulative[j.clip(0)] + inside, 0)

    return np.maximum(up_to(b) - up_to(a), 0)


def window_arrays(log: EventLog) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(iterations, window starts, window ends) on the reference clock: an
    iteration ends with its last row."""
    log = as_columns(log)
    start, end = aligned_times(log)
    iteration = log.column("iteration")
    has = iteration >= 0
    if not has.any():
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    numbers, inverse = np.unique(iteration[has], return_inverse=True)
    ends = np.full(len(numbers), np.iinfo(np.int64).min)
    np.maximum.at(ends, inverse, end[has])
    ends = np.maximum.accumulate(ends)  # windows never run backwards
    starts = np.concatenate([[int(start.min())], ends[:-1]])
    return numbers.astype(np.int64), starts.astype(np.int64), ends


def iteration_windows(log: EventLog) -> "pd.DataFrame":
    """iteration, start_ns, end_ns (reference clock): an iteration ends with its last row."""
    import pandas as pd

    numbers, starts, ends = window_arrays(log)
    return pd.DataFrame({"iteration": numbers.astype(int), "start_ns": starts, "end_ns": ends})


PARTS = ("compute_ns", "communication_ns", "overlap_ns", "exposed_communication_ns", "idle_ns")


def rank_iteration_arrays(log: EventLog) -> dict:
    """Per rank (axis 0) and iteration (axis 1): compute / communication /
    overlap / exposed communication / idle in ns; plus `ranks`, `roles`,
    `iterations`, `start_ns`, `end_ns` (the windows)."""
    log = as_columns(log)
    numbers, a, b = window_arrays(log)
    start, end = aligned_times(log)
    rank = log.column("rank")
    kind_codes, kind_dictionary = log.codes("kind")
    kind = np.array([KINDS.index(k) for k in kind_dictionary], dtype=np.int64)[kind_codes] if len(kind_codes) else kind_codes
    role_codes, role_dictionary = log.codes("role")
    is_compute = kind == _COMPUTE
    is_communication = np.isin(kind, _COMMUNICATION)
    order = np.argsort(rank, kind="stable")
    sorted_ranks = rank[order]
    first = np.flatnonzero(np.concatenate([[True], sorted_ranks[1:] != sorted_ranks[:-1]])) if len(rank) else \
        np.zeros(0, dtype=np.int64)
    ranks = sorted_ranks[first]
    roles = [str(role_dictionary[role_codes[order[i]]]) for i in first]  # one role per rank
    bounds = np.append(first, len(order))
    out = {part: np.zeros((len(ranks), len(numbers)), dtype=np.int64) for part in PARTS}
    for index in range(len(ranks)):
        rows = order[bounds[index]: bounds[index + 1]]
        c, m = rows[is_compute[rows]], rows[is_communication[rows]]
        both = np.concatenate([c, m])
        compute = covered(start[c], end[c], a, b)
        communication = covered(start[m], end[m], a, b)
        busy = covered(start[both], end[both], a, b)
        overlap = compute + communication - busy
        out["compute_ns"][index] = compute
        out["communication_ns"][index] = communication
        out["overlap_ns"][index] = overlap
        out["exposed_communication_ns"][index] = communication - overlap
        out["idle_ns"][index] = (b - a) - busy
    out.update(ranks=ranks, roles=np.array(roles, dtype=object), iterations=numbers, start_ns=a, end_ns=b)
    return out


def rank_iteration_table(log: EventLog) -> "pd.DataFrame":
    """One row per (iteration, rank): the window and compute / communication /
    overlap / exposed communication / idle in ns."""
    import pandas as pd

    arrays = rank_iteration_arrays(log)
    ranks, iterations = arrays["ranks"], arrays["iterations"]
    r, i = len(ranks), len(iterations)
    frame = pd.DataFrame({
        "iteration": np.tile(iterations.astype(int), r),
        "rank": np.repeat(ranks.astype(int), i),
        "role": np.repeat(arrays["roles"], i),
        "start_ns": np.tile(arrays["start_ns"], r),
        "end_ns": np.tile(arrays["end_ns"], r),
        **{part: arrays[part].reshape(-1) for part in PARTS},
    })
    return frame.sort_values(["iteration", "rank"], kind="stable").reset_index(drop=True)


def iteration_arrays(log: EventLog, arrays: dict | None = None) -> dict:
    """Per iteration: window, time and the breakdown in seconds, mean over
    the workers (over all ranks if the log has no worker), and SketchDLC's
    overlap ratio (overlap / iteration time); numpy only. `arrays`: the
    log's :func:`rank_iteration_arrays`, if already computed."""
    arrays = rank_iteration_arrays(log) if arrays is None else arrays
    workers = arrays["roles"] == "worker"
    if not workers.any():
        workers = np.ones(len(arrays["ranks"]), dtype=bool)
    time_ns = arrays["end_ns"] - arrays["start_ns"]
    out = {
        "iteration": arrays["iterations"].astype(int),
        "start_s": arrays["start_ns"] / 1e9,
        "end_s": arrays["end_ns"] / 1e9,
        "time_s": time_ns / 1e9,
    }
    # A rank of a class log stands for its class (ddlsim.trace.classes): weighted, in integers, the
    # mean is the per-rank log's.
    weights = rank_weights(log, arrays["ranks"])[workers]
    for part in PARTS:
        values = arrays[part][workers]
        if not len(values):
            mean = np.zeros(len(time_ns))
        elif (weights == 1).all():
            mean = values.mean(axis=0)
        else:
            mean = (values * weights[:, None]).sum(axis=0) / int(weights.sum())
        out[part.replace("_ns", "_s")] = mean / 1e9
    out["overlap_ratio"] = np.where(time_ns > 0, out["overlap_s"] / np.where(time_ns > 0, out["time_s"], 1), 0.0)
    return out


def iteration_table(log: EventLog) -> "pd.DataFrame":
    """Per iteration: its time and breakdown in seconds, mean over the
    workers (over all ranks if the log has no worker); SketchDLC's overlap
    ratio is overlap / iteration time."""
    import pandas as pd

    return pd.DataFrame(iteration_arrays(log))


def warmup_iterations(metadata: dict, iterations: int) -> int:
    """How many leading iterations the mean leaves out as warm-up: one in a
    measured log (a capture or an imported trace: its first iteration pays
    for allocation, autotuning and connection setup) that has more than one
    iteration; none in a log ddlsim simulated (the model has no warm-up) or
    with a single iteration."""
    return 1 if metadata.get("source") != "simulate" and iterations > 1 else 0


def collective_iterations(metadata: dict) -> "set[int] | None":
    """The iterations that carry collective rows in a capture that recorded its all-reduces on some iterations only
    (``collective_iterations`` in the metadata: ``capture ddp --layer-every K`` runs the un-sampled iterations
    through DDP's own all-reduce, unrecorded); None for any other log (every iteration carries its communication).
    The readers take what they measure from collective rows (the communication breakdown, the bucket tables, the
    all-reduce fits, the optimizer step after the all-reduces, the bucket skew) over these iterations only."""
    found = (metadata or {}).get("collective_iterations")
    if not isinstance(found, list):
        return None
    return {int(i) for i in found if isinstance(i, int) and not isinstance(i, bool)}


def breakdown_mask(arrays: dict, metadata: dict, mask: np.ndarray) -> np.ndarray:
    """`mask` (the counted iterations of :func:`iteration_mean`) less the iterations without collective rows in a
    capture that recorded them on some only (:func:`collective_iterations`): the iterations whose breakdown
    (compute, communication, overlap, exposed, idle) is complete. `mask` itself for any other log, or where no
    counted iteration has collective rows."""
    carried = collective_iterations(metadata)
    if carried is None:
        return mask
    kept = mask & np.isin(np.asarray(arrays["iteration"], dtype=np.int64), sorted(carried))
    return kept if kept.any() else mask


def spread_pct(values) -> float:
    """The spread of repeated measurements, (max − min) / mean in %: 0 for fewer than two values or a mean that is
    not positive (``ddlsim validate``'s repeats, ``ddlsim plan --apply``'s pairs)."""
    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return 0.0
    mean = float(v.mean())
    return float((v.max() - v.min()) / mean * 100) if mean > 0 else 0.0


def iteration_mean(arrays: dict, metadata: dict) -> dict:
    """The mean iteration time, one definition for every output (capture's
    summary, analyze, replay): the mean of the windows of
    :func:`iteration_arrays` (`arrays`) after :func:`warmup_iterations`.
    Returns ``mean_s``, ``iterations`` (those averaged), ``warmup`` (those
    left out), ``mask`` (over `arrays`' iterations) and ``definition`` (the
    sentence the outputs print)."""
    numbers = np.asarray(arrays["iteration"], dtype=np.int64)
    times = np.asarray(arrays["time_s"], dtype=float)
    skip = warmup_iterations(metadata, len(numbers))
    mask = np.zeros(len(numbers), dtype=bool)
    mask[skip:] = True
    used, left = numbers[mask], numbers[:skip]
    mean = float(times[mask].mean()) if mask.any() else float("nan")
    return {"mean_s": mean, "iterations": [int(x) for x in used], "warmup": [int(x) for x in left], "mask": mask,
            "definition": describe_mean(used, left)}


def _span(numbers) -> str:
    numbers = [int(x) for x in numbers]
    if len(numbers) == 1:
        return f"iteration {numbers[0]}"
    if all(b - a == 1 for a, b in zip(numbers, numbers[1:])):  # contiguous (no range built: a gap may be 2**62)
        return f"iterations {numbers[0]}-{numbers[-1]}"
    return "iterations " + ", ".join(str(x) for x in numbers)


def describe_mean(used, warmup) -> str:
    """E.g. "mean of iterations 1-4, warm-up iteration 0 excluded"."""
    if not len(used):
        return "no iterations"
    if len(warmup):
        return f"mean of {_span(used)}, warm-up {_span(warmup)} excluded"
    return f"mean of {_span(used)}, no warm-up excluded"
