"""The `ddlsim` command line."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer
from .. import _core as _engine
from ..errors import DdlsimError
from ..workload.devices import DEVICES
from .consoles import QUIET_HELP, err, out, real_console

# The engine's all-reduce algorithms, spelled as ddlsim.simulation.algorithms.names() does, for
# the --algorithm help (read from the extension alone: importing the simulation package here would slow every start).
_ALGORITHMS = " | ".join(_engine.ALGORITHM_NAMES).replace("_", "-")

app = typer.Typer(
    help="Simulate and analyze the network communication of distributed deep-learning training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


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


# Options that simulate and replay share (one definition each).
_STRAGGLER_OPTION = typer.Option(
    None, "--straggler", help="A persistent straggler (repeatable; replaces the scenario's [[straggler]] tables): RANK:FACTOR, "
    "e.g. 3:1.5 (worker 3 computes 1.5x as long every iteration); the run is also simulated without, to report the cost.")
_TRANSIENT_STRAGGLER_OPTION = typer.Option(
    None, "--transient-straggler", help="A transient straggler (repeatable): P:FACTOR, e.g. 0.01:2 (each worker, each "
    "iteration, computes 2x as long with probability 0.01; seeded).")
_DEVICE_OPTION = typer.Option(None, "--device", help=" | ".join(DEVICES))  # every preset (plan's had lost two)
_RANK_TIMES_OPTION = typer.Option(
    None, "--rank-times", help="With an event-log profile: median (every rank the median layer times) | sampled "
    "(each rank and iteration draws a captured step's layer times; docs/replay-at-scale.md)")


@app.command()
def simulate(
    scenario: Optional[Path] = typer.Argument(None, help="Scenario TOML file; flags override its values."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Zoo model (see `ddlsim models`), or 'synthetic'."),
    workers: Optional[int] = typer.Option(None, "--workers", "-n", help="Number of workers."),
    servers: Optional[int] = typer.Option(None, "--servers", help="Parameter servers (strategy ps)."),
    strategy: Optional[str] = typer.Option(None, "--strategy", "-s", help="ring (all-reduce) | ps (parameter server)"),
    algorithm: Optional[str] = typer.Option(None, "--algorithm", help=f"All-reduce algorithm (strategy ring): {_ALGORITHMS}"),
    chunk_bytes: Optional[str] = typer.Option(
        None, "--chunk-bytes", help="Algorithm ring: cut each tensor into messages of at most this size, e.g. 4MB (0: off)."),
    collective_model: Optional[str] = typer.Option(
        None, "--collective-model", help="steps | closed-form (one event per collective; needs --network analytic)"),
    stream_policy: Optional[str] = typer.Option(
        None, "--stream-policy", help="Order of gradient transfers: fifo | priority (lowest layer first)"),
    preemption: Optional[str] = typer.Option(
        None, "--preemption", help="With --stream-policy priority: none (finish the running one) | chunk (preempt between steps) "
        "| message (P3: only between --chunk-bytes slices)"),
    partition_bytes: Optional[str] = typer.Option(
        None, "--partition", help="ByteScheduler: cut each group into all-reduces of at most this size, e.g. 4MB (0: off)."),
    credit_bytes: Optional[str] = typer.Option(
        None, "--credit", help="ByteScheduler: start the next queued all-reduce while those running move fewer bytes than this, "
        "e.g. 16MB (0: one at a time)."),
    grouping: Optional[str] = typer.Option(
        None, "--grouping", help="Which gradients travel together: per-tensor | synceasgd | mg-wfbp | fusion | thesis-fusion "
        "| ddp | fixed, options after a colon: ddp:bucket_cap_mb=50, fusion:threshold=32MiB,cycle_time=2ms"),
    bandwidth: Optional[str] = typer.Option(
        None, "--bandwidth", "-b", help="Host link bandwidth with a unit: 10Gbps (bits/s) or 10GB/s (bytes/s)."),
    latency: Optional[str] = typer.Option(None, "--latency", help="Host-to-host latency with a unit (ns, us, ms, s), e.g. 10us."),
    network: Optional[str] = typer.Option(None, "--network", help="Fidelity: analytic | flow | packet"),
    topology: Optional[str] = typer.Option(None, "--topology", help="star | leaf-spine"),
    oversubscription: Optional[float] = typer.Option(None, "--oversubscription", help="Leaf-spine oversubscription ratio."),
    hosts_per_leaf: Optional[int] = typer.Option(None, "--hosts-per-leaf", help="Leaf-spine: hosts under each leaf."),
    spines: Optional[int] = typer.Option(None, "--spines", help="Leaf-spine: number of spine switches."),
    placement: Optional[str] = typer.Option(
        None, "--placement", help="PS tensor placement: round-robin | size-balanced | split (every tensor over all servers)"),
    distribution: Optional[str] = typer.Option(
        None, "--distribution", help="PS distribution order: immediate | round-robin (a parameter to every worker) | block"),
    asynchronous: Optional[bool] = typer.Option(
        None, "--async/--sync", help="Asynchronous PS: no cross-worker barrier, workers use the latest parameters."),
    staleness: Optional[int] = typer.Option(None, "--staleness", help="Asynchronous PS: iterations a worker may run ahead."),
    gamma_ns_per_byte: Optional[float] = typer.Option(
        None, "--gamma", help="Reduction cost in ns per byte (MG-WFBP's gamma). PS: adds (N-1) x bytes x gamma to each server update; "
        "all-reduce: each received chunk of the reduce phase takes bytes x gamma before the next step."),
    stagger: Optional[str] = typer.Option(None, "--stagger", help="Backpropagation staggering: skew with a unit, e.g. 2ms."),
    stagger_mode: Optional[str] = typer.Option(None, "--stagger-mode", help="fixed (worker w waits w x skew) | random (seeded)"),
    compute_speedup: Optional[float] = typer.Option(
        None, "--compute-speedup", help="Faster compute: layers of --speedup-kind run this many times faster."),
    speedup_kinds: Optional[list[str]] = typer.Option(
        None, "--speedup-kind", help="Layer type prefix the speedup applies to (repeatable; default Conv)."),
    grow_module: Optional[str] = typer.Option(
        None, "--grow-module", help="Synthetic growth: inception-35x35x288 (compute) | inception-17x17x768 (network)"),
    grow_count: Optional[int] = typer.Option(None, "--grow-count", help="Synthetic growth: modules to add."),
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
    band_policy: Optional[str] = typer.Option(
        None, "--band-policy", help="fixed (every transfer in network.job_band) | adaptive (each gradient group's band from "
        "its slack: low band when it can wait, job_band when critical; docs/adaptive-priority.md)"),
    record_flows: Optional[bool] = typer.Option(
        None, "--record-flows/--no-record-flows", help="Write flows.parquet: one row per network flow (FCT, bytes, band)."),
    background: Optional[list[str]] = typer.Option(
        None, "--background", help="A background tenant (repeatable; replaces the scenario's [[tenant]] tables): SIZES:key=value,... "
        "with SIZES websearch | datamining | cdf=PATH (CSV bytes,cumulative fraction) and keys load (fraction of the SENDING "
        "host's link rate) or flows_per_host (flows per second PER SENDING HOST), band, seed, start, stop, name; "
        "e.g. websearch:load=0.3 (docs/tenants.md)."),
    hosts: Optional[int] = typer.Option(
        None, "--hosts", help="Hosts in the fabric, at least those the ranks use; the others only run background tenants."),
    transport: Optional[str] = typer.Option(
        None, "--transport", help="Packet level: newreno | dctcp (needs --ecn-threshold)"),
    queue_limit: Optional[str] = typer.Option(
        None, "--queue-limit", help="Packet level: drop-tail limit per band (per port with queue_scope = port), in packets (1000) or bytes with a unit (256KB)."),
    ecn_threshold: Optional[int] = typer.Option(
        None, "--ecn-threshold", help="Packet level: ECN marking threshold K in packets (DCTCP; 65 is usual at 10 Gbit/s)."),
    rto_min: Optional[str] = typer.Option(None, "--rto-min", help="Packet level: minimum TCP retransmission timeout, e.g. 200ms."),
    bands: Optional[int] = typer.Option(None, "--bands", help="Packet level: strict-priority bands per port, 1-8."),
    queue_sample: Optional[str] = typer.Option(
        None, "--queue-sample", help="Packet level: sample queue occupancy at this period (e.g. 100us) into queues.parquet."),
    iterations: Optional[int] = typer.Option(None, "--iterations", "-i", help="Training iterations to simulate."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Random seed."),
    jitter: Optional[float] = typer.Option(None, "--jitter", help="Coefficient of variation of compute times."),
    straggler: Optional[list[str]] = _STRAGGLER_OPTION,
    transient_straggler: Optional[list[str]] = _TRANSIENT_STRAGGLER_OPTION,
    rank_times: Optional[str] = _RANK_TIMES_OPTION,
    job_stagger: Optional[str] = typer.Option(
        None, "--job-stagger", help="Scenarios with [[job]] tables: job k starts k x this later, e.g. 10ms (docs/jobs.md)."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Per-worker batch size."),
    device: Optional[str] = _DEVICE_OPTION,
    precision: Optional[str] = typer.Option(None, "--precision", help="fp32 | tf32 | fp16 | bf16"),
    compute: Optional[str] = typer.Option(None, "--compute", help="roofline (per-kernel roofline + launch costs) | flops (FLOPs / (peak x efficiency))."),
    efficiency: Optional[float] = typer.Option(None, "--efficiency", help="Share of peak FLOP/s reached (0-1], with --compute flops."),
    profile: Optional[Path] = typer.Option(None, "--profile", help="Measured layer times: CSV layer,fwd_ms,bwd_ms, or an event log (.parquet) whose per-layer compute rows give them."),
    barrier: Optional[bool] = typer.Option(None, "--barrier/--no-barrier", help="Global barrier between iterations."),
    trace_detail: Optional[str] = typer.Option(None, "--trace-detail", help="auto | step | collective"),
    per_rank: bool = typer.Option(
        False, "--per-rank", help="Closed form: simulate and log every worker, not one per class of alike workers."),
    out_dir: Optional[Path] = typer.Option(None, "--out", "-o", help="Write event log, trace, tables and timeline here."),
    as_json: bool = typer.Option(False, "--json", help="Print a machine-readable summary only."),
    max_memory: Optional[str] = typer.Option(
        None, "--max-memory", help="Refuse runs estimated to need more memory than this, e.g. 16GB (default: half of RAM)."),
    force: bool = typer.Option(False, "--force", help="Run even when the cost estimate is over budget."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Simulate training iterations and report where the time goes."""
    from ..api import simulate as run_simulation

    overrides = {
        "model": model, "workers": workers, "servers": servers, "strategy": strategy,
        "bandwidth": bandwidth, "latency": latency, "network": network, "topology": topology,
        "oversubscription": oversubscription, "hosts_per_leaf": hosts_per_leaf, "spines": spines,
        "placement": placement, "in_network": in_network, "switch_memory": switch_memory, "algorithm": algorithm, "chunk_bytes": chunk_bytes, "collective_model": collective_model,
        "stream_policy": stream_policy, "preemption": preemption, "grouping": grouping,
        "partition_bytes": partition_bytes, "credit_bytes": credit_bytes,
        "routing": routing, "ranks_per_host": ranks_per_host, "rack_placement": rack_placement,
        "server_hosts": server_hosts, "priority_bands": priority_bands, "band_policy": band_policy, "record_flows": record_flows, "precision": precision, "efficiency": efficiency, "compute": compute,
        "profile": str(profile.resolve()) if profile else None, "iterations": iterations, "seed": seed, "jitter": jitter,
        "batch_size": batch_size, "device": device, "barrier": barrier, "trace_detail": trace_detail,
        "rank_classes": "off" if per_rank else None,
        "distribution": distribution, "asynchronous": asynchronous, "staleness": staleness,
        "gamma_ns_per_byte": gamma_ns_per_byte, "stagger": stagger, "stagger_mode": stagger_mode,
        "compute_speedup": compute_speedup, "speedup_kinds": speedup_kinds or None, "grow_module": grow_module,
        "grow_count": grow_count, "hosts": hosts, "background": _background_overrides(background), "job_stagger": job_stagger,
        "straggler": _straggler_overrides(straggler, transient_straggler), "rank_times": rank_times,
        **_packet_overrides(transport, queue_limit, ecn_threshold, rto_min, bands, queue_sample),
    }
    overrides = {k: v for k, v in overrides.items() if v is not None}
    _simulate_and_report(lambda: run_simulation(scenario, **overrides), iterations=iterations, out_dir=out_dir, as_json=as_json,
                         max_memory=max_memory, force=force, quiet=quiet)


