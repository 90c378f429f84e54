"""Time validating and writing a large event log (schema v2), as the
simulate bridge would hand it over: numpy columns, (codes, dictionary)
strings and CSR deps. Not a test; prints seconds.

    PYTHONPATH=python python benchmarks/bench_event_log.py [rows]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ddlsim.trace import event_log_from_arrays, read_event_log, write_event_log


def synthetic(n: int, ranks: int = 64, seed: int = 0):
    """A ring-like log: per rank a chain of send/recv pairs and compute rows."""
    rng = np.random.default_rng(seed)
    kinds = ["compute", "send", "recv", "collective", "barrier", "marker"]
    ids = np.arange(n, dtype=np.int64)
    # rows come in (send, recv) pairs after a compute prefix; message = pair index
    kind = np.where(ids % 2 == 0, 1, 2).astype(np.int32)
    kind[: n // 10] = 0
    rank = (ids // 2 % ranks).astype(np.int32)
    peer = np.where(kind == 1, (rank + 1) % ranks, np.where(kind == 2, (rank - 1) % ranks, -1)).astype(np.int32)
    rank = np.where(kind == 2, (rank + 1) % ranks, rank).astype(np.int32)  # recv runs on the receiver
    peer = np.where(kind == 2, (rank - 1) % ranks, peer).astype(np.int32)
    message = np.where(kind > 0, ids // 2, -1)
    start = ids * 1000
    start[kind == 2] = start[kind == 2] - 1000 + 500  # recv starts at its send's end
    end = start + 500
    end[kind == 2] = start[kind == 2] + 700
    # deps: each row on the previous row (same pair or chain), CSR
    deps_offsets = np.concatenate([[0], np.cumsum(ids > 0)]).astype(np.int64)
    deps_values = ids[1:] - 1
    ok = end[deps_values] <= start[1:]
    deps_values = deps_values[ok]
    deps_offsets = np.concatenate([[0], np.cumsum(np.concatenate([[False], ok]))]).astype(np.int64)
    columns = {
        "id": ids,
        "iteration": (ids * 3 // n).astype(np.int32),
        "rank": rank,
        "role": (np.zeros(n, np.int8), ["worker"]),
        "host": rank,
        "stream": ((kind > 0).astype(np.int32), ["compute", "comm"]),
        "kind": (kind, kinds),
        "op": ((kind > 0).astype(np.int32), ["backward", "ring_step"]),
        "name": (rng.integers(0, 160, n), [f"layer{i}.weight" for i in range(160)]),
        "layer": rng.integers(0, 160, n).astype(np.int32),
        "tensor": rng.integers(0, 160, n).astype(np.int32),
        "peer": peer,
        "message": message,
        "bytes": rng.integers(0, 1 << 20, n),
        "collective": np.where(kind > 0, ids // 128, -1),
        "coll_type": ((kind > 0).astype(np.int32), ["", "allreduce"]),
        "algorithm": ((kind > 0).astype(np.int32), ["", "ring"]),
        "step": np.where(kind > 0, ids % 126, -1).astype(np.int32),
        "ready_ns": start,
        "start_ns": start,
        "end_ns": end,
    }
    return columns, deps_offsets, deps_values


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_300_000
    columns, offsets, values = synthetic(n)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.parquet"
        for attempt in range(3):
            t0 = time.perf_counter()
            log = event_log_from_arrays(columns, deps_offsets=offsets, deps_values=values, metadata={"source": "bench"})
            t1 = time.perf_counter()
            write_event_log(log, path)
            t2 = time.perf_counter()
            back = read_event_log(path)
            t3 = time.perf_counter()
            print(f"{n:,} rows: build+validate {t1 - t0:.3f} s, write {t2 - t1:.3f} s, "
                  f"validate+write {t2 - t0:.3f} s, read+validate {t3 - t2:.3f} s, "
                  f"file {path.stat().st_size / 1e6:.1f} MB")
        assert len(back) == n


if __name__ == "__main__":
    main()
