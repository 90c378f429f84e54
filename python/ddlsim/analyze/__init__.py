"""Analysis of event logs — simulated or captured alike."""

from .breakdown import iteration_table, union_length

__all__ = ["iteration_table", "union_length"]
