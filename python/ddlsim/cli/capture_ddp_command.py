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
    model: str = typer.Option("resnet18", "--model", "-m", help="lenet5 | resnet18 | resnet50 (torchvision, weights=None)."),
    workers: int = typer.Option(2, "--workers", "-n", help="Ranks (processes) on this machine."),
    iterations: int = typer.Option(5, "--iterations", "-i", help="Training iterations."),
    batch_size: int = typer.Option(8, "--batch-size", help="Samples per rank per iteration (synthetic images)."),
    image_size: int = typer.Option(32, "--image-size", help="Image side in pixels (lenet5: 32; ResNets: >= 32)."),
    bucket_cap_mb: float = typer.Option(25.0, "--bucket-cap-mb", help="DDP bucket size cap in MiB."),
    seed: int = typer.Option(0, "--seed", help="Seed of the weights and the synthetic data."),
    timeout: float = typer.Option(600.0, "--timeout", help="Stop the job after this many seconds."),
    bandwidth: Optional[str] = typer.Option(None, "--bandwidth", "-b", help="Shape each rank's link to this rate, e.g. 1Gbps."),
    out_dir: Path = typer.Option(Path("run"), "--out", "-o", help="Capture directory: rank files, logs, events.parquet."),
) -> None:
    """Run PyTorch DDP training on CPU (gloo) and record every layer's forward/backward and every bucket's all-reduce."""
    from ..capture.ddp import job_config
    from ..units import parse_bandwidth

    if importlib.util.find_spec("torch") is None:
        raise DdlsimError("ddlsim capture needs PyTorch, which is not installed; pip install ddlsim[capture]")
    if workers < 1:
        raise DdlsimError(f"--workers must be at least 1, got {workers}")
    from ..safe_io import check_directory_target

    check_directory_target(out_dir)
    if timeout <= 0:
        raise DdlsimError(f"--timeout must be positive, got {timeout}")
    config = {"model": model, "iterations": iterations, "batch_size": batch_size, "image_size": image_size,
              "bucket_cap_mb": bucket_cap_mb, "seed": seed}
    try:
        config = job_config(config)
        rate = None if bandwidth is None else parse_bandwidth(bandwidth)
    except ValueError as exc:
        raise DdlsimError(f"ddlsim capture ddp: {exc}") from None
    if model != "lenet5" and importlib.util.find_spec("torchvision") is None:
        raise DdlsimError(f"--model {model} needs torchvision; pip install ddlsim[capture] (or use --model lenet5)")
    from ..capture.ddp_run import run_ddp_capture
    from ..safe_io import ensure_directory

    ensure_directory(out_dir)  # a directory ddlsim can write in (created if missing), checked before the job starts

    err.print(f"capturing DDP {model}: {workers} ranks x {iterations} iterations, batch {batch_size}, "
              f"{image_size}x{image_size} images, buckets {bucket_cap_mb:g} MiB ...", highlight=False)
    log, failure = run_ddp_capture(config, workers, out_dir, timeout_s=timeout, bandwidth_bps=rate)
    target = out_dir / "events.parquet"
    if failure is not None:
        raise DdlsimError(f"{failure}\nwrote the partial trace {target} ({log.table.num_rows} rows; partial ranks "
                          f"{log.metadata['partial_ranks']})")
    _summary(log, target)


def _summary(log, target: Path) -> None:
    import numpy as np

    kind, iteration = log.column("kind"), log.column("iteration")
    markers = (kind == "marker") & (log.column("op") == "iteration")
    seconds = (log.column("end_ns") - log.column("start_ns"))[markers] / 1e9
    steady = seconds[iteration[markers] > 0] if (iteration[markers] > 0).any() else seconds
    buckets = log.metadata.get("buckets", [])
    sizes = ", ".join(f"{b['bytes'] / 2**20:.2f}" for b in buckets)
    out.print(f"wrote {target}: {log.table.num_rows} rows, {len(log.metadata['ranks'])} ranks", highlight=False)
    out.print(f"iteration time: mean {np.mean(steady) * 1e3:.1f} ms over iterations >= 1 "
              f"(first iteration {np.mean(seconds[iteration[markers] == 0]) * 1e3:.1f} ms)", highlight=False)
    out.print(f"buckets: {len(buckets)} all-reduces per iteration ({sizes} MiB)", highlight=False)
    out.print(f"next: ddlsim analyze {target}   |   ddlsim replay {target} --bandwidth 10Gbps", highlight=False)


def register(app: typer.Typer) -> None:
    """Adds `ddp` to the `capture` group."""
    app.command("ddp")(ddp)
