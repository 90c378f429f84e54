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
from ..safe_io import check_directory_target, ensure_directory

DEFAULT_BUCKET_CAP_MB = 25.0
DEFAULT_REPEATS = 3  # before/after pairs: one pair's gain is often inside the noise between two captures
MAX_WORKERS = 4096  # ranks of one capture (ddlsim validate's bound too)


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
    from ..capture.ddp_plan import job_plan_config
    from ..capture.ddp_run import run_ddp_capture
    from ..units import parse_bandwidth
    from .planner import make_plan

    from ..arguments import real, whole
    from ..capture.ddp_plan import ENTRIES
    from .planner import plan_scenario

    step = on_step or (lambda text: None)
    out = _new_or_empty(out_dir, "the two captures, the plan and the report")
    # every argument checked before the first capture starts (minutes, and a directory written)
    what = "ddlsim plan --apply:"
    workers = whole(workers, f"{what} workers (--workers)", 2, MAX_WORKERS)
    iterations = whole(iterations, f"{what} iterations (--capture-iterations; the first is a warm-up)", 2, 1_000_000)
    repeats = whole(repeats, f"{what} repeats (--repeats, before/after pairs)", 1, 1000)
    timeout_s = real(timeout_s, f"{what} timeout_s", 0.0, 1e9, open_lo=True)
    if not isinstance(entry, str) or entry not in ENTRIES:
        raise DdlsimError(f"--plan-entry {entry!r}: choose one of {', '.join(ENTRIES)}")
    if not isinstance(plan_options, (dict, type(None))):
        raise DdlsimError(f"{what} plan_options must be a dict of make_plan's options (e.g. latency), got {plan_options!r}")
    try:
        rate = None if bandwidth is None else parse_bandwidth(bandwidth)
        base = job_config({"model": model, "iterations": iterations, "batch_size": batch_size,
                           "image_size": image_size, "bucket_cap_mb": DEFAULT_BUCKET_CAP_MB, "seed": seed})
    except ValueError as exc:
        raise DdlsimError(f"{what} {exc}") from None
    options = {k: v for k, v in (plan_options or {}).items() if v is not None}
    plan_scenario(None, None, [], model=model, workers=workers, bandwidth=bandwidth, **options)  # the plan's options
    ensure_directory(out, option="--apply")

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
            plan = make_plan(model=model, profile=str((out / "before" / "events.parquet").resolve()), workers=workers,
                             bandwidth=bandwidth, **options)
            plan.save(out / "plan.json")
            data = plan.to_dict()
            config = {**base, **job_plan_config(data, entry, model, image_size, out / "plan.json")}
            chosen = config["plan"]["entry"]
            path = config["plan"].get("path", "ddp-buckets")
            how = {"ddp-buckets": "as DDP's own buckets",
                   "hook": f"through the merge hook ({config['plan'].get('why')})"}[path]

    captured = data.get("captured") or data["baselines"]["ddp_default"]  # the replay of the "before" capture
    head = {"model": model, "workers": workers, "bandwidth": bandwidth, "iterations": iterations,
            "batch_size": batch_size, "entry": chosen, "path": path, "alternated": True}
    sides = {"before": {"bucket_cap_mb": DEFAULT_BUCKET_CAP_MB},
             "after": {"bucket_cap_mb": config["bucket_cap_mb"], "bucket_cap_mb_list": config.get("bucket_cap_mb_list")}}
    predicted = {"before_s": captured["iteration_time_s"], "after_s": data[chosen]["iteration_time_s"],
                 "ddp_default_s": data["baselines"]["ddp_default"]["iteration_time_s"]}
    paths = {side: [str(out / capture_dir_name(side, k) / "events.parquet") for k in range(1, repeats + 1)]
             for side in ("before", "after")}
    report = _report(logs, paths, head, sides, predicted, data.get("shared_cores"),
                     [capture_dir_name(side, pair) for side, pair in order])
    _write_report(out, report)
    return report


