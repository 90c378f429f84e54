"""PS capture overhead: the iteration time of ``ddlsim capture ps``'s job recorded against the same job with nothing
recorded. Target: under 3 %.

Each run starts the job's ranks on this machine (W workers and S servers over torch RPC, TensorPipe on TCP:
``ddlsim.capture.ps.run_rank``, what ``ddlsim capture ps`` launches). A *recorded* run records as the capture
does (every RPC's rows, the layer rows, the server's rows). A *plain* run is the same code with a recorder that
keeps nothing (each row only takes an id) on every rank and no layer hooks: the same model, RPCs, queues and
loop, no rows. Runs alternate in ABBA order (recorded, plain, plain, recorded, ...), so a machine that drifts
over the benchmark weighs on both alike. Rank 0 (a worker) times every iteration in both: an iteration ends at
the loop's per-iteration flush, its last step.

Printed: per kind the median iteration over every run's timed iterations (each run's first ``--warmup`` left
out: the RPC agents' and the model's first use), the ratio of the medians, the per-run medians (their spread is
the run-to-run noise the ratio must beat) and the mean per kind. Then the CPU time per iteration of all the
job's processes together (the recording is CPU work; on a machine whose cores the processes share, the wall time
of one run moves with the scheduler by more than the recording costs, the CPU time much less): every rank notes
its process's CPU time at each of its flushes (a worker's once per iteration, the server's every 200 ms), and
:func:`cpu_per_iteration` takes each rank's CPU time between its first and last flush inside rank 0's timed
iterations, per iteration of rank 0 in that span; the difference per rank says which process the recording
costs.

    PYTHONPATH=python OMP_NUM_THREADS=1 python benchmarks/bench_capture_overhead_ps.py --runs 4 --iterations 60
    PYTHONPATH=python OMP_NUM_THREADS=1 python benchmarks/bench_capture_overhead_ps.py --layer-every 1000    # sampled layer rows

``--alternate B`` compares inside each run instead: every run records blocks of B iterations and leaves the next B
unrecorded, in turn (the first block recorded in odd runs, unrecorded in even ones). In an unrecorded iteration
every rank's recorder keeps nothing of that iteration's rows (switched as the worker begins an iteration and as
the server takes a request, so a recorded row pays no wrapper call) and the worker runs no layer hook, as a plain
run does (``--model lenet5`` only). Run-to-run noise (5 points on 2 cores, more than the recording costs) then
weighs on both kinds alike; what differs between neighbouring blocks is the recording, and the machine's drift
over a block. Printed: the ratios of the pooled medians and of the pooled means (each block's first iteration left
out: the hooks going on or off; the mean holds the slow iterations, which the training time holds too), and the
mean of the paired blocks' differences (a recorded block's mean less its unrecorded neighbour's) with its 95 %
interval (normal approximation), as a share of the unrecorded mean; the workers' CPU time per iteration by kind.
The server's flushes (its rows formatted and written every 200 ms) fall into either kind alike: they are timed, and
the most they can add is printed. ``--summarize FILE...`` pools the runs of several such ``--json`` files.
``--phases`` also times each worker's loop by phase (:data:`PHASES`, :func:`_time_phases`) and prints, per phase,
what a recorded iteration spends more than an unrecorded one, on the host clock and in the loop thread's CPU time:
where the recording's cost falls (its clocks, a few µs, cost both kinds alike).

    PYTHONPATH=python OMP_NUM_THREADS=1 python benchmarks/bench_capture_overhead_ps.py --alternate 5 --runs 3 --iterations 405
    PYTHONPATH=python OMP_NUM_THREADS=1 python benchmarks/bench_capture_overhead_ps.py --workers 1 --alternate 5 --runs 3 --iterations 405 --phases
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from queue import Empty
from typing import Optional


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def block_recorded(iteration: int, warmup: int, block: int, first_recorded: bool) -> bool:
    """Whether `iteration` is recorded in an alternating run (``--alternate``): the warm-up is; after it blocks of
    `block` iterations take turns, the first recorded where `first_recorded`."""
    if iteration < warmup:
        return True
    return (((iteration - warmup) // block) % 2 == 0) == first_recorded


def timed_iteration(iteration: int, warmup: int, block: int) -> bool:
    """Whether an alternating run's `iteration` counts: after the warm-up, and not its block's first (where the
    hooks go on or come off)."""
    return iteration >= warmup and (iteration - warmup) % block != 0


def _rank(rank: int, world: int, config: dict, port: int, out_dir: str, plain, queue, phases: bool = False) -> None:
    """One rank: `plain` True (nothing recorded), False (recorded as the capture does) or ``(block, warmup,
    first_recorded)`` (blocks of each, :func:`block_recorded`). `phases`: a worker also times its loop's phases
    (:func:`_time_phases`)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    from ddlsim.capture import ps
    from ddlsim.capture.recorder import RankRecorder, now_ns

    flushes: list[tuple[int, int]] = []  # (host ns, process CPU ns) at each flush of this rank (rank 0: per iteration)
    spent = [0]  # host ns inside this rank's flushes (the rows held formatted and written)
    on_flush = [None]  # --phases: a worker's end of iteration

    class Timed(RankRecorder):
        """The capture's recorder; each rank also notes when its flushes come and its process's CPU time then."""

        def __init__(self, *args, **kwargs):
            self._timing = False  # the header's flush is not an iteration's
            super().__init__(*args, **kwargs)
            self._timing = True

        def flush(self) -> None:
            t0 = now_ns()
            super().flush()
            if self._timing:
                flushes.append((now_ns(), time.process_time_ns()))
                spent[0] += flushes[-1][0] - t0
                if on_flush[0] is not None:
                    on_flush[0](flushes[-1][0])

    class Quiet(Timed):
        """Keeps nothing: each row takes an id (the job's code passes ids on as deps), nothing is formatted or
        written (its file holds only its header and end mark)."""

        def row(self, kind, op, start_ns, end_ns, *, ready_ns=None, deps=(), row_id=None, **fields) -> int:
            return self.new_id() if row_id is None else int(row_id)

        def held_row(self, kind, op, start_ns, end_ns, deps, fields, columns=None, row_id=None) -> int:
            return self.new_id() if row_id is None else row_id

        def write_lines(self, lines) -> None:
            pass

    class NoLayers:
        """No per-layer hook: the worker's loop takes its one-row-per-pass path, whose rows the quiet recorder
        drops."""

        sampled = False

        def __init__(self, module, recorder, **kwargs):
            self.rec = recorder

        def begin_iteration(self, iteration, waits=()) -> None:
            pass

        def compute_row(self, op, start_ns, end_ns, **fields) -> int:
            return self.rec.new_id()

        def write_rows(self) -> None:
            pass

    if isinstance(plain, tuple):  # alternating blocks
        block, warmup, first = plain

        def recorded(iteration) -> bool:
            return iteration is None or block_recorded(int(iteration), warmup, block, first)

        class Switching(Timed):
            """Records the rows of recorded iterations as the capture does; of the others keeps nothing (as Quiet).
            Switched per iteration (the worker's, as it begins; the server's, per request), not per row: a wrapper
            around every row would cost the recorded rows a call the capture does not make."""

            def use(self, iteration) -> None:
                if recorded(iteration):
                    self.__dict__.pop("row", None)  # the capture's own row() and held_row()
                    self.__dict__.pop("held_row", None)
                else:
                    self.row, self.held_row = self.quiet_row, self.quiet_held_row

            quiet_row, quiet_held_row = Quiet.row, Quiet.held_row  # what the quiet recorder does

        from ddlsim.capture import ps_server

        serve = ps_server.Server._serve

        def switching_serve(self, req) -> None:
            self.rec.use(req.iteration)
            serve(self, req)

        ps_server.Server._serve = switching_serve

        class SwitchingLayers(ps.LayerHooks):
            """The capture's layer hooks in recorded iterations; none (and no rows) in the others, as NoLayers."""

            def begin_iteration(self, iteration, waits=()) -> None:
                self.rec.use(iteration)
                if recorded(iteration):
                    super().begin_iteration(iteration, waits)
                    return
                if self._handles:
                    self._uninstall()
                with self._lock:
                    self.iteration, self.sampled = int(iteration), False

            def compute_row(self, op, start_ns, end_ns, **fields) -> int:
                if not self.sampled:
                    return self.rec.new_id()
                return super().compute_row(op, start_ns, end_ns, **fields)

        ps.RankRecorder, ps.LayerHooks = Switching, SwitchingLayers
    else:
        ps.RankRecorder = Quiet if plain else Timed
        if plain:
            ps.LayerHooks = NoLayers
    timed_phases = None
    if phases and rank < int(config["workers"]):
        timed_phases, on_flush[0] = _time_phases(ps)
    ps.run_rank(config, rank, world, out_dir)
    queue.put((rank, flushes, spent[0], timed_phases))


