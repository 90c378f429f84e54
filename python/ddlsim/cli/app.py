"""The `ddlsim` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from ..errors import DdlsimError

app = typer.Typer(
    help="Simulate and analyze the network communication of distributed deep-learning training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
err = Console(stderr=True)


def _version(value: bool) -> None:
    if value:
        from .. import __version__
        from .._core import __version__ as engine_version

        typer.echo(f"ddlsim {__version__} (engine {engine_version})")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Simulate and analyze the network communication of distributed deep-learning training."""
# Tables stay readable when piped (rich would otherwise assume 80 columns).
out = Console(width=None if sys.stdout.isatty() else 150)


@app.command()
def simulate(
    scenario: Optional[Path] = typer.Argument(None, help="Scenario TOML file; flags override its values."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Zoo model (see `ddlsim models`), or 'synthetic'."),
    workers: Optional[int] = typer.Option(None, "--workers", "-n", help="Number of workers."),
    servers: Optional[int] = typer.Option(None, "--servers", help="Parameter servers (strategy ps)."),
    strategy: Optional[str] = typer.Option(None, "--strategy", "-s", help="ring (all-reduce) | ps (parameter server)"),
    algorithm: Optional[str] = typer.Option(None, "--algorithm", help="All-reduce algorithm (strategy ring): ring | halving-doubling | recursive-doubling | binary-tree | double-binary-tree | direct | butterfly | hierarchical-ring"),
    chunk_bytes: Optional[int] = typer.Option(
        None, "--chunk-bytes", help="Algorithm ring: cut each tensor into messages of at most this many bytes (0: off)."),
    collective_model: Optional[str] = typer.Option(
        None, "--collective-model", help="steps | closed-form (one event per collective; needs --network analytic)"),
    stream_policy: Optional[str] = typer.Option(
        None, "--stream-policy", help="Order of gradient transfers: fifo | priority (lowest layer first)"),
    preemption: Optional[str] = typer.Option(
        None, "--preemption", help="With --stream-policy priority: none (finish the running one) | chunk (preempt at chunk boundaries)"),
    grouping: Optional[str] = typer.Option(
        None, "--grouping", help="Which gradients travel together: per-tensor | synceasgd | mg-wfbp | fusion | thesis-fusion "
        "| ddp | fixed, options after a colon: ddp:bucket_cap_mb=50, fusion:threshold=32MiB,cycle_time=2ms"),
    bandwidth: Optional[str] = typer.Option(
        None, "--bandwidth", "-b", help="Host link bandwidth with a unit: 10Gbps (bits/s) or 10GB/s (bytes/s)."),
    latency: Optional[str] = typer.Option(None, "--latency", help="Host-to-host latency with a unit (ns, us, ms, s), e.g. 10us."),
    network: Optional[str] = typer.Option(None, "--network", help="Fidelity: analytic | flow"),
    topology: Optional[str] = typer.Option(None, "--topology", help="star | leaf-spine"),
    oversubscription: Optional[float] = typer.Option(None, "--oversubscription", help="Leaf-spine oversubscription ratio."),
    hosts_per_leaf: Optional[int] = typer.Option(None, "--hosts-per-leaf", help="Leaf-spine: hosts under each leaf."),
    spines: Optional[int] = typer.Option(None, "--spines", help="Leaf-spine: number of spine switches."),
    placement: Optional[str] = typer.Option(None, "--placement", help="PS tensor placement: round-robin | size-balanced"),
    in_network: Optional[str] = typer.Option(
        None, "--in-network", help="In-network mechanisms. PS: none | multicast (parameters) | aggregation (gradients, in the switch) | multiagg (both); ring: none | multicast (all-gather)"),
    switch_memory: Optional[str] = typer.Option(
        None, "--switch-memory", help="PS aggregation: switch memory with a unit, e.g. 10MB; groups that do not fit go to the server."),
    routing: Optional[str] = typer.Option(None, "--routing", help="Leaf-spine routing: ecmp (per-flow hash) | spray"),
    ranks_per_host: Optional[int] = typer.Option(None, "--ranks-per-host", help="Ranks (GPUs) sharing one host and its link."),
    rack_placement: Optional[str] = typer.Option(
        None, "--rack-placement", help="Leaf-spine: packed (consecutive ranks fill a rack) | spread (round-robin over racks)"),
    server_hosts: Optional[str] = typer.Option(
        None, "--server-hosts", help="PS servers: separate (own hosts after the workers) | colocated (on the workers' hosts)"),
    priority_bands: Optional[bool] = typer.Option(
        None, "--priority-bands/--no-priority-bands", help="Gradient transfers use the network's strict-priority bands."),
    record_flows: Optional[bool] = typer.Option(
        None, "--record-flows/--no-record-flows", help="Write flows.parquet: one row per network flow (FCT, bytes, band)."),
    iterations: Optional[int] = typer.Option(None, "--iterations", "-i", help="Training iterations to simulate."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Random seed."),
    jitter: Optional[float] = typer.Option(None, "--jitter", help="Coefficient of variation of compute times."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Per-worker batch size."),
    device: Optional[str] = typer.Option(None, "--device", help="K80 | P100 | V100 | T4 | A100 | H100"),
    precision: Optional[str] = typer.Option(None, "--precision", help="fp32 | fp16"),
    efficiency: Optional[float] = typer.Option(None, "--efficiency", help="Share of peak FLOP/s reached (0-1]."),
    profile: Optional[Path] = typer.Option(None, "--profile", help="Measured layer times: CSV layer,fwd_ms,bwd_ms."),
    barrier: Optional[bool] = typer.Option(None, "--barrier/--no-barrier", help="Global barrier between iterations."),
    trace_detail: Optional[str] = typer.Option(None, "--trace-detail", help="auto | step | collective"),
    out_dir: Optional[Path] = typer.Option(None, "--out", "-o", help="Write event log, trace, tables and timeline here."),
    as_json: bool = typer.Option(False, "--json", help="Print a machine-readable summary only."),
) -> None:
    """Simulate training iterations and report where the time goes."""
    from ..api import simulate as run_simulation

    overrides = {
        "model": model, "workers": workers, "servers": servers, "strategy": strategy,
        "bandwidth": bandwidth, "latency": latency, "network": network, "topology": topology,
        "oversubscription": oversubscription, "hosts_per_leaf": hosts_per_leaf, "spines": spines,
        "placement": placement, "in_network": in_network, "switch_memory": switch_memory, "algorithm": algorithm, "chunk_bytes": chunk_bytes, "collective_model": collective_model,
        "stream_policy": stream_policy, "preemption": preemption, "grouping": grouping,
        "routing": routing, "ranks_per_host": ranks_per_host, "rack_placement": rack_placement,
        "server_hosts": server_hosts, "priority_bands": priority_bands, "record_flows": record_flows, "precision": precision, "efficiency": efficiency,
        "profile": str(profile.resolve()) if profile else None, "iterations": iterations, "seed": seed, "jitter": jitter,
        "batch_size": batch_size, "device": device, "barrier": barrier, "trace_detail": trace_detail,
    }
    overrides = {k: v for k, v in overrides.items() if v is not None}
    with err.status("simulating…", spinner="dots") if not as_json else _null():
        result = run_simulation(scenario, **overrides)
    summary = result.summary()
    if out_dir is not None:
        paths = result.save(out_dir)
        summary["outputs"] = {k: str(v) for k, v in paths.items()}
        summary["notes"] = list(result.notes)
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
        return
    from .report import print_summaries

    sc = result.scenario
    label = sc.strategy.label
    print_summaries(
        {label: summary},
        f"{result.model.display_name} · {sc.workers} workers · {sc.network.bandwidth} · {sc.network.fidelity}",
        out,
    )
    out.print(f"{summary['events']:,} events, {summary['log_rows']:,} log rows, engine {summary['wall_s']:.3f} s")
    if out_dir is not None:
        for key, path in summary["outputs"].items():
            out.print(f"  {key:13s} {path}")
    for note in result.notes:
        out.print(f"[yellow]note:[/] {note}")


# Scenario defaults shown in `simulate --help` (the flags default to "not
# given", so that a scenario file's values stand). A test checks that they
# equal the Scenario model's defaults, so they cannot drift.
SIMULATE_DEFAULTS = {
    "model": "resnet50", "workers": "8", "servers": "1 (with --strategy ps)", "strategy": "ring",
    "algorithm": "ring", "stream_policy": "fifo", "preemption": "none", "grouping": "per-tensor",
    "bandwidth": "10Gbps", "latency": "10us", "network": "flow", "topology": "star", "oversubscription": "1.0",
    "hosts_per_leaf": "8", "spines": "2", "placement": "round-robin", "routing": "ecmp", "ranks_per_host": "1",
    "rack_placement": "packed", "server_hosts": "separate", "priority_bands": "off", "iterations": "3", "seed": "0",
    "jitter": "0.0", "batch_size": "32", "device": "V100", "precision": "fp32", "efficiency": "0.5",
    "barrier": "on", "trace_detail": "auto", "record_flows": "off",
}


def _show_defaults(command, defaults: dict[str, str]) -> None:
    import inspect

    for name, parameter in inspect.signature(command).parameters.items():
        info = parameter.default
        if name in defaults and getattr(info, "help", None):
            info.help = f"{info.help} (default: {defaults[name]})"


_show_defaults(simulate, SIMULATE_DEFAULTS)


@app.command()
def models(layers: Optional[str] = typer.Option(None, "--layers", help="Show the layer table of this model.")) -> None:
    """List the model zoo: parameter tensors, parameters, size, FLOPs."""
    from ..workload import list_models, load_model

    if layers:
        m = load_model(layers)
        table = Table(title=f"{m.display_name} layers", title_justify="left")
        for col in ("#", "layer", "type", "tensors", "bytes", "fwd GFLOPs", "bwd GFLOPs"):
            table.add_column(col, justify="right" if col not in ("layer", "type") else "left")
        for i, row in m.layer_table().iterrows():
            table.add_row(str(i), row["layer"], row["type"], str(row["tensors"]), f"{row['bytes']:,}",
                          f"{row['fwd_flops'] / 1e9:.3f}", f"{row['bwd_flops'] / 1e9:.3f}")
        out.print(table)
        return
    table = Table(title="model zoo (FLOPs per sample)", title_justify="left")
    for col in ("name", "model", "tensors", "parameters", "size (MB)", "fwd GFLOPs", "bwd GFLOPs"):
        table.add_column(col, justify="left" if col in ("name", "model") else "right")
    for name in list_models():
        m = load_model(name)
        table.add_row(name, m.display_name, str(len(m.tensors)), f"{m.parameters:,}", f"{m.size_bytes / 1e6:.2f}",
                      f"{m.fwd_flops / 1e9:.2f}", f"{m.bwd_flops / 1e9:.2f}")
    out.print(table)


@app.command()
def export(
    events: Path = typer.Argument(..., help="An event log (events.parquet)."),
    fmt: str = typer.Option(..., "--format", "-f", help="chrome | sketchdlc | csv"),
    out_path: Path = typer.Option(..., "--out", "-o", help="Output file (chrome, csv) or directory (sketchdlc)."),
) -> None:
    """Convert an event log: Perfetto/Chrome JSON, SketchDLC per-node text, or CSV."""
    import numpy as np

    from ..output import staged_directory
    from ..trace import read_event_log, write_chrome_trace, write_sketchdlc

    fmt = fmt.strip().lower()
    if fmt not in ("chrome", "sketchdlc", "csv"):
        raise DdlsimError(f"--format {fmt!r}: choose chrome, sketchdlc or csv")
    log = read_event_log(events)
    if fmt == "chrome":
        write_chrome_trace(log, out_path)
    elif fmt == "csv":
        with staged_directory(out_path.parent if str(out_path.parent) else Path(".")) as stage:
            frame = log.to_pandas()
            frame["deps"] = frame["deps"].map(lambda d: "" if d is None else " ".join(str(int(x)) for x in d))
            frame.to_csv(stage / out_path.name, index=False)
    else:
        if not np.isin(log.column("op"), ["push_request", "push_response", "pull_request", "pull_response"]).any():
            raise DdlsimError(f"{events}: SketchDLC describes parameter-server push/pull traffic; this log has none")
        with staged_directory(out_path) as stage:
            write_sketchdlc(log, stage)
    out.print(f"wrote {out_path}")


@app.command()
def demo(out_dir: Path = typer.Option(Path("ddlsim-out"), "--out", "-o", help="Where to write the outputs.")) -> None:
    """Ring all-reduce vs parameter server for ResNet-50 on 8 workers at 10 Gbit/s."""
    from .demo import run_demo

    run_demo(out_dir, out)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main() -> None:
    try:
        app()
    except DdlsimError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
