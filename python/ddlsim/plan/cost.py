"""All-reduce cost models: MG-WFBP's Table II and fits to microbenchmarks.

Shi et al., MG-WFBP (ICDCS 2019), Eq. 9 and Table II: an all-reduce of M
bytes among N workers costs T_ar(M) = a + b M, where a and b follow from the
point-to-point startup time alpha, the per-byte transfer time beta and the
per-byte reduction time gamma:

=============================  ==================  =====================================
algorithm                      a                   b
=============================  ==================  =====================================
binary tree                    2 alpha log2 N      (2 beta + gamma) log2 N
recursive doubling             alpha log2 N        (beta + gamma) log2 N
recursive halving-doubling     2 alpha log2 N      2 beta - (2 beta + gamma) / N + gamma
ring                           2 (N - 1) alpha     2 (N - 1) / N beta + (N - 1) / N gamma
=============================  ==================  =====================================

:func:`fit` fits a and b by least squares, per worker count, to measured
all-reduce times (:func:`read_table` reads OSU ``osu_allreduce`` output and
plain CSV), reports the fit quality (R², largest relative error) and turns
a and b back into alpha and beta with the table (gamma given, 0 by default).
A :class:`CostModel` (fitted, read from JSON or given) prices an all-reduce
for any worker count (:meth:`CostModel.allreduce`), drives the MG-WFBP
planner and gives the simulated network that has the same alpha and beta
(:meth:`CostModel.network`: latency = alpha, bandwidth = 1 / beta, which is
how the engine's ring steps cost a message, see
:func:`ddlsim.simulation.lowering.allreduce_cost`).

Units: nanoseconds and bytes throughout (alpha_ns, beta_ns_per_byte).
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Iterable, Optional, Sequence

from ..errors import PlanError
from ..inputs import input_file
from ..simulation import algorithms as _registry
from ..simulation.algorithms import AllReduceCost

# Table II's algorithms (what a measured table can be fitted with), and every
# algorithm the engine simulates: both read from the one registry.
ALGORITHMS = tuple(a.name for a in _registry.table2_algorithms())
SIMULATED_ALGORITHMS = _registry.names()
TIME_UNITS_NS = {"ns": 1, "us": 1000, "ms": 10**6, "s": 10**9}


def algorithm_name(name: str) -> str:
    """The canonical Table II name of an all-reduce algorithm."""
    key = _registry.canonical(name)
    if key not in ALGORITHMS:
        other = " (the simulator runs it, but MG-WFBP's Table II gives no cost to fit it with)" if key in SIMULATED_ALGORITHMS else ""
        raise PlanError(f"unknown all-reduce algorithm {name!r}{other}; choose one of {', '.join(ALGORITHMS)}")
    return key


def _model_algorithm(name: str) -> str:
    """A cost model's algorithm: Table II's (fitted) or any other the simulator runs (priced by its schedule)."""
    key = _registry.canonical(name)
    if key not in ALGORITHMS and key not in SIMULATED_ALGORITHMS:
        raise PlanError(f"unknown all-reduce algorithm {name!r}; choose one of {', '.join(SIMULATED_ALGORITHMS)}")
    return key


def table2(algorithm: str, workers: int, alpha_ns: float, beta_ns_per_byte: float,
           gamma_ns_per_byte: float = 0.0) -> AllReduceCost:
    """T_ar(M) = a + b M of Table II for `workers` workers."""
    return _registry.get(algorithm_name(algorithm)).table2(workers, alpha_ns, beta_ns_per_byte, gamma_ns_per_byte)


def _coefficients(algorithm: str, n: int) -> tuple[float, float, float]:
    """(ka, kb, kg) with a = ka alpha and b = kb beta + kg gamma (Table II)."""
    return _registry.get(algorithm_name(algorithm)).table2_coefficients(n)


def point_to_point(algorithm: str, workers: int, a_ns: float, b_ns_per_byte: float,
                   gamma_ns_per_byte: float = 0.0) -> tuple[float, float]:
    """Table II read backwards: (alpha, beta) from an all-reduce's (a, b)."""
    if workers < 2:
        raise PlanError(f"an all-reduce among {workers} worker(s) sends nothing; alpha and beta need at least 2 workers")
    ka, kb, kg = _coefficients(algorithm, workers)
    return a_ns / ka, (b_ns_per_byte - kg * gamma_ns_per_byte) / kb


