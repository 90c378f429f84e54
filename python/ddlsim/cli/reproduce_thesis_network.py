"""`ddlsim reproduce thesis-network`: the thesis' chapter 5 (background web-search flows beside a Horovod job in
the same or a lower priority band), run through `ddlsim sweep`'s grid runner and printed beside the thesis."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import DdlsimError
from .consoles import QUIET_HELP, err, out, real_console


def _ints(option: str, text: Optional[str]) -> Optional[list[int]]:
    if text is None:
        return None
    from ..option_lists import comma_list, whole_number

    return comma_list(text, option, whole_number, example="16,8", what="whole numbers")


PRINTED = (("setting", ("parameter",)), ("fig5_19", ("ratio", "rate")), ("table5_5", ("size_class",)),
           ("claims", ("claim",)))


def thesis_network(
    out_dir: Path = typer.Option(Path("reproduce-thesis-network"), "--out", "-o",
                                 help="Directory for the CSV tables and PNG/SVG figures (written all or nothing)."),
    runs_dir: Path = typer.Option(Path("thesis-network-runs"), "--runs",
                                  help="The sweep datasets (one per R: RUNS/R16, RUNS/R16-alone, ...); a rerun skips the runs "
                                       "done there (`ddlsim sweep --status RUNS/R16`)."),
    quick: bool = typer.Option(False, "--quick", help="R 4, 23 and 92 flows/s, 1 seed, 3-second runs with 0.5 s windows, "
                                                     "flow fidelity: seconds."),
    fidelity: Optional[str] = typer.Option(None, "--fidelity", help="packet (default; the thesis' ns-3 model) or flow "
                                                                   "(max-min sharing, no queues; minutes for the whole grid)."),
    ratios: Optional[str] = typer.Option(None, "--ratios", help="Only these computation-to-network ratios, e.g. 16,4 "
                                                               "(default 16,8,4,2)."),
    rates: Optional[str] = typer.Option(None, "--rates", help="Only these background rates, flows/s PER HOST, e.g. 23,92 "
                                                             "(default 23,46,92,184)."),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="Only these seeds, e.g. 1 (default 1,2,3)."),
    jobs: int = typer.Option(1, "--jobs", "-j", help="Simulations in parallel: local processes, or the CPUs of a local Ray instance."),
    ray: bool = typer.Option(False, "--ray", help="Run on a local Ray instance started for the run (pip install 'ddlsim[sweep]')."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="ADDRESS",
                                              help="Run on the Ray cluster at this address; implies --ray."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Friendlier-DDNN thesis chapter 5 (Tables 5.1-5.5, Figs 5.5-5.19): Horovod beside web-search flows, same vs lower band."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..reproduce.thesis_network import build, parse_plan, run_all, small_flow_cdf
    from ..reproduce.training_common import write_reproduction
    from ..safe_io import check_directory_target
    from .reproduce_training import print_table

    if jobs < 1:
        raise DdlsimError(f"--jobs {jobs}: give at least 1")
    if fidelity is not None and fidelity not in ("packet", "flow"):
        raise DdlsimError(f"--fidelity {fidelity!r}: use packet or flow")
    try:
        plan = parse_plan(quick, fidelity, _ints("--ratios", ratios), _ints("--rates", rates), _ints("--seeds", seeds))
    except ValueError as exc:
        raise DdlsimError(str(exc)) from None
    check_directory_target(out_dir)  # before the simulations, not after
    check_directory_target(runs_dir, option="--runs")
    ray_target = ray_address if ray_address is not None else ("local" if ray else None)
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=real_console(err), transient=True, disable=quiet or not err.is_terminal)
    with bar:
        task = bar.add_task("simulating", total=None)

        def progress(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, description=label)

        runs = run_all(plan, runs_dir, jobs=jobs, ray=ray_target, progress=progress)
        bar.update(task, description="writing tables and figures")
        rep = build(plan, runs, small_flow_cdf(plan, runs_dir))
        paths = write_reproduction(rep, out_dir)
    out.print(f"[bold]{rep.title}[/] with ddlsim{' (--quick subset)' if quick else ''}; paper values in the paper* columns "
              "('-': the thesis gives no number)", highlight=False)
    for name, keys in PRINTED:
        if not rep.tables[name].empty and len(rep.tables[name].columns) > len(keys):
            print_table(name, rep.tables[name], keys, out)
    for note in rep.notes:
        out.print(f"note: {note}", highlight=False)
    if not quiet:
        out.print(f"wrote {len(paths)} files (CSV tables, PNG and SVG figures) to {out_dir}/",
                  highlight=False)


def register(app: typer.Typer) -> None:
    """Adds `thesis-network` to the `reproduce` group."""
    app.command("thesis-network")(thesis_network)