def measure_plan(out_dir: str | Path, *, before, after) -> dict:
    """Measured against predicted gain of a plan your own script ran (``ddlsim plan --apply DIR --before CAPTURES
    --after CAPTURES``): `before` the captures of the job as it was, `after` those made with
    ``attach(..., plan=plan_for(model, 'plan.json'))``, pair k = (before[k], after[k]) (each a capture directory or
    its events.parquet; a list, or a comma-separated string). The prediction is the one the "after" captures
    recorded: the plan's entry, and for "before" the plan's replay of the capture it was made from (a plan made
    without a capture: DDP's default buckets). Writes ``apply.json`` and ``apply.png`` in `out_dir` (new, or an
    empty directory) and returns the report, as :func:`apply_plan` does."""
    out = _new_or_empty(out_dir, "the report")
    sides = {"before": _capture_list(before, "--before"), "after": _capture_list(after, "--after")}
    if len(sides["before"]) != len(sides["after"]):
        raise DdlsimError(f"--before names {len(sides['before'])} capture(s), --after {len(sides['after'])}: give one "
                          "of each per pair, pair k = the k-th of each")
    logs, facts = {}, None
    for side, files in sides.items():
        for k, file in enumerate(files, start=1):
            log = logs[side, k] = _ddp_capture(file, f"--{side}")
            ran = log.metadata.get("plan")
            if side == "before" and ran is not None:
                raise DdlsimError(f"--before {file}: this capture ran a plan ({ran.get('entry') if isinstance(ran, dict) else ran!r}); "
                                  "--before takes captures of the job without it")
            if side == "after":
                ran = _plan_facts(ran, file)
                key = (ran.get("file"), ran["entry"], ran["predicted_iteration_s"])
                if facts is not None and key != facts[0]:
                    raise DdlsimError(f"--after {file}: ran another plan than {facts[1]} (plan {key[0]}, entry {key[1]}); "
                                      "every --after capture must run the same plan")
                facts = facts or (key, file, ran)
    first_before, first_after = logs["before", 1].metadata, logs["after", 1].metadata
    for field in ("model", "workers"):
        for (side, k), log in logs.items():
            if log.metadata.get(field) != first_before.get(field):
                raise DdlsimError(f"--{side} {sides[side][k - 1]}: {field} {log.metadata.get(field)!r}, but --before "
                                  f"{sides['before'][0]} has {first_before.get(field)!r}; compare captures of one job")
    ran = facts[2]
    before_s = ran.get("predicted_captured_s") or ran.get("predicted_default_s")
    if before_s is None:
        raise DdlsimError(f"--after {facts[1]}: its plan records no prediction of the job before it (neither the "
                          "capture it was planned from nor DDP's default); make the plan again with ddlsim plan --out")
    head = {"model": first_before.get("model"), "workers": first_before.get("workers"),
            "bandwidth": first_before.get("bandwidth"), "iterations": first_before.get("iterations"),
            "batch_size": first_before.get("batch_size"), "entry": ran["entry"], "path": ran.get("path"),
            "alternated": False, "plan": ran.get("file"),
            "predicted_before_from": "the plan's replay of the capture it was made from"
            if ran.get("predicted_captured_s") else "the plan's DDP default buckets (a plan made without a capture)"}
    settings = {side: {"bucket_cap_mb": meta.get("bucket_cap_mb")} for side, meta in (("before", first_before), ("after", first_after))}
    settings["after"]["bucket_cap_mb_list"] = first_after.get("bucket_cap_mb_list")
    predicted = {"before_s": float(before_s), "after_s": float(ran["predicted_iteration_s"]),
                 "ddp_default_s": ran.get("predicted_default_s")}
    paths = {side: [str(f) for f in files] for side, files in sides.items()}
    started = {key: _started_unix_ns(log) for key, log in logs.items()}
    pairs = len(paths["before"])
    if None in started.values():  # a capture made before captures recorded the wall clock: the order is unknown
        order, firsts = [name for k in range(1, pairs + 1) for name in (f"before {k}", f"after {k}")], None
    else:
        order = [f"{side} {k}" for side, k in sorted(started, key=lambda key: (started[key], key))]
        firsts = ["before" if started["before", k] <= started["after", k] else "after" for k in range(1, pairs + 1)]
    head["alternated"] = bool(firsts) and pairs > 1 and all(a != b for a, b in zip(firsts, firsts[1:]))
    head["order_known"] = firsts is not None
    report = _report(logs, paths, head, settings, predicted, None, order)
    report["order_note"] = _order_note(firsts)
    created = not out.exists()
    ensure_directory(out, option="--apply")
    try:
        _write_report(out, report)
    except BaseException:  # an error or Ctrl-C while writing: the files are written whole or not at all, and the
        if created and not any(out.iterdir()):  # directory this call made goes with them
            out.rmdir()
        raise
    return report


