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
the run-to-run noise the ratio must beat) and the mean per kind.

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
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, world: int, config: dict, port: int, out_dir: str, plain: bool, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    from ddlsim.capture import ps
    from ddlsim.capture.recorder import RankRecorder, now_ns

    ends: list[int] = []  # rank 0: the end of each iteration (its flush)

    class Timed(RankRecorder):
        """The capture's recorder; rank 0 also notes when each iteration's flush comes."""

        def __init__(self, *args, **kwargs):
            self._timing = False  # the header's flush is not an iteration's
            super().__init__(*args, **kwargs)
            self._timing = True

        def flush(self) -> None:
            super().flush()
            if self._timing and self.rank == 0:
                ends.append(now_ns())

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

    ps.RankRecorder = Quiet if plain else Timed
    if plain:
        ps.LayerHooks = NoLayers
    ps.run_rank(config, rank, world, out_dir)
    if rank == 0:
        queue.put([(b - a) / 1e6 for a, b in zip(ends, ends[1:])])  # ms per iteration, from the second on


def one_run(config: dict, world: int, plain: bool) -> list[float]:
    """Rank 0's iteration times (ms, from the second iteration on) of one run of the job."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="ps-overhead-") as out_dir:
        procs = [ctx.Process(target=_rank, args=(r, world, config, port, out_dir, plain, queue)) for r in range(world)]
        for p in procs:
            p.start()
        times = queue.get(timeout=float(config["timeout_s"]) * 4)
        for p in procs:
            p.join()
        if any(p.exitcode for p in procs):
            raise SystemExit(f"a rank failed: exit codes {[p.exitcode for p in procs]}")
    return times


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
    for k, kind in enumerate(order, 1):
        print(f"[{k}/{len(order)}] {kind} run", file=sys.stderr, flush=True)
        runs[kind].append(one_run(config, world, kind == "plain")[max(0, args.warmup - 1):])
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
    if args.json:
        from gpu_setup import write_out

        if not write_out(Path(args.json), json.dumps({"args": vars(args), "times_ms": runs}), option="--json"):
            return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
