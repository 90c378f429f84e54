"""`ddlsim reproduce thesis` and `ddlsim reproduce mg-wfbp`: the training
papers' figures regenerated, printed with the papers' values beside ours and
written as CSV tables and PNG + SVG figures.

reproduce_command.py calls :func:`register` on its `reproduce_app` (this
module does not import that one, so the two form no import circle).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import typer

from .consoles import QUIET_HELP as _QUIET_HELP, err, out, real_console

_OUT_HELP = "Directory for the CSV tables and PNG/SVG figures (written all or nothing)."
_QUICK_HELP = "A small subset (a few node counts and bandwidths) that runs in seconds."

# Tables printed to the terminal (the others are written only: per-run rows, timelines, paper sources), each with
# the columns that name a row; a table wider than WIDE columns is printed transposed (one column per row).
PRINTED = {
    "thesis": (("table4_1", ("parameter",)), ("fig4_7", ("workers", "bandwidth_gbps")), ("fig4_8_11_summary", ("figure",))),
    "mg-wfbp": (("fig9", ("model", "nodes")), ("costmodel_fit", ("workers",))),
}
WIDE = 11


def _cell(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value:  # NaN: the paper gives no number here
            return "-"
        return f"{value:.5g}" if abs(value) < 1e5 else f"{value:,.0f}"
    return str(value)


def print_table(name: str, frame, keys: tuple[str, ...], console) -> None:
    """One table (a `paper_X` column stands right after our `X`); transposed when wide."""
    from rich.table import Table

    if len(frame.columns) > WIDE:
        table = Table(title=name, title_justify="left", header_style="bold")
        table.add_column(" / ".join(keys), justify="left", no_wrap=True, min_width=max(len(str(c)) for c in frame.columns))
        for row in frame.itertuples(index=False):
            table.add_column(" ".join(_cell(getattr(row, k)) for k in keys), justify="right")
        for column in frame.columns:
            if column not in keys:
                table.add_row(column, *(_cell(v) for v in frame[column]), style="cyan" if column.startswith("paper_") else None)
        console.print(table)
        return
    table = Table(title=name, title_justify="left", header_style="bold")
    for column in frame.columns:
        table.add_column(column.replace("_", " "), justify="right", style="cyan" if column.startswith("paper_") else None)
    for row in frame.itertuples(index=False):
        table.add_row(*(_cell(v) for v in row))
    console.print(table)


def _run(paper: str, reproduce: Callable, out_dir: Path, quick: bool, quiet: bool) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..reproduce.training_common import write_reproduction
    from ..safe_io import check_directory_target

    check_directory_target(out_dir)  # before minutes of simulation, not after
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=real_console(err), transient=True, disable=quiet or not err.is_terminal)
    with bar:
        task = bar.add_task("simulating", total=None)

        def progress(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, description=label)

        rep = reproduce(quick=quick, progress=progress)
        bar.update(task, description="writing tables and figures")
        paths = write_reproduction(rep, out_dir)
    out.print(f"[bold]{rep.title}[/] with ddlsim{' (--quick subset)' if quick else ''}; paper values in the paper_* columns "
              "('-': the paper gives no number)", highlight=False)
    for name, keys in PRINTED[paper]:
        print_table(name, rep.tables[name], keys, out)
    for note in rep.notes:
        out.print(f"note: {note}", highlight=False)
    if not quiet:
        out.print(f"wrote {len(paths)} files (CSV tables, PNG and SVG figures) to {out_dir}/", highlight=False)


def thesis(
    out_dir: Path = typer.Option(Path("reproduce-thesis"), "--out", "-o", help=_OUT_HELP),
    quick: bool = typer.Option(False, "--quick", help=_QUICK_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=_QUIET_HELP),
) -> None:
    """Friendlier-DDNN thesis Figs 4.7-4.11: FIFO vs priority queue, barrier on/off, 1-100 Gbit/s, 2-16 workers.

    Fig. 4.7 (iteration time against bandwidth) and the timelines of Figs 4.8-4.11 (§4.6)."""
    from ..reproduce.thesis import reproduce

    _run("thesis", reproduce, out_dir, quick, quiet)


def mg_wfbp(
    out_dir: Path = typer.Option(Path("reproduce-mg-wfbp"), "--out", "-o", help=_OUT_HELP),
    quick: bool = typer.Option(False, "--quick", help=_QUICK_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=_QUIET_HELP),
) -> None:
    """MG-WFBP (ICDCS'19) Figure 9 and its cost-model fit: WFBP vs SyncEASGD vs MG-WFBP on 4-64 K80 nodes, 10GbE."""
    from ..reproduce.mg_wfbp import reproduce

    _run("mg-wfbp", reproduce, out_dir, quick, quiet)


def register(app: typer.Typer) -> None:
    """Adds `thesis` and `mg-wfbp` to the `reproduce` group."""
    app.command("thesis")(thesis)
    app.command("mg-wfbp")(mg_wfbp)
