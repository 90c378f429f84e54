"""Terminal tables (rich)."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

_TIMES = ("iteration_time_s", "compute_s", "communication_s", "overlap_s", "exposed_communication_s", "idle_s")
_TIME_HEADERS = ("iter", "compute", "comm", "overlap", "exposed", "idle")


def _columns(summaries: dict[str, dict]) -> list[tuple[str, str, float]]:
    """(header, summary key, scale); units chosen so that values stay narrow."""
    longest = max((s[k] for s in summaries.values() for k in _TIMES), default=0.0)
    time_unit, time_scale = ("ms", 1e3) if longest < 100 else ("s", 1.0)
    rate = max((s["throughput_samples_per_s"] for s in summaries.values()), default=0.0)
    rate_unit, rate_scale = ("/s", 1.0) if rate < 1e6 else ("k/s", 1e-3)
    sent = max((s["bytes_sent_per_worker_per_iteration"] for s in summaries.values()), default=0.0)
    size_unit, size_scale = ("MB", 1e-6) if sent < 1e11 else ("GB", 1e-9)
    return [(f"{h}\n{time_unit}", k, time_scale) for h, k in zip(_TIME_HEADERS, _TIMES)] + [
        (f"samples\n{rate_unit}", "throughput_samples_per_s", rate_scale),
        (f"{size_unit} sent\n/wkr/it", "bytes_sent_per_worker_per_iteration", size_scale),
    ]


def _number(x: float) -> str:
    """Three significant digits or more, never more than 9 characters wide for sane values."""
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    ax = abs(x)
    if ax >= 99.95 or ax == 0:
        return f"{x:,.0f}"
    if ax >= 9.995:
        return f"{x:.1f}"
    if ax >= 0.9995:
        return f"{x:.2f}"
    return f"{x:.3g}"


def summary_table(summaries: dict[str, dict], title: str = "ddlsim") -> Table:
    """One row per scenario; fits an 80-column terminal: numbers are never
    cut (their columns do not wrap), only the scenario label wraps."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0, 0, 1))
    table.add_column("scenario", min_width=min(12, max([8] + [len(label) for label in summaries])))
    columns = _columns(summaries)
    rows = [[_number(s[key] * scale) for _, key, scale in columns] for s in summaries.values()]
    for index, (header, _, _) in enumerate(columns):
        width = max([len(r[index]) for r in rows] + [max(len(h) for h in header.split("\n"))])
        table.add_column(header, justify="right", no_wrap=True, min_width=width)
    for label, cells in zip(summaries, rows):
        table.add_row(label, *cells)
    return table


def print_summaries(summaries: dict[str, dict], title: str, console: Console | None = None) -> None:
    (console or Console()).print(summary_table(summaries, title))


# Ports shown in the terminal at packet fidelity (those with the most drops and marks first); all are in summary.json.
PORT_ROWS = 16


