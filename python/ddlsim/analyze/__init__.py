"""Analysis of event logs — simulated or captured alike."""

from .breakdown import iteration_table, union_length
from .rpc import fill_rpc_breakdown, rpc_table

__all__ = ["iteration_table", "union_length", "fill_rpc_breakdown", "rpc_table"]
