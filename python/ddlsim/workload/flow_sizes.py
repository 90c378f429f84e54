"""Flow-size distributions of background tenants: empirical CDFs.

A CDF is a list of points ``(bytes, cumulative fraction)``, sizes strictly
increasing, fractions non-decreasing, the last one 1. A flow's size is drawn
by inverse transform with linear interpolation between the points: for ``u``
uniform in [0, 1), ``u < cum[0]`` gives ``bytes[0]`` (the first point's size
has probability ``cum[0]``); otherwise, with ``cum[i-1] <= u < cum[i]``, the
size is ``bytes[i-1] + (u - cum[i-1]) / (cum[i] - cum[i-1]) x (bytes[i] -
bytes[i-1])``. Its mean is therefore

    cum[0] x bytes[0] + sum over i >= 1 of (cum[i] - cum[i-1]) x (bytes[i-1] + bytes[i]) / 2

(:func:`mean_bytes`), which converts a load (a fraction of the link rate)
into flows per second: ``rate = load x link_bps / (8 x mean_bytes)``.

Built in (the points as published, ``(0, 0)`` first):

* ``websearch``: the web-search workload of DCTCP (M. Alizadeh et al., "Data
  Center TCP (DCTCP)", SIGCOMM 2010, Fig. 3), as distributed with the DCTCP
  authors' traffic generator (github.com/datacenter/empirical-traffic-gen,
  file ``DCTCP_CDF``) and with HPCC's simulations
  (github.com/alibaba-edu/High-Precision-Congestion-Control,
  ``traffic_gen/WebSearch_distribution.txt``, the same points in percent).
  Mean 1,711,250 bytes (about 1.7 MB, the value the thesis' chapter 5 uses).
* ``datamining``: the data-mining workload of VL2 (A. Greenberg et al.,
  "VL2: A Scalable and Flexible Data Center Network", SIGCOMM 2009, Fig. 2),
  as distributed with the same traffic generator (file ``VL2_CDF``). Mean
  about 12.7 MB; 80 % of the flows are under 10 KB, 2 % are 100 MB to 1 GB.

The published tables start at ``(0 bytes, 0)``. A flow has at least one
byte, and the engine reads a CDF whose fractions lie in (0, 1], so such a
leading point ``(b, 0)`` becomes ``(b + 1, F(b + 1))``, the published CDF's
own value one byte further (:func:`engine_points`); the distribution is the
published one on every whole number of bytes.

A user's CDF is a two-column CSV, ``bytes,cumulative fraction``, with an
optional header line, ``#`` comments and blank lines (:func:`read_cdf_csv`);
like the built-in tables it may start with a ``(bytes, 0)`` row.
"""

from __future__ import annotations

import csv
import difflib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from ..errors import ScenarioError
from ..inputs import input_file

Points = tuple[tuple[int, float], ...]

# DCTCP web search (DCTCP_CDF of github.com/datacenter/empirical-traffic-gen).
WEBSEARCH: Points = (
    (0, 0.0), (10_000, 0.15), (20_000, 0.20), (30_000, 0.30), (50_000, 0.40), (80_000, 0.53), (200_000, 0.60),
    (1_000_000, 0.70), (2_000_000, 0.80), (5_000_000, 0.90), (10_000_000, 0.97), (30_000_000, 1.0),
)
# VL2 data mining (VL2_CDF of github.com/datacenter/empirical-traffic-gen).
DATAMINING: Points = (
    (0, 0.0), (180, 0.1), (216, 0.2), (560, 0.3), (900, 0.4), (1_100, 0.5), (1_870, 0.6), (3_160, 0.7),
    (10_000, 0.8), (400_000, 0.9), (3_160_000, 0.95), (100_000_000, 0.98), (1_000_000_000, 1.0),
)

BUILTIN: dict[str, Points] = {"websearch": WEBSEARCH, "datamining": DATAMINING}
SOURCES: dict[str, str] = {
    "websearch": "DCTCP web search (Alizadeh et al., SIGCOMM 2010); points of DCTCP_CDF in github.com/datacenter/empirical-traffic-gen",
    "datamining": "VL2 data mining (Greenberg et al., SIGCOMM 2009); points of VL2_CDF in github.com/datacenter/empirical-traffic-gen",
}
# Spellings accepted for the built-in names.
ALIASES = {"web-search": "websearch", "web_search": "websearch", "data-mining": "datamining", "data_mining": "datamining",
           "dctcp": "websearch", "vl2": "datamining"}