# ----------------------------------------------------------------- samples


@dataclass(frozen=True)
class Sample:
    """One measured all-reduce: message size, time, worker count, where it was read."""

    size_bytes: Fraction
    time_ns: Fraction
    workers: Optional[int]
    origin: str = ""  # "file:line"


_OSU_TITLE = re.compile(r"^#?\s*OSU\b.*\bTest\b", re.IGNORECASE)
_OSU_HEADER = re.compile(r"^#?\s*Size\s+Avg\s+Latency\s*\((us|ms|ns|s)\)", re.IGNORECASE)
# one way to match each number (not \d+\.?\d*, whose two digit runs backtrack quadratically on a long
# run of digits that does not end a number)
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_OSU_ROW = re.compile(rf"^\s*(\d{{1,19}})\s+({_NUMBER})(?:\s+.*)?$")


_MAX_MEASURE = 1e30  # sizes (bytes) and times (any unit) beyond this are no measurement
_MAX_WORKERS = 1_000_000  # a worker count of a measured all-reduce


def _exact(text: str, what: str, origin: str) -> Fraction:
    text = text.strip()
    try:
        approx = float(text)
    except ValueError:
        raise PlanError(f"{origin}: {what} must be a number, got {text[:40]!r}") from None
    # an exponent of 1000 or more (1e-999999) would make a fraction of a million digits: no measurement has one
    if not math.isfinite(approx) or abs(approx) > _MAX_MEASURE or re.search(r"[eE][-+]?0*\d{4,}", text):
        raise PlanError(f"{origin}: {what} {text[:40]!r} is out of range (at most {_MAX_MEASURE:g})")
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise PlanError(f"{origin}: {what} must be a number, got {text[:40]!r}") from None
    if value < 0:
        raise PlanError(f"{origin}: {what} must not be negative, got {text.strip()!r}")
    return value


def _is_osu(lines: Sequence[str]) -> bool:
    return any(_OSU_TITLE.match(line.strip()) or _OSU_HEADER.match(line.strip()) for line in lines[:200])


def _read_osu(path: Path, lines: Sequence[str], workers: Optional[int]) -> list[Sample]:
    """OSU micro-benchmark output: a title ``# OSU MPI Allreduce Latency Test
    vX.Y``, on newer versions ``# Datatype: MPI_FLOAT.``, a header ``# Size
    Avg Latency(us)`` (with ``-f`` also min, max latency and iterations), then
    one row per message size in bytes with the average latency in us. Lines
    before the first header (mpirun's binding reports) are skipped."""
    samples: list[Sample] = []
    unit_ns: Optional[int] = None
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        origin = f"{path}:{number}"
        title = _OSU_TITLE.match(line)
        if title:
            if "allreduce" not in line.lower().replace("-", "").replace("_", "").replace(" ", ""):
                raise PlanError(f"{origin}: this is the output of another OSU test ({line.lstrip('# ')!r}); "
                                "give the output of osu_allreduce")
            continue
        header = _OSU_HEADER.match(line)
        if header:
            unit_ns = TIME_UNITS_NS[header.group(1).lower()]
            continue
        if not line or line.startswith("#") or unit_ns is None:
            continue
        row = _OSU_ROW.match(line)
        if not row:
            raise PlanError(f"{origin}: cannot read {line[:80]!r} as an osu_allreduce row "
                            "(message size in bytes, then the average latency); remove the line or fix it")
        samples.append(Sample(Fraction(int(row.group(1))), _exact(row.group(2), "latency", origin) * unit_ns,
                              workers, origin))
    if unit_ns is None:
        raise PlanError(f"{path}: no '# Size  Avg Latency(us)' header; is this osu_allreduce output?")
    if workers is None:
        raise PlanError(f"{path}: OSU output does not say how many processes ran; give the worker count (--workers N)")
    return samples


_SIZE_COLUMNS = ("size", "bytes", "size_bytes", "message_size", "msg_size", "m")
_WORKER_COLUMNS = ("workers", "nodes", "ranks", "procs", "processes", "n", "np")
_TIME_COLUMN = re.compile(r"^(?:time|latency|t|avg_latency)(?:_?\(?(ns|us|ms|s)\)?)?$")


