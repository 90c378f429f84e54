"""`ddlsim analyze`: the analyses of :class:`ddlsim.analyze.Analysis` as
tables (CSV and / or Parquet), figures (PNG and SVG), headline numbers (text
or JSON) and one self-contained HTML report (figures embedded as base64 PNG,
every string that comes from the trace escaped). Large Parquet logs are
analysed streamed (:mod:`ddlsim.analyze.streaming`)."""

from __future__ import annotations

import base64
import html
import io
import json
import math
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from ..analyze.analysis import Analysis

DEFAULT_SWITCH_MEMORY = 10_000_000  # bytes: "tens of megabytes" of switch memory (RPC paper section 4)
TABLE_FORMATS = {"csv": ("csv",), "parquet": ("parquet",), "both": ("csv", "parquet")}
FIGURE_FORMATS = ("png", "svg")


def tables(analysis: Analysis, t_window_ns: int, switch_memory_bytes: int,
           fct_window: tuple[int, int] = (0, 0)) -> dict[str, pd.DataFrame]:
    """Every table of the analysis, by file stem. ``fct_window``: (warm-up,
    cool-down) ns of the flow-completion-time window."""
    makers: dict[str, Callable[[], pd.DataFrame]] = {
        "iterations": analysis.iterations,
        "critical_path": analysis.critical_path,
        "critical_path_summary": analysis.critical_path_summary,
        "sketchdlc_overheads": analysis.sketchdlc_overheads,
        "sketchdlc_overhead_samples": analysis.overhead_samples,
        "message_sizes_per_key": lambda: analysis.message_sizes("key"),
        "message_volume_per_iteration": lambda: analysis.message_sizes("iteration"),
        "message_volume_per_node": lambda: analysis.message_sizes("node"),
        "rpc_latency": analysis.rpc_latency,
        "rpc_shares": analysis.rpc_shares,
        "rpc_intervals": analysis.rpc_intervals,
        "concurrent_connections": lambda: analysis.concurrent_connections(t_window_ns),
        "hot_keys": analysis.hot_keys,
        "offload_estimate": lambda: analysis.offload_estimate(switch_memory_bytes),
        "collectives": analysis.collectives,
        "collectives_by_group": analysis.collectives_by_group,
        "queue_occupancy": analysis.queue_occupancy,
        "fct_flows": analysis.flow_completion,
        "fct_summary": lambda: analysis.fct_summary(*fct_window),
        "jobs": analysis.jobs,
        "job_contention": analysis.job_contention,
    }
    return {name: make() for name, make in makers.items()}


def figures(analysis: Analysis, t_window_ns: int, compare_table: pd.DataFrame | None,
            formats: tuple[str, ...] = ("png",), fct_window: tuple[int, int] = (0, 0)) -> dict[str, dict[str, bytes]]:
    """Per figure the log has something for: its bytes in each format
    (``{"iterations": {"png": b"...", "svg": b"..."}}``)."""
    from ..analyze import figures as f

    makers = {
        "iterations": lambda: f.iterations_figure(analysis),
        "critical_path": lambda: f.critical_path_figure(analysis),
        "sketchdlc_overheads": lambda: f.overheads_figure(analysis),
        "rpc_latency": lambda: f.rpc_figure(analysis),
        "connections": lambda: f.connections_figure(analysis, t_window_ns),
        "hot_keys": lambda: f.hot_keys_figure(analysis),
        "collectives": lambda: f.collectives_figure(analysis),
        "queues": lambda: f.queues_figure(analysis),
        "fct_cdf": lambda: f.fct_figure(analysis, *fct_window),
        "fct_slowdown": lambda: f.slowdown_figure(analysis, *fct_window),
        "jobs_timeline": lambda: _jobs_timeline(analysis),
    }
    if compare_table is not None:
        makers["compare"] = lambda: f.compare_figure(compare_table)
    out = {}
    import matplotlib
    import matplotlib.pyplot as plt

    for name, make in makers.items():
        fig = make()
        if fig is None:
            continue
        out[name] = {}
        for kind in formats:
            buffer = io.BytesIO()
            # SVG without a date and with fixed element ids, so the same log gives the same file
            with matplotlib.rc_context({"svg.hashsalt": "ddlsim"}):
                fig.savefig(buffer, format=kind, dpi=100, metadata={"Date": None} if kind == "svg" else None)
            out[name][kind] = buffer.getvalue()
        plt.close(fig)
    return out


