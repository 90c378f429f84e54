"""Planning, the layer above analyze: all-reduce cost models fitted to
microbenchmarks (:mod:`.cost`) and `ddlsim plan` (:mod:`.planner`), which
picks the MG-WFBP merge plan and the DDP bucket size for a cluster and
predicts their gains by simulating them."""

from .cost import CostModel, WorkerFit, fit, fit_tables, read_table, table2

__all__ = ["CostModel", "WorkerFit", "fit", "fit_tables", "read_table", "table2", "make_plan"]


def __getattr__(name: str):
    if name in ("make_plan", "Plan", "Candidate", "DEFAULT_BUCKET_CAPS_MB"):
        from . import planner

        return getattr(planner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
