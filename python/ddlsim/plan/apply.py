"""``ddlsim plan --apply DIR``: capture the DDP job, plan from the capture, capture again with the plan, and set the
measured gain beside the predicted one.

1. ``DIR/before``: the built-in DDP job (:mod:`ddlsim.capture.ddp`) with DDP's default 25 MB buckets.
2. ``DIR/plan.json``: :func:`~ddlsim.plan.planner.make_plan` with the layer times measured in step 1
   (``profile = DIR/before/events.parquet``), the same model and worker count, and the link rate given (the same
   rate the captures are shaped to, when one is given).
3. ``DIR/after``: the same job with the plan applied (:mod:`ddlsim.capture.ddp_plan`).
4. ``DIR/apply.json``: measured mean iteration of both captures (one definition:
   :func:`ddlsim.analyze.breakdown.iteration_mean`), the plan's predictions for the job as captured in step 1 and
   for the applied entry, and both gains. The plan simulates the capture as ``ddlsim replay`` does (the same
   scenario, :func:`ddlsim.simulation.replay.replay_plan`), so the predicted "before" is the replay of step 1 to
   the last digit: its own buckets, framework gaps, optimizer step, wait for the slower rank, and the ring's rate
   while training.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from ..errors import DdlsimError

DEFAULT_BUCKET_CAP_MB = 25.0


def _measured(log) -> dict:
    from ..analyze.breakdown import iteration_arrays, iteration_mean

    arrays = iteration_arrays(log)
    mean = iteration_mean(arrays, log.metadata)
    used = [float(t) for t, keep in zip(arrays["time_s"], mean["mask"]) if keep]
    return {"mean_s": mean["mean_s"], "iterations": mean["iterations"], "times_s": used, "definition": mean["definition"]}


def apply_plan(out_dir: str | Path, *, model: str = "resnet18", workers: int = 2, iterations: int = 6,
               batch_size: int = 8, image_size: int = 32, bandwidth: Optional[str] = None, entry: str = "best",
               seed: int = 0, timeout_s: float = 600.0, plan_options: Optional[dict] = None,
               on_step: Optional[Callable[[str], None]] = None) -> dict:
    """Runs the four steps of the module docstring in `out_dir` (created; must not hold a capture) and returns the
    report written to ``apply.json``. `plan_options` go to :func:`~ddlsim.plan.planner.make_plan` (e.g. latency)."""
    from ..capture.ddp import job_config
    from ..capture.ddp_plan import captured_groups, job_plan_config
    from ..capture.ddp_run import run_ddp_capture
    from ..units import parse_bandwidth
    from .planner import make_plan

    step = on_step or (lambda text: None)
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DdlsimError(f"--apply {out}: exists and is not an empty directory; name a new directory for the two "
                          "captures, the plan and the report")
    rate = None if bandwidth is None else parse_bandwidth(bandwidth)
    try:
        base = job_config({"model": model, "iterations": iterations, "batch_size": batch_size,
                           "image_size": image_size, "bucket_cap_mb": DEFAULT_BUCKET_CAP_MB, "seed": seed})
    except ValueError as exc:
        raise DdlsimError(f"ddlsim plan --apply: {exc}") from None
    if iterations < 2:
        raise DdlsimError("ddlsim plan --apply: --capture-iterations must be at least 2 (the first is a warm-up)")
    out.mkdir(parents=True, exist_ok=True)

    step(f"1/3 capturing {model} with DDP's default {DEFAULT_BUCKET_CAP_MB:g} MB buckets")
    before_log, failure = run_ddp_capture(base, workers, out / "before", timeout_s=timeout_s, bandwidth_bps=rate)
    if failure is not None:
        raise DdlsimError(f"the capture before the plan failed: {failure}")

    step("2/3 planning from the measured layer times")
    options = {k: v for k, v in (plan_options or {}).items() if v is not None}
    plan = make_plan(model=model, profile=str((out / "before" / "events.parquet").resolve()), workers=workers,
                     bandwidth=bandwidth, **options)
    plan.save(out / "plan.json")
    data = plan.to_dict()

    config = {**base, **job_plan_config(data, entry, model, image_size, out / "plan.json")}
    chosen = config["plan"]["entry"]
    path = config["plan"].get("path", "ddp-buckets")
    how = {"ddp-buckets": "as DDP's own buckets", "hook": f"through the merge hook ({config['plan'].get('why')})"}[path]
    step(f"3/3 capturing {model} with the plan's {chosen} entry {how}")
    after_log, failure = run_ddp_capture(config, workers, out / "after", timeout_s=timeout_s, bandwidth_bps=rate)
    if failure is not None:
        raise DdlsimError(f"the capture with the plan failed: {failure}")

    before, after = _measured(before_log), _measured(after_log)
    captured = data.get("captured") or data["baselines"]["ddp_default"]  # the replay of the "before" capture
    predicted_before = captured["iteration_time_s"]
    predicted_after = data[chosen]["iteration_time_s"]
    report = {
        "ddlsim_plan_apply": 1,
        "model": model, "workers": workers, "bandwidth": bandwidth, "iterations": iterations, "batch_size": batch_size,
        "entry": chosen, "path": path,
        "before": {"capture": str(out / "before" / "events.parquet"), "bucket_cap_mb": DEFAULT_BUCKET_CAP_MB,
                   "all_reduces": len(before_log.metadata.get("buckets") or []), **before},
        "after": {"capture": str(out / "after" / "events.parquet"), "bucket_cap_mb": config["bucket_cap_mb"],
                  "bucket_cap_mb_list": config.get("bucket_cap_mb_list"), "all_reduces": len(after_log.metadata.get("buckets") or []), "groups": captured_groups(after_log), **after},
        "predicted": {"before_s": predicted_before, "after_s": predicted_after,
                      "gain": 1.0 - predicted_after / predicted_before,
                      "ddp_default_s": data["baselines"]["ddp_default"]["iteration_time_s"]},
        "measured": {"before_s": before["mean_s"], "after_s": after["mean_s"],
                     "gain": 1.0 - after["mean_s"] / before["mean_s"]},
        "same_weights": before_log.metadata.get("parameter_sha256") == after_log.metadata.get("parameter_sha256"),
    }
    from ..trace.parquet import write_json

    write_json(out / "apply.json", report)
    return report