def _jobs_timeline(analysis: Analysis):
    """The per-job timeline of a log of several jobs (None otherwise, or for a streamed log)."""
    from ..analyze.jobs import jobs_timeline_figure

    return jobs_timeline_figure(analysis.log) if len(analysis.jobs()) and len(analysis.log) else None


def write_table(frame: pd.DataFrame, stem: Path, formats: tuple[str, ...]) -> list[str]:
    """``frame`` as ``stem.csv`` and / or ``stem.parquet``; the names written.
    Parquet keeps the dtypes (nullable integers, strings); the frame's attrs
    (notes) are not written (they are in headline.json)."""
    plain = frame.copy()
    plain.attrs = {}
    written = []
    if "csv" in formats:
        plain.to_csv(stem.with_suffix(".csv"), index=False)
        written.append(stem.name + ".csv")
    if "parquet" in formats:
        plain.to_parquet(stem.with_suffix(".parquet"), index=False)
        written.append(stem.name + ".parquet")
    return written


# ------------------------------------------------------------------ HTML

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1200px;color:#222;padding:0 1em}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}h3{font-size:1.05em}
table{border-collapse:collapse;font-size:12px;margin:.5em 0 1em}td,th{border:1px solid #ddd;padding:2px 6px;text-align:right}
th{background:#f3f3f3}td.s{text-align:left}img{max-width:100%;border:1px solid #eee}
.note{background:#fff8e1;border-left:4px solid #f0ad4e;padding:.4em .8em;margin:.5em 0}
.tw{overflow-x:auto;max-width:100%}.kv td:first-child{text-align:left;font-weight:600}nav a{margin-right:1em}p.more{color:#666;font-size:12px}
"""


def _fmt(value: Any) -> str:
    if value is None or value is pd.NA:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.4g}"
        return f"{value:,.4f}".rstrip("0").rstrip(".")
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def table_html(frame: pd.DataFrame, max_rows: int = 25) -> str:
    """An HTML table of the first rows; every header and cell escaped."""
    if frame is None or frame.empty:
        return "<p class='more'>(no rows)</p>"
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = []
    for record in frame.head(max_rows).itertuples(index=False):
        cells = []
        for value in record:
            text = html.escape(_fmt(value.item() if hasattr(value, "item") else value))
            cells.append(f"<td class='s'>{text}</td>" if isinstance(value, str) else f"<td>{text}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = f"<p class='more'>first {max_rows} of {len(frame):,} rows; all in the table files (--out)</p>" if len(frame) > max_rows else ""
    return f"<div class='tw'><table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>{more}"


def _figure_html(png: bytes | None, alt: str) -> str:
    if not png:
        return ""
    data = base64.b64encode(png).decode("ascii")
    return f"<p><img alt='{html.escape(alt, quote=True)}' src='data:image/png;base64,{data}'></p>"


def _notes_html(*frames: pd.DataFrame) -> str:
    notes = []
    for frame in frames:
        note = frame.attrs.get("note") if frame is not None else None
        if note and note not in notes:
            notes.append(note)
    return "".join(f"<div class='note'>{html.escape(n)}</div>" for n in notes)


def _flat(value: Any) -> str:
    """A headline value as one readable line."""
    if isinstance(value, dict):
        return ", ".join(f"{k} {_flat(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "; ".join(_flat(v) for v in value)
    return _fmt(value)


def _kv_html(values: dict[str, Any]) -> str:
    rows = []
    for key, value in values.items():
        rows.append(f"<tr><td>{html.escape(str(key))}</td><td class='s'>{html.escape(_flat(value))}</td></tr>")
    return f"<table class='kv'>{''.join(rows)}</table>"


def html_report(analysis: Analysis, data: dict[str, pd.DataFrame], pictures: dict[str, bytes], headline: dict[str, Any],
                compare_table: pd.DataFrame | None = None, t_window_ns: int = 1_000_000,
                switch_memory_bytes: int = DEFAULT_SWITCH_MEMORY) -> str:
    """The report: one HTML document with its figures embedded."""
    e = html.escape
    sections: list[tuple[str, str, str]] = []
    summary = {k: v for k, v in headline.items() if k not in ("notes", "rpc_latency")}
    sections.append(("summary", "Summary", _kv_html(summary)))

    jobs = data.get("jobs")
    if jobs is not None and not jobs.empty:
        body = ("<p>Several jobs on one fabric (docs/jobs.md): each job's iteration time with the others, alone "
                "(same placement and fabric) and the slowdown; the links that carried flows of two or more jobs.</p>"
                + _figure_html(pictures.get("jobs_timeline"), "per-job timeline") + table_html(jobs, 40)
                + "<h3>Links shared by jobs</h3>" + table_html(data["job_contention"], 40))
        sections.append(("jobs", "Jobs", body))

    it = data["iterations"]
    body = (_notes_html(it, data["critical_path"]) + _figure_html(pictures.get("iterations"), "iteration breakdown")
            + "<h3>Per iteration (rank -1: mean over workers)</h3>" + table_html(it[it["rank"] == -1] if "rank" in it else it)
            + "<h3>Per rank</h3>" + table_html(it[it["rank"] >= 0] if "rank" in it else it, 40)
            + "<h3>Critical path (walked back through the recorded deps)</h3>"
            + _figure_html(pictures.get("critical_path"), "critical path")
            + table_html(data["critical_path_summary"])
            + "<p class='more'>every step of every path is in the critical_path table</p>")
    sections.append(("iterations", "Iterations and critical path", body))

    ov = data["sketchdlc_overheads"]
    glob = analysis.sketchdlc_global() if len(ov) else {}
    body = (_notes_html(ov, data["sketchdlc_overhead_samples"])
            + (_kv_html({f"{k} (global mean, us)": v for k, v in glob.items()}) if glob else "")
            + _figure_html(pictures.get("sketchdlc_overheads"), "SketchDLC overheads")
            + "<h3>Per key: min / mean / max (us)</h3>" + table_html(ov, 40)
            + "<h3>Message sizes per key (Tables 6-7)</h3>" + table_html(data["message_sizes_per_key"], 30)
            + "<h3>Data per worker per iteration (Table 5)</h3>" + table_html(data["message_volume_per_iteration"])
            + "<h3>Per node and operation</h3>" + table_html(data["message_volume_per_node"], 40))
    sections.append(("sketchdlc", "SketchDLC overheads", body))

    offload = data["offload_estimate"]
    summary_offload = offload.attrs.get("summary") or {}
    body = (_notes_html(data["rpc_latency"], data["concurrent_connections"])
            + _figure_html(pictures.get("rpc_latency"), "RPC latency")
            + "<h3>Shares of each component</h3>" + table_html(data["rpc_shares"])
            + "<h3>RPCs</h3>" + table_html(data["rpc_latency"], 20)
            + f"<h3>Intervals and concurrent connections (t_window = {t_window_ns / 1e6:g} ms)</h3>"
            + _figure_html(pictures.get("connections"), "connections")
            + "<h3>Hot-parameter skew</h3>" + _figure_html(pictures.get("hot_keys"), "hot keys")
            + table_html(data["hot_keys"], 20)
            + f"<h3>In-network offload estimate (switch memory {switch_memory_bytes:,} bytes)</h3>"
            + (_kv_html(summary_offload) if summary_offload else "") + table_html(offload, 20))
    sections.append(("rpc", "RPC latency dissection", body))

    body = (_notes_html(data["collectives"]) + _figure_html(pictures.get("collectives"), "collectives")
            + "<h3>Per group</h3>" + table_html(data["collectives_by_group"], 30)
            + "<h3>Per instance</h3>" + table_html(data["collectives"], 20))
    sections.append(("collectives", "Collectives", body))

    queues = data.get("queue_occupancy")
    if pictures.get("queues") or (queues is not None and not queues.empty):
        counters = headline.get("packet_network") or {}
        body = ((_kv_html(counters) if counters else "") + _figure_html(pictures.get("queues"), "queue occupancy")
                + "<h3>Per port and band</h3>" + table_html(queues, 40))
        sections.append(("queues", "Network queues (packet level)", body))

    flows = data.get("fct_flows")
    if flows is not None and not flows.empty:
        summary = data["fct_summary"]
        first, last = summary.attrs.get("window_ns", (0, 0))
        tenants = sorted({int(t) for t in flows["tenant"]})
        who = ", ".join("the job (tenant 0)" if t == 0 else f"tenant {t}" for t in tenants)
        body = (_notes_html(flows)
                + f"<p>{len(flows):,} flows of {e(who)}; summarised: those starting in [{first / 1e9:.6g} s, {last / 1e9:.6g} s] "
                  f"(--warmup / --cooldown); FCT in microseconds; slowdown = FCT / the flow's ideal time alone on its path "
                  f"(docs/analysis.md).</p>"
                + _figure_html(pictures.get("fct_cdf"), "FCT CDF")
                + _figure_html(pictures.get("fct_slowdown"), "slowdown against size")
                + "<h3>Per tenant and size class (small &lt; 100 KB, large &gt; 10 MB)</h3>" + table_html(summary, 40))
        fct_compare = data.get("fct_compare")
        if fct_compare is not None and not fct_compare.empty:
            a, b = fct_compare.attrs.get("names", ("a", "b"))
            body += (f"<h3>FCT, a = {e(str(a))} vs b = {e(str(b))} (change = b / a - 1)</h3>"
                     + table_html(fct_compare, 40))
        sections.append(("fct", "Flow completion times", body))

    if compare_table is not None:
        a, b = compare_table.attrs.get("names", ("a", "b"))
        largest = compare_table.attrs.get("largest", [])
        items = "".join(f"<li>{e(x['scope'])} <b>{e(str(x['item']))}</b>: {x['diff_s'] * 1e3:+.3f} ms</li>" for x in largest)
        body = (f"<p>a = <b>{e(str(a))}</b>, b = <b>{e(str(b))}</b>; diff = b - a, seconds per worker and iteration.</p>"
                + (f"<p>Largest contributors:</p><ul>{items}</ul>" if items else "")
                + _figure_html(pictures.get("compare"), "comparison") + table_html(compare_table, 40))
        sections.append(("compare", "Comparison", body))

    notes = headline.get("notes") or []
    if notes:
        sections.append(("notes", "Notes", "".join(f"<div class='note'>{e(n)}</div>" for n in notes)))
    nav = "".join(f"<a href='#{key}'>{e(title)}</a>" for key, title, _ in sections)
    content = "".join(f"<section id='{key}'><h2>{e(title)}</h2>{body}</section>" for key, title, body in sections)
    title = f"ddlsim analysis: {analysis.name}"
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; img-src data:; style-src 'unsafe-inline'\">"
            f"<title>{e(title)}</title><style>{_CSS}</style></head><body>"
            f"<h1>{e(title)}</h1><p class='more'>{headline.get('rows', len(analysis.log)):,} rows · source {e(str(analysis.log.metadata.get('source', '')))}"
            f"</p><nav>{nav}</nav>{content}</body></html>\n")


# ------------------------------------------------------------------ running

def analyze_to_directory(analysis: Analysis, directory: Path, *, compare: Analysis | None = None,
                         t_window_ns: int = 1_000_000, switch_memory_bytes: int = DEFAULT_SWITCH_MEMORY,
                         report_name: str | None = "report.html", write_tables: bool = True,
                         table_format: str = "both", fct_window: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    """Writes the tables (``table_format``: csv, parquet or both), the
    figures (PNG and SVG) and the report into `directory` (a staging
    directory: the caller moves it into place). Returns the headline numbers
    and the names written."""
    if table_format not in TABLE_FORMATS:
        from ..errors import DdlsimError

        raise DdlsimError(f"--format {table_format}: choose one of {', '.join(TABLE_FORMATS)}")
    data = tables(analysis, t_window_ns, switch_memory_bytes, fct_window)
    compare_table = analysis.compare(compare) if compare is not None else None
    if compare_table is not None:
        data["compare"] = compare_table
        fct_compare = _fct_compare(analysis, compare, fct_window)
        if fct_compare is not None:
            data["fct_compare"] = fct_compare
    headline = analysis.headline(t_window_ns, switch_memory_bytes, fct_window)
    if compare_table is not None:
        headline["compare"] = {"with": compare.name, "iteration_time_diff_s": float(
            compare_table.loc[compare_table["item"] == "time", "diff_s"].iloc[0]),
            "largest": compare_table.attrs.get("largest", [])}
    drawn = figures(analysis, t_window_ns, compare_table, FIGURE_FORMATS if write_tables else ("png",), fct_window)
    pictures = {name: kinds["png"] for name, kinds in drawn.items()}
    written = []
    if write_tables:
        for name, frame in data.items():
            if frame is None or frame.empty:
                continue
            written += write_table(frame, directory / name, TABLE_FORMATS[table_format])
        for name, kinds in drawn.items():
            for kind, content in kinds.items():
                (directory / f"{name}.{kind}").write_bytes(content)
                written.append(f"{name}.{kind}")
        (directory / "headline.json").write_text(json.dumps(headline, indent=2) + "\n", encoding="utf-8")
        written.append("headline.json")
    if report_name:
        page = html_report(analysis, data, pictures, headline, compare_table, t_window_ns, switch_memory_bytes)
        (directory / report_name).write_text(page, encoding="utf-8")
        written.append(report_name)
    return {"headline": headline, "files": written}


def _fct_compare(analysis: Analysis, other: Analysis, fct_window: tuple[int, int]) -> pd.DataFrame | None:
    """The FCT summaries of the compared logs side by side (a = `analysis`, b = `other`), when both have flows."""
    from ..analyze.fct import compare_fct

    mine, theirs = analysis.flow_completion(), other.flow_completion()
    if mine.empty or theirs.empty:
        return None
    return compare_fct(mine, theirs, names=(analysis.name, other.name), warmup_ns=fct_window[0], cooldown_ns=fct_window[1])


def run_analyze(log_path: Path, *, compare_path: Path | None, report: Path | None, out_dir: Path | None, as_json: bool,
                t_window_ns: int, switch_memory_bytes: int, console: Any, table_format: str = "both",
                stream: bool | None = None, iteration: int | None = None,
                fct_window: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    """The `ddlsim analyze` command: read, analyse, write (atomically, by the rules of
    :mod:`ddlsim.safe_io`: never over a directory, a device or the logs read), print.
    ``stream``: None streams Parquet logs above ``STREAM_ABOVE_ROWS`` rows.
    ``fct_window``: (warm-up, cool-down) ns of the flow-completion-time window."""
    from ..analyze.streaming import open_analysis
    from ..safe_io import atomic_file, check_directory_target, check_file_target, staged_directory
    from ..trace.parquet import with_side_tables

    if table_format not in TABLE_FORMATS:
        from ..errors import DdlsimError

        raise DdlsimError(f"--format {table_format}: choose one of {', '.join(TABLE_FORMATS)}")
    inputs = with_side_tables(log_path, compare_path)
    # refused before the analysis, not after it
    if out_dir is not None:
        check_directory_target(out_dir)
    if report is not None:
        check_file_target(report, inputs=inputs, option="--report", example="report.html")
    analysis = open_analysis(log_path, stream=stream, iteration=iteration)
    other = open_analysis(compare_path, stream=stream) if compare_path is not None else None
    result: dict[str, Any]
    if out_dir is not None:
        report_inside = report is not None and report.parent.resolve() == Path(out_dir).resolve()
        with staged_directory(out_dir, inputs=inputs) as stage:
            result = analyze_to_directory(analysis, stage, compare=other, t_window_ns=t_window_ns,
                                          switch_memory_bytes=switch_memory_bytes,
                                          report_name=report.name if report_inside else "report.html",
                                          table_format=table_format, fct_window=fct_window)
        result["out"] = str(out_dir)
        if report is not None and not report_inside:
            with atomic_file(report, inputs=inputs, option="--report", make_parent=True) as temporary:
                temporary.write_bytes((Path(out_dir) / "report.html").read_bytes())
    else:
        if report is not None:
            with atomic_file(report, inputs=inputs, option="--report", make_parent=True) as temporary:
                result = analyze_to_directory(analysis, temporary.parent, compare=other, t_window_ns=t_window_ns,
                                              switch_memory_bytes=switch_memory_bytes, report_name=temporary.name,
                                              write_tables=False, fct_window=fct_window)
        else:
            headline = analysis.headline(t_window_ns, switch_memory_bytes, fct_window)
            if other is not None:
                table = analysis.compare(other)
                headline["compare"] = {"with": other.name, "iteration_time_diff_s": float(
                    table.loc[table["item"] == "time", "diff_s"].iloc[0]), "largest": table.attrs.get("largest", [])}
            result = {"headline": headline, "files": []}
    if report is not None:
        result["report"] = str(report)
    if as_json:
        import sys

        sys.stdout.write(json.dumps(result, indent=2, default=str) + "\n")
    else:
        print_headline(result["headline"], console)
        if out_dir is not None:
            tables_written = " and ".join(TABLE_FORMATS[table_format]).replace("csv", "CSV").replace("parquet", "Parquet")
            console.print(f"wrote {len(result['files'])} files ({tables_written} tables, PNG and SVG figures, report.html) "
                          f"to {out_dir}/", highlight=False, markup=False)
        if report is not None:
            console.print(f"report: {report}")
    return result


def print_headline(headline: dict[str, Any], console: Any) -> None:
    """Terminal summary of the headline numbers."""
    from rich.markup import escape

    h = headline

    def ms(x):
        return "-" if x is None else f"{x * 1e3:.3f} ms"

    console.print(f"[bold]{escape(str(h.get('log')))}[/]: {h.get('rows', 0):,} rows, {h.get('workers', 0)} workers, "
                  f"{h.get('servers', 0)} servers, {h.get('iterations', 0)} iterations", highlight=False)
    if "iteration_time_s" in h:
        console.print(f"  iteration {ms(h['iteration_time_s'])}: compute {ms(h['compute_s'])}, communication "
                      f"{ms(h['communication_s'])}, overlap {ms(h['overlap_s'])}, exposed {ms(h['exposed_communication_s'])}, "
                      f"idle {ms(h['idle_s'])}; overlap ratio {h['overlap_ratio']:.1%} ({h['iteration_mean']}"
                      + (f"; the breakdown: mean of the iterations with all-reduce rows, {_short(h['breakdown_iterations'])}"
                         if h.get("breakdown_iterations") else "") + ")", highlight=False)
    if h.get("sketchdlc_overlap_ratio") is not None:
        console.print(f"  SketchDLC overlap ratio (phase 2 / (phase 1 + phase 3)): {h['sketchdlc_overlap_ratio']:.1%}",
                      highlight=False)
    for item in h.get("critical_path_top", [])[:3]:
        console.print(f"  critical path: {item['kind']} {item['op']} {item['name']} {item['share']:.1%} of iteration time",
                      highlight=False, markup=False)
    if h.get("sketchdlc_global_mean_us"):
        parts = ", ".join(f"{k} {v:,.1f} us" for k, v in h["sketchdlc_global_mean_us"].items() if v is not None)
        console.print(f"  SketchDLC overheads (mean over keys): {parts}", highlight=False)
    if "rpc_latency" in h:
        a = h["rpc_latency"].get("all", {})
        shares = ", ".join(f"{k.replace('_share', '')} {v:.1%}" for k, v in a.items() if k.endswith("_share") and v is not None)
        console.print(f"  {h.get('rpcs', 0):,} RPCs, mean {a.get('mean_total_us') or 0:,.1f} us: {shares}", highlight=False)
    if "concurrent_connections" in h:
        c = h["concurrent_connections"]
        console.print(f"  concurrent connections per PS per {c['t_window_ns'] / 1e6:g} ms: mean {c['mean']:.2f}, max {c['max']}",
                      highlight=False)
    if "hot_keys" in h:
        k = h["hot_keys"]
        console.print(f"  top {k['top_10pct_keys']} of {k['keys']} keys take {k['top_10pct_update_share']:.1%} of updates",
                      highlight=False)
    if "offload" in h:
        o = h["offload"]
        console.print(f"  offload to a {o['switch_memory_bytes']:,}-byte switch: {o['keys_offloaded']} keys, "
                      f"{o['operations_removed_share']:.1%} of server operations, {o['bytes_removed_share']:.1%} of bytes",
                      highlight=False)
    if "collectives" in h:
        c = h["collectives"]
        ratio = "" if c.get("busbw_over_link") is None else f" ({c['busbw_over_link']:.1%} of the link)"
        busbw = ("unknown (the collectives take no time, e.g. a generated Chakra file)" if c.get("mean_busbw_Gbps") is None
                 else f"{c['mean_busbw_Gbps']:.2f} Gbit/s{ratio}")
        console.print(f"  {c['instances']:,} collectives, mean {ms(c['mean_time_s'] or 0)}, bus bandwidth {busbw}", highlight=False)
    if "fct" in h:
        window = h["fct"].get("window_ns", [0, 0])
        for tenant, classes in h["fct"].get("tenants", {}).items():
            who = "job" if tenant == "0" else f"tenant {tenant}"
            a = classes.get("all", {})
            parts = ", ".join(f"{k} {v['flows']:,}" for k, v in classes.items() if k != "all")
            mean = "-" if a.get("fct_mean_us") is None else f"{a['fct_mean_us']:,.1f} us"
            p99 = "-" if a.get("fct_p99_us") is None else f"{a['fct_p99_us']:,.1f} us"
            slow = "-" if a.get("slowdown_mean") is None else f"{a['slowdown_mean']:.2f}"
            console.print(f"  FCT {who}: {a.get('flows', 0):,} flows starting in [{window[0] / 1e9:.6g} s, {window[1] / 1e9:.6g} s] "
                          f"({parts}), {a.get('unfinished', 0):,} unfinished; mean {mean}, p99 {p99}, mean slowdown {slow}",
                          highlight=False, markup=False)
    for j in h.get("jobs", []):
        slow = "" if j.get("slowdown") is None else f", alone {ms(j['alone_iteration_time_s'])}, slowdown {j['slowdown']:.3f}x"
        console.print(f"  job {j['job']} ({j['name']}): iteration {ms(j['iteration_time_s'])}{slow}, "
                      f"{j['shared_links']} shared link(s)", highlight=False, markup=False)
    if "compare" in h:
        c = h["compare"]
        console.print(f"  vs {c['with']}: iteration time {c['iteration_time_diff_s'] * 1e3:+.3f} ms", highlight=False,
                      markup=False)
        for x in c["largest"][:3]:
            console.print(f"    {x['scope']} {x['item']}: {x['diff_s'] * 1e3:+.3f} ms", highlight=False, markup=False)
    for note in h.get("notes", []):
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)


def _short(numbers: list) -> str:
    """Iteration numbers as a short list ("1, 4, 7, ..." after eight)."""
    return ", ".join(str(i) for i in numbers[:8]) + (", ..." if len(numbers) > 8 else "")