#: a worker's loop, each iteration: the phases --phases times (see _time_phases)
PHASES = ("begin", "forward", "backward", "pushes", "responses", "end")


def _time_phases(ps) -> tuple[list, object]:
    """``--phases``: wraps the worker's forward, backward and response loop (``_Worker._drain``) with clocks, host
    and thread CPU. Returns the list it fills, per iteration (iteration, [ns per phase], [thread CPU ns per phase])
    of :data:`PHASES`, and the call that ends an iteration (at the worker's flush, its loop's last step, with the
    flush's host time: the phases then add up to the iteration's time exactly). The
    phases: begin (the previous iteration's flush to the forward: the batch, the hooks put on or off), forward,
    backward (the backward call), pushes (its end to the response loop: the pass rows, the pushes), responses
    (until every pull is in) and end (the layer rows written, the flush)."""
    from ddlsim.capture import ps_model

    out: list = []
    marks: dict = {}

    def clocks() -> tuple[int, int]:
        return time.monotonic_ns(), time.thread_time_ns()

    def wrap(owner, name: str, before: str, after: Optional[str]) -> None:
        inner = getattr(owner, name)

        def timed(self, *args, **kwargs):
            marks[before] = clocks()
            result = inner(self, *args, **kwargs)
            if after is not None:
                marks[after] = clocks()
            if name == "_drain":
                marks["iteration"] = args[1] if len(args) > 1 else kwargs["iteration"]
            return result
        setattr(owner, name, timed)

    wrap(ps_model.PsModel, "forward", "forward", None)
    wrap(ps_model.PsModel, "backward", "backward", "pushes")
    wrap(ps._Worker, "_drain", "responses", "end")

    def end_iteration(host_ns: int) -> None:
        """At the worker's flush, whose host time (the one its iteration time is taken at) is `host_ns`."""
        now = (host_ns, time.thread_time_ns())
        if "iteration" in marks and all(n in marks for n in PHASES):
            points = [marks[n] for n in PHASES] + [now]
            out.append((marks["iteration"], [b[0] - a[0] for a, b in zip(points, points[1:])],
                        [b[1] - a[1] for a, b in zip(points, points[1:])]))
        marks.clear()
        marks["begin"] = now
    return out, end_iteration