def _background_overrides(specs: Optional[list[str]]) -> Optional[list[dict]]:
    """The --background values as [[tenant]] tables, each checked on its own so that an error is
    one line naming the value; a CSV path becomes absolute (flags are relative to the working directory)."""
    if not specs:
        return None
    from pydantic import ValidationError

    from ..simulation.scenario import TenantConfig, parse_background
    from ..workload.flow_sizes import builtin_name

    tables = []
    for spec in specs:
        try:
            table = parse_background(spec)
            TenantConfig.model_validate(table)
        except ValueError as exc:  # a ValidationError too
            if isinstance(exc, ValidationError):
                messages = [(e["loc"][0] if e["loc"] else "", e["msg"].removeprefix("Value error, ")) for e in exc.errors()]
                why = "; ".join(dict.fromkeys(m if not f or m.startswith(f"{f} ") else f"{f}: {m}" for f, m in messages))
            else:
                why = str(exc).removeprefix(f"{spec!r}: ")
            example = "" if "e.g." in why else "; write e.g. websearch:load=0.3 or cdf=sizes.csv:flows_per_host=23,band=0"
            raise DdlsimError(f"--background {spec!r}: {why}{example}") from None
        if builtin_name(table["sizes"]) is None:
            table["sizes"] = str(Path(table["sizes"]).expanduser().resolve())
        tables.append(table)
    return tables


def _straggler_overrides(persistent: Optional[list[str]], transient: Optional[list[str]]) -> Optional[list[dict]]:
    """--straggler RANK:FACTOR and --transient-straggler P:FACTOR as [[straggler]] tables (None: neither given)."""
    if not persistent and not transient:
        return None
    tables = []
    for flag, values, key, example in (("--straggler", persistent, "rank", "3:1.5"), ("--transient-straggler", transient, "probability", "0.01:2")):
        for value in values or []:
            head, _, factor = value.partition(":")
            try:
                number = int(head) if key == "rank" else float(head)
                tables.append({key: number, "factor": float(factor)})
            except ValueError:
                raise DdlsimError(f"{flag} {value!r}: write {key.upper() if key == 'rank' else 'P'}:FACTOR, e.g. {example}") from None
    return tables


def _packet_overrides(transport: Optional[str], queue_limit: Optional[str], ecn_threshold: Optional[int],
                      rto_min: Optional[str], bands: Optional[int], queue_sample: Optional[str]) -> dict:
    """The packet-level flags as scenario overrides ([network.packet]); --queue-limit
    is a number of packets (1000, 1000p) or a size with a unit (256KB: bytes)."""
    values = {"transport": transport, "ecn_threshold": ecn_threshold, "rto_min": rto_min, "bands": bands,
              "queue_sample": queue_sample}
    if queue_limit is not None:
        from ..units import parse_size_bytes

        text = queue_limit.strip().lower()
        number = text.removesuffix("packets").removesuffix("p").strip()
        if number.isdigit():
            values["queue_limit"], values["queue_limit_unit"] = int(number), "packets"
        else:
            try:
                values["queue_limit"], values["queue_limit_unit"] = int(parse_size_bytes(queue_limit)), "bytes"
            except ValueError:
                raise DdlsimError(f"--queue-limit {queue_limit!r}: give packets (1000) or bytes with a unit (256KB)") from None
    return {k: v for k, v in values.items() if v is not None}


