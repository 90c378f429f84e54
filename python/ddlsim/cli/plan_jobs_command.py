"""`ddlsim plan SCENARIO` when the scenario has [[job]] tables: per-job
groupings and CASSINI-style start offsets (ddlsim.plan.jobs_plan)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

from ..errors import DdlsimError
from .consoles import err, out


def plan_several_jobs(scenario: Path, *, overrides: dict[str, Any], groupings: str, grid: Optional[str],
                      method: str, seed: int, bucket_caps: Optional[list[float]], out_path: Optional[Path],
                      as_json: bool) -> None:
    from rich.table import Table

    from ..plan.jobs_plan import make_jobs_plan
    from ..units import parse_duration_ns

    grid_ns = None
    if grid is not None:
        try:
            grid_ns = parse_duration_ns(grid)
        except ValueError as exc:
            raise DdlsimError(f"--offset-grid {grid!r}: {exc}; give a duration such as 100us") from None
        if grid_ns <= 0:
            raise DdlsimError(f"--offset-grid {grid!r}: the grid step must be > 0, e.g. 100us")
    if out_path is not None:
        from ..safe_io import check_file_target

        check_file_target(out_path, inputs=[scenario], example="plan.json")  # before the simulations

    def progress(what: str) -> None:
        if err.is_terminal and not as_json:
            err.print(f"[dim]{what}…[/]")

    result = make_jobs_plan(scenario, groupings=groupings, grid_ns=grid_ns, method=method, seed=seed,
                            bucket_caps_mb=bucket_caps, progress=progress, **overrides)
    data = result.to_dict()
    if out_path is not None:
        result.save(out_path)
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    off = data["offsets"]
    table = Table(title=f"{len(result.names)} jobs · offsets on a {off['grid_ns'] / 1e3:g} us grid ({off['method']}) · "
                  "iteration (ms): alone / together without / with offsets", title_justify="left")
    for col in ("job", "grouping", "start (ms)", "alone", "without", "with", "slowdown without", "with",
                "gain", "predicted gain"):
        table.add_column(col, justify="left" if col in ("job", "grouping") else "right")
    for row in data["jobs"]:
        m, p = row["measured"], row["predicted"]
        g = row["grouping"]
        label = g.get("label") or (g["grouping"]["kind"] if isinstance(g.get("grouping"), dict) else str(g.get("grouping")))
        table.add_row(row["name"], label, f"{row['start_ns'] / 1e6:.3f}", f"{row['alone_iteration_time_s'] * 1e3:.2f}",
                      f"{m['without']['iteration_time_s'] * 1e3:.2f}", f"{m['with']['iteration_time_s'] * 1e3:.2f}",
                      f"{m['without']['slowdown']:.3f}", f"{m['with']['slowdown']:.3f}", f"{m['gain']:.3f}x",
                      f"{p['gain']:.3f}x")
    out.print(table)
    before, after = off["before"], off["after"]
    out.print(f"shared links: {len(off['shared_links'])}; overlap summed over them {before['excess_ns'] / 1e6:.3f} -> "
              f"{after['excess_ns'] / 1e6:.3f} ms per {off['circle_ns'] / 1e6:g} ms circle; compatibility "
              f"{before['score']:.3f} -> {after['score']:.3f}; {result.simulations} simulations in {result.wall_s:.2f} s")
    if out_path is not None:
        out.print(f"wrote {out_path}")
    for note in result.notes:
        out.print(f"[yellow]note:[/] {note}")