def cpu_per_iteration(ends: list[int], flushes: list[tuple[int, int]]) -> float | None:
    """A rank's CPU ns per iteration of rank 0 over rank 0's iterations that end at `ends` (host ns, one per
    iteration): its CPU time between its first and its last flush inside ``[ends[0], ends[-1]]`` (`flushes`:
    (host ns, process CPU ns) at each of its flushes), divided by the iterations of rank 0 in that span (a
    fraction at each side, from the iteration ends on either side). None with fewer than two flushes inside."""
    inside = [(t, c) for t, c in flushes if ends[0] <= t <= ends[-1]]
    if len(inside) < 2 or inside[-1][0] == inside[0][0]:
        return None

    def position(t: int) -> float:  # rank 0's iterations done by host time t, counted from ends[0]
        k = max(i for i, e in enumerate(ends) if e <= t)
        if k == len(ends) - 1:
            return float(k)
        return k + (t - ends[k]) / (ends[k + 1] - ends[k])

    (t0, c0), (t1, c1) = inside[0], inside[-1]
    return (c1 - c0) / (position(t1) - position(t0))


def one_run(config: dict, world: int, plain: bool, warmup: int) -> tuple[list[float], list]:
    """One run of the job: rank 0's iteration times (ms) after the first `warmup` iterations, and each rank's CPU ms
    per iteration of rank 0 over those iterations (None where the rank flushed too rarely)."""
    flushes, _, _ = _launch(config, world, plain)
    ends = [t for t, _ in flushes[0]][max(0, warmup - 1):]  # the end of each timed iteration, and of the one before
    times = [(b - a) / 1e6 for a, b in zip(ends, ends[1:])]
    per_rank = [cpu_per_iteration(ends, flushes[r]) for r in sorted(flushes)]
    return times, [None if c is None else c / 1e6 for c in per_rank]


