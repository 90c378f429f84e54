"""`ddlsim capture ps` and `ddlsim capture connections`: parameter-server jobs
over torch.distributed.rpc and the connection-scaling microbenchmark
(docs/capture-ps.md). capture_command.py calls :func:`register`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import DdlsimError
from .consoles import err, out


def _launch_kwargs(world_size: int, bandwidth: Optional[str], stack):
    if bandwidth is None:
        return {}
    from ..units import parse_bandwidth

    rate = parse_bandwidth(bandwidth)
    try:
        from ..capture.shaping import shaped_network
    except ImportError:
        raise DdlsimError(f"--bandwidth {bandwidth}: shaped links are unavailable in this installation "
                          "(ddlsim.capture.shaping is missing); leave out --bandwidth") from None
    net = stack.enter_context(shaped_network(world_size, rate, on_note=lambda note: err.print(f"note: {note}", highlight=False)))
    return {"wrap": net.wrap, "master_addr": net.master_addr, "env": net.env}


def ps(
    out_dir: Path = typer.Option(..., "--out", "-o", help="Capture directory (per-rank files, logs, events.parquet)."),
    model: str = typer.Option("sparse-lr", "--model", help="sparse-lr (Zipf-keyed embedding + logistic regression) | lenet5"),
    workers: int = typer.Option(2, "--workers", help="Worker processes."),
    servers: int = typer.Option(1, "--servers", help="Parameter-server processes."),
    iterations: int = typer.Option(3, "--iterations", help="Training iterations."),
    batch_size: int = typer.Option(16, "--batch-size", help="Examples per worker and iteration."),
    asynchronous: bool = typer.Option(False, "--async", help="Apply each push on its own (default: synchronous)."),
    zipf_s: float = typer.Option(1.1, "--zipf-s", help="Zipf exponent of the sparse model's feature ids."),
    vocab: int = typer.Option(1000, "--vocab", help="Embedding rows of the sparse model (its keys)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the model, the data and the Zipf draw."),
    placement: str = typer.Option("round-robin", "--placement", help="round-robin | size-balanced"),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds before the job is stopped."),
    bandwidth: Optional[str] = typer.Option(None, "--bandwidth", help="Shape every rank's link to RATE (e.g. 1Gbps)."),
    connection_counts: str = typer.Option(
        "auto", "--connections", help="After the job, the connection-scaling microbenchmark at these connection counts "
        "(auto: 1 to max(2, workers); none: skip); its per-request server cost a + b C goes in the metadata for replay."),
    connection_requests: int = typer.Option(200, "--connection-requests", help="RPC requests per connection count."),
    layer_every: int = typer.Option(
        1, "--layer-every", help="lenet5: the workers' per-layer rows on iteration 0 and every K-th iteration from 1 on "
        "(1, 1+K, ...) only, as capture ddp --layer-every; the others record each pass as one row and run no layer hook "
        "(the capture cost 2.9 % of the iteration at 1, 1 worker on 2 cores, over half of it the layer hooks', which run "
        "on one iteration in K: docs/capture-ps.md, Overhead). 1: every iteration."),
) -> None:
    """Run a parameter-server job over torch.distributed.rpc (TCP) and record every RPC as an event log."""
    from contextlib import ExitStack

    from ..capture.launch import CaptureError, check_timeout, cores_note, host_facts, launch_local
    from ..capture.merge import merge_capture
    from ..capture.outdir import capture_dir
    from ..capture.ps import metadata, ps_config
    from ..trace import write_event_log

    check_timeout(timeout)  # before --out is made (inf: the connection scaling's ranks crashed)
    if bandwidth is not None:  # before --out is made: a bad rate is one line and leaves nothing
        from ..units import parse_bandwidth

        try:
            parse_bandwidth(bandwidth)
        except ValueError as exc:
            raise DdlsimError(f"--bandwidth {bandwidth}: {exc}") from None
    config = ps_config(model=model, workers=workers, servers=servers, iterations=iterations, batch_size=batch_size,
                       sync=not asynchronous, zipf_s=zipf_s, vocab=vocab, seed=seed, placement=placement,
                       timeout_s=min(timeout, 120.0), layer_every=layer_every)
    world = workers + servers
    counts = _scaling_counts(connection_counts, workers)
    if counts and connection_requests < max(counts):
        raise DdlsimError(f"--connection-requests {connection_requests} is fewer than {max(counts)} connections; give at least "
                          f"{max(counts)}")
    failure = None
    from ..capture.launch import check_world_fits

    check_world_fits(world, "--workers + --servers")  # before the directory, the namespaces or any rank
    with capture_dir(out_dir) as out_dir, ExitStack() as stack:
        kwargs = _launch_kwargs(world, bandwidth, stack)
        shared = cores_note(world)  # after the checks of --out and --bandwidth: a bad input stays one line
        if shared:
            err.print(f"note: {shared}", highlight=False)
        try:
            launch_local("ps", config, world, out_dir, timeout_s=timeout, **kwargs)
        except CaptureError as exc:
            failure = exc
            err.print(f"error: {exc}\nmerging what the ranks recorded into a partial trace", highlight=False)
        stack.close()  # the links go before the merge
        extra = {"bandwidth": bandwidth} if bandwidth else {}
        extra.update(host_facts(world))
        cost = _server_cost(counts, connection_requests, out_dir, timeout) if counts and failure is None else None
        if cost is not None:
            extra["server_cost"] = cost
        log = merge_capture(out_dir, metadata={**metadata(config), **extra})
        _add_client_cost(log)
        target = out_dir / "events.parquet"
        write_event_log(log, target)
    flag = f" (PARTIAL: ranks {log.metadata['partial_ranks']})" if log.metadata.get("partial") else ""
    out.print(f"wrote {target}: {log.table.num_rows} rows{flag}", highlight=False)
    _print_breakdown(log)
    out.print(f"SketchDLC traces: ddlsim convert {target} sketchdlc/ --to sketchdlc   |   analysis: ddlsim analyze {target}",
              highlight=False)
    if failure is not None:
        raise typer.Exit(1)


def _scaling_counts(text: str, workers: int) -> list[int]:
    """The connection counts of `--connections`: auto = 1 .. max(2, workers), none = no run."""
    if text.strip().lower() == "none":
        return []
    if text.strip().lower() == "auto":
        return list(range(1, max(2, workers) + 1))
    from ..option_lists import connection_counts

    try:
        return connection_counts(text)
    except DdlsimError as exc:
        raise DdlsimError(f"{exc} (or auto, or none)") from None


def _server_cost(counts: list[int], requests: int, out_dir: Path, timeout: float) -> Optional[dict]:
    """The connection-scaling microbenchmark into `out_dir` (c<C>/, scaling.csv, fit.json) over loopback; the
    capture's ``server_cost`` metadata (the per-request service-time fit, see capture/connections.py), or None
    with a note when it fails (the capture stands without it)."""
    from ..capture.connections import _run_scaling, server_cost_metadata
    from ..capture.launch import CaptureError

    err.print(f"connection scaling: {', '.join(map(str, counts))} connections, {requests} requests each", highlight=False)
    try:
        result = _run_scaling(counts, requests, 4096, out_dir, timeout, None)
    except (CaptureError, DdlsimError) as exc:
        err.print(f"note: connection scaling failed ({exc}); the capture has no server_cost, replay uses none", highlight=False)
        return None
    cost = server_cost_metadata(result["fit"], counts)
    err.print(f"  per-request server cost = {cost['a_ns'] / 1e3:.1f} us + {cost['b_ns'] / 1e3:.1f} us x connections "
              f"(R^2 = {cost['r2']:.3f})", highlight=False)
    return cost


def _add_client_cost(log) -> None:
    """The workers' own per-request cost, fitted from the log's rows, into its ``client_cost`` metadata
    (capture/ps_client_cost.py); none when no counted iteration sent a request."""
    from ..capture.ps_client_cost import client_cost_metadata

    cost = client_cost_metadata(log)
    if cost is None:
        return
    log.metadata["client_cost"] = cost
    err.print(f"  worker per-request cost: issue {cost['issue_ns'] / 1e3:.1f} us + {cost['issue_ns_per_byte']:.3g} ns/byte, "
              f"handling {cost['receive_ns'] / 1e3:.1f} us + {cost['receive_ns_per_byte']:.3g} ns/byte, wake-up "
              f"{cost['wakeup_ns'] / 1e3:.1f} us ({cost['idle_responses']} responses reached an idle loop)", highlight=False)


def _print_breakdown(log) -> None:
    from rich.table import Table

    import pandas as pd

    from ..analyze.rpc import rpc_table

    table = rpc_table(log)
    if table.empty:
        return
    parts = ["total_ns", "n_tx_ns", "ps_queue_ns", "ps_proc_ns", "w_queue_ns", "w_proc_ns"]
    means = table.groupby("kind")[parts].mean()
    view = Table(title="RPC latency breakdown, mean per RPC (us)", title_justify="left", header_style="bold")
    view.add_column("kind")
    view.add_column("rpcs", justify="right")
    for p in parts:
        view.add_column(p[:-3], justify="right")
    counts = table.groupby("kind").size()
    for kind, row in means.iterrows():
        view.add_row(kind, str(counts[kind]), *("-" if pd.isna(row[p]) else f"{float(row[p]) / 1e3:.1f}" for p in parts))
    out.print(view)


def connections(
    out_dir: Path = typer.Option(..., "--out", "-o", help="Directory for c<C>/ runs, scaling.csv and fit.json."),
    counts: str = typer.Option("1,2,4,8", "--connections", help="Connection counts (client processes), comma separated."),
    requests: int = typer.Option(2000, "--requests", help="Total RPC requests per run, shared by the connections."),
    request_size: str = typer.Option("4096", "--request-bytes", help="Payload size per request, e.g. 4096 or 4KiB."),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds per run before it is stopped."),
) -> None:
    """Connection scaling (RPC paper Fig. 9): one server, C connections, the same total requests; fit server time vs C."""
    from rich.table import Table

    from ..capture.launch import check_timeout
    from ..option_lists import connection_counts
    from ..units import parse_size_bytes

    check_timeout(timeout)  # the options first: a bad one is refused before PyTorch is imported
    values = connection_counts(counts)
    try:
        request_bytes = parse_size_bytes(request_size)
    except ValueError as exc:
        raise DdlsimError(f"--request-bytes: {exc}") from None
    from ..capture.connections import run_scaling

    result = run_scaling(values, requests, request_bytes, out_dir, timeout_s=timeout,
                         on_done=lambda r: err.print(f"  {r['connections']} connections done", highlight=False))
    view = Table(title=f"{requests} requests of {request_bytes} B, one server", title_justify="left", header_style="bold")
    columns = ["connections", "requests", "server_us", "queue_us", "proc_us", "service_us", "latency_us", "total_s"]
    for c in columns:
        view.add_column(c, justify="right")
    for row in result["table"][columns].itertuples(index=False):
        view.add_row(*(f"{v:.4g}" if isinstance(v, float) else str(v) for v in row))
    out.print(view)
    fit = result["fit"]
    service = fit["service"]
    out.print(f"fit: server time per request = {fit['a']:.1f} us + {fit['b']:.1f} us x connections (R^2 = {fit['r2']:.3f}); "
              f"service time = {service['a']:.1f} us + {service['b']:.1f} us x connections (R^2 = {service['r2']:.3f}); "
              f"wrote {out_dir / 'scaling.csv'}, {out_dir / 'fit.json'}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("ps")(ps)
    app.command("connections")(connections)