def _simulate_and_report(run, *, iterations: Optional[int], out_dir: Optional[Path], as_json: bool, max_memory: Optional[str],
                         force: bool, quiet: bool, recorded: Optional[tuple[str, float, str]] = None) -> None:
    """Runs `run()` (a simulation) under the budget and progress bar, then prints or writes it;
    `recorded`: (log, iteration time, how it was averaged) of a replayed run, printed beside the replay."""
    if out_dir is not None:
        from ..safe_io import check_directory_target

        check_directory_target(out_dir)  # refused before the run, not after it
    from ..simulation.budget import parse_max_memory, run_control

    budget_bytes = parse_max_memory(max_memory)
    from .progress import EngineProgress

    with EngineProgress(err, iterations or 0, enabled=sys.stderr.isatty() and not quiet) as progress:
        with run_control(max_memory=budget_bytes, force=force, progress=progress, on_start=progress.start):
            result = run()
            effect = None
            if result.scenario.straggler:  # what the stragglers cost: the same run without them
                from ..api import straggler_effect

                effect = straggler_effect(result)
        progress.phase("analysing")
        summary = result.summary()
        if effect is not None:
            summary["stragglers"] = effect
        if recorded is not None:
            summary["recorded"] = {"log": recorded[0], "iteration_time_s": recorded[1], "iteration_mean": recorded[2],
                                   "difference": summary["iteration_time_s"] / recorded[1] - 1 if recorded[1] > 0 else None}
        if out_dir is not None:
            progress.phase("writing")
            paths = result.save(out_dir)
            summary["outputs"] = {k: str(v) for k, v in paths.items()}
            summary["notes"] = list(result.notes)
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
        return
    if "jobs" in summary:  # several jobs on one fabric (docs/jobs.md)
        from .report import print_jobs

        print_jobs(summary, out, quiet)
        for row in summary["jobs"]:  # a replay: the recorded run beside
            if row.get("recorded_iteration_time_s"):
                out.print(f"recorded run, job {row['name']}: {row['recorded_iteration_time_s'] * 1e3:.3f} ms per iteration; "
                          f"replayed: {row['iteration_time_s'] * 1e3:.3f} ms ({row['recorded_difference']:+.2%})", highlight=False)
        for row in (effect or {}).get("jobs", []):
            out.print(f"stragglers, job {row['name']}: {row['with_s'] * 1e3:.3f} ms per iteration against "
                      f"{row['without_s'] * 1e3:.3f} ms without them ({row['ratio'] - 1:+.2%})")
        for note in result.notes:
            out.print(f"[yellow]note:[/] {note}")
        return
    from .report import print_summaries

    sc = result.scenario
    label = sc.strategy.label
    print_summaries(
        {label: summary},
        f"{result.model.display_name} · {sc.workers} workers · {sc.network.bandwidth} · {sc.network.fidelity}",
        out,
    )
    if "packet" in summary:
        from .report import port_table

        ports, line = port_table(summary["packet"])
        if summary["packet"].get("ports"):
            out.print(ports)
        out.print(line)
    if not quiet:
        out.print(f"{summary['events']:,} events, {summary['log_rows']:,} log rows, engine {summary['wall_s']:.3f} s")
    if recorded is not None and recorded[1] > 0:
        out.print(f"recorded run: {recorded[1] * 1e3:.2f} ms per iteration ({recorded[2]}); replayed: {summary['iteration_time_s'] * 1e3:.2f} ms "
                  f"({summary['recorded']['difference']:+.2%} against the recorded run)")
    if effect is not None:
        out.print(f"stragglers: {effect['with_s'] * 1e3:.3f} ms per iteration against {effect['without_s'] * 1e3:.3f} ms "
                  f"without them ({effect['ratio'] - 1:+.2%})")
    if out_dir is not None and not quiet:
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
    "jitter": "0.0", "batch_size": "32", "device": "V100", "precision": "fp32", "compute": "roofline", "efficiency": "0.5",
    "barrier": "on", "trace_detail": "auto", "record_flows": "off", "rank_times": "median", "band_policy": "fixed",
}


def _show_defaults(command, defaults: dict[str, str]) -> None:
    import inspect

    for name, parameter in inspect.signature(command).parameters.items():
        info = parameter.default
        if name in defaults and getattr(info, "help", None):
            info.help = f"{info.help} (default: {defaults[name]})"


_show_defaults(simulate, SIMULATE_DEFAULTS)


