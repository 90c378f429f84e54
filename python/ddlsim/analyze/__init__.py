"""Analysis of event logs (ddlsim.trace.EventLog) — simulated or captured alike."""

from .breakdown import covered, iteration_table, iteration_windows, merge_intervals, rank_iteration_table, union_length
from .rpc import RPC_COLUMNS, rpc_table

__all__ = [
    "RPC_COLUMNS",
    "covered",
    "iteration_table",
    "iteration_windows",
    "merge_intervals",
    "rank_iteration_table",
    "rpc_table",
    "union_length",
]