def _read_csv(path: Path, text: str, workers: Optional[int], time_unit: str) -> list[Sample]:
    """CSV ``size,time[,workers]``: size in bytes; time in `time_unit` unless
    the header names the unit (``time_us``, ``time_ms``, ``time_s``,
    ``time_ns``); the header is optional (then the columns are in that order)."""
    try:
        rows = list(csv.reader(text.splitlines()))
    except csv.Error as exc:
        raise PlanError(f"{path}: not a readable CSV ({exc}); give size,time[,workers] rows (size in bytes)") from None
    if not rows:
        raise PlanError(f"{path}: empty table; give size,time[,workers] rows (size in bytes)")
    first = [c.strip().lower().replace(" ", "_") for c in rows[0]]
    size_col, time_col, workers_col = 0, 1, 2
    unit_ns = TIME_UNITS_NS[time_unit]
    start = 0
    has_header = any(c and not re.fullmatch(_NUMBER, c) for c in first)
    if has_header:
        start = 1
        size_col = next((i for i, c in enumerate(first) if c in _SIZE_COLUMNS), None)
        time_match = [(i, _TIME_COLUMN.match(c)) for i, c in enumerate(first)]
        time_col = next((i for i, m in time_match if m), None)
        workers_col = next((i for i, c in enumerate(first) if c in _WORKER_COLUMNS), None)
        if size_col is None or time_col is None:
            raise PlanError(f"{path}:1: header {','.join(rows[0])!r} needs a size column (bytes) and a time column "
                            "(time, time_us, time_ms, time_s or time_ns); write e.g. size,time_us,workers")
        unit = time_match[time_col][1].group(1)
        if unit:
            unit_ns = TIME_UNITS_NS[unit]
    samples: list[Sample] = []
    for number, row in enumerate(rows[start:], start=start + 1):
        origin = f"{path}:{number}"
        if not row or all(not c.strip() for c in row) or row[0].lstrip().startswith("#"):
            continue
        need = max(size_col, time_col) + 1
        if len(row) < need:
            raise PlanError(f"{origin}: expected at least {need} columns (size,time[,workers]), got {len(row)}")
        size = _exact(row[size_col], "size (bytes)", origin)
        time = _exact(row[time_col], "time", origin) * unit_ns
        n = workers
        if workers_col is not None and workers_col < len(row) and row[workers_col].strip():
            w = row[workers_col].strip()
            if not re.fullmatch(r"\d{1,7}", w) or not 1 <= int(w) <= _MAX_WORKERS:
                raise PlanError(f"{origin}: workers must be a whole number from 1 to {_MAX_WORKERS}, got {w[:40]!r}")
            n = int(w)
        if n is None:
            raise PlanError(f"{origin}: no worker count; add a workers column or give --workers N")
        samples.append(Sample(size, time, n, origin))
    return samples


def read_table(path: str | Path, workers: Optional[int] = None, time_unit: str = "us") -> list[Sample]:
    """Measured all-reduce times from OSU ``osu_allreduce`` output or a CSV
    ``size,time[,workers]``. `workers` is the worker count of rows that do not
    give one (OSU output never does). Errors name the file and line."""
    path = Path(path)
    if time_unit not in TIME_UNITS_NS:
        raise PlanError(f"time unit {time_unit!r}: choose one of {', '.join(TIME_UNITS_NS)}")
    if workers is not None and not 1 <= workers <= _MAX_WORKERS:
        raise PlanError(f"workers must be from 1 to {_MAX_WORKERS}, got {workers}")
    input_file(path, "microbenchmark table", "give osu_allreduce output or a CSV size,time[,workers]", error=PlanError,
               missing=f"{path}: file not found; give osu_allreduce output or a CSV size,time[,workers]")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise PlanError(f"{path}: not a text file; give osu_allreduce output or a CSV size,time[,workers]") from None
    lines = text.splitlines()
    samples = _read_osu(path, lines, workers) if _is_osu(lines) else _read_csv(path, text, workers, time_unit)
    if not samples:
        raise PlanError(f"{path}: no measurements found")
    return samples


