"""Where the pushes of PS captures wait at the server, measured against replayed.

For every PS capture (``*/events.parquet``) under a directory (e.g. ``ddlsim validate``'s ``captures/``),
prints from the capture's own rows (counted iterations; :mod:`ddlsim.capture.ps_server_queue`):

* each push's server queue (arrival to its key's update), split into the **barrier** (waiting for the other
  workers' push of the key) and the **serial** wait (the one server thread working through what is ahead);
* the server's update cost fitted from its ``update`` rows, and the update rows' sum per iteration;

and the same from the capture's replay without the serial update (the per-request cost a + b C only: the
replay before it) and with it (``ddlsim replay`` now), with both replayed iteration times beside the measured
one. A Markdown table, one row per capture (docs/validation.md). A second table splits each response's wait in
its worker's receive queue (W_queue) by whether the worker's training loop was idle when the response arrived (it
arrived after the end of the loop's last row before it took it: the loop was blocked waiting for it, so the wait
is its wake-up) or busy (the wait is the queue behind the loop's work; ``ddlsim.capture.ps_client_cost.
response_waits``), measured and in the capture's replay, which simulates the wake-up (``client_cost.wakeup``).

    python benchmarks/ps_push_queue.py ps-grid/captures
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("captures", type=Path, help="a directory of PS captures (each */events.parquet)")
    args = parser.parse_args(argv)
    paths = sorted(args.captures.glob("*/events.parquet")) if args.captures.is_dir() else []
    if not paths:
        print(f"error: {args.captures}: no */events.parquet under it; give a directory of PS captures "
              "(e.g. ddlsim validate's OUT/captures)", file=sys.stderr)
        return 2

    import ddlsim
    from ddlsim.analyze.breakdown import iteration_arrays, iteration_mean
    from ddlsim.capture.ps_server_queue import push_queue_summary, server_update_fit
    from ddlsim.simulation.replay import captured_server_cost
    from ddlsim.trace import read_event_log

    print("| capture | push queue µs | barrier µs (share) | serial µs | replayed serial before | replayed serial now | "
          "update fit | update ms/it measured | before | now | measured ms | replayed ms before | now |")
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for path in paths:
        log = read_event_log(path)
        if log.metadata.get("job") != "ps":
            continue
        measured, fit = push_queue_summary(log), server_update_fit(log)
        if measured is None or fit is None:
            print(f"| {path.parent.name} | no push or update rows in its counted iterations |")
            continue
        cost = captured_server_cost(log.metadata) or (0, 0)
        before = ddlsim.replay(path, server_cost={"a": f"{cost[0]}ns", "b": f"{cost[1]}ns"})
        now = ddlsim.replay(path)
        b, n = push_queue_summary(before.events), push_queue_summary(now.events)
        mean_ms = iteration_mean(iteration_arrays(log), log.metadata)["mean_s"] * 1e3
        print(f"| {path.parent.name} | {measured['queue_ns'] / 1e3:,.0f} | {measured['barrier_ns'] / 1e3:,.0f} "
              f"({measured['barrier_share'] * 100:.0f} %) | {measured['serial_ns'] / 1e3:,.0f} | {b['serial_ns'] / 1e3:,.0f} | "
              f"{n['serial_ns'] / 1e3:,.0f} | {fit['update_ns'] / 1e3:.0f} µs + {fit['update_ns_per_byte']:.2f} ns/B | "
              f"{measured['update_busy_ns'] / 1e6:.2f} | {b['update_busy_ns'] / 1e6:.3f} | {n['update_busy_ns'] / 1e6:.2f} | "
              f"{mean_ms:.1f} | {before.iteration_time_s * 1e3:.1f} | {now.iteration_time_s * 1e3:.1f} |")
    print()
    print("| capture | push responses: W_queue µs when the loop was idle (n) | busy (n) | pull responses: idle (n) | "
          "busy (n) | wake-up fit µs (median) | replayed idle W_queue µs (n) | measured ms | replayed ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    from ddlsim.capture.ps_client_cost import wakeup_fit

    for path in paths:
        log = read_event_log(path)
        if log.metadata.get("job") != "ps":
            continue
        fit, replayed = wakeup_fit(log), ddlsim.replay(path)
        again = response_waits(replayed.events, log.metadata)
        mean_ms = iteration_mean(iteration_arrays(log), log.metadata)["mean_s"] * 1e3
        idle = [w for w in again if w[1]]
        print(f"| {path.parent.name} | " + " | ".join(f"{mean / 1e3:,.0f} ({n})" for mean, n in response_wait_means(log))
              + (f" | {fit['wakeup_ns'] / 1e3:,.0f} ({fit['wakeup_median_ns'] / 1e3:,.0f})" if fit else " | none")
              + f" | {sum(w[0] for w in idle) / max(1, len(idle)) / 1e3:,.0f} ({len(idle)})"
              + f" | {mean_ms:.1f} | {replayed.iteration_time_s * 1e3:.1f} |")
    return 0


def response_waits(log, metadata=None) -> list[tuple[float, bool, str]]:
    """(W_queue ns, idle, kind) of the counted iterations' handled responses
    (:func:`ddlsim.capture.ps_client_cost.response_waits`)."""
    import numpy as np

    from ddlsim.analyze.breakdown import warmup_iterations
    from ddlsim.capture.ps_client_cost import response_waits as waits

    role, iteration = np.asarray(log.column("role")), np.asarray(log.column("iteration"))
    iterations = np.unique(iteration[(role == "worker") & (iteration >= 0)])
    counted = set(int(i) for i in iterations[warmup_iterations(metadata or log.metadata, len(iterations)):])
    rows = waits(log)
    return [(float(r["wait_ns"]), bool(r["idle"]), r["kind"]) for r in rows if r["iteration"] in counted]


def response_wait_means(log) -> list[tuple[float, int]]:
    """(mean W_queue ns, responses) of the counted iterations' push responses that reached an idle worker loop,
    of those that reached a busy one, then the same for pull responses."""
    import numpy as np

    rows = response_waits(log)
    out = []
    for kind in ("push_response", "pull_response"):
        for idle in (True, False):
            w = [wait for wait, i, k in rows if k == kind and i == idle]
            out.append((float(np.mean(w)) if w else float("nan"), len(w)))
    return out


if __name__ == "__main__":
    sys.exit(main())
