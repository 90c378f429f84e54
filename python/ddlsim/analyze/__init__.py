"""Analysis of event logs (ddlsim.trace.EventLog) — simulated or captured alike.

Submodules load on first use (pandas and matplotlib are not imported until
a table or a picture is asked for).
"""

from .._lazy import lazy_exports

_EXPORTS = {
    "Analysis": "analysis",
    "OPERATIONS": "analysis",
    "cdf": "analysis",
    "compare_fct": "fct",
    "compare_iteration_time": "fct",
    "fct_cdf": "fct",
    "fct_summary": "fct",
    "flow_table": "fct",
    "interaction": "fct",
    "covered": "breakdown",
    "iteration_arrays": "breakdown",
    "iteration_table": "breakdown",
    "iteration_windows": "breakdown",
    "merge_intervals": "breakdown",
    "rank_iteration_arrays": "breakdown",
    "rank_iteration_table": "breakdown",
    "union_length": "breakdown",
    "RPC_COLUMNS": "rpc",
    "StreamedAnalysis": "streaming",
    "open_analysis": "streaming",
    "rpc_table": "rpc",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
