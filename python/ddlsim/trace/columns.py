"""The event log's vocabulary and a pyarrow-free view of its columns.

`ddlsim simulate --json` needs the rows of a run only as numpy arrays (for
the breakdown); building the Arrow table would import pyarrow (and, through
it, pandas) for nothing. :class:`ArrayLog` holds the columns as the engine
produced them; :func:`ddlsim.trace.schema.event_log_from_array_log` makes it
a validated :class:`~ddlsim.trace.schema.EventLog` when one is needed.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

KINDS = ("compute", "send", "recv", "collective", "barrier", "marker")
"""The closed ``kind`` vocabulary (``op`` is open)."""
ROLES = ("worker", "server", "switch", "host")
COLL_TYPES = ("allreduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all", "barrier")
PS_OPS = ("push_request", "push_response", "pull_request", "pull_response")
EXTENSION_PREFIX = "x_"
BREAKDOWN_COLUMNS = ("w_proc_ns", "w_queue_ns", "ps_proc_ns", "ps_queue_ns", "n_tx_ns")
"""The RPC breakdown: schema v1 stored it; v2 computes it (ddlsim.analyze.rpc_table)."""


class ArrayLog:
    """An event log's columns as numpy arrays, before (or instead of) its Arrow table.

    ``columns`` maps column names to numpy arrays, string columns to
    ``(codes, dictionary)`` pairs (code -1 meaning ""); deps are CSR
    (``deps_offsets``, ``deps_values``). It answers :meth:`column`,
    :meth:`codes`, ``metadata`` and ``len()`` as an EventLog does, which is all
    the breakdown reads.
    """

    def __init__(self, columns: Mapping[str, Any], *, deps_offsets: Any, deps_values: Any, metadata: Mapping[str, Any],
                 groups: Any = None, flows: Any = None, queues: Any = None, source: str = "arrays"):
        self.columns = dict(columns)
        self.deps_offsets = deps_offsets
        self.deps_values = deps_values
        self.metadata = dict(metadata)
        self.groups = groups
        self.flows = flows
        self.queues = queues
        self.source = source
        self._rows = len(np.asarray(self.columns["id"]))

    def __len__(self) -> int:
        return self._rows

    def __repr__(self) -> str:
        return f"ArrayLog({len(self):,} rows)"

    def codes(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """A string column as (int32 codes, object array of the dictionary)."""
        value = self.columns[name]
        if not isinstance(value, tuple):
            raise KeyError(f"{name} is not a string column")
        codes, dictionary = value
        codes = np.asarray(codes, dtype=np.int32)
        dictionary = np.asarray(list(dictionary), dtype=object)
        if (codes < 0).any():  # -1 means "": give it a dictionary entry of its own
            dictionary = np.append(dictionary, "")
            codes = np.where(codes < 0, len(dictionary) - 1, codes).astype(np.int32)
        return codes, dictionary

    def column(self, name: str) -> np.ndarray:
        value = self.columns[name]
        if isinstance(value, tuple):
            codes, dictionary = self.codes(name)
            return dictionary[codes] if len(dictionary) else np.empty(len(codes), dtype=object)
        return np.asarray(value)



def host_offsets(metadata: Mapping[str, Any], hosts: np.ndarray) -> np.ndarray | None:
    """Per-row offset (ns) from the metadata's ``clocks``, or None if all are 0."""
    clocks = metadata.get("clocks") or {}
    offsets = {int(host): int(clock.get("offset_ns", 0)) for host, clock in clocks.items()}
    offsets = {host: offset for host, offset in offsets.items() if offset}
    if not offsets or not len(hosts):
        return None
    # a lookup by search, not a table indexed by host number: a host number is any integer
    keys = np.array(sorted(offsets), dtype=np.int64)
    values = np.array([offsets[int(key)] for key in keys], dtype=np.int64)
    hosts = np.asarray(hosts, dtype=np.int64)
    position = np.minimum(np.searchsorted(keys, hosts), len(keys) - 1)
    return np.where(keys[position] == hosts, values[position], 0)


def aligned_times(log: Any) -> tuple[np.ndarray, np.ndarray]:
    """(start_ns, end_ns) on the reference clock: each row's times plus the
    ``offset_ns`` of its host's clock (metadata ``clocks``; 0 if absent)."""
    start, end = log.column("start_ns"), log.column("end_ns")
    offset = host_offsets(log.metadata, log.column("host"))
    if offset is None:
        return start, end
    return start + offset, end + offset