def _new_or_empty(out_dir, what: str) -> Path:
    """`out_dir` (the ``--apply`` directory) as a Path, refused unless it is new or an empty directory."""
    from ..arguments import path_arg

    out = path_arg(out_dir, "out_dir")
    check_directory_target(out, option="--apply")
    if out.exists() and any(out.iterdir()):
        raise DdlsimError(f"--apply {out}: exists and is not an empty directory; name a new directory for {what}")
    return out


def _started_unix_ns(log) -> Optional[int]:
    """When the capture started by the wall clock (its first rank's header), or None where it did not record it."""
    ranks = log.metadata.get("ranks") or {}
    times = [r.get("started_unix_ns") for r in ranks.values() if isinstance(r, dict)]
    return min(times) if times and None not in times else None


def _order_note(firsts: Optional[list[str]]) -> Optional[str]:
    """A caveat where every pair of two or more ran the same side first: a drift of the machine from the first
    capture of a pair to the second then falls on one side, and is read as the plan's gain or loss."""
    if not firsts or len(firsts) < 2 or len(set(firsts)) > 1:
        return None
    return (f"every pair ran its {firsts[0]} capture first: whatever drifts from the first capture of a pair to the "
            f"second (a machine's load, caches, clocks) falls on the {'after' if firsts[0] == 'before' else 'before'} "
            f"side and reads as the plan's effect; alternate the order (before, after | after, before | ...)")


def _capture_list(value, option: str) -> list[Path]:
    """`value` (a list of capture directories or event logs, or a comma-separated string of them) as event-log files."""
    from ..option_lists import comma_list

    if isinstance(value, (str, Path)):
        items = comma_list(str(value), option, example="run-a/,run-b/", what="captures")
    elif isinstance(value, (list, tuple)) and value and all(isinstance(v, (str, Path)) for v in value):
        items = [str(v) for v in value]
    else:
        raise DdlsimError(f"{option}: give capture directories (or their events.parquet), a list or a comma-separated "
                          f"string, got {value!r}")
    files, seen = [], {}
    for item in items:
        path = Path(item)
        file = path / "events.parquet" if path.is_dir() else path
        if not file.is_file():
            raise DdlsimError(f"{option} {item}: no such capture (a directory with events.parquet, or the file)")
        if file.resolve() in seen:  # one capture is one pair's, or the sign test counts it twice
            raise DdlsimError(f"{option} {item}: the capture {seen[file.resolve()]} named twice; give each capture once")
        seen[file.resolve()] = item
        files.append(file)
    return files


def _ddp_capture(file: Path, option: str):
    from ..trace import read_event_log

    log = read_event_log(file)
    meta = log.metadata
    if meta.get("source") != "capture" or meta.get("job") != "ddp":
        raise DdlsimError(f"{option} {file}: not a DDP capture (job {meta.get('job')!r}, source {meta.get('source')!r}); "
                          "give captures of ddlsim.capture.attach or ddlsim capture ddp")
    return log


def _plan_facts(ran, file: Path) -> dict:
    """The plan facts an "after" capture recorded (their types checked when the log was read:
    :class:`~ddlsim.trace.log_facts.CaptureFacts`)."""
    fix = "run your script with attach(..., plan=ddlsim.capture.plan_for(model, 'plan.json'))"
    if not isinstance(ran, dict):
        raise DdlsimError(f"--after {file}: this capture ran no plan; {fix}")
    if ran.get("entry") not in ("ddp", "mg_wfbp") or ran.get("predicted_iteration_s") is None:
        raise DdlsimError(f"--after {file}: field 'plan' does not say which entry ran and what it predicted "
                          f"(entry {ran.get('entry')!r}, predicted_iteration_s {ran.get('predicted_iteration_s')!r}); {fix}")
    return ran


