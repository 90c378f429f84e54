"""Analysis of event logs (ddlsim.trace.EventLog) — simulated or captured alike.

Submodules load on first use (pandas and matplotlib are not imported until
a table or a picture is asked for).
"""

from importlib import import_module

_EXPORTS = {
    "Analysis": "analysis",
    "OPERATIONS": "analysis",
    "cdf": "analysis",
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


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