@app.command()
def replay(
    events: Path = typer.Argument(..., help="The event log of a run (events.parquet: simulated, captured or converted)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Zoo model, when the log does not record one."),
    workers: Optional[int] = typer.Option(None, "--workers", "-n", help="Number of workers (default: the log's)."),
    strategy: Optional[str] = typer.Option(None, "--strategy", "-s", help="ring (all-reduce) | ps (parameter server)"),
    servers: Optional[int] = typer.Option(None, "--servers", help="Parameter servers (strategy ps)."),
    algorithm: Optional[str] = typer.Option(None, "--algorithm", help="All-reduce algorithm (strategy ring)."),
    grouping: Optional[str] = typer.Option(None, "--grouping", help="Which gradients travel together (see simulate --help)."),
    stream_policy: Optional[str] = typer.Option(None, "--stream-policy", help="fifo | priority"),
    bandwidth: Optional[str] = typer.Option(None, "--bandwidth", "-b", help="Host link bandwidth with a unit, e.g. 25Gbps."),
    latency: Optional[str] = typer.Option(None, "--latency", help="Host-to-host latency with a unit, e.g. 10us."),
    network: Optional[str] = typer.Option(None, "--network", help="Fidelity: analytic | flow | packet"),
    topology: Optional[str] = typer.Option(None, "--topology", help="star | leaf-spine"),
    oversubscription: Optional[float] = typer.Option(None, "--oversubscription", help="Leaf-spine oversubscription ratio."),
    in_network: Optional[str] = typer.Option(None, "--in-network", help="In-network mechanisms (see simulate --help)."),
    transport: Optional[str] = typer.Option(
        None, "--transport", help="Packet level: newreno | dctcp (needs --ecn-threshold)"),
    queue_limit: Optional[str] = typer.Option(
        None, "--queue-limit", help="Packet level: drop-tail limit per band (per port with queue_scope = port), in packets (1000) or bytes with a unit (256KB)."),
    ecn_threshold: Optional[int] = typer.Option(
        None, "--ecn-threshold", help="Packet level: ECN marking threshold K in packets (DCTCP; 65 is usual at 10 Gbit/s)."),
    rto_min: Optional[str] = typer.Option(None, "--rto-min", help="Packet level: minimum TCP retransmission timeout, e.g. 200ms."),
    bands: Optional[int] = typer.Option(None, "--bands", help="Packet level: strict-priority bands per port, 1-8."),
    queue_sample: Optional[str] = typer.Option(
        None, "--queue-sample", help="Packet level: sample queue occupancy at this period (e.g. 100us) into queues.parquet."),
    background: Optional[list[str]] = typer.Option(
        None, "--background", help="A background tenant (repeatable), e.g. websearch:load=0.3 (see simulate --help, docs/tenants.md)."),
    hosts: Optional[int] = typer.Option(
        None, "--hosts", help="Hosts in the fabric, at least those the ranks use; the others only run background tenants."),
    barrier: Optional[bool] = typer.Option(None, "--barrier/--no-barrier", help="Global barrier between iterations."),
    iterations: Optional[int] = typer.Option(None, "--iterations", "-i", help="Training iterations to simulate."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Random seed (sampled rank times, transient stragglers)."),
    collective_model: Optional[str] = typer.Option(
        None, "--collective-model", help="steps | closed-form (one event per collective; needs --network analytic)"),
    straggler: Optional[list[str]] = _STRAGGLER_OPTION,
    transient_straggler: Optional[list[str]] = _TRANSIENT_STRAGGLER_OPTION,
    rank_times: Optional[str] = _RANK_TIMES_OPTION,
    overheads: Optional[bool] = typer.Option(
        None, "--overheads/--no-overheads", help="A capture: add its measured framework gaps and optimizer step to the "
        "layer times, and a PS capture's server and worker per-request costs and its RPC transport while training "
        "(default on for captures; docs/validation.md)."),
    wire: Optional[str] = typer.Option(
        None, "--wire", help="Headers the link rate pays per MSS-sized TCP segment: tbf (default for a shaped capture: "
        "1448/1514) | ethernet (1460/1538) | none."),
    idle_curve: Optional[Path] = typer.Option(
        None, "--idle-curve", help="A DDP capture: scale each iteration's compute by this idle curve (a "
        "benchmarks/idle_wake.py --out CSV) at the replay's wait before it over the capture's, in place of the "
        "curve the capture measured (docs/validation.md, compute after a wait)."),
    message_times: Optional[str] = typer.Option(
        None, "--message-times", help="A PS capture at its own link: measured (default: each replayed iteration takes "
        "the transport times of one counted captured iteration, message for message) | mean (every message the fitted "
        "latency) (docs/validation.md)."),
    scaling: Optional[str] = typer.Option(
        None, "--scaling", help="Replay at each of these worker counts, e.g. 4,64,1024, and print how the iteration time and "
        "its spread grow (with --rank-times sampled: the slowest rank's draw)."),
    trace_detail: Optional[str] = typer.Option(None, "--trace-detail", help="auto | step | collective"),
    job: Optional[list[str]] = typer.Option(
        None, "--job", help="A log of several jobs: replay only the job of this name (repeatable), on the same fabric "
        "without the others (docs/jobs.md)."),
    job_stagger: Optional[str] = typer.Option(
        None, "--job-stagger", help="A log of several jobs: job k starts k x this later than recorded, e.g. 10ms."),
    out_dir: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the replay's event log, trace, tables and timeline here."),
    as_json: bool = typer.Option(False, "--json", help="Print a machine-readable summary only."),
    max_memory: Optional[str] = typer.Option(None, "--max-memory", help="Refuse runs estimated to need more memory than this."),
    force: bool = typer.Option(False, "--force", help="Run even when the cost estimate is over budget."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Replay a recorded run: its model and measured layer times, communication simulated again under the given strategy and network."""
    from ..analyze.breakdown import iteration_arrays, iteration_mean
    from ..api import simulate as run_simulation
    from ..simulation.replay import replay_plan
    from ..trace.parquet import read_event_log

    overrides = {
        "workers": workers, "strategy": strategy, "servers": servers, "algorithm": algorithm, "grouping": grouping,
        "stream_policy": stream_policy, "bandwidth": bandwidth, "latency": latency, "network": network, "topology": topology,
        "oversubscription": oversubscription, "in_network": in_network, "barrier": barrier, "iterations": iterations, "trace_detail": trace_detail,
        "hosts": hosts, "background": _background_overrides(background),
        "seed": seed, "collective_model": collective_model, "rank_times": rank_times,
        "overheads": overheads, "wire": wire, "job_stagger": job_stagger, "idle_curve": idle_curve,
        "message_times": message_times,
        "straggler": _straggler_overrides(straggler, transient_straggler),
        **_packet_overrides(transport, queue_limit, ecn_threshold, rto_min, bands, queue_sample),
    }
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if scaling is not None:
        if job:
            raise DdlsimError("--scaling replays a log of one job at other worker counts; leave out --job")
        return _replay_scaling(events, scaling, model, overrides, as_json, out_dir)
    scenario, notes = replay_plan(events, model=model, jobs=job, **overrides)  # checks the log and the overrides first

    def run():
        from ..simulation.replay import attach_recorded

        result = run_simulation(scenario)
        result.notes[:0] = notes  # what the replay took from the log and what it assumed
        attach_recorded(result, events)  # several jobs: each job's recorded time beside its replayed one
        return result

    if scenario.job:  # a log of several jobs: the jobs report, each job's recorded time in it
        _simulate_and_report(run, iterations=iterations, out_dir=out_dir, as_json=as_json, max_memory=max_memory,
                             force=force, quiet=quiet)
        return
    log = read_event_log(events)
    recorded = iteration_mean(iteration_arrays(log), log.metadata)  # capture and analyze's definition
    _simulate_and_report(run, iterations=iterations, out_dir=out_dir, as_json=as_json, max_memory=max_memory, force=force,
                         quiet=quiet, recorded=(str(events), recorded["mean_s"], recorded["definition"]))


def _replay_scaling(events: Path, scaling: str, model: Optional[str], overrides: dict, as_json: bool, out_dir: Optional[Path]) -> None:
    """ddlsim replay --scaling: one replay per worker count, a table (or --json) of the iteration time and its spread."""
    from ..option_lists import comma_list, whole_number

    counts = comma_list(scaling, "--scaling", whole_number, example="4,64,1024", what="worker counts")
    if min(counts) < 1:
        raise DdlsimError(f"--scaling {scaling!r}: a count of {min(counts)}; worker counts are at least 1, e.g. --scaling 4,64,1024")
    if "workers" in overrides or out_dir is not None:
        raise DdlsimError("--scaling sets the worker counts and writes no log: drop --workers/--out, or drop --scaling")
    from ..simulation.replay import replay_plan, replay_scaling

    replay_plan(events, model=model, **overrides)  # checks the log and the overrides first
    rows = replay_scaling(events, counts, model=model, **overrides)
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    from rich.table import Table

    table = Table(title=f"replay of {events} at scale (rank times: {rows[0]['rank_times']})")
    for name in ("workers", "iteration mean ms", "sd ms", "min ms", "max ms", "compute part ms", "expected max ms", "median step ms"):
        table.add_column(name, justify="right")
    for r in rows:
        expected = "-" if r["expected_compute_max_s"] is None else f"{r['expected_compute_max_s'] * 1e3:.3f}"
        table.add_row(str(r["workers"]), f"{r['iteration_mean_s'] * 1e3:.3f}", f"{r['iteration_std_s'] * 1e3:.3f}",
                      f"{r['iteration_min_s'] * 1e3:.3f}", f"{r['iteration_max_s'] * 1e3:.3f}", f"{r['compute_mean_s'] * 1e3:.3f}", expected,
                      f"{r['median_step_s'] * 1e3:.3f}")
    out.print(table)


@app.command()
def models(layers: Optional[str] = typer.Option(None, "--layers", help="Show the layer table of this model.")) -> None:
    """List the model zoo: parameter tensors, parameters, size, FLOPs."""
    from rich.table import Table

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
    fmt: str = typer.Option(..., "--format", "-f", help="chrome | sketchdlc | csv | chakra | kineto"),
    out_path: Path = typer.Option(..., "--out", "-o", help="Output file (chrome, csv), directory (sketchdlc, kineto) "
                                  "or prefix (chakra: <prefix>.<rank>.et)."),
) -> None:
    """Convert an event log: Perfetto/Chrome JSON, SketchDLC, CSV, Chakra or Kineto (same as `convert --to`)."""
    from ..interop import convert as convert_trace

    if fmt.strip().lower() == "events":
        raise DdlsimError("--format events: the input is already an event log; use `ddlsim convert` to copy it")
    notes: list[str] = []
    written = convert_trace(events, out_path, from_format="events", to_format=fmt, notes=notes, option="--out")
    out.print(f"wrote {out_path}" + (f" ({len(written)} files)" if len(written) > 1 else ""))
    for note in notes:  # the Perfetto trace's size bound, as simulate applies it
        err.print(f"warning: {note}", highlight=False, markup=False)


@app.command()
def convert(
    source: Path = typer.Argument(..., help="Input: events.parquet, a SketchDLC / Kineto directory, a Chakra prefix or "
                                  ".et file, a Kineto .json, a netop trace."),
    target: Path = typer.Argument(..., help="Output: .parquet, .json (Chrome), .csv, <prefix>.et (Chakra), or a "
                                  "directory (with --to sketchdlc or kineto)."),
    from_format: Optional[str] = typer.Option(None, "--from", help="events | sketchdlc | chakra | kineto | netop "
                                              "(default: from the name)"),
    to_format: Optional[str] = typer.Option(None, "--to", help="events | sketchdlc | chakra | kineto | chrome | csv "
                                            "(default: from the name)"),
    expand: bool = typer.Option(False, "--expand", help="A log of rank classes (closed form): write one row per rank."),
) -> None:
    """Convert between trace formats (see docs/interop.md): event log, SketchDLC, Chakra, Kineto, Chrome, CSV, netop."""
    from ..interop import convert as convert_trace

    notes: list[str] = []
    written = convert_trace(source, target, from_format=from_format, to_format=to_format, notes=notes, expand=expand)
    out.print(f"wrote {target}" + (f" ({len(written)} files)" if len(written) > 1 else ""))
    for note in notes:  # the Perfetto trace's size bound, as simulate applies it
        err.print(f"warning: {note}", highlight=False, markup=False)


@app.command()
def analyze(
    events: Path = typer.Argument(..., help="An event log (events.parquet) or a directory of SketchDLC traces (w0.txt, s0.txt...)."),
    compare: Optional[Path] = typer.Option(None, "--compare", help="A second event log to compare with."),
    report: Optional[Path] = typer.Option(None, "--report", help="Write the self-contained HTML report here."),
    out_dir: Optional[Path] = typer.Option(None, "--out", "-o", help="Write CSV tables, PNG figures and report.html here."),
    t_window: str = typer.Option("1ms", "--t-window", help="Window for concurrent connections per PS."),
    switch_memory: str = typer.Option("10MB", "--switch-memory", help="Switch memory for the in-network offload estimate."),
    as_json: bool = typer.Option(False, "--json", help="Print the headline numbers as JSON only."),
    table_format: str = typer.Option("both", "--format", help="Tables under --out: csv | parquet | both (figures: PNG and SVG)."),
    stream: Optional[bool] = typer.Option(
        None, "--stream/--in-memory", help="Read the Parquet log by row groups in bounded memory (default: above 2 M rows)."),
    iteration: Optional[int] = typer.Option(
        None, "--iteration", help="Streamed: the iteration the row-level analyses (critical path, RPCs...) read; default the last."),
    warmup: str = typer.Option("0s", "--warmup", help="Flow completion times: leave out flows starting in this first part of the run."),
    cooldown: str = typer.Option("0s", "--cooldown", help="Flow completion times: leave out flows starting in this last part of the run."),
) -> None:
    """Analyze an event log: iterations, critical path, SketchDLC overheads, RPC latency, collectives, flow completion times."""
    from ..units import parse_duration_ns, parse_size_bytes
    from .analyze_command import run_analyze

    try:
        window_ns, memory = parse_duration_ns(t_window), parse_size_bytes(switch_memory)
    except ValueError as exc:
        raise DdlsimError(f"--t-window / --switch-memory: {exc}") from None
    if window_ns <= 0:
        raise DdlsimError("--t-window must be longer than 0")
    try:
        fct_window = (parse_duration_ns(warmup), parse_duration_ns(cooldown))
    except ValueError as exc:
        raise DdlsimError(f"--warmup / --cooldown: {exc}") from None
    if min(fct_window) < 0:
        raise DdlsimError(f"--warmup / --cooldown must be 0 or longer, got {warmup} and {cooldown}")
    run_analyze(events, compare_path=compare, report=report, out_dir=out_dir, as_json=as_json,
                t_window_ns=window_ns, switch_memory_bytes=memory, console=real_console(out), table_format=table_format,
                stream=stream, iteration=iteration, fct_window=fct_window)


@app.command()
def demo(out_dir: Path = typer.Option(Path("ddlsim-out"), "--out", "-o", help="Where to write the outputs.")) -> None:
    """Ring all-reduce vs parameter server for ResNet-50 on 8 workers at 10 Gbit/s."""
    from .demo import run_demo

    run_demo(out_dir, real_console(out))


@app.command()
def fit(
    tables: list[Path] = typer.Argument(..., help="All-reduce microbenchmark tables: osu_allreduce output or CSV size,time[,workers]."),
    workers: Optional[list[int]] = typer.Option(
        None, "--workers", "-n", help="Worker count of tables that give none (OSU output): once for all tables or once per table."),
    algorithm: str = typer.Option("ring", "--algorithm", help="All-reduce algorithm, to turn a and b into alpha and beta (Table II): "
                                  "ring | halving-doubling | recursive-doubling | binary-tree"),
    gamma: float = typer.Option(0.0, "--gamma", help="Reduction time per byte in ns (Table II's gamma): given, not fitted; the fit takes its share out of b "
    "before solving for beta, and `ddlsim plan --cost-model` charges it in the simulated all-reduces (strategy.gamma_ns_per_byte)."),
    time_unit: str = typer.Option("us", "--time-unit", help="Unit of a CSV time column without one in its name: ns | us | ms | s"),
    min_size: str = typer.Option("0", "--min-size", help="Fit only messages of at least this size (e.g. 64KiB)."),
    out_path: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the cost model as JSON (for `ddlsim plan --cost-model`)."),
    as_json: bool = typer.Option(False, "--json", help="Print the cost model as JSON only."),
) -> None:
    """Fit the all-reduce cost a + b·M (per worker count) and alpha, beta to microbenchmark times."""
    from rich.table import Table

    from ..plan.cost import fit_tables
    from ..units import parse_size_bytes

    try:
        min_bytes = parse_size_bytes(min_size)
    except ValueError as exc:
        raise DdlsimError(f"--min-size: {exc}") from None
    if out_path is not None:
        from ..safe_io import check_file_target

        check_file_target(out_path, inputs=tables, example="cost.json")
    model = fit_tables(tables, workers or [], algorithm, gamma, time_unit.strip().lower(), min_bytes)
    if out_path is not None:
        model.save(out_path)
    if as_json:
        sys.stdout.write(json.dumps(model.to_dict(), indent=2) + "\n")
        return
    table = Table(title=f"all-reduce cost T(M) = a + b·M, {model.algorithm} (MG-WFBP Table II)", title_justify="left")
    for col in ("workers", "points", "sizes", "a (us)", "b (ns/B)", "alpha (us)", "beta → bandwidth", "R²", "max rel. error"):
        table.add_column(col, justify="right")
    for f in model.fits:
        alpha = f"{f.alpha_ns / 1e3:.3f}" if f.workers >= 2 else "-"
        bw = f"{8 / f.beta_ns_per_byte:.3f} Gbit/s" if f.workers >= 2 and f.beta_ns_per_byte > 0 else "-"
        table.add_row(str(f.workers), str(f.points), f"{f.min_size_bytes:,}–{f.max_size_bytes:,} B", f"{f.a_ns / 1e3:.3f}",
                      f"{f.b_ns_per_byte:.6g}", alpha, bw, f"{f.r2:.6f}", f"{f.max_relative_error:.2%}")
    out.print(table)
    out.print(f"alpha = {model.alpha_ns / 1e3:.3f} us, beta = {model.beta_ns_per_byte:.6g} ns/B "
              f"({8 / model.beta_ns_per_byte:.3f} Gbit/s), gamma = {model.gamma_ns_per_byte:g} ns/B"
              + (" (least squares over every worker count)" if len([f for f in model.fits if f.workers >= 2]) > 1 else ""))
    if out_path is not None:
        out.print(f"wrote {out_path}")


@app.command()
def plan(
    scenario: Optional[Path] = typer.Argument(None, help="Scenario TOML file; flags override its values."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Zoo model (see `ddlsim models`), or 'synthetic'."),
    profile: Optional[Path] = typer.Option(None, "--profile", help="Measured layer times: CSV layer,fwd_ms,bwd_ms, or an event log (.parquet) whose per-layer compute rows give them."),
    workers: Optional[int] = typer.Option(None, "--workers", "-n", help="Number of workers."),
    bandwidth: Optional[str] = typer.Option(None, "--bandwidth", "-b", help="Host link bandwidth with a unit, e.g. 10Gbps."),
    latency: Optional[str] = typer.Option(None, "--latency", help="Host-to-host latency with a unit, e.g. 10us."),
    algorithm: Optional[str] = typer.Option(None, "--algorithm", help=f"All-reduce algorithm: {_ALGORITHMS}"),
    cost_model: Optional[Path] = typer.Option(
        None, "--cost-model", help="Cost model JSON (`ddlsim fit --out`): sets alpha, beta and the algorithm instead of "
        "--bandwidth/--latency/--algorithm."),
    network: Optional[str] = typer.Option(None, "--network", help="Fidelity: analytic | flow | packet"),
    transport: Optional[str] = typer.Option(
        None, "--transport", help="Packet level: newreno | dctcp (needs --ecn-threshold)"),
    queue_limit: Optional[str] = typer.Option(
        None, "--queue-limit", help="Packet level: drop-tail limit per band (per port with queue_scope = port), in packets (1000) or bytes with a unit (256KB)."),
    ecn_threshold: Optional[int] = typer.Option(
        None, "--ecn-threshold", help="Packet level: ECN marking threshold K in packets (DCTCP; 65 is usual at 10 Gbit/s)."),
    rto_min: Optional[str] = typer.Option(None, "--rto-min", help="Packet level: minimum TCP retransmission timeout, e.g. 200ms."),
    bands: Optional[int] = typer.Option(None, "--bands", help="Packet level: strict-priority bands per port, 1-8."),
    queue_sample: Optional[str] = typer.Option(
        None, "--queue-sample", help="Packet level: sample queue occupancy at this period (e.g. 100us) into queues.parquet."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Per-worker batch size."),
    device: Optional[str] = _DEVICE_OPTION,
    iterations: Optional[int] = typer.Option(
        None, "--iterations", "-i", help="Iterations per simulation (default: 1 when the barrier is on and there is no jitter)."),
    barrier: Optional[bool] = typer.Option(
        None, "--barrier/--no-barrier", help="Global barrier between iterations (priority schedules such as P3 need it off)."),
    bucket_caps: str = typer.Option("1,5,10,25,50,100", "--bucket-caps", help="DDP bucket_cap_mb values to sweep."),
    slice_sizes: str = typer.Option(
        "1MiB,4MiB,16MiB", "--slice-sizes", help="P3 slice sizes to sweep (ring; 'none' for no P3 sweep)."),
    credits: str = typer.Option(
        "16MB", "--credits", help="ByteScheduler credits to sweep, e.g. 4MB,16MB,64MB ('none' for no ByteScheduler sweep)."),
    partition: str = typer.Option("4MB", "--partition", help="ByteScheduler partition size for the credit sweep."),
    out_path: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the plan as JSON here."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON only."),
    apply_dir: Optional[Path] = typer.Option(
        None, "--apply", help="Capture the DDP job (default buckets), plan from it, capture again with the plan, and "
        "report measured against predicted gain; writes before/, after/, plan.json and apply.json in this new directory."),
    capture_iterations: int = typer.Option(6, "--capture-iterations", help="With --apply: iterations of each capture."),
    repeats: Optional[int] = typer.Option(
        None, "--repeats", help="With --apply: before/after capture pairs (default 3), their order alternated (before-K/, "
        "after-K/ for K >= 2); the measured gain is of the means over the pairs, printed with each pair's gain, the "
        "spread and a sign test."),
    plan_entry: str = typer.Option("best", "--plan-entry", help="With --apply: best | ddp | mg_wfbp (see capture ddp --plan)."),
    before: Optional[str] = typer.Option(
        None, "--before", help="With --apply and --after: your own script's captures without the plan (comma-separated "
        "directories); nothing is captured, apply.json compares them with --after."),
    after: Optional[str] = typer.Option(
        None, "--after", help="With --apply and --before: your own script's captures that ran the plan "
        "(attach(..., plan=ddlsim.capture.plan_for(model, 'plan.json'))), pair k with the k-th --before."),
    job_groupings: str = typer.Option(
        "plan", "--job-groupings", help="Several jobs ([[job]]): plan (each job's fastest plan) or keep (each job's own)."),
    offset_grid: Optional[str] = typer.Option(None, "--offset-grid", help="Several jobs: grid of the offset search, e.g. 100us."),
    offset_method: str = typer.Option("auto", "--offset-method", help="Several jobs: auto | exact | affinity."),
    seed: int = typer.Option(0, "--offset-seed", help="Several jobs: seed of the offset search's random restarts."),
) -> None:
    """Plan gradient synchronisation: MG-WFBP merge plan and best DDP bucket size, verified by simulation.
    A scenario with [[job]] tables gets per-job groupings and start offsets (docs/planning.md)."""
    if repeats is not None and apply_dir is None:
        raise DdlsimError("--repeats counts the before/after capture pairs of --apply: give --apply DIR, or leave it out")
    if before is not None or after is not None:
        if apply_dir is None or before is None or after is None:
            raise DdlsimError("--before and --after compare your own captures with and without a plan: give both, "
                              "with --apply DIR for the report")
        given = [name for name, value in (("a scenario", scenario), ("--model", model), ("--profile", profile),
                                          ("--workers", workers), ("--bandwidth", bandwidth), ("--latency", latency),
                                          ("--batch-size", batch_size), ("--repeats", repeats), ("--out", out_path),
                                          ("--cost-model", cost_model)) if value is not None]
        if given:
            raise DdlsimError(f"--before/--after take the job and the plan from the captures: leave out {', '.join(given)}")
        _plan_measured(apply_dir, before, after, as_json)
        return
    if apply_dir is not None:
        if scenario is not None or profile is not None or cost_model is not None or out_path is not None:
            raise DdlsimError("--apply measures its own profile and writes its own plan: leave out the scenario, "
                              "--profile, --cost-model and --out")
        _plan_apply(apply_dir, model=model or "resnet18", workers=2 if workers is None else workers, bandwidth=bandwidth,
                    batch_size=8 if batch_size is None else batch_size, iterations=capture_iterations, entry=plan_entry, as_json=as_json,
                    repeats=repeats, plan_options={"latency": latency, "network": network, "algorithm": algorithm})
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from ..plan.cost import CostModel
    from ..plan.planner import make_plan

    if cost_model is not None and (bandwidth or latency or algorithm):
        raise DdlsimError("--cost-model sets alpha, beta and the algorithm; leave out --bandwidth, --latency and --algorithm")
    from ..option_lists import comma_list, number
    from ..units import parse_size_bytes

    caps = comma_list(bucket_caps, "--bucket-caps", number, example="1,5,10,25", what="bucket caps in MB")

    def sizes(option: str, text: str) -> list[int]:
        if text.strip().lower() == "none":
            return []
        return comma_list(text, option, parse_size_bytes, example="1MiB,4MiB", what="sizes")

    slices = sizes("--slice-sizes", slice_sizes)
    credit_sizes = sizes("--credits", credits)
    partition_sizes = sizes("--partition", partition)
    if len(partition_sizes) != 1:
        raise DdlsimError(f"--partition {partition!r}: give one size, e.g. 4MB")
    cm = CostModel.load(cost_model) if cost_model is not None else None
    from ..plan.jobs_plan import has_jobs

    if scenario is not None and has_jobs(scenario):  # several jobs on one fabric
        from .plan_jobs_command import plan_several_jobs

        if cm is not None or profile is not None or model is not None:
            raise DdlsimError("--model, --profile and --cost-model plan one job; give each [[job]] its model and the network in the scenario")
        plan_several_jobs(scenario, overrides={
            "workers": workers, "bandwidth": bandwidth, "latency": latency, "network": network, "iterations": iterations,
            "barrier": barrier, **_packet_overrides(transport, queue_limit, ecn_threshold, rto_min, bands, queue_sample)},
            groupings=job_groupings, grid=offset_grid, method=offset_method, seed=seed,
            bucket_caps=caps, out_path=out_path, as_json=as_json)
        return
    if out_path is not None:
        from ..safe_io import check_file_target

        check_file_target(out_path, inputs=[scenario, profile, cost_model], example="plan.json")  # before the simulations
    overrides = {
        "model": model, "profile": str(profile.resolve()) if profile else None, "workers": workers,
        "bandwidth": bandwidth, "latency": latency, "algorithm": algorithm, "network": network,
        "batch_size": batch_size, "device": device, "iterations": iterations, "barrier": barrier,
        **_packet_overrides(transport, queue_limit, ecn_threshold, rto_min, bands, queue_sample),
    }
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=real_console(err), transient=True, disable=not err.is_terminal or as_json)
    with bar:
        task = bar.add_task("simulating", total=None)

        def progress(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, description=f"simulating {label}")

        result = make_plan(scenario, cost_model=cm, bucket_caps_mb=caps, slice_bytes=slices, credit_bytes=credit_sizes,
                           partition_bytes=partition_sizes[0], progress=progress,
                           **{k: v for k, v in overrides.items() if v is not None})
    data = result.to_dict()
    if out_path is not None:
        result.save(out_path)
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    from ..units import format_bandwidth

    sc = result.scenario
    table = Table(title=f"{result.model.display_name} · {sc.workers} workers · {sc.strategy.algorithm} all-reduce · "
                  f"{format_bandwidth(sc.network.bandwidth_bps)}, {sc.network.latency_ns / 1e3:g} us · simulated",
                  title_justify="left")
    for col in ("plan", "groups", "iteration (ms)", "vs WFBP", "vs SyncEASGD", "vs DDP 25 MB"):
        table.add_column(col, justify="left" if col == "plan" else "right")
    rows = [("WFBP (per tensor)", result.wfbp), ("SyncEASGD", result.synceasgd), ("DDP 25 MB (default)", result.ddp_default)]
    rows += [(f"DDP {c.bucket_cap_mb:g} MB" + (" [best]" if c is result.best_ddp else ""), c) for c in result.ddp_sweep
             if c.groups != result.ddp_default.groups or c is result.best_ddp]
    rows.append(("MG-WFBP", result.mg_wfbp))
    if result.captured is not None:  # planned from a DDP capture: the job as captured (ddlsim replay's time)
        rows.insert(3, (result.captured.label, result.captured))
    rows += [(c.label + (" [best]" if c is result.best_p3 else ""), c) for c in result.p3_sweep]
    rows += [(c.label + (" [best]" if c is result.best_bytescheduler else ""), c) for c in result.bytescheduler_sweep]
    for label, c in rows:
        s = result.speedups(c)
        style = "bold" if any(c is best for best in (result.mg_wfbp, result.best_ddp, result.best_p3, result.best_bytescheduler)) else None
        table.add_row(label, str(len(c.groups)), f"{c.iteration_time_s * 1e3:.2f}", f"{s['wfbp']:.3f}x",
                      f"{s['synceasgd']:.3f}x", f"{s['ddp_default']:.3f}x", style=style)
    out.print(table)
    sizes = [g["bytes"] for g in result.mg_wfbp.groups]
    out.print(f"MG-WFBP plan: {len(sizes)} all-reduces of {', '.join(f'{b / 1e6:.2f}' for b in sizes[:12])}"
              f"{' …' if len(sizes) > 12 else ''} MB (first layer first); T_ar(M) = {result.cost.a / 1e3:.2f} us + "
              f"{result.cost.b:.4g} ns/B · M; planner's own estimate {result.mg_wfbp_estimate_s * 1e3:.2f} ms")
    if result.best_p3 is not None:
        out.print(f"best P3: {result.best_p3.label} (per-tensor all-reduces, lowest layer first, preempted between slices)")
    if result.best_bytescheduler is not None:
        out.print(f"best ByteScheduler: {result.best_bytescheduler.label} (lowest layer first, several partitions in flight)")
    out.print(f"best DDP: bucket_cap_mb={result.best_ddp.bucket_cap_mb:g} ({len(result.best_ddp.groups)} buckets); "
              f"{result.simulations} simulations in {result.wall_s:.2f} s")
    if out_path is not None:
        out.print(f"wrote {out_path}")
    for note in result.notes:
        out.print(f"[yellow]note:[/] {note}")


def _plan_apply(apply_dir: Path, *, model: str, workers: int, bandwidth: Optional[str], batch_size: int, iterations: int,
                entry: str, as_json: bool, repeats: Optional[int], plan_options: dict) -> None:
    """`ddlsim plan --apply`: see :mod:`ddlsim.plan.apply`."""
    import importlib.util

    from ..capture.ddp_plan import ENTRIES
    from ..plan.apply import DEFAULT_REPEATS, apply_plan

    if importlib.util.find_spec("torch") is None:
        raise DdlsimError("ddlsim plan --apply runs the DDP job and needs PyTorch, which is not installed; "
                          "pip install ddlsim[capture]")
    if entry not in ENTRIES:
        raise DdlsimError(f"--plan-entry {entry!r}: choose one of {', '.join(ENTRIES)}")
    from ..safe_io import check_directory_target

    check_directory_target(apply_dir, option="--apply")
    repeats = DEFAULT_REPEATS if repeats is None else repeats
    if repeats < 1:
        raise DdlsimError(f"--repeats {repeats}: give the number of before/after capture pairs, 1 or more")
    report = apply_plan(apply_dir, model=model, workers=workers, iterations=iterations, batch_size=batch_size,
                        bandwidth=bandwidth, entry=entry, plan_options=plan_options, repeats=repeats,
                        on_step=lambda text: err.print(text, highlight=False))
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
        return
    _print_plan_report(report, alternating=True)
    out.print(f"wrote {apply_dir / 'apply.json'}, {apply_dir / 'apply.png'}, {apply_dir / 'plan.json'} and the captures "
              f"{', '.join(str(apply_dir / name) for name in report['order'])}", highlight=False)


def _plan_measured(apply_dir: Path, before: str, after: str, as_json: bool) -> None:
    """`ddlsim plan --apply DIR --before ... --after ...`: see :func:`ddlsim.plan.apply.measure_plan`."""
    from ..plan.apply import measure_plan

    report = measure_plan(apply_dir, before=before, after=after)
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
        return
    _print_plan_report(report, alternating=report["alternated"])
    if report.get("order_note"):
        out.print(f"[yellow]caveat:[/] {report['order_note']}")
    out.print(f"wrote {apply_dir / 'apply.json'}, {apply_dir / 'apply.png'}", highlight=False)


def _print_plan_report(report: dict, alternating: bool) -> None:
    """A plan's report (apply.json) as `plan --apply` prints it: the job, predicted, the caveat, measured."""
    p = report["predicted"]
    out.print(f"{report['model']}, {report['workers']} workers, {report['bandwidth'] or 'unshaped'}: plan entry "
              f"{report['entry']} ({report['path']}; {report['after']['all_reduces']} all-reduces per iteration, "
              f"before {report['before']['all_reduces']})", highlight=False)
    out.print(f"predicted: {p['before_s'] * 1e3:.1f} -> {p['after_s'] * 1e3:.1f} ms per iteration ({-p['gain']:+.1%}; "
              f"before = {report.get('predicted_before_from', 'ddlsim replay of the before capture')})", highlight=False)
    if report.get("shared_cores"):
        out.print(f"[yellow]caveat:[/] {report['shared_cores']['note']}")
    _print_measured(report, report["repeats"], alternating)


def _print_measured(report: dict, repeats: int, alternating: bool) -> None:
    """The measured lines of a plan's report (apply.json): the two sides' means, the pairs (`alternating`: captured
    in alternating order) and the sign test."""
    m, b, a = report["measured"], report["before"], report["after"]
    if repeats == 1:
        how = a["definition"]
    else:
        how = (f"mean of {repeats} pairs{' in alternating order' if alternating else ''}, each capture's {a['definition']}; per pair "
               + ", ".join(f"{-g:+.1%}" for g in m["pair_gains"])
               + f"; spread of the captures' means: before {b['spread_pct']:.0f} %, after {a['spread_pct']:.0f} %")
    out.print(f"measured:  {m['before_s'] * 1e3:.1f} -> {m['after_s'] * 1e3:.1f} ms per iteration ({-m['gain']:+.1%}; "
              f"{how})", highlight=False)
    if repeats > 1:
        faster, slower, p_value = m["pairs_faster"], m["pairs_slower"], m["sign_test_p"]
        verdict = (f"the plan made the job {'faster' if faster > slower else 'slower'} (sign test p = {p_value:.3g})"
                   if p_value < 0.05 else
                   f"not resolved at this noise (sign test p = {p_value:.2g}; 6 pairs or more can resolve p < 0.05)")
        out.print(f"pairs: the plan faster in {faster} of {len(m['pair_gains'])}, slower in {slower}: {verdict}",
                  highlight=False)


@app.command()
def validate(
    out_dir: Path = typer.Option(..., "--out", "-o", help="A new or empty directory for the captures, CSVs, plots and HTML."),
    captures: Optional[Path] = typer.Option(
        None, "--captures", help="Take the captures under this directory (DIR/*/events.parquet) instead of capturing."),
    quick: bool = typer.Option(False, "--quick", help="DDP and PS LeNet-5, unshaped, 1 repeat, 4 iterations (under a minute)."),
    jobs: Optional[str] = typer.Option(None, "--jobs", help="Comma-separated: ddp,ps (default both)."),
    models: Optional[str] = typer.Option(None, "--models", help="Comma-separated: lenet5,resnet18 (PS: lenet5 only)."),
    links: Optional[str] = typer.Option(
        None, "--links", help="Comma-separated: unshaped and/or rates, e.g. unshaped,1Gbps,100Mbps (the default; rates need root)."),
    repeats: int = typer.Option(3, "--repeats", help="Captures per case (mean and spread)."),
    iterations: int = typer.Option(5, "--iterations", "-i", help="Training iterations per capture (the first is a warm-up)."),
    workers: Optional[int] = typer.Option(
        None, "--workers", "-n", help="Worker ranks per capture (default: 4 where the machine has a core for each "
        "process, a PS server's too, and one to spare; else 2; --quick: 2)."),
    idle_curve: Optional[Path] = typer.Option(
        None, "--idle-curve", help="Replay the DDP captures with this idle curve (a benchmarks/idle_wake.py --out CSV) "
        "in place of their own (docs/validation.md, compute after a wait)."),
    no_idle_curve: bool = typer.Option(
        False, "--no-idle-curve", help="Replay the DDP captures without compute after a wait (as before it was simulated)."),
    measure_idle_curve: bool = typer.Option(
        False, "--measure-idle-curve", help="The DDP captures measure their ranks' idle curve after training "
        "(ddlsim capture ddp --idle-curve; a few seconds each)."),
    message_times: Optional[str] = typer.Option(
        None, "--message-times", help="Replay the PS captures' messages with their measured times (default) or "
        "their mean (as before 2026-11-27, 19:40 UTC)."),
) -> None:
    """Replay against capture over a grid of real runs (DDP and PS, links, models, repeats): self- and cross-prediction, CSV, plots, HTML."""
    import importlib.util
    import shlex

    from ..validation import format_cases, format_operations, validate as run_validation
    from .progress import Interrupted

    if captures is None and importlib.util.find_spec("torch") is None:
        raise DdlsimError("ddlsim validate captures real jobs and needs PyTorch, which is not installed; "
                          "pip install ddlsim[capture], or give existing captures with --captures")
    from ..option_lists import comma_list
    from ..validation import link_label

    def split(text: Optional[str], option: str, example: str, same=None) -> Optional[list[str]]:
        return None if text is None else comma_list(text, option, example=example, what=option[2:], same=same)

    try:
        tables = run_validation(out_dir, captures=captures, quick=quick, jobs=split(jobs, "--jobs", "ddp,ps"),
                                models=split(models, "--models", "lenet5,resnet18"),
                                links=split(links, "--links", "unshaped,1Gbps", same=link_label), repeats=repeats, iterations=iterations, workers=workers,
                                idle_curve=False if no_idle_curve else idle_curve, measure_idle_curve=measure_idle_curve,
                                message_times=message_times,
                                command="ddlsim " + shlex.join(sys.argv[1:] if sys.argv[1:2] == ["validate"] else ["validate"]),
                                progress=lambda text: err.print(text, highlight=False))
    except Interrupted:
        if (out_dir / "captures").is_dir():
            err.print(f"the captures completed so far are kept in {out_dir / 'captures'} (reuse: --captures)",
                      highlight=False)
        raise
    out.print(format_cases(tables["cases"]), highlight=False, soft_wrap=True)
    out.print("\nper operation (self-prediction), ms per rank and iteration (a replayed forward or backward holds the "
              "framework gap before it, the first forward the optimizer step):", highlight=False, soft_wrap=True)
    out.print(format_operations(tables["operations"]), highlight=False, soft_wrap=True)
    out.print(f"wrote {out_dir}/cases.csv, runs.csv, iterations.csv, operations.csv, validation.png, errors.png, index.html",
              highlight=False)


from .reproduce_command import reproduce_app  # noqa: E402  (registered after the top-level commands)

app.add_typer(reproduce_app, name="reproduce")

from .capture_command import capture_app  # noqa: E402

app.add_typer(capture_app, name="capture")

from .sweep_command import register as _register_sweep  # noqa: E402

_register_sweep(app)


def main() -> None:
    from .progress import CAPTURE_GRACE_MS, GRACE_MS, Interrupted, install_signal_handlers

    from ..safe_io import GuardedStream

    words = [a for a in sys.argv[1:] if not a.startswith("-")]
    install_signal_handlers(CAPTURE_GRACE_MS if words[:1] in (["capture"], ["validate"]) else GRACE_MS)
    real_stdout = sys.stdout
    sys.stdout = guard = GuardedStream(real_stdout)  # a failed write to it becomes one line (_stdout_failed)
    try:
        try:
            _refuse_empty_arguments(sys.argv[1:])
            _run_app()
        except SystemExit as exc:
            if not isinstance(exc, Interrupted):
                sys.stdout.flush()  # a full or closed standard output shows here at the latest, not at the interpreter's exit
            raise
    except Interrupted as exc:
        from ..safe_io import remove_leftover_scratch

        # Unwinding ran the clean-ups; one that the signal itself cut short left its scratch directory
        # registered: remove those too. Then skip the interpreter's slow teardown of large frames.
        remove_leftover_scratch()
        err.print("interrupted" if exc.code == 130 else "terminated", "(partial outputs removed)", highlight=False)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exc.code)
    except DdlsimError as exc:
        from ..errors import ScenarioError
        from ..simulation.scenario import OverrideError, one_line

        text = str(exc)
        flags = _flags(words) if isinstance(exc, OverrideError) and exc.origin == "arguments" else None
        if flags:
            text = exc.naming(flags)  # the flags given, not the scenario fields they set
        elif isinstance(exc, ScenarioError):
            text = one_line(text)  # a scenario file's problems: one line, not one a problem
        # escaped: a message's own brackets ([sweep], pip install 'ddlsim[sweep]') are text, not markup
        err.print(f"[bold red]error:[/] {_escape_markup(text)}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except OSError as exc:
        _stdout_failed(exc, guard)
        # Any other failed system call on a path the user gave (a name too long for the file system,
        # a permission): one line naming the path and the reason, status 2.
        where = exc.filename if exc.filename is not None else "a file ddlsim needs"
        where = str(where) if len(str(where)) <= 80 else str(where)[:77] + "..."
        err.print(f"[bold red]error:[/] {where}: {exc.strerror or exc}; check the path", highlight=False,
                  soft_wrap=True, markup=True)
        sys.exit(2)
    finally:
        sys.stdout = real_stdout


def _refuse_empty_arguments(argv: list[str]) -> None:
    """An empty value (`-o ''`, `--out=`, `--set ''`) is a one-line error before anything runs: no option or
    argument of ddlsim takes one, and an empty path would silently be the current directory."""
    for i, arg in enumerate(argv):
        if arg == "--":
            return
        if arg.startswith("--") and arg.endswith("=") and len(arg) > 3:
            option = arg[:-1]
        elif arg == "":
            option = argv[i - 1] if i and argv[i - 1].startswith("-") and "=" not in argv[i - 1] else ""
        else:
            continue
        what = f"{option} ''" if option else "an argument ''"
        path = option in ("", "-o", "--out")  # an output or input path: say how to name the current directory
        raise DdlsimError(f"{what}: empty; give a value" + (" (for the current directory, write .)" if path else ""))


def _run_app() -> None:
    """The app, with click's usage errors (an unknown option, a value of the wrong type, a missing argument)
    as one line naming the option and where the help is, status 2, like every other bad input; its
    four-line usage block is for `--help`. A command name alone (`ddlsim`, `ddlsim capture`) shows its help."""
    # click's exceptions, wherever this typer takes click from (its own copy since typer 0.22, click before)
    exceptions = sys.modules[typer.BadParameter.__module__]
    no_args_is_help = getattr(exceptions, "NoArgsIsHelpError", ())  # click >= 8.2

    try:
        code = app(standalone_mode=False)
    except no_args_is_help as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except exceptions.ClickException as exc:
        text = " ".join(exc.format_message().split()).rstrip(".")
        context = getattr(exc, "ctx", None)
        where = f"; see {context.command_path} --help" if context is not None else ""
        err.print(f"[bold red]error:[/] {_escape_markup(text)}{where}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except typer.Abort:  # end of input at a prompt
        err.print("aborted", highlight=False)
        sys.exit(1)
    if isinstance(code, int) and not isinstance(code, bool) and code:
        sys.exit(code)  # typer.Exit(code) from a command


# Overrides set by a flag of another name than theirs.
_FLAG_OF_KEY = {"rank_classes": "--per-rank", "tenant": "--background", "queue_limit_unit": "--queue-limit",
                "straggler": "--straggler / --transient-straggler"}


def _flags(words: list[str]) -> Optional[dict[str, str]]:
    """Override key -> the flag of the command `words` ran that sets it (its parameter's name -> its first long
    option); None where the words name no command."""
    command = typer.main.get_command(app)
    for word in words:  # down the groups (`capture ps`) to the command
        if word not in getattr(command, "commands", {}):
            break
        command = command.commands[word]
    if hasattr(command, "commands"):
        return None
    flags = {p.name: next((o for o in p.opts if o.startswith("--")), p.opts[0]) for p in command.params if p.opts}
    return {**flags, **_FLAG_OF_KEY}


def _escape_markup(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _stdout_failed(exc: OSError, guard) -> None:
    """A failed write to standard output (`ddlsim models > /dev/full`): one line on stderr, status 2."""
    from ..safe_io import silence_stdout, stdout_failure

    message = stdout_failure(exc, guard)
    if message is None:
        return
    sys.stdout = guard._stream
    silence_stdout()
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    sys.exit(2)


if __name__ == "__main__":
    main()