def _report(logs: dict, paths: dict, head: dict, sides: dict, predicted: dict, shared_cores: Optional[dict],
            order: list[str]) -> dict:
    """apply.json's report of the captures `logs` ((side, pair) -> event log; `paths` their files per side, pair
    1 first), with `head` (the job), `sides` (each side's DDP settings) and `predicted` (before_s, after_s,
    ddp_default_s)."""
    from ..analyze.breakdown import spread_pct
    from ..capture.ddp_plan import captured_groups

    repeats = len(paths["before"])
    before_log, after_log = logs["before", 1], logs["after", 1]
    measured = {key: _measured(log) for key, log in logs.items()}  # each capture's iterations, once
    before, after = measured["before", 1], measured["after", 1]
    means = {side: [measured[side, k]["mean_s"] for k in range(1, repeats + 1)] for side in ("before", "after")}
    for side, first in (("before", before), ("after", after)):  # the first pair's capture, and every pair's mean
        first.update({"captures": paths[side], "means_s": means[side], "spread_pct": spread_pct(means[side])})
    measured_before = sum(means["before"]) / repeats
    measured_after = sum(means["after"]) / repeats
    gains = [1.0 - a / b for a, b in zip(means["after"], means["before"])]
    digests = [log.metadata.get("parameter_sha256") for log in logs.values()]
    return {
        "ddlsim_plan_apply": 1, **head,
        "before": {"capture": paths["before"][0], **sides["before"],
                   "all_reduces": len(before_log.metadata.get("buckets") or []), **before},
        "after": {"capture": paths["after"][0], **sides["after"],
                  "all_reduces": len(after_log.metadata.get("buckets") or []), "groups": captured_groups(after_log), **after},
        "predicted": {"before_s": predicted["before_s"], "after_s": predicted["after_s"],
                      "gain": 1.0 - predicted["after_s"] / predicted["before_s"],
                      "ddp_default_s": predicted["ddp_default_s"]},
        "measured": {"before_s": measured_before, "after_s": measured_after, "gain": 1.0 - measured_after / measured_before,
                     "pair_gains": gains,
                     "pairs_faster": sum(g > 0 for g in gains), "pairs_slower": sum(g < 0 for g in gains),
                     "sign_test_p": sign_test_p(sum(g > 0 for g in gains), sum(g != 0 for g in gains)),
                     "definition": f"each side the mean over {repeats} capture(s) of each capture's mean iteration"},
        # the plan's caveat where the capture's transport ran on the cores that compute (None elsewhere)
        "shared_cores": shared_cores,
        "repeats": repeats,
        "order": order,
        # whether every capture trained the same weights (None where a capture did not record them: your own script's)
        "same_weights": None if None in digests else len(set(digests)) == 1,
    }


def _write_report(out: Path, report: dict) -> None:
    from ..safe_io import atomic_file
    from ..trace.parquet import write_json

    with atomic_file(out / "apply.png", option="--apply") as temporary:
        plot_pairs(report, temporary)
    write_json(out / "apply.json", report)


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
    fig, ax = plt.subplots(figsize=(max(6.8, 1.0 + 0.5 * len(pairs)), 3.8))
    for x, b, a in zip(pairs, before, after):
        ax.plot([x, x], [b, a], color="0.75", linewidth=1, zorder=1)
    cap = report["before"].get("bucket_cap_mb")
    ax.scatter(pairs, before, marker="o", color="tab:blue", zorder=2,
               label=f"before: DDP's {cap:.3g} MB buckets, measured" if cap else "before, measured")
    ax.scatter(pairs, after, marker="s", color="tab:orange", zorder=2, label=f"after: the plan's {report['entry']}, measured")
    ax.axhline(m["before_s"] * 1e3, color="tab:blue", linewidth=1, label="before, mean over the pairs")
    ax.axhline(m["after_s"] * 1e3, color="tab:orange", linewidth=1, label="after, mean over the pairs")
    default = report.get("predicted_before_from", "").startswith("the plan's DDP default")
    ax.axhline(p["before_s"] * 1e3, color="tab:blue", linestyle=":", linewidth=1.2,
               label="before, predicted (DDP's default buckets)" if default else "before, predicted (replay)")
    ax.axhline(p["after_s"] * 1e3, color="tab:orange", linestyle=":", linewidth=1.2, label="after, predicted (plan)")
    ax.set_xticks(pairs)
    ax.set_xlabel("pair (captures in alternating order)" if report.get("alternated", True) else "pair")
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
