"""`ddlsim capture ddp`: a DDP training job on CPU (gloo), recorded.

capture_command.py calls :func:`register` on its `capture_app`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Optional

import typer

from ..errors import DdlsimError
from .consoles import err, out


def ddp(
    model: Optional[str] = typer.Option(
        None, "--model", "-m", help="lenet5 | resnet18 | resnet50 (torchvision, weights=None); default: the plan's model, else resnet18."),
    workers: int = typer.Option(2, "--workers", "-n", help="Ranks (processes) on this machine."),
    iterations: int = typer.Option(5, "--iterations", "-i", help="Training iterations."),
    batch_size: int = typer.Option(8, "--batch-size", help="Samples per rank per iteration (synthetic images)."),
    image_size: int = typer.Option(32, "--image-size", help="Image side in pixels (lenet5: 32; ResNets: >= 32)."),
    bucket_cap_mb: float = typer.Option(25.0, "--bucket-cap-mb", help="DDP bucket size cap in MiB."),
    seed: int = typer.Option(0, "--seed", help="Seed of the weights and the synthetic data."),
    timeout: float = typer.Option(600.0, "--timeout", help="Stop the job after this many seconds."),
    bandwidth: Optional[str] = typer.Option(None, "--bandwidth", "-b", help="Shape each rank's link to this rate, e.g. 1Gbps."),
    out_dir: Path = typer.Option(Path("run"), "--out", "-o", help="Capture directory: rank files, logs, events.parquet."),
    plan: Optional[Path] = typer.Option(
        None, "--plan", help="Run the job with this `ddlsim plan --out` result: its DDP bucket size or its MG-WFBP merges."),
    plan_entry: str = typer.Option(
        "best", "--plan-entry", help="With --plan: best (what the plan predicts faster) | ddp (bucket_cap_mb) | mg_wfbp (merges)."),
    device: str = typer.Option("cpu", "--device", help="cpu (gloo, host clock) | cuda (NCCL, one GPU per rank, CUDA events)."),
    idle_curve: bool = typer.Option(
        False, "--idle-curve/--no-idle-curve", help="After training, time each rank's optimizer step, forward and "
        "backward after waits of 0-32 ms (a few seconds) for replay's compute after a wait (docs/validation.md). Off by "
        "default: on a loaded machine the curve is noisier than the effect it measures."),
    layer_every: int = typer.Option(
        1, "--layer-every", help="Per-layer rows on iteration 0 and every K-th iteration from 1 on (1, 1+K, ...) only; "
        "the others record each pass as one row and pay no per-layer cost (the capture overhead), and run through a second "
        "DDP wrapper without the Python comm hook (DDP's own all-reduce, no allreduce rows; one more copy of the "
        "gradients' bytes; not with a --plan merge hook). 1: every iteration."),
) -> None:
    """Run PyTorch DDP training on CPU (gloo) or GPUs (NCCL) and record every layer's forward/backward and every bucket's all-reduce."""
    from ..capture.ddp import job_config
    from ..units import parse_bandwidth

    if importlib.util.find_spec("torch") is None:
        raise DdlsimError("ddlsim capture needs PyTorch, which is not installed; pip install ddlsim[capture]")
    if workers < 1:
        raise DdlsimError(f"--workers must be at least 1, got {workers}")
    from ..capture.launch import check_world_fits

    check_world_fits(workers)
    if layer_every < 1:
        raise DdlsimError(f"--layer-every must be a positive integer (1: layer rows on every iteration, K: on every "
                          f"K-th), got {layer_every}")
    from ..safe_io import check_directory_target

    check_directory_target(out_dir)
    plan_data = None
    if plan is not None:
        from ..capture.ddp_plan import load_plan

        plan_data = load_plan(plan)
        if model is None:
            model = plan_data["model"].get("name") or "resnet18"
    elif plan_entry != "best":
        raise DdlsimError("--plan-entry needs --plan PLAN.json (a ddlsim plan --out result)")
    model = model or "resnet18"
    from ..capture.launch import check_timeout

    check_timeout(timeout)
    config = {"model": model, "iterations": iterations, "batch_size": batch_size, "image_size": image_size,
              "bucket_cap_mb": bucket_cap_mb, "seed": seed, "device": device, "layer_every": layer_every,
              "idle_curve": idle_curve}
    try:
        config = job_config(config)
        rate = None if bandwidth is None else parse_bandwidth(bandwidth)
    except ValueError as exc:
        raise DdlsimError(f"ddlsim capture ddp: {exc}") from None
    if model != "lenet5" and importlib.util.find_spec("torchvision") is None:
        raise DdlsimError(f"--model {model} needs torchvision; pip install ddlsim[capture] (or use --model lenet5)")
    if plan_data is not None:
        config = apply_plan(config, plan_data, plan_entry, plan)
        bucket_cap_mb = config["bucket_cap_mb"]
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise DdlsimError("--device cuda: torch sees no GPU on this machine; capture with --device cpu")
        if workers > torch.cuda.device_count():
            raise DdlsimError(f"--device cuda: {workers} ranks but {torch.cuda.device_count()} GPU(s); "
                              f"give --workers {torch.cuda.device_count()} or fewer")
    from ..capture.ddp_run import run_ddp_capture
    from ..capture.outdir import check_out_dir

    check_out_dir(out_dir)  # before the first line of output: a bad --out is one line

    layout = (f"plan {plan} ({config['plan']['entry']}: {len(config['merge_groups'])} merged all-reduces through a "
              f"merge hook over one DDP bucket per parameter: {config['plan']['why']})"
              if config.get("merge_groups") else
              f"plan {plan} ({config['plan']['entry']}: {len(config['bucket_cap_mb_list'])} merged all-reduces as DDP's own "
              "buckets, bucket_cap_mb_list)" if config.get("bucket_cap_mb_list") else f"buckets {bucket_cap_mb:g} MiB"
              + (f" (plan {plan}, {config['plan']['entry']})" if config.get("plan") else ""))
    sampled = "" if layer_every == 1 else f", layer rows on iteration 0 and every {layer_every}th from 1"
    err.print(f"capturing DDP {model}: {workers} ranks x {iterations} iterations, batch {batch_size}, "
              f"{image_size}x{image_size} images, {layout}{sampled} ...", highlight=False)
    from ..capture.launch import cores_note

    shared = cores_note(workers)
    if shared:
        err.print(f"note: {shared}", highlight=False)
    log, failure = run_ddp_capture(config, workers, out_dir, timeout_s=timeout, bandwidth_bps=rate,
                                   on_note=lambda note: err.print(f"note: {note}", highlight=False))
    target = out_dir / "events.parquet"
    if failure is not None:
        raise DdlsimError(f"{failure}\nwrote the partial trace {target} ({log.table.num_rows} rows; partial ranks "
                          f"{log.metadata['partial_ranks']})")
    _summary(log, target)


def apply_plan(config: dict, plan_data: dict, entry: str, path) -> dict:
    """`config` (a checked DDP job config) with `entry` of the plan applied; errors name the plan and the mismatch."""
    from ..capture.ddp_plan import job_plan_config

    planned = plan_data["model"].get("name")
    if planned and planned != config["model"]:
        raise DdlsimError(f"--plan {path} was made for {planned}, not {config['model']}; leave out --model or plan for "
                          f"{config['model']} (ddlsim plan --model {config['model']} --out {path})")
    return {**config, **job_plan_config(plan_data, entry, config["model"], config["image_size"], path)}


def _summary(log, target: Path) -> None:
    """What a finished capture prints: its iteration time by the definition `ddlsim analyze` uses
    (:func:`ddlsim.analyze.breakdown.iteration_mean`, stated in the line) and its buckets."""
    from ..analyze.breakdown import iteration_arrays, iteration_mean

    arrays = iteration_arrays(log)
    mean = iteration_mean(arrays, log.metadata)
    buckets = log.metadata.get("buckets", [])
    sizes = ", ".join(f"{b['bytes'] / 2**20:.2f}" for b in buckets)
    out.print(f"wrote {target}: {log.table.num_rows} rows, {len(log.metadata['ranks'])} ranks", highlight=False)
    warmup = "".join(f"; warm-up iteration {i}: {t * 1e3:.1f} ms" for i, t in zip(arrays["iteration"], arrays["time_s"])
                     if int(i) in mean["warmup"])
    out.print(f"iteration time: {mean['mean_s'] * 1e3:.1f} ms ({mean['definition']}{warmup})", highlight=False)
    carried = log.metadata.get("collective_iterations")
    out.print(f"buckets: {len(buckets)} all-reduces per iteration ({sizes} MiB)"
              + (f"; all-reduce rows on the {len(carried)} iterations with layer rows only (the others: DDP's own "
                 "all-reduce, unrecorded)" if isinstance(carried, list) else ""), highlight=False)
    sampled = log.metadata.get("layer_iterations")
    if log.metadata.get("layer_every", 1) > 1 and isinstance(sampled, list):
        out.print(f"layer rows on {len(sampled)} of {log.metadata.get('iterations')} iterations "
                  f"({', '.join(str(i) for i in sampled[:8])}{', ...' if len(sampled) > 8 else ''}; "
                  f"--layer-every {log.metadata['layer_every']}); the others: one row per pass", highlight=False)
    applied = log.metadata.get("plan")
    if isinstance(applied, dict) and applied.get("predicted_iteration_s") is not None:
        out.print(f"plan {applied.get('file')} ({applied.get('entry')}): predicted "
                  f"{applied['predicted_iteration_s'] * 1e3:.1f} ms per iteration", highlight=False)
    out.print(f"next: ddlsim analyze {target}   |   ddlsim replay {target} --bandwidth 10Gbps", highlight=False)


def register(app: typer.Typer) -> None:
    """Adds `ddp` to the `capture` group."""
    app.command("ddp")(ddp)