# ----------------------------------------------------------------- fitting


@dataclass(frozen=True)
class WorkerFit:
    """T_ar(M) = a + b M fitted for one worker count, and its alpha and beta."""

    workers: int
    a_ns: float
    b_ns_per_byte: float
    alpha_ns: float
    beta_ns_per_byte: float
    r2: float
    max_relative_error: float
    points: int
    min_size_bytes: int
    max_size_bytes: int

    @property
    def cost(self) -> AllReduceCost:
        return AllReduceCost(self.a_ns, self.b_ns_per_byte)


def least_squares(xs: Sequence[Fraction], ys: Sequence[Fraction]) -> tuple[Fraction, Fraction]:
    """(a, b) minimising sum (a + b x - y)^2, in exact arithmetic (so data
    that lie on a line give that line exactly)."""
    n = len(xs)
    mx, my = sum(xs, Fraction(0)) / n, sum(ys, Fraction(0)) / n
    sxx = sum(((x - mx) ** 2 for x in xs), Fraction(0))
    if sxx == 0:
        raise ValueError("all sizes are equal")
    sxy = sum(((x - mx) * (y - my) for x, y in zip(xs, ys)), Fraction(0))
    b = sxy / sxx
    return my - b * mx, b


def fit_quality(xs: Sequence[Fraction], ys: Sequence[Fraction], a: Fraction, b: Fraction) -> tuple[float, float]:
    """(R², largest |predicted - measured| / measured) of the line a + b x."""
    my = sum(ys, Fraction(0)) / len(ys)
    ss_res = sum(((a + b * x - y) ** 2 for x, y in zip(xs, ys)), Fraction(0))
    ss_tot = sum(((y - my) ** 2 for y in ys), Fraction(0))
    r2 = 1.0 if ss_tot == 0 else float(1 - ss_res / ss_tot)
    rel = [abs(a + b * x - y) / y for x, y in zip(xs, ys) if y > 0]
    return r2, float(max(rel)) if rel else 0.0


def fit(samples: Iterable[Sample], algorithm: str = "ring", gamma_ns_per_byte: float = 0.0,
        min_size_bytes: int = 0, source: str = "") -> "CostModel":
    """Least-squares fit of a and b per worker count (samples of at least
    `min_size_bytes` bytes), alpha and beta per worker count from Table II,
    and one alpha and beta for all of them (the least-squares solution of
    Table II over every sample; with one worker count, that count's)."""
    algorithm = algorithm_name(algorithm)
    if not 0 <= gamma_ns_per_byte < math.inf:  # found by probing: nan was refused as "beta_ns_per_byte ... got nan"
        raise PlanError(f"--gamma {gamma_ns_per_byte:g}: the reduction time per byte is a finite number of ns >= 0, "
                        "e.g. --gamma 0.1 (or leave it out: 0)")
    by_workers: dict[int, list[Sample]] = {}
    for s in samples:
        if s.size_bytes >= min_size_bytes:
            by_workers.setdefault(int(s.workers), []).append(s)
    if not by_workers:
        raise PlanError(f"no measurements of at least {min_size_bytes} bytes to fit")
    fits = []
    for n in sorted(by_workers):
        group = by_workers[n]
        xs, ys = [s.size_bytes for s in group], [s.time_ns for s in group]
        if len(set(xs)) < 2:
            raise PlanError(f"{group[0].origin}: {n} workers: need at least two different message sizes to fit "
                            f"a + bM, got {len(set(xs))}")
        a, b = least_squares(xs, ys)
        r2, max_rel = fit_quality(xs, ys, a, b)
        alpha, beta = point_to_point(algorithm, n, float(a), float(b), gamma_ns_per_byte) if n >= 2 else (0.0, 0.0)
        fits.append(WorkerFit(n, float(a), float(b), alpha, beta, r2, max_rel, len(group), int(min(xs)), int(max(xs))))
    usable = [f for f in fits if f.workers >= 2]
    if not usable:
        raise PlanError("every measurement is for 1 worker; an all-reduce among 1 worker sends nothing")
    if len(usable) == 1:
        alpha, beta = usable[0].alpha_ns, usable[0].beta_ns_per_byte
    else:
        alpha, beta = _joint_fit(algorithm, by_workers, gamma_ns_per_byte)
    return CostModel(algorithm, alpha, beta, gamma_ns_per_byte, tuple(fits), source)


