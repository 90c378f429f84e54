"""What a capture row costs the job, measured apart (docs/capture-ps.md "Overhead"): recording one row of a PS RPC's
shape (eight fields) with ``RankRecorder.row`` (keyword arguments) and with ``RankRecorder.held_row`` (the fields and
the key's columns handed over as dicts), against a call that does nothing with the same arguments (what the
benchmark's unrecorded iterations pay); and formatting the rows held, per row, by the extension's one call
(``encode_rows``, what the recorder does) against one ``encode_row`` call per row with its dicts merged (the
recorder before 2026-11-28). Minimum of ``--repeats`` rounds; ratios against the first line of each part.

    PYTHONPATH=python python benchmarks/bench_recorder_rows.py
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import timeit


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1000, help="rows per round (default 1000)")
    parser.add_argument("--repeats", type=int, default=7, help="rounds; the minimum is printed (default 7)")
    args = parser.parse_args(argv)
    if args.rows < 1 or args.repeats < 1:
        print(f"error: --rows {args.rows} --repeats {args.repeats}: both must be at least 1 (e.g. --rows 1000 "
              "--repeats 7)", file=sys.stderr)
        return 2

    from ddlsim._core import encode_row
    from ddlsim.capture.recorder import RankRecorder

    with tempfile.TemporaryDirectory() as out:
        rec = RankRecorder(out, 0, "worker")
        cols = {"iteration": 3, "tensor": 4, "layer": 2, "name": "fc3.weight"}
        n = args.rows

        def nothing(kind, op, start_ns, end_ns, *, ready_ns=None, deps=(), row_id=None, **fields):
            return 1

        def record_row():
            for i in range(n):
                rec.row("send", "push_request", 1_000_000_000 + i, 1_000_000_500 + i, deps=[4294967297 + i], peer=2,
                        message=4294967299 + i, rpc=4294967300 + i, bytes=3360, **cols)

        def record_held():
            for i in range(n):
                rec.held_row("send", "push_request", 1_000_000_000 + i, 1_000_000_500 + i, [4294967297 + i],
                             {"peer": 2, "message": 4294967299 + i, "rpc": 4294967300 + i, "bytes": 3360}, cols)

        def call_nothing():
            for i in range(n):
                nothing("send", "push_request", 1_000_000_000 + i, 1_000_000_500 + i, deps=[4294967297 + i], peer=2,
                        message=4294967299 + i, rpc=4294967300 + i, bytes=3360, **cols)

        def per_row(held):  # the recorder before 2026-11-28: a Python call, a merged dict and a string per row
            encode = rec._encode
            return "\n".join(encode_row(k, o, s, e, r, d, i, {**f, **c}, encode) for k, o, s, e, r, d, i, f, c in held)

        def timed(fn, setup=None) -> float:
            best = float("inf")
            for _ in range(args.repeats):
                held = setup() if setup else None
                t = timeit.timeit(lambda: fn(held) if setup else fn(), number=1)
                best = min(best, t)
                rec._pending.clear()
            return best / n * 1e6

        def held_rows():
            rec._pending.clear()
            record_held()
            rows = list(rec._pending)
            rec._pending.clear()
            return rows

        def batch(held):
            rec._pending.extend(held)
            with rec._lock:
                rec._write_pending()

        record = [("a call that does nothing, same arguments", timed(call_nothing)),
                  ("row(), eight keyword fields", timed(record_row)),
                  ("held_row(), the fields and columns as dicts", timed(record_held))]
        fmt = [("one encode_row call per row, dicts merged (before)", timed(per_row, held_rows)),
               ("encode_rows, one call for the rows held (now)", timed(batch, held_rows))]
        rec.close()
    for title, lines in (("recording a row", record), ("formatting a held row", fmt)):
        print(f"{title} (us per row, minimum of {args.repeats} rounds of {n}):")
        base = lines[0][1]
        for name, us in lines:
            print(f"  {name:55s} {us:6.2f}  x{us / base:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
