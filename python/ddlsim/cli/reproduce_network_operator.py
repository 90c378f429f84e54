"""`ddlsim reproduce network-operator`: the network-operator paper's tables and figures, ddlsim beside the paper."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import DdlsimError
from .consoles import QUIET_HELP


def network_operator(
    out_dir: Path = typer.Option(Path("network-operator-out"), "--out", "-o", help="Where to write the CSV tables and the figures."),
    only: Optional[str] = typer.Option(None, "--only", help="Comma-separated tables/figures, e.g. table1,table4,fig5 (default: all)."),
    quick: bool = typer.Option(False, "--quick", help="A reduced subset (2 models, 8 workers, 2 points per sweep) that runs in seconds."),
    cache: Optional[Path] = typer.Option(None, "--cache", help="Results cache directory (default: $XDG_CACHE_HOME/ddlsim or ~/.cache/ddlsim)."),
    jobs: int = typer.Option(1, "--jobs", "-j", help="Simulations run in parallel (local processes)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Network-operator paper (Chang et al.) Tables 1-4, 6-10 and Figs 3-12: PS, multicast, in-network aggregation, ring, butterfly."""

    from ..reproduce.compare import rich_tables
    from ..reproduce.network_operator import parse_only, reproduce_network_operator
    import sys

    from rich.console import Console

    err = Console(stderr=True)
    out = Console(width=None if sys.stdout.isatty() else 150)
    from .sweep_progress import SweepProgress

    if jobs < 1:
        raise DdlsimError(f"--jobs {jobs}: give at least 1")
    from ..safe_io import check_directory_target

    check_directory_target(out_dir)  # before the simulations, not after them
    selected = parse_only(only)
    with SweepProgress(err, enabled=err.is_terminal and not quiet) as progress:
        result = reproduce_network_operator(only=selected, quick=quick, cache_dir=cache, jobs=jobs, on_progress=progress)
    for table in rich_tables(result):
        out.print(table)
        out.print()
    written = result.save(out_dir)
    s = result.stats
    if not quiet:
        out.print(f"{s.simulated + s.cached} scenarios: {s.simulated} simulated ({s.simulation_wall_s:.1f} s), {s.cached} from the cache "
                  f"{result.cache_dir}")
        out.print(f"wrote {len(written)} files to {out_dir}/ (comparison.txt, *.csv, fig*.png, fig*.svg)")
    for note in result.notes:
        out.print(f"note: {note}", highlight=False)


def register(app: typer.Typer) -> None:
    """Adds `network-operator` to the `reproduce` group."""
    app.command("network-operator")(network_operator)
