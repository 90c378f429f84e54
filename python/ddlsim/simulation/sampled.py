"""Captures with sampled layer rows (``ddlsim capture ddp --layer-every K``,
docs/capture.md): what a replay of one should say about them.

Their layer times come from the sampled iterations, and those iterations
also paid the per-layer recording (hooks, time points); on a host-bound job
(a GPU iteration waiting for its kernel launches) they ran longer than the
others. :func:`sampled_layers_note` measures both kinds of iteration from
the capture's own marker rows, so the replay says what its layer times
stand for.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np


def sampled_iteration_times(log, metadata: Optional[dict[str, Any]] = None) -> Optional[dict[str, Any]]:
    """For a capture with ``layer_every`` > 1: the mean iteration time (the workers' ``marker`` rows, mean over
    ranks) of the counted iterations with layer rows (``sampled_s``, ``sampled``: how many) and without
    (``others_s``, ``others``); None for any other log or when either kind has no counted iteration."""
    from ..analyze.breakdown import warmup_iterations
    from ..trace.coerce import as_columns

    meta = metadata if metadata is not None else getattr(log, "metadata", {}) or {}
    every, layered = meta.get("layer_every"), meta.get("layer_iterations")
    if not isinstance(every, int) or isinstance(every, bool) or every <= 1 or not isinstance(layered, list):
        return None
    log = as_columns(log)
    cols = {k: np.asarray(log.column(k)) for k in ("role", "iteration", "kind", "op", "start_ns", "end_ns")}
    markers = (cols["kind"] == "marker") & (cols["op"] == "iteration") & (cols["iteration"] >= 0)
    if (cols["role"] == "worker").any():
        markers &= cols["role"] == "worker"
    iterations = np.unique(cols["iteration"][cols["iteration"] >= 0])
    counted = iterations[warmup_iterations(meta, len(iterations)):]
    sampled = np.isin(cols["iteration"], [int(i) for i in layered])
    duration = (cols["end_ns"] - cols["start_ns"]).astype(np.int64)
    on = markers & np.isin(cols["iteration"], counted) & sampled
    off = markers & np.isin(cols["iteration"], counted) & ~sampled
    if not on.any() or not off.any():
        return None
    return {"sampled_s": float(duration[on].mean()) / 1e9, "sampled": int(len(np.unique(cols["iteration"][on]))),
            "others_s": float(duration[off].mean()) / 1e9, "others": int(len(np.unique(cols["iteration"][off]))),
            "every": every}


def sampled_layers_note(log, gaps: bool = True) -> Optional[str]:
    """The replay's note on a capture with sampled layer rows, or None for any other log. `gaps`: whether the replay
    takes the framework's gaps from them too (not with ``--no-overheads``)."""
    found = sampled_iteration_times(log)
    if found is None:
        return None
    extra = (found["sampled_s"] / found["others_s"] - 1) * 100 if found["others_s"] > 0 else 0.0
    return (f"replay: layer times{' and gaps' if gaps else ''} from the {found['sampled']} counted iterations with layer rows "
            f"(--layer-every {found['every']}); they took {found['sampled_s'] * 1e3:.4g} ms on average against "
            f"{found['others_s'] * 1e3:.4g} ms for the {found['others']} others ({extra:+.1f} %; the per-layer "
            "recording's own cost shows here where the iteration is host-bound), and the replayed iteration follows "
            "them")
