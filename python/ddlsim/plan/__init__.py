"""Planning, the layer above analyze: all-reduce cost models fitted to
microbenchmarks (:mod:`.cost`) and `ddlsim plan` (:mod:`.planner`), which
picks the MG-WFBP merge plan and the DDP bucket size for a cluster and
predicts their gains by simulating them; for several jobs on one fabric,
CASSINI-style start offsets (:mod:`.offsets`, :mod:`.jobs_plan`)."""

from .cost import CostModel, WorkerFit, fit, fit_tables, read_table, table2

__all__ = ["CostModel", "WorkerFit", "fit", "fit_tables", "read_table", "table2", "make_plan", "make_jobs_plan",
           "search_offsets", "CommProfile"]


def __getattr__(name: str):
    if name in ("make_plan", "Plan", "Candidate", "DEFAULT_BUCKET_CAPS_MB"):
        from . import planner

        return getattr(planner, name)
    if name in ("search_offsets", "CommProfile", "OffsetPlan", "profile_from_log", "route_links"):
        from . import offsets

        return getattr(offsets, name)
    if name in ("make_jobs_plan", "JobsOffsetPlan"):
        from . import jobs_plan

        return getattr(jobs_plan, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
