"""The quick-start demo: ring all-reduce vs a parameter server for
ResNet-50 on 8 workers at 10 Gbit/s (flow-level star network)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from ..output import staged_directory, write_result_files
from ..analyze.plot import breakdown_figure, save_figure
from ..analyze.analysis import Analysis
from .analyze_command import analyze_to_directory
from .report import print_summaries
from ..api import simulate

DEMO_SCENARIOS = {
    "ring all-reduce": dict(strategy="ring"),
    "PS, 1 server": dict(strategy="ps", servers=1),
    "PS, 8 servers": dict(strategy="ps", servers=8),
}


def run_demo(out_dir: Path, console: Console) -> dict[str, dict]:
    from ..safe_io import check_directory_target

    check_directory_target(out_dir)  # refused before the simulations, not after them
    base = dict(model="resnet50", workers=8, bandwidth="10Gbps", latency="10us", iterations=3)
    results = {}
    with console.status("simulating…"):
        for label, extra in DEMO_SCENARIOS.items():
            results[label] = simulate(**base, **extra)
    summaries = {label: r.summary() for label, r in results.items()}
    print_summaries(summaries, "ResNet-50 · 8 workers · V100 fp32, batch 32 · 10 Gbit/s, 10 us · flow-level star", console)
    with staged_directory(out_dir) as stage:
        for label, result in results.items():
            slug = label.lower().replace(",", "").replace(" ", "-").replace("-all-reduce", "")
            names = {
                "events": f"{slug}.events.parquet",
                "chrome_trace": f"{slug}.trace.json",
                "iterations": f"{slug}.iterations.csv",
                "summary": f"{slug}.summary.json",
                "timeline": f"{slug}.timeline.png",
            }
            write_result_files(result, stage, names)
        save_figure(breakdown_figure(summaries, "ResNet-50, 8 workers, 10 Gbit/s"), stage / "breakdown.png")
        with console.status("analyzing…"):
            # the runs analysed as any log would be (`ddlsim analyze`): the PS run against ring all-reduce,
            # and the ring run on its own (collectives)
            ps = Analysis(results["PS, 1 server"].events, name="PS, 1 server")
            ring = Analysis(results["ring all-reduce"].events, name="ring all-reduce")
            analyze_to_directory(ps, stage, compare=ring, write_tables=False, report_name="report.html")
            analyze_to_directory(ring, stage, write_tables=False, report_name="ring.report.html")
    console.print(f"wrote event logs (Parquet), Perfetto traces (open in ui.perfetto.dev), timelines and breakdown.png to {out_dir}/")
    console.print(f"analysis report (PS, 1 server vs ring all-reduce; open in a browser): {Path(out_dir) / 'report.html'} "
                  f"(ring on its own: {Path(out_dir) / 'ring.report.html'})")
    return summaries
