"""Every PS capture of a `ddlsim validate` grid replayed on a bare link (no token bucket) at each other link's rate,
and on that link's tbf shaping, against the captures made there (docs/validation.md, "PS: what a veth costs each
message over the loopback"): an unshaped capture with ``--bandwidth R``, a shaped one with ``--bandwidth R --wire
none``; the mean of a case's captures.

    python benchmarks/bare_link_replay.py GRID        # GRID: the --out of ddlsim validate --jobs ps --links ...
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

import ddlsim

RATES = {"1000Mbps": "1Gbps", "100Mbps": "100Mbps"}


def main(grid: Path) -> None:
    cases = pd.read_csv(grid / "cases.csv")
    cases = cases[(cases["job"] == "ps") & (cases["kind"] == "self")]
    measured = dict(zip(cases["captured_link"], cases["measured_ms"]))
    for model in sorted(set(cases["model"])):
        for source in sorted(measured):
            for target, rate in RATES.items():
                if target == source or target not in measured:
                    continue
                paths = sorted(grid.glob(f"captures/ps-{model}-{source}-r*/events.parquet"))
                bare = dict(bandwidth=rate) if source == "unshaped" else dict(bandwidth=rate, wire="none")
                row = []
                for kw in (bare, dict(bandwidth=rate, wire="tbf")):
                    times = [ddlsim.replay(p, **kw).summary()["iteration_time_s"] * 1e3 for p in paths]
                    mean = sum(times) / len(times)
                    row.append(f"{mean:.2f} ms ({100 * (mean / measured[target] - 1):+.1f} %)")
                print(f"ps {model} {source} -> {target}: bare {row[0]}, tbf {row[1]}, measured {measured[target]:.2f} ms "
                      f"({len(paths)} captures)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]))
