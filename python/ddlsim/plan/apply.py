"""``ddlsim plan --apply DIR``: capture the DDP job, plan from the capture, capture again with the plan, and set the
measured gain beside the predicted one.

1. ``DIR/before``: the built-in DDP job (:mod:`ddlsim.capture.ddp`) with DDP's default 25 MB buckets.
2. ``DIR/plan.json``: :func:`~ddlsim.plan.planner.make_plan` with the layer times measured in step 1
   (``profile = DIR/before/events.parquet``), the same model and worker count, and the link rate given (the same
   rate the captures are shaped to, when one is given).
3. ``DIR/after``: the same job with the plan applied (:mod:`ddlsim.capture.ddp_plan`).
4. With ``repeats`` R > 1, R − 1 more pairs, ``DIR/before-K`` and ``DIR/after-K`` (K = 2..R), the two orders
   alternated so that a drift of the machine's speed falls on both sides alike (before, after | after, before |
   before, after ...): on a shared machine one capture's mean moves by more than a plan's gain from one run to the
   next (docs/planning.md).
5. ``DIR/apply.json``: measured mean iteration of every capture (one definition:
   :func:`ddlsim.analyze.breakdown.iteration_mean`), their mean per side over the pairs and its spread
   ((max − min) / mean), each pair's gain, the plan's predictions for the job as captured in step 1 and for the
   applied entry, and both gains (measured: of the two sides' means over the pairs); ``DIR/apply.png`` shows each
   pair's two means beside the predicted times (:func:`plot_pairs`). The plan simulates the
   capture as ``ddlsim replay`` does (the same scenario, :func:`ddlsim.simulation.replay.replay_plan`), so the predicted "before" is the replay of step 1 to
   the last digit: its own buckets, framework gaps, optimizer step, wait for the slower rank, and the ring's rate
   while training. ``shared_cores``: the plan's caveat (:func:`~ddlsim.plan.planner.shared_core_overlap`) where
   the "before" capture's all-reduces ran on the cores its ranks computed on, else None.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from ..errors import DdlsimError

DEFAULT_BUCKET_CAP_MB = 25.0
DEFAULT_REPEATS = 3  # before/after pairs: one pair's gain is often inside the noise between two captures


def _measured(log) -> dict:
    from ..analyze.breakdown import iteration_arrays, iteration_mean

    arrays = iteration_arrays(log)
    mean = iteration_mean(arrays, log.metadata)
    used = [float(t) for t, keep in zip(arrays["time_s"], mean["mask"]) if keep]
    return {"mean_s": mean["mean_s"], "iterations": mean["iterations"], "times_s": used, "definition": mean["definition"]}


def sign_test_p(faster: int, pairs: int) -> float:
    """Two-sided exact sign test: the chance, were the plan without effect (each pair's sign a fair coin), of a
    split at least as uneven as `faster` of `pairs` (ties are not pairs)."""
    from math import comb

    if pairs <= 0:
        return 1.0
    tail = min(faster, pairs - faster)
    return min(1.0, 2 * sum(comb(pairs, i) for i in range(tail + 1)) / 2 ** pairs)


def capture_order(repeats: int) -> list[tuple[str, int]]:
    """The captures in the order they run: (side, pair number from 1), the pairs' two orders alternated (before,
    after | after, before | ...); the plan is made between the first two."""
    order = []
    for k in range(1, repeats + 1):
        order += [("before", k), ("after", k)] if k % 2 else [("after", k), ("before", k)]
    return order


def capture_dir_name(side: str, pair: int) -> str:
    """``before`` / ``after`` for the first pair, ``before-K`` / ``after-K`` for pair K."""
    return side if pair == 1 else f"{side}-{pair}"


def apply_plan(out_dir: str | Path, *, model: str = "resnet18", workers: int = 2, iterations: int = 6,
               batch_size: int = 8, image_size: int = 32, bandwidth: Optional[str] = None, entry: str = "best",
               seed: int = 0, timeout_s: float = 600.0, plan_options: Optional[dict] = None, repeats: int = DEFAULT_REPEATS,
               on_step: Optional[Callable[[str], None]] = None) -> dict:
    """Runs the steps of the module docstring in `out_dir` (created; must not hold a capture) and returns the
    report written to ``apply.json``. `plan_options` go to :func:`~ddlsim.plan.planner.make_plan` (e.g. latency);
    `repeats`: before/after pairs (``ddlsim plan --apply --repeats``)."""
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
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise DdlsimError(f"ddlsim plan --apply: --repeats must be a whole number of before/after pairs >= 1, got {repeats!r}")
    out.mkdir(parents=True, exist_ok=True)

    order = capture_order(repeats)
    total = len(order) + 1  # the captures and the plan
    logs: dict[tuple[str, int], object] = {}
    config = data = chosen = path = None
    for number, (side, pair) in enumerate(order, start=1):
        shown = number + (number > 1)  # the plan is step 2
        where = out / capture_dir_name(side, pair)
        if side == "before":
            step(f"{shown}/{total} capturing {model} with DDP's default {DEFAULT_BUCKET_CAP_MB:g} MB buckets"
                 + (f" (pair {pair} of {repeats})" if repeats > 1 else ""))
            log, failure = run_ddp_capture(base, workers, where, timeout_s=timeout_s, bandwidth_bps=rate)
            if failure is not None:
                raise DdlsimError(f"the capture before the plan ({where}) failed: {failure}")
        else:
            step(f"{shown}/{total} capturing {model} with the plan's {chosen} entry {how}"
                 + (f" (pair {pair} of {repeats})" if repeats > 1 else ""))
            log, failure = run_ddp_capture(config, workers, where, timeout_s=timeout_s, bandwidth_bps=rate)
            if failure is not None:
                raise DdlsimError(f"the capture with the plan ({where}) failed: {failure}")
        logs[side, pair] = log
        if number == 1:
            step(f"2/{total} planning from the measured layer times")
            options = {k: v for k, v in (plan_options or {}).items() if v is not None}
            plan = make_plan(model=model, profile=str((out / "before" / "events.parquet").resolve()), workers=workers,
                             bandwidth=bandwidth, **options)
            plan.save(out / "plan.json")
            data = plan.to_dict()
            config = {**base, **job_plan_config(data, entry, model, image_size, out / "plan.json")}
            chosen = config["plan"]["entry"]
            path = config["plan"].get("path", "ddp-buckets")
            how = {"ddp-buckets": "as DDP's own buckets",
                   "hook": f"through the merge hook ({config['plan'].get('why')})"}[path]

    from ..analyze.breakdown import spread_pct

    before_log, after_log = logs["before", 1], logs["after", 1]
    measured = {key: _measured(log) for key, log in logs.items()}  # each capture's iterations, once
    before, after = measured["before", 1], measured["after", 1]
    means = {side: [measured[side, k]["mean_s"] for k in range(1, repeats + 1)] for side in ("before", "after")}
    for side, first in (("before", before), ("after", after)):  # the first pair's capture, and every pair's mean
        first.update({"captures": [str(out / capture_dir_name(side, k) / "events.parquet") for k in range(1, repeats + 1)],
                      "means_s": means[side], "spread_pct": spread_pct(means[side])})
    measured_before = sum(means["before"]) / repeats
    measured_after = sum(means["after"]) / repeats
    gains = [1.0 - a / b for a, b in zip(means["after"], means["before"])]
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
        "measured": {"before_s": measured_before, "after_s": measured_after, "gain": 1.0 - measured_after / measured_before,
                     "pair_gains": gains,
                     "pairs_faster": sum(g > 0 for g in gains), "pairs_slower": sum(g < 0 for g in gains),
                     "sign_test_p": sign_test_p(sum(g > 0 for g in gains), sum(g != 0 for g in gains)),
                     "definition": f"each side the mean over {repeats} capture(s) of each capture's mean iteration"},
        # the plan's caveat where the capture's transport ran on the cores that compute (None elsewhere)
        "shared_cores": data.get("shared_cores"),
        "repeats": repeats,
        "order": [capture_dir_name(side, pair) for side, pair in order],
        "same_weights": len({log.metadata.get("parameter_sha256") for log in logs.values()}) == 1,
    }
    from ..safe_io import atomic_file
    from ..trace.parquet import write_json

    with atomic_file(out / "apply.png", option="--apply") as temporary:
        plot_pairs(report, temporary)
    write_json(out / "apply.json", report)
    return report


def plot_pairs(report: dict, target) -> None:
    """The measured mean iteration of each pair's two captures (before: DDP's default buckets; after: the plan), the
    means over the pairs, and the predicted before and after, as a PNG at `target` (the same bytes for the same
    report)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..analyze.figures import save_deterministic
    from ..analyze.plot_text import plain_text

    before = [t * 1e3 for t in report["before"]["means_s"]]
    after = [t * 1e3 for t in report["after"]["means_s"]]
    pairs = list(range(1, len(before) + 1))
    p, m = report["predicted"], report["measured"]
    fig, ax = plt.subplots(figsize=(max(5.0, 1.0 + 0.5 * len(pairs)), 3.6))
    for x, b, a in zip(pairs, before, after):
        ax.plot([x, x], [b, a], color="0.75", linewidth=1, zorder=1)
    ax.scatter(pairs, before, marker="o", color="tab:blue", zorder=2, label="before: DDP's 25 MB buckets, measured")
    ax.scatter(pairs, after, marker="s", color="tab:orange", zorder=2, label=f"after: the plan's {report['entry']}, measured")
    ax.axhline(m["before_s"] * 1e3, color="tab:blue", linewidth=1, label="before, mean over the pairs")
    ax.axhline(m["after_s"] * 1e3, color="tab:orange", linewidth=1, label="after, mean over the pairs")
    ax.axhline(p["before_s"] * 1e3, color="tab:blue", linestyle=":", linewidth=1.2, label="before, predicted (replay)")
    ax.axhline(p["after_s"] * 1e3, color="tab:orange", linestyle=":", linewidth=1.2, label="after, predicted (plan)")
    ax.set_xticks(pairs)
    ax.set_xlabel("pair (captures in alternating order)")
    ax.set_ylabel("mean iteration (ms)")
    link = report["bandwidth"] or "unshaped"
    ax.set_title(plain_text(f"{report['model']}, {report['workers']} workers, {link}: predicted {-p['gain']:+.1%}, "
                            f"measured {-m['gain']:+.1%}"), fontsize=10)
    top = max(before + after + [p["before_s"] * 1e3, p["after_s"] * 1e3])
    ax.set_ylim(0, top * 1.45)
    ax.legend(fontsize=7, ncol=2, loc="upper center")
    fig.tight_layout()
    save_deterministic(fig, target, fmt="png")
    plt.close(fig)