MAX_ROWS = 100_000
MAX_BYTES = 10**15
CSV_FORM = "two columns bytes,cumulative fraction (e.g. 10000,0.15), sizes increasing, the last fraction 1"


@dataclass(frozen=True)
class FlowSizeCDF:
    """An empirical flow-size distribution: `points` as written (published or
    read from a CSV), `name` (a built-in name or the CSV's path)."""

    name: str
    points: Points

    @property
    def mean_bytes(self) -> float:
        return mean_bytes(self.points)

    def engine_points(self) -> list[list]:
        return engine_points(self.points)


def builtin_name(text: str) -> Optional[str]:
    """The built-in CDF `text` names (any case, '-' or '_' allowed), else None."""
    key = text.strip().lower()
    key = ALIASES.get(key, key)
    return key if key in BUILTIN else None


def looks_like_path(text: str) -> bool:
    return any(c in text for c in "/\\.") or text.startswith("~")


def check_sizes_name(text: str) -> None:
    """Raises ValueError for a word that is neither a built-in CDF nor written like a path (a typo)."""
    if builtin_name(text) is None and not looks_like_path(text):
        close = difflib.get_close_matches(text.strip().lower(), list(BUILTIN) + list(ALIASES), n=1)
        hint = f"did you mean {ALIASES.get(close[0], close[0])!r}? " if close else ""
        raise ValueError(f"unknown flow-size distribution {text!r}; {hint}choose {' or '.join(repr(n) for n in BUILTIN)}, "
                         "or give the path of a CSV file (bytes,cumulative fraction)")


def resolve(sizes: str, base_dir: Optional[str] = None) -> FlowSizeCDF:
    """The CDF `sizes` names: a built-in name, or a CSV path (relative to `base_dir` when given)."""
    name = builtin_name(sizes)
    if name is not None:
        return FlowSizeCDF(name, BUILTIN[name])
    check_sizes_name(sizes)
    path = Path(sizes).expanduser()
    if base_dir is not None and not path.is_absolute():
        path = Path(base_dir) / path
    return FlowSizeCDF(str(path), read_cdf_csv(path))


def file_digest(sizes: str, base_dir: Optional[str] = None) -> Optional[str]:
    """SHA-256 of the CSV file `sizes` names (None for a built-in name): for
    result caches, as the scenario names the file, not its points."""
    import hashlib

    if builtin_name(sizes) is not None:
        return None
    path = Path(sizes).expanduser()
    if base_dir is not None and not path.is_absolute():
        path = Path(base_dir) / path
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read the flow-size CDF ({exc.strerror or exc})") from None


def mean_bytes(points: Sequence[tuple[float, float]]) -> float:
    """Mean flow size of the piecewise-linear CDF (see the module docstring)."""
    b0, c0 = points[0]
    total = c0 * b0
    for (b_prev, c_prev), (b, c) in zip(points, points[1:]):
        total += (c - c_prev) * (b_prev + b) / 2
    return total


def engine_points(points: Sequence[tuple[float, float]]) -> list[list]:
    """The CDF as the engine reads it: ``[[bytes, cum], ...]`` with every
    fraction in (0, 1]. A leading ``(b, 0)`` point (the published tables'
    start) becomes ``(b + 1, F(b + 1))``, or is dropped when the next point is
    ``b + 1`` bytes (then the two describe the same whole-byte sizes)."""
    pts = [(int(b), float(c)) for b, c in points]
    if pts[0][1] == 0.0:
        (b0, _), (b1, c1) = pts[0], pts[1]
        pts = pts[1:] if b1 <= b0 + 1 else [(b0 + 1, c1 / (b1 - b0))] + pts[1:]
    return [[b, c] for b, c in pts]


def sample(points: Sequence[tuple[float, float]], rng, n: int):
    """`n` flow sizes (float bytes) drawn from the CDF by the engine's rule, with
    numpy's generator `rng`: for checks and plots; the engine draws its own."""
    import numpy as np

    b = np.asarray([p[0] for p in points], dtype=float)
    c = np.asarray([p[1] for p in points], dtype=float)
    u = rng.random(n)
    i = np.searchsorted(c, u, side="right")  # c[i-1] <= u < c[i]; i == 0: u < c[0]
    first = i == 0
    j = np.where(first, 1, i)
    lo_b, hi_b, lo_c, hi_c = b[j - 1], b[j], c[j - 1], c[j]
    with np.errstate(divide="ignore", invalid="ignore"):  # flat segments are never chosen (the first-point branch aside)
        out = lo_b + (u - lo_c) / (hi_c - lo_c) * (hi_b - lo_b)
    return np.where(first, b[0], out)