def port_table(packet: dict, limit: int = PORT_ROWS) -> tuple[Table, str]:
    """Packet fidelity: drops and ECN marks per port (egress of a directed
    link), the busiest in drops and marks first, and a line of network-wide
    counters."""
    rows = sorted(packet.get("ports") or [], key=lambda r: (-int(r.get("drops", 0)), -int(r.get("ecn_marks", 0)),
                                                             -int(r.get("packets", 0)), int(r.get("port", 0))))
    table = Table(title="ports (packet level)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0, 0, 1))
    table.add_column("port")
    for header in ("packets", "drops", "ECN marks", "peak queue\npackets"):
        table.add_column(header, justify="right", no_wrap=True)
    for r in rows[:limit]:
        table.add_row(str(r.get("name", r.get("port", ""))), f"{int(r.get('packets', 0)):,}", f"{int(r.get('drops', 0)):,}",
                      f"{int(r.get('ecn_marks', 0)):,}", f"{int(r.get('max_packets', 0)):,}")
    c = packet.get("counters") or {}
    line = (f"{int(c.get('packets_forwarded', 0)):,} packets forwarded, {int(c.get('drops', 0)):,} dropped, "
            f"{int(c.get('ecn_marks', 0)):,} ECN-marked, {int(c.get('retransmits', 0)):,} retransmitted, "
            f"{int(c.get('timeouts', 0)):,} timeouts")
    if len(rows) > limit:
        line += f"; {len(rows) - limit:,} more ports in summary.json (--out) or --json"
    if c.get("queues_truncated"):
        line += "; the queues table stopped at network.packet.queue_sample_cap rows"
    return table, line


# Contended links shown in the terminal for a run of several jobs (the most shared first); all are in summary.json.
CONTENTION_ROWS = 12


def jobs_table(summary: dict) -> Table:
    """Several jobs on one fabric: per job its placement, start, mean iteration time with the other jobs and
    alone (same placement and fabric), the slowdown and how many links it shares with another job."""
    table = Table(title="jobs on one fabric", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0, 0, 1))
    for header in ("job", "model", "workers", "hosts", "start", "iteration\nwith others", "iteration\nalone", "slowdown",
                   "shared\nlinks"):
        table.add_column(header, justify="left" if header in ("job", "model", "hosts") else "right", no_wrap=True)
    for j in summary["jobs"]:
        hosts = j["hosts"]
        shown = ",".join(str(h) for h in hosts[:6]) + (f",... ({len(hosts)})" if len(hosts) > 6 else "")
        alone = j["alone_iteration_time_s"]
        table.add_row(str(j["name"]), str(j["model"]), str(j["workers"]), shown, f"{j['start_ns'] / 1e6:.3f} ms",
                      f"{j['iteration_time_s'] * 1e3:.3f} ms", "-" if alone is None else f"{alone * 1e3:.3f} ms",
                      "-" if j["slowdown"] is None else f"{j['slowdown']:.3f}x", str(len(j["contended_links"])))
    return table


def contention_table(summary: dict, limit: int = CONTENTION_ROWS) -> tuple[Table, str]:
    """The links flows of two or more jobs crossed, the longest shared first: each owner's bytes and busy time."""
    names = {j["job"]: j["name"] for j in summary["jobs"]}
    rows = sorted(summary.get("contention") or [], key=lambda r: (-int(r["shared_ns"]), int(r["link"])))
    table = Table(title="links shared by jobs", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0, 0, 1))
    for header in ("link", "shared", "owner", "MB", "busy"):
        table.add_column(header, justify="left" if header in ("link", "owner") else "right", no_wrap=True)
    for r in rows[:limit]:
        for k, u in enumerate(r["uses"]):
            owner = names.get(u["id"], f"job{u['id']}") if u["owner"] == "job" else f"tenant {u['id']}"
            table.add_row(r["name"] if k == 0 else "", f"{r['shared_ns'] / 1e6:.3f} ms" if k == 0 else "", owner,
                          f"{u['bytes'] / 1e6:.3f}", f"{u['busy_ns'] / 1e6:.3f} ms")
    line = f"{len(rows)} link(s) carried flows of two or more jobs" if rows else "no link carried flows of two jobs"
    if len(rows) > limit:
        line += f"; {len(rows) - limit} more in summary.json (--out) or --json"
    return table, line


def print_jobs(summary: dict, console: Console, quiet: bool = False) -> None:
    """The terminal report of a run of several jobs: the jobs table, the shared links and the outputs."""
    console.print(jobs_table(summary))
    table, line = contention_table(summary)
    if summary.get("contention"):
        console.print(table)
    console.print(line)
    if not quiet:
        console.print(f"{summary['events']:,} events, {summary['log_rows']:,} log rows, engine {summary['wall_s']:.3f} s")
        for key, path in (summary.get("outputs") or {}).items():
            console.print(f"  {key:13s} {path}")