def alternating_run(config: dict, world: int, workers: int, warmup: int, block: int, first_recorded: bool,
                    phases: bool = False) -> tuple[list[tuple[int, bool, float, list[float]]], list[float], dict]:
    """One run in alternating blocks: per iteration after the warm-up, (iteration, recorded, rank 0's time in ms,
    each worker's CPU ms in its own iteration of that number); and per rank, the ms it spent inside its flushes
    per iteration of rank 0 (a server's flushes, every 200 ms, fall into either kind of iteration: its share of the
    servers' summed ms goes into the run as ``server_flush_ms``); and (`phases`) each worker's phases per iteration
    (:func:`_time_phases`)."""
    flushes, spent, timed = _launch(config, world, (block, warmup, first_recorded), phases)
    per_iteration = [spent[r] / 1e6 / max(1, len(flushes[0])) for r in sorted(spent)]
    out = []
    for i in range(max(1, warmup), len(flushes[0])):
        cpu = [(flushes[w][i][1] - flushes[w][i - 1][1]) / 1e6 for w in range(workers)]
        took = (flushes[0][i][0] - flushes[0][i - 1][0]) / 1e6
        out.append((i, block_recorded(i, warmup, block, first_recorded), took, cpu))
    return out, per_iteration, timed


def paired_blocks(rows: list[tuple[int, bool, float, list[float]]], warmup: int,
                  block: int) -> tuple[list[float], list[float], list[float]]:
    """From one run's :func:`alternating_run` rows: the recorded and the unrecorded iteration times with each
    block's first iteration left out, and per pair of neighbouring blocks (the 1st and 2nd, the 3rd and 4th, ...;
    both complete) the recorded block's mean less the unrecorded one's."""
    blocks: dict[int, list[float]] = {}
    kinds: dict[int, bool] = {}
    for i, recorded, t, _ in rows:
        if i < warmup:
            continue
        b = (i - warmup) // block
        kinds[b] = recorded
        if (i - warmup) % block:  # the block's first iteration puts the hooks on or takes them off
            blocks.setdefault(b, []).append(t)
    pooled = {True: [], False: []}
    for b, times in blocks.items():
        pooled[kinds[b]].extend(times)
    diffs = []
    for b in range(0, max(blocks, default=-1), 2):
        pair = [blocks.get(b, []), blocks.get(b + 1, [])]
        if all(len(p) == block - 1 for p in pair):
            rec, plain = (pair[0], pair[1]) if kinds[b] else (pair[1], pair[0])
            diffs.append(statistics.mean(rec) - statistics.mean(plain))
    return pooled[True], pooled[False], diffs