def _joint_fit(algorithm: str, by_workers: dict[int, list[Sample]], gamma: float) -> tuple[float, float]:
    """alpha, beta minimising the squared error of Table II over all samples."""
    import numpy as np

    rows, rhs = [], []
    for n, group in by_workers.items():
        if n < 2:
            continue
        ka, kb, kg = _coefficients(algorithm, n)
        for s in group:
            rows.append((ka, kb * float(s.size_bytes)))
            rhs.append(float(s.time_ns) - kg * gamma * float(s.size_bytes))
    solution, *_ = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)
    return float(solution[0]), float(solution[1])


# ----------------------------------------------------------------- cost model


@dataclass(frozen=True)
class CostModel:
    """alpha, beta, gamma of an all-reduce algorithm (Table II), with the
    per-worker-count fits it came from (if fitted)."""

    algorithm: str = "ring"
    alpha_ns: float = 10_000.0
    beta_ns_per_byte: float = 0.8  # 10 Gbit/s
    gamma_ns_per_byte: float = 0.0
    fits: tuple[WorkerFit, ...] = field(default_factory=tuple)
    source: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "algorithm", _model_algorithm(self.algorithm))
        for name in ("alpha_ns", "beta_ns_per_byte", "gamma_ns_per_byte"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise PlanError(f"cost model {name} must be a finite number >= 0, got {value!r}")
        if self.beta_ns_per_byte <= 0:
            raise PlanError("cost model beta_ns_per_byte must be > 0 (it is 8e9 / bandwidth in bit/s)")

    @classmethod
    def from_network(cls, latency_ns: float, bandwidth_bps: float, algorithm: str = "ring") -> "CostModel":
        """alpha = the latency, beta = 8e9 / bandwidth (bit/s), gamma = 0."""
        return cls(algorithm, float(latency_ns), 8e9 / bandwidth_bps, 0.0, (), "network")

    def fit_for(self, workers: int) -> Optional[WorkerFit]:
        return next((f for f in self.fits if f.workers == workers), None)

    def allreduce(self, workers: int) -> AllReduceCost:
        """T_ar(M) = a + b M for `workers`: the fitted line where that worker
        count was measured, else Table II with alpha, beta and gamma (for an
        algorithm Table II lacks, its schedule's cost, ddlsim.simulation.algorithms)."""
        f = self.fit_for(workers)
        if f is not None:
            return f.cost
        if self.algorithm not in ALGORITHMS:  # not in Table II: its schedule's idle-network cost
            return _registry.get(self.algorithm).cost(workers, self.alpha_ns, self.beta_ns_per_byte, self.gamma_ns_per_byte)
        return table2(self.algorithm, workers, self.alpha_ns, self.beta_ns_per_byte, self.gamma_ns_per_byte)

    def point_to_point(self, workers: int) -> tuple[float, float]:
        """(alpha, beta) for `workers`: that worker count's fit if any, else the model's."""
        f = self.fit_for(workers)
        if f is not None and f.workers >= 2:
            return f.alpha_ns, f.beta_ns_per_byte
        return self.alpha_ns, self.beta_ns_per_byte

    def network(self, workers: int) -> dict:
        """Scenario overrides for a simulated network with this alpha and beta:
        latency = alpha (rounded to the ns), bandwidth = 8e9 / beta bit/s, the
        algorithm (every one of Table II's the engine runs) and gamma as the
        all-reduce's reduction cost."""
        alpha, beta = self.point_to_point(workers)
        if self.algorithm not in SIMULATED_ALGORITHMS:
            raise PlanError(f"the simulator runs {', '.join(SIMULATED_ALGORITHMS)} all-reduce, not {self.algorithm}; "
                            f"fit the table with --algorithm {' or '.join(a for a in ALGORITHMS if a in SIMULATED_ALGORITHMS)}")
        if beta <= 0:
            raise PlanError(f"the cost model's beta for {workers} workers is {beta!r}; it must be > 0 to give a bandwidth")
        overrides = {"latency": f"{max(0, round(alpha))}ns", "bandwidth": f"{8e9 / beta!r}bps", "algorithm": self.algorithm}
        if self.gamma_ns_per_byte:
            overrides["gamma_ns_per_byte"] = self.gamma_ns_per_byte
        return overrides

    # ------------------------------------------------------------- JSON

    def to_dict(self) -> dict:
        return {
            "ddlsim_cost_model": 1,
            "algorithm": self.algorithm,
            "alpha_ns": self.alpha_ns,
            "beta_ns_per_byte": self.beta_ns_per_byte,
            "gamma_ns_per_byte": self.gamma_ns_per_byte,
            "bandwidth_bps": 8e9 / self.beta_ns_per_byte,
            "source": self.source,
            "fits": [asdict(f) for f in self.fits],
        }

    @classmethod
    def from_dict(cls, data: dict, origin: str = "cost model") -> "CostModel":
        if not isinstance(data, dict):
            raise PlanError(f"{origin}: a cost model is a JSON object with algorithm, alpha_ns, beta_ns_per_byte")
        known = {"ddlsim_cost_model", "algorithm", "alpha_ns", "beta_ns_per_byte", "gamma_ns_per_byte",
                 "bandwidth_bps", "source", "fits"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise PlanError(f"{origin}: unknown key(s) {', '.join(map(repr, unknown))}; known keys: {', '.join(sorted(known))}")
        missing = [k for k in ("alpha_ns", "beta_ns_per_byte") if k not in data]
        if missing:
            raise PlanError(f"{origin}: missing {', '.join(missing)}; write e.g. "
                            '{"algorithm": "ring", "alpha_ns": 10000, "beta_ns_per_byte": 0.8}')
        try:
            fits = tuple(WorkerFit(**f) for f in data.get("fits", []))
        except TypeError as exc:
            raise PlanError(f"{origin}: malformed fits entry ({exc})") from None
        try:
            return cls(str(data.get("algorithm", "ring")), data["alpha_ns"], data["beta_ns_per_byte"],
                       data.get("gamma_ns_per_byte", 0.0), fits, str(data.get("source", origin)))
        except PlanError as exc:
            raise PlanError(f"{origin}: {exc}") from None

    def save(self, path: str | Path) -> None:
        from ..trace.parquet import write_json  # complete or absent, never half-written

        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "CostModel":
        path = Path(path)
        input_file(path, "cost model file", "give the JSON file that `ddlsim fit TABLE --out FILE` wrote", error=PlanError,
                   missing=f"{path}: cost model file not found; write one with `ddlsim fit TABLE --out {path}`")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:  # ValueError: bad JSON, an integer of > 4300 digits
            raise PlanError(f"{path}: not valid JSON ({exc})") from None
        except RecursionError:
            raise PlanError(f"{path}: not valid JSON (nested too deeply to read)") from None
        return cls.from_dict(data, origin=str(path))


def fit_tables(paths: Sequence[str | Path], workers: Sequence[int] = (), algorithm: str = "ring",
               gamma_ns_per_byte: float = 0.0, time_unit: str = "us", min_size_bytes: int = 0) -> CostModel:
    """Reads every table (`workers`: one count for all tables, or one per
    table, for rows that give none) and fits them together."""
    from ..arguments import path_arg

    algorithm = algorithm_name(algorithm)
    if isinstance(paths, (str, os.PathLike)):  # one table, not the characters of its name
        paths = [paths]
    if not isinstance(paths, (list, tuple)):
        raise PlanError(f"paths must be a list of table files, got {type(paths).__name__}")
    paths = [path_arg(p, f"paths[{i}]") for i, p in enumerate(paths)]
    if not paths:
        raise PlanError("give at least one table")
    if len(workers) not in (0, 1, len(paths)):
        raise PlanError(f"give one --workers for all tables or one per table ({len(paths)}), got {len(workers)}")
    samples: list[Sample] = []
    for i, p in enumerate(paths):
        n = workers[0] if len(workers) == 1 else (workers[i] if workers else None)
        samples.extend(read_table(p, n, time_unit))
    return fit(samples, algorithm, gamma_ns_per_byte, min_size_bytes, source=", ".join(str(p) for p in paths))


fit_cost_model = fit_tables
