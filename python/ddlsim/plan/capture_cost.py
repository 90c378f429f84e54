"""The all-reduce cost a DDP capture measured, for the planner: the per-call cost a of the fit T(M) = a + b M
(:mod:`ddlsim.analyze.allreduce_fit` says what goes into it). The planner takes a from here when it plans from a
capture (:func:`capture_alpha`): the ring's 2 (N - 1) steps each get a / (2 (N - 1)) as their latency, as replay
does.
"""

from __future__ import annotations

from typing import Any, Optional

from ..analyze.allreduce_fit import allreduce_points, fit_allreduce


def capture_alpha(profile: str) -> Optional[dict[str, Any]]:
    """What a plan from the DDP capture at `profile` (an events.parquet) takes from it: ``alpha_ns`` (the per-call
    cost a: the fit's a when the capture's points determine it, else the small all-reduce itself), ``step_ns``
    (alpha / (2 (N - 1)) for the capture's N workers: the per-step latency), ``b_ns_per_byte`` (the fit's b, or
    None), ``gamma_ns_per_byte`` (the measured reduction cost, or None) and ``workers``; None for anything that is
    not a DDP capture with a measured small all-reduce."""
    from ..trace.parquet import read_event_log, read_log_metadata

    try:
        meta = read_log_metadata(profile)
    except Exception:  # not a parquet event log: the profile is read (and refused) elsewhere
        return None
    if meta.get("source") != "capture" or meta.get("job") != "ddp" or not meta.get("allreduce_small_ns"):
        return None
    workers = int(meta.get("workers") or 0)
    if workers < 2:
        return None
    log = read_event_log(profile)
    fit = fit_allreduce(allreduce_points(log, log.metadata))
    alpha = fit[0] if fit is not None and fit[0] > 0 else float(meta["allreduce_small_ns"])
    gamma = meta.get("gamma_ns_per_byte")
    return {"alpha_ns": alpha, "step_ns": alpha / (2 * (workers - 1)), "b_ns_per_byte": fit[1] if fit else None,
            "gamma_ns_per_byte": float(gamma) if isinstance(gamma, (int, float)) and gamma > 0 else None,
            "workers": workers, "small_ns": float(meta["allreduce_small_ns"])}