def _launch(config: dict, world: int, plain, phases: bool = False) -> tuple[dict, dict, dict]:
    """Runs the job's ranks (`plain` as :func:`_rank` takes it); each rank's flushes, (host ns, process CPU ns), the
    host ns each rank spent inside them, and (`phases`) each worker's phases (:func:`_time_phases`)."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="ps-overhead-") as out_dir:
        procs = [ctx.Process(target=_rank, args=(r, world, config, port, out_dir, plain, queue, phases))
                 for r in range(world)]
        for p in procs:
            p.start()
        flushes, spent, timed, deadline = {}, {}, {}, time.monotonic() + float(config["timeout_s"]) * 4
        while len(flushes) < len(procs):  # a rank that fails ends the run at once (the others would wait for it)
            try:
                rank, rank_flushes, rank_spent, rank_phases = queue.get(timeout=1.0)
                flushes[rank] = rank_flushes
                spent[rank] = rank_spent
                if rank_phases is not None:
                    timed[rank] = rank_phases
            except Empty:
                failed = [p.exitcode for p in procs if p.exitcode]
                if failed or time.monotonic() > deadline:
                    for p in procs:  # no rank left behind: the others would wait for the failed one
                        p.kill()
                        p.join(10)
                    raise SystemExit(f"a rank failed: exit codes {[p.exitcode for p in procs]}" if failed else
                                     f"the run took more than {float(config['timeout_s']) * 4:.0f} s")
        for p in procs:
            p.join()
        if any(p.exitcode for p in procs):
            raise SystemExit(f"a rank failed: exit codes {[p.exitcode for p in procs]}")
    return flushes, spent, timed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="lenet5", help="lenet5 | sparse-lr (the PS capture's models)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("--iterations", type=int, default=60, help="iterations per run")
    parser.add_argument("--warmup", type=int, default=5, help="iterations of each run left out")
    parser.add_argument("--runs", type=int, default=4, help="runs of each kind (ABBA order)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--layer-every", type=int, default=1, help="the capture's --layer-every K")
    parser.add_argument("--json", default=None, help="also write every run's times to this file")
    parser.add_argument("--alternate", type=int, default=0, metavar="B",
                        help="compare inside each run: blocks of B iterations recorded and not, in turn (B >= 2)")
    parser.add_argument("--phases", action="store_true",
                        help="with --alternate: also time each worker's loop by phase, and print what recording adds "
                             "to each (the clocks cost both kinds alike)")
    parser.add_argument("--summarize", nargs="+", metavar="FILE",
                        help="run nothing: pool the runs of these --alternate --json files and print their overhead")
    args = parser.parse_args(argv)
    if args.summarize:
        return _summarize(args.summarize)
    if args.iterations < args.warmup + 3 or args.runs < 1:
        print("error: --iterations must exceed --warmup by 3 or more, --runs must be >= 1", file=sys.stderr)
        return 2
    if args.alternate and args.model != "lenet5":
        print(f"error: --alternate needs --model lenet5 (its worker switches the recording as each iteration begins), "
              f"got --model {args.model}", file=sys.stderr)
        return 2
    if args.phases and not args.alternate:
        print("error: --phases needs --alternate B (it compares the phases of recorded and unrecorded blocks)",
              file=sys.stderr)
        return 2
    if args.alternate and (args.alternate < 2 or args.iterations < args.warmup + 2 * args.alternate):
        print(f"error: --alternate must be 2 or more, with two blocks of it after --warmup (--iterations "
              f"{args.warmup + 2 * max(2, args.alternate)} or more), got --alternate {args.alternate}", file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    from gpu_setup import check_out

    from ddlsim.capture.ps import ps_config

    if args.json and not check_out(Path(args.json), "--json"):  # before any run: a bad path costs nothing
        return 2

    from ddlsim.errors import DdlsimError

    try:
        config = ps_config(model=args.model, workers=args.workers, servers=args.servers, iterations=args.iterations,
                           batch_size=args.batch_size, layer_every=args.layer_every, timeout_s=120.0)
    except DdlsimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    world = args.workers + args.servers
    if args.alternate:
        return _alternating(args, config, world)
    order = [kind for _ in range((args.runs + 1) // 2) for kind in ("recorded", "plain", "plain", "recorded")]
    order = order[:2 * args.runs]
    runs: dict[str, list[list[float]]] = {"plain": [], "recorded": []}
    cpu_ranks: dict[str, list] = {"plain": [], "recorded": []}  # per run: each rank's CPU ms per iteration
    for k, kind in enumerate(order, 1):
        print(f"[{k}/{len(order)}] {kind} run", file=sys.stderr, flush=True)
        times, per_rank = one_run(config, world, kind == "plain", args.warmup)
        runs[kind].append(times)
        cpu_ranks[kind].append(per_rank)
    # per run: all processes together
    cpu = {kind: [None if None in run else sum(run) for run in cpu_ranks[kind]] for kind in cpu_ranks}
    print(f"PS capture job: {args.model}, {args.workers} workers, {args.servers} server(s), batch {args.batch_size}, "
          f"--layer-every {args.layer_every}; {args.runs} runs of each kind (ABBA), {args.iterations} iterations each, "
          f"the first {args.warmup} left out; {os.cpu_count()} cores")
    medians = {}
    for kind in ("plain", "recorded"):
        pooled = [t for run in runs[kind] for t in run]
        medians[kind] = statistics.median(pooled)
        per_run = ", ".join(f"{statistics.median(run):.2f}" for run in runs[kind])
        print(f"  {kind:9} median {medians[kind]:7.2f} ms   mean {statistics.mean(pooled):7.2f} ms   "
              f"per-run medians {per_run} ms")
    print(f"capture overhead: {(medians['recorded'] / medians['plain'] - 1) * 100:+.2f} % (ratio of medians); "
          "target < 3 %")
    if all(c is not None for kind in cpu for c in cpu[kind]):
        cpu_medians = {kind: statistics.median(cpu[kind]) for kind in cpu}
        for kind in ("plain", "recorded"):
            print(f"  {kind:9} CPU {cpu_medians[kind]:7.2f} ms per iteration, all processes (median of runs: "
                  f"{', '.join(f'{c:.2f}' for c in cpu[kind])})")
        print(f"CPU overhead: {(cpu_medians['recorded'] / cpu_medians['plain'] - 1) * 100:+.2f} % (ratio of medians)")
        extra = [statistics.median(run[r] for run in cpu_ranks["recorded"]) -
                 statistics.median(run[r] for run in cpu_ranks["plain"]) for r in range(world)]
        print("  recorded - plain, median CPU ms per iteration: " + ", ".join(
            f"rank {r} ({'worker' if r < args.workers else 'server'}) {e:+.3f}" for r, e in enumerate(extra)))
    else:
        print("CPU time: a rank flushed fewer than twice within the timed iterations; give more --iterations")
    if args.json:
        from gpu_setup import write_out

        data = {"args": vars(args), "times_ms": runs, "cpu_ms_per_iteration": cpu, "cpu_ms_per_rank": cpu_ranks}
        if not write_out(Path(args.json), json.dumps(data), option="--json"):
            return 2
    return 0


def summarize_alternating(runs: list[dict], warmup: int, block: int) -> tuple[dict, list[str]]:
    """The overhead over alternating runs (each ``{"first_recorded", "rows"}``, the rows of :func:`alternating_run`),
    their iterations and pairs of blocks pooled: the summary and the lines printed."""
    from statistics import NormalDist

    rec_times, plain_times, diffs = [], [], []
    cpu = {True: [], False: []}  # the workers' CPU ms per iteration, by kind
    per_run = []
    for run in runs:
        rows = [tuple(row) for row in run["rows"]]
        rec, plain, d = paired_blocks(rows, warmup, block)
        rec_times += rec
        plain_times += plain
        diffs += d
        per_run.append((statistics.median(rec) / statistics.median(plain) - 1) * 100)
        for i, recorded, _, worker_cpu in rows:
            if timed_iteration(i, warmup, block):
                cpu[recorded].append(sum(worker_cpu))
    base, base_mean = statistics.median(plain_times), statistics.mean(plain_times)
    overhead = (statistics.median(rec_times) / base - 1) * 100
    mean_overhead = (statistics.mean(rec_times) / base_mean - 1) * 100
    lines = [f"  recorded      median {statistics.median(rec_times):7.2f} ms, mean "
             f"{statistics.mean(rec_times):7.2f} ms over {len(rec_times)} iterations",
             f"  not recorded  median {base:7.2f} ms, mean {base_mean:7.2f} ms over {len(plain_times)} iterations",
             "  per run (ratio of medians): " + ", ".join(f"{o:+.2f} %" for o in per_run),
             f"capture overhead: {overhead:+.2f} % (ratio of medians), {mean_overhead:+.2f} % (ratio of means); "
             "target < 3 %"]
    summary = {"overhead_pct": overhead, "mean_overhead_pct": mean_overhead, "pairs": len(diffs)}
    if len(diffs) >= 2:
        mean, half = statistics.mean(diffs), NormalDist().inv_cdf(0.975) * statistics.stdev(diffs) / len(diffs) ** 0.5
        low, high = (mean - half) / base_mean * 100, (mean + half) / base_mean * 100
        summary.update(paired_pct=mean / base_mean * 100, paired_ci_pct=[low, high], paired_ms=mean)
        lines.append(f"paired blocks: {mean / base_mean * 100:+.2f} % of the mean, {mean:.3f} ms (95 % interval "
                     f"{low:+.2f} to {high:+.2f} %, {len(diffs)} pairs of neighbouring blocks)")
    c_rec, c_plain = statistics.median(cpu[True]), statistics.median(cpu[False])
    summary["worker_cpu_ms"] = {"recorded": c_rec, "plain": c_plain}
    lines.append(f"  workers' CPU per iteration (median): recorded {c_rec:.3f} ms, not recorded {c_plain:.3f} ms "
                 f"({(c_rec / c_plain - 1) * 100:+.2f} %)")
    if all(run.get("server_flush_ms") is not None for run in runs):  # runs stored before 2026-11-28 01:50 lack it
        server = statistics.mean(run["server_flush_ms"] for run in runs)
        summary["server_flush_ms_per_iteration"] = server
        lines.append(f"  the server's flushes: {server:.3f} ms per iteration, in either kind alike (at most "
                     f"{server / base_mean * 100:+.2f} % more, where each delayed the job by all of its time)")
    if runs and all(run.get("phases") for run in runs):
        summary["phases_us"], more = phase_lines(runs, warmup, block)
        lines += more
    return summary, lines


def phase_lines(runs: list[dict], warmup: int, block: int) -> tuple[dict, list[str]]:
    """``--phases``: per phase of the workers' loops (:data:`PHASES`), the mean µs per worker and iteration, recorded
    less not recorded, host and thread CPU (each block's first iteration left out, as for the times)."""
    sums = {kind: [[0.0] * len(PHASES), [0.0] * len(PHASES), 0] for kind in (True, False)}
    for run in runs:
        for worker in run["phases"]:
            for i, wall, cpu in worker:
                if not timed_iteration(i, warmup, block):
                    continue
                acc = sums[block_recorded(i, warmup, block, run["first_recorded"])]
                for k in range(len(PHASES)):
                    acc[0][k] += wall[k]
                    acc[1][k] += cpu[k]
                acc[2] += 1
    if not (sums[True][2] and sums[False][2]):
        return {}, ["  phases: no timed iteration of each kind"]
    diff = {name: {what: (sums[True][j][k] / sums[True][2] - sums[False][j][k] / sums[False][2]) / 1e3
                   for j, what in enumerate(("wall", "cpu"))} for k, name in enumerate(PHASES)}
    total = {what: sum(d[what] for d in diff.values()) for what in ("wall", "cpu")}
    cells = ", ".join(f"{name} {d['wall']:+.0f} ({d['cpu']:+.0f})" for name, d in diff.items())
    return {**diff, "total": total}, [f"  recording per worker and iteration by phase, µs of the loop (of its thread's "
                                      f"CPU): {cells}; in all {total['wall']:+.0f} ({total['cpu']:+.0f})"]


def _alternating(args, config: dict, world: int) -> int:
    """``--alternate``: the runs, each in alternating blocks; the summary printed (and written to ``--json``)."""
    runs = []
    for r in range(args.runs):
        first = r % 2 == 0
        print(f"[{r + 1}/{args.runs}] run in blocks of {args.alternate}, the first "
              f"{'recorded' if first else 'not recorded'}", file=sys.stderr, flush=True)
        rows, flush_ms, timed = alternating_run(config, world, args.workers, args.warmup, args.alternate, first,
                                                args.phases)
        runs.append({"first_recorded": first, "rows": rows, "server_flush_ms": sum(flush_ms[args.workers:])})
        if args.phases:
            runs[-1]["phases"] = [timed[w] for w in sorted(timed)]
    summary, lines = summarize_alternating(runs, args.warmup, args.alternate)
    print(f"PS capture job: {args.model}, {args.workers} workers, {args.servers} server(s), batch {args.batch_size}, "
          f"--layer-every {args.layer_every}; {args.runs} runs, {args.iterations} iterations each in blocks of "
          f"{args.alternate} recorded and not in turn, the first {args.warmup} left out, and each block's first; "
          f"{os.cpu_count()} cores")
    print("\n".join(lines))
    if args.json:
        from gpu_setup import write_out

        data = {"args": vars(args), "summary": summary, "runs": runs}
        if not write_out(Path(args.json), json.dumps(data), option="--json"):
            return 2
    return 0


def _summarize(paths: list[str]) -> int:
    """``--summarize``: the runs of several ``--alternate --json`` files pooled (the same job, warm-up and blocks)."""
    runs, setting = [], None
    for path in paths:
        try:
            if not Path(path).is_file():  # a FIFO would block the read, a directory cannot be read
                raise ValueError("not a regular file")
            data = json.loads(Path(path).read_text())
            args = data["args"]
            these = (args["model"], args["workers"], args["servers"], args["batch_size"], args["layer_every"],
                     args["warmup"], args["alternate"])
            if not isinstance(these[-1], int) or isinstance(these[-1], bool) or these[-1] < 2:
                raise KeyError("alternate")
            for r in data["runs"]:
                rows = [(int(i), bool(kind), float(t), [float(c) for c in cpu]) for i, kind, t, cpu in r["rows"]]
                flush = r.get("server_flush_ms")
                runs.append({"first_recorded": bool(r["first_recorded"]), "rows": rows,
                             "server_flush_ms": None if flush is None else float(flush)})
                if r.get("phases") is not None:  # --phases: per worker, (iteration, 6 x ns, 6 x ns) per iteration
                    runs[-1]["phases"] = [[(int(i), [int(x) for x in wall], [int(x) for x in cpu])
                                           for i, wall, cpu in worker] for worker in r["phases"]]
                    if any(len(wall) != len(PHASES) or len(cpu) != len(PHASES)
                           for worker in runs[-1]["phases"] for _, wall, cpu in worker):
                        raise ValueError(f"a phases row without {len(PHASES)} times of each kind")
            kinds = {kind for r in runs for i, kind, _, _ in r["rows"] if timed_iteration(i, these[-2], these[-1])}
            if kinds != {True, False}:
                raise ValueError("no timed iteration of each kind (recorded and not)")
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            print(f"error: --summarize {path}: not the --json of an --alternate run ({exc.__class__.__name__}: {exc}); "
                  "give files that `--alternate B --json FILE` wrote", file=sys.stderr)
            return 2
        if setting is not None and these != setting:
            print(f"error: --summarize {path}: another job or setting (model, workers, servers, batch, layer_every, "
                  f"warmup, alternate = {these}) than {paths[0]} ({setting}); pool runs of one setting",
                  file=sys.stderr)
            return 2
        setting = these
    model, workers, servers, batch, layer_every, warmup, block = setting
    print(f"PS capture job: {model}, {workers} workers, {servers} server(s), batch {batch}, --layer-every "
          f"{layer_every}; {len(runs)} runs from {len(paths)} files, in blocks of {block}")
    print("\n".join(summarize_alternating(runs, warmup, block)[1]))
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