# ----------------------------------------------------------------- CSV


def _number(text: str) -> Optional[float]:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def read_cdf_csv(path: str | Path) -> Points:
    """Reads a user's flow-size CDF: rows ``bytes,cumulative fraction`` (an
    optional header line, ``#`` comments and blank lines are skipped). Every
    error is a :class:`~ddlsim.errors.ScenarioError` of one line naming the
    file (and line) and the fix. Only text is read: nothing is evaluated."""
    path = Path(path)
    input_file(path, "flow-size CDF file", f"give a CSV with {CSV_FORM}, or 'websearch' / 'datamining'",
               error=ScenarioError)
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(_rows(path, fh))
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); a flow-size CDF is a CSV "
                            f"with {CSV_FORM}") from None
    except csv.Error as exc:
        raise ScenarioError(f"{path}: not a readable CSV ({exc}); a flow-size CDF has {CSV_FORM}") from None
    if not rows:
        raise ScenarioError(f"{path}: no data rows; a flow-size CDF has {CSV_FORM}")
    if len(rows) < 2:
        raise ScenarioError(f"{path}:{rows[0][0]}: only one row; a flow-size CDF needs at least two rows "
                            f"(the smallest and the largest size), {CSV_FORM}")
    points: list[tuple[int, float]] = []
    for index, (line, b, c) in enumerate(rows):
        where = f"{path}:{line}"
        if b != int(b) or b < 0 or b > MAX_BYTES:
            raise ScenarioError(f"{where}: size {b:g} is not a whole number of bytes from 0 to 1e15; "
                                "write flow sizes in bytes (e.g. 10000)")
        if c < 0 or c > 1 + 1e-9:
            percent = " (percent? divide by 100)" if 1 < c <= 100 else ""
            raise ScenarioError(f"{where}: cumulative fraction {c:g} is outside (0, 1]{percent}; write fractions such as 0.15")
        if c == 0 and index > 0:
            raise ScenarioError(f"{where}: cumulative fraction 0 is only allowed on the first row (where sizes start); "
                                "give each later row the fraction of flows up to its size, in (0, 1]")
        if b == 0 and c > 0:
            raise ScenarioError(f"{where}: size 0 with cumulative fraction {c:g}: a flow has at least one byte; "
                                "start at 1 byte, or write the start as 0,0")
        if points and b <= points[-1][0]:
            raise ScenarioError(f"{where}: size {int(b)} is not larger than the previous row's {points[-1][0]}; "
                                "sizes must strictly increase, one row per size")
        if points and c < points[-1][1]:
            raise ScenarioError(f"{where}: cumulative fraction {c:g} is below the previous row's {points[-1][1]:g}; "
                                "a CDF never decreases: sort the rows by size and check the fractions")
        points.append((int(b), c))
    last_line, last = rows[-1][0], points[-1][1]
    if abs(last - 1.0) > 1e-9:
        raise ScenarioError(f"{path}:{last_line}: the last cumulative fraction is {last:g}, but a CDF ends at 1; "
                            "add a row for the largest size with fraction 1 (or rescale the fractions)")
    points[-1] = (points[-1][0], 1.0)
    return tuple(points)


def _rows(path: Path, fh):
    """(line number, bytes, cum) of every data row; the first line may be a header."""
    data = 0
    for line_no, fields in enumerate(csv.reader(fh), start=1):
        cells = [f.strip() for f in fields]
        if not any(cells) or cells[0].startswith("#"):
            continue
        values = [_number(x) for x in cells]
        if line_no == 1 and len(cells) == 2 and all(v is None for v in values):
            continue  # a header such as "bytes,cdf"
        where = f"{path}:{line_no}"
        if len(cells) != 2:
            raise ScenarioError(f"{where}: {len(cells)} column{'s' if len(cells) != 1 else ''} ({','.join(cells)[:60]!r}); "
                                f"a flow-size CDF has {CSV_FORM}")
        for cell, value in zip(cells, values):
            if value is None:
                raise ScenarioError(f"{where}: {cell[:40]!r} is not a number; a flow-size CDF has {CSV_FORM}")
        data += 1
        if data > MAX_ROWS:
            raise ScenarioError(f"{where}: more than {MAX_ROWS:,} rows; thin the CDF out (a few dozen points describe it)")
        yield line_no, values[0], values[1]
