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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, world: int, config: dict, port: int, out_dir: str, plain: bool, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    from ddlsim.capture import ps
    from ddlsim.capture.recorder import RankRecorder, now_ns

    flushes: list[tuple[int, int]] = []  # (host ns, process CPU ns) at each flush of this rank (rank 0: per iteration)

    class Timed(RankRecorder):
        """The capture's recorder; each rank also notes when its flushes come and its process's CPU time then."""

        def __init__(self, *args, **kwargs):
            self._timing = False  # the header's flush is not an iteration's
            super().__init__(*args, **kwargs)
            self._timing = True

        def flush(self) -> None:
            super().flush()
            if self._timing:
                flushes.append((now_ns(), time.process_time_ns()))

    class Quiet(Timed):
        """Keeps nothing: each row takes an id (the job's code passes ids on as deps), nothing is formatted or
        written (its file holds only its header and end mark)."""

        def row(self, kind, op, start_ns, end_ns, *, ready_ns=None, deps=(), row_id=None, **fields) -> int:
            return self.new_id() if row_id is None else int(row_id)

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

    ps.RankRecorder = Quiet if plain else Timed
    if plain:
        ps.LayerHooks = NoLayers
    ps.run_rank(config, rank, world, out_dir)
    queue.put((rank, flushes))


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
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="ps-overhead-") as out_dir:
        procs = [ctx.Process(target=_rank, args=(r, world, config, port, out_dir, plain, queue)) for r in range(world)]
        for p in procs:
            p.start()
        flushes, deadline = {}, time.monotonic() + float(config["timeout_s"]) * 4
        while len(flushes) < len(procs):  # a rank that fails ends the run at once (the others would wait for it)
            try:
                rank, rank_flushes = queue.get(timeout=1.0)
                flushes[rank] = rank_flushes
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
    ends = [t for t, _ in flushes[0]][max(0, warmup - 1):]  # the end of each timed iteration, and of the one before
    times = [(b - a) / 1e6 for a, b in zip(ends, ends[1:])]
    per_rank = [cpu_per_iteration(ends, flushes[r]) for r in sorted(flushes)]
    return times, [None if c is None else c / 1e6 for c in per_rank]


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
    args = parser.parse_args(argv)
    if args.iterations < args.warmup + 3 or args.runs < 1:
        print("error: --iterations must exceed --warmup by 3 or more, --runs must be >= 1", file=sys.stderr)
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


if __name__ == "__main__":
    raise SystemExit(main())
