"""Start offsets that keep several jobs' communication phases apart, in the
manner of CASSINI (Rajasekaran, Ghobadi, Akella, NSDI'24).

A data-parallel job repeats the same iteration: its traffic on a network
link is a periodic pattern, busy during the communication phases of each
iteration and idle in between. Several jobs that share a link contend only
where their busy phases coincide, and where each job's phases sit in time is
set by when the job starts. CASSINI draws each job's iteration as a circle
(circumference = the iteration time) and, for the jobs on one link, rolls
them onto one *unified circle* whose circumference is a common multiple of
their periods; rotating a job on it is shifting its start. This module
searches the rotations (start offsets) that minimise the overlap.

The model (everything in whole grid cells of ``grid_ns`` nanoseconds)
-------------------------------------------------------------------

- A :class:`CommProfile` is one job's period ``P`` and, per directed link,
  the intervals of one iteration in which the job sends on it (from the
  iteration's start; an interval may run past ``P`` and wraps). It comes
  from a simulation of the job alone (:func:`profile_from_log`).
- Cells: period ``P`` becomes ``p = round(P / g)`` cells (exact when ``g``
  divides ``P``); an interval ``[s, e)`` marks every cell it touches,
  ``floor(s / g)`` to ``ceil(e / g) - 1`` (rounded outwards, so phases that
  do not share a cell do not overlap in continuous time either). A job's
  busy demand is 1 (a phase uses the whole link, as a flow-level transfer
  alone on its path does).
- A job's *rotation* on its circle is where its profiled iteration sits:
  ``(start + anchor) mod P`` for a job started at ``start`` whose profiled
  iteration begins ``anchor`` after its start (the iterations before it,
  e.g. a slower first one at packet level, shift the phases by that much);
  the search works on rotations and returns starts, ``(rotation - anchor)
  mod P``.
- Job ``j`` with rotation ``o_j`` (cells) is busy on link ``l`` at cell ``t``
  when its pattern is busy at ``(t - o_j) mod p_j``. On the unified circle
  of ``H`` cells (``H = lcm(p_j)``; at most ``max_cells``, beyond which the
  first ``max_cells`` cells are used and a note says so) the link's
  **excess** is ``sum_t max(0, n_l(t) - 1)``, ``n_l(t)`` the number of jobs
  busy on it: the time during which more than one job wants the link, once
  per job beyond the first (CASSINI's excess demand over capacity with unit
  demands and capacity). The objective is the total excess over the links
  that two or more jobs use.
- **Compatibility score** of a link: ``1 - excess / H`` (1: the jobs never
  meet there; 0 with two jobs: always). The plan's score is the mean over
  the shared links.
- **Predicted delay** of job ``j`` per iteration (a first-order estimate,
  exact for two jobs sharing one link at fair share whose phases do not
  drift): at each cell where ``j`` sends, the largest number of other jobs
  sending on one of its links, summed over the circle, times ``g``, divided
  by the number of ``j``'s iterations on the circle (``H / p_j``).

The search
----------

Only relative offsets matter (shifting every job by the same amount keeps
every overlap), so in each connected component of the affinity graph (the
bipartite graph of jobs and the shared links they use) the first job stays
at offset 0. Adding job ``j`` to a link where the other jobs' busy count is
``m(t)`` raises the excess by ``[m(t) >= 1]`` at each cell where ``j`` is
busy, so the change in excess for *every* offset of ``j`` at once is a
circular correlation of ``j``'s pattern with the folded occupancy of the
others (one FFT per link): the *best response* of job ``j``.

- ``exact``: every combination of offsets of the component's jobs but the
  first and the last, and the best response of the last job: the optimum on
  the grid. Chosen by ``method="auto"`` while the work (combinations x
  cells x links) stays under ``max_work``.
- ``affinity`` (CASSINI's Algorithm): per shared link, the offsets that
  minimise that link's excess alone (jobs placed one by one, largest
  busy time first, at their best response, then improved by best-response
  sweeps); then a breadth-first walk of the affinity graph from the
  component's first job gives each job reached over link ``l`` from job
  ``i`` the offset ``t_j = t_i - s_{i,l} + s_{j,l}`` (mod ``p_j``), which
  keeps the per-link optimum on every link of a tree; a job reached a second
  time (a loop in the affinity graph) keeps its first offset and the plan
  counts the conflict. The result, and ``restarts`` random starts (seeded),
  are improved by best-response sweeps over all jobs until none helps; the
  lowest total excess wins (the first one found on ties).

Ties between offsets of equal excess go to the middle of the longest run of
equally good offsets (the widest gap), and otherwise to the smallest offset;
once found, every job but the first moves, in turn and twice over, to the
middle of its widest run of best offsets given the others, which never
raises the excess and leaves the phases more room on either side.
Everything is integer arithmetic or exactly rounded FFT sums (values below
2**31), so identical inputs give identical plans.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import product
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from ..errors import PlanError

DEFAULT_CELLS_PER_PERIOD = 1000
DEFAULT_MAX_CELLS = 1 << 18
DEFAULT_MAX_WORK = 50_000_000
DEFAULT_RESTARTS = 4


@dataclass(frozen=True)
class CommProfile:
    """One job's communication profile: its iteration period and, per link
    name, the ``(start_ns, end_ns)`` intervals of one iteration during which
    it sends on that link, measured from the iteration's start.
    ``anchor_ns``: when that iteration starts, counted from the job's start
    (the job repeats it every period from then on, so a job started at ``s``
    sends on the link at ``s + anchor + k * period + phase``)."""

    name: str
    period_ns: int
    phases: Mapping[str, Sequence[tuple[int, int]]]
    anchor_ns: int = 0

    def rotation_ns(self, start_ns: int) -> int:
        """Where a start at `start_ns` puts the profiled iteration on the job's circle."""
        return (int(start_ns) + int(self.anchor_ns)) % int(self.period_ns)

    def start_for(self, rotation_ns: int) -> int:
        """The start in [0, period) that puts the profiled iteration at `rotation_ns` on the circle."""
        return (int(rotation_ns) - int(self.anchor_ns)) % int(self.period_ns)

    def busy_ns(self, link: str) -> int:
        """Time the job sends on `link` per iteration (intervals merged, wrapped onto the period)."""
        return int(sum(e - s for s, e in _merged(self.phases.get(link, ()), int(self.period_ns))))

    def to_dict(self) -> dict:
        return {"name": self.name, "period_ns": int(self.period_ns), "anchor_ns": int(self.anchor_ns),
                "phases": {link: [[int(s), int(e)] for s, e in _merged(v, int(self.period_ns))]
                           for link, v in sorted(self.phases.items())}}


def _merged(intervals: Iterable[tuple[int, int]], period: int) -> list[tuple[int, int]]:
    """`intervals` wrapped onto [0, period) and merged, sorted."""
    pieces = []
    for s, e in intervals:
        s, e = int(s), int(e)
        if e <= s:
            continue
        if e - s >= period:
            return [(0, period)]
        s0 = s % period
        e0 = s0 + (e - s)
        if e0 <= period:
            pieces.append((s0, e0))
        else:
            pieces.extend([(s0, period), (0, e0 - period)])
    pieces.sort()
    out: list[tuple[int, int]] = []
    for s, e in pieces:
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


@dataclass
class Evaluation:
    """Overlap of the jobs at given offsets (see the module doc)."""

    offsets_ns: list[int]  # the jobs' starts
    excess_cells: dict[str, int]  # per shared link
    horizon_cells: int
    grid_ns: int
    periods_cells: list[int]
    delay_cells: list[int]  # per job: sum over the circle of the other jobs it meets (module doc)

    @property
    def total_excess_cells(self) -> int:
        return int(sum(self.excess_cells.values()))

    @property
    def scores(self) -> dict[str, float]:
        return {link: 1.0 - e / self.horizon_cells for link, e in self.excess_cells.items()}

    @property
    def score(self) -> float:
        """Mean compatibility score over the shared links (1.0 when none is shared)."""
        s = self.scores
        return float(sum(s.values()) / len(s)) if s else 1.0

    @property
    def overlap_fraction(self) -> float:
        """Total excess / circle (summed over the shared links)."""
        return self.total_excess_cells / self.horizon_cells

    def predicted_delay_ns(self) -> list[float]:
        return [d * self.grid_ns * p / self.horizon_cells for d, p in zip(self.delay_cells, self.periods_cells)]

    def to_dict(self, names: Sequence[str]) -> dict:
        return {
            "offsets_ns": [int(o) for o in self.offsets_ns],
            "excess_ns": self.total_excess_cells * self.grid_ns,
            "overlap_fraction": self.overlap_fraction,
            "score": self.score,
            "links": {link: {"excess_ns": e * self.grid_ns, "score": self.scores[link]}
                      for link, e in sorted(self.excess_cells.items())},
            "predicted_delay_ns": dict(zip(names, self.predicted_delay_ns())),
        }


@dataclass
class OffsetPlan:
    """What :func:`search_offsets` found."""

    names: list[str]
    periods_ns: list[int]
    grid_ns: int
    periods_cells: list[int]
    horizon_cells: int
    exact_circle: bool  # the horizon is the whole unified circle (lcm of the periods in cells)
    method: str  # "exact", "affinity" or "none" (no shared link)
    shared_links: dict[str, list[str]]  # link -> names of the jobs on it
    before: Evaluation
    after: Evaluation
    components: list[list[str]]
    conflicts: int = 0  # affinity-graph loops whose per-link shifts disagreed
    evaluations: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def offsets_ns(self) -> list[int]:
        return list(self.after.offsets_ns)

    def offset_of(self, name: str) -> int:
        return self.after.offsets_ns[self.names.index(name)]

    def to_dict(self) -> dict:
        return {
            "jobs": list(self.names),
            "periods_ns": [int(p) for p in self.periods_ns],
            "offsets_ns": {n: int(o) for n, o in zip(self.names, self.after.offsets_ns)},
            "grid_ns": self.grid_ns,
            "periods_cells": list(self.periods_cells),
            "circle_ns": self.horizon_cells * self.grid_ns,
            "exact_circle": self.exact_circle,
            "method": self.method,
            "shared_links": {k: list(v) for k, v in sorted(self.shared_links.items())},
            "components": [list(c) for c in self.components],
            "conflicts": self.conflicts,
            "evaluations": self.evaluations,
            "before": self.before.to_dict(self.names),
            "after": self.after.to_dict(self.names),
            "notes": list(self.notes),
        }


# ------------------------------------------------------------------ the grid


def default_grid_ns(periods_ns: Sequence[int], cells_per_period: int = DEFAULT_CELLS_PER_PERIOD) -> int:
    """A grid step near ``max(period) / cells_per_period``: the largest
    divisor of the periods' gcd not above it when that is at least a quarter
    of it (the periods then fill whole cells, exactly), else that step."""
    periods = [int(p) for p in periods_ns]
    target = max(1, max(periods) // max(1, cells_per_period))
    g = 0
    for p in periods:
        g = math.gcd(g, p)
    if g <= target:
        return g if 4 * g >= target else target
    k = -(-g // target)  # the smallest divisor count k with g / k <= target
    while g // k >= max(1, target // 4):
        if g % k == 0:
            return g // k
        k += 1
    return target


class _Grid:
    """The jobs' patterns on the grid (module doc)."""

    def __init__(self, profiles: Sequence[CommProfile], grid_ns: int, max_cells: int):
        self.grid = int(grid_ns)
        self.periods = [max(1, int(round(int(p.period_ns) / self.grid))) for p in profiles]
        lcm = 1
        for p in self.periods:
            lcm = lcm * p // math.gcd(lcm, p)
        self.exact_circle = lcm <= max_cells
        self.horizon = int(lcm if self.exact_circle else max(max_cells, max(self.periods)))
        links: dict[str, list[int]] = {}
        self.patterns: list[dict[str, np.ndarray]] = []
        for j, prof in enumerate(profiles):
            pj = self.periods[j]
            pats = {}
            for link in sorted(prof.phases):
                pat = np.zeros(pj, dtype=np.int64)
                for s, e in prof.phases[link]:
                    s, e = int(s), int(e)
                    if e <= s:
                        continue
                    a, b = s // self.grid, -(-e // self.grid)
                    if b - a >= pj:
                        pat[:] = 1
                        continue
                    idx = np.arange(a, b) % pj
                    pat[idx] = 1
                if pat.any():
                    pats[link] = pat
                    links.setdefault(link, []).append(j)
            self.patterns.append(pats)
        self.shared = {link: jobs for link, jobs in sorted(links.items()) if len(jobs) >= 2}
        self.n = len(profiles)
        self._tiles: dict[tuple[int, str], np.ndarray] = {}

    def tiled(self, j: int, link: str, offset: int) -> np.ndarray:
        """Job j's busy cells on `link` over the horizon at `offset` cells (a view)."""
        key = (j, link)
        long = self._tiles.get(key)
        pat = self.patterns[j][link]
        p = len(pat)
        if long is None:
            long = self._tiles[key] = np.tile(pat, -(-self.horizon // p) + 1)
        start = (-int(offset)) % p
        return long[start:start + self.horizon]

    def fold(self, values: np.ndarray, p: int) -> np.ndarray:
        """sum of values[t] over the horizon's t with t mod p = u, for each u < p."""
        pad = (-len(values)) % p
        if pad:
            values = np.concatenate([values, np.zeros(pad, dtype=values.dtype)])
        return values.reshape(-1, p).sum(axis=0)

    def correlate(self, j: int, link: str, occupied: np.ndarray) -> np.ndarray:
        """out[o] = cells where job j at offset o is busy on `link` while `occupied` (0/1) is set."""
        pj = self.periods[j]
        folded = self.fold(occupied, pj).astype(float)
        pat = self.patterns[j][link].astype(float)
        # out[o] = sum_u pat[u] * folded[(u + o) mod pj]: a circular correlation
        return np.rint(np.fft.irfft(np.conj(np.fft.rfft(pat)) * np.fft.rfft(folded), n=pj)).astype(np.int64)

    def counts(self, link: str, offsets: Sequence[int], skip: Optional[int] = None) -> np.ndarray:
        n = np.zeros(self.horizon, dtype=np.int64)
        for j in self.shared[link]:
            if j != skip:
                n += self.tiled(j, link, offsets[j])
        return n

    def excess(self, offsets: Sequence[int], links: Optional[Iterable[str]] = None) -> dict[str, int]:
        return {link: int(np.maximum(self.counts(link, offsets) - 1, 0).sum())
                for link in (self.shared if links is None else links)}

    def total(self, offsets: Sequence[int], links: Optional[Iterable[str]] = None) -> int:
        return sum(self.excess(offsets, links).values())

    def delays(self, offsets: Sequence[int]) -> list[int]:
        counts = {link: self.counts(link, offsets) for link in self.shared}
        out = []
        for j in range(self.n):
            worst = np.zeros(self.horizon, dtype=np.int64)
            for link in self.patterns[j]:
                if link in self.shared:
                    worst = np.maximum(worst, self.tiled(j, link, offsets[j]) * (counts[link] - 1))
            out.append(int(worst.sum()))
        return out

    def response(self, j: int, offsets: Sequence[int], links: Optional[Iterable[str]] = None) -> np.ndarray:
        """Excess that job j adds, for each of its offsets 0..p_j-1, given the others' offsets."""
        out = np.zeros(self.periods[j], dtype=np.int64)
        for link in (self.shared if links is None else links):
            if j in self.shared[link]:
                out += self.correlate(j, link, (self.counts(link, offsets, skip=j) >= 1).astype(np.int8))
        return out

    def evaluation(self, offsets: Sequence[int], starts_ns: Sequence[int]) -> Evaluation:
        """The overlap at rotations `offsets` (cells), which starts `starts_ns` give."""
        offsets = [int(o) % p for o, p in zip(offsets, self.periods)]
        return Evaluation([int(x) for x in starts_ns], self.excess(offsets), self.horizon, self.grid,
                          list(self.periods), self.delays(offsets))


def _pick(values: np.ndarray) -> int:
    """The offset of least value: the middle of the longest circular run of
    least values (the earliest run on ties; the smaller middle)."""
    best = values.min()
    good = values == best
    n = len(values)
    if good.all():
        return 0
    # rotate so that the sequence starts right after a bad cell: runs do not wrap
    start = int(np.flatnonzero(~good)[-1]) + 1
    rolled = np.roll(good, -start)
    best_len, best_at = 0, 0
    i = 0
    while i < n:
        if rolled[i]:
            k = i
            while k < n and rolled[k]:
                k += 1
            here = ((start + i) % n, k - i)
            if k - i > best_len or (k - i == best_len and here[0] < best_at):
                best_len, best_at = k - i, here[0]
            i = k
        else:
            i += 1
    return (best_at + (best_len - 1) // 2) % n


# ------------------------------------------------------------------ the search


def _components(grid: _Grid) -> list[list[int]]:
    parent = list(range(grid.n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for jobs in grid.shared.values():
        for j in jobs[1:]:
            a, b = find(jobs[0]), find(j)
            if a != b:
                parent[max(a, b)] = min(a, b)
    groups: dict[int, list[int]] = {}
    for j in range(grid.n):
        groups.setdefault(find(j), []).append(j)
    return [g for _, g in sorted(groups.items())]


def _links_of(grid: _Grid, jobs: Sequence[int]) -> list[str]:
    member = set(jobs)
    return [link for link, js in grid.shared.items() if member.intersection(js)]


def _exact(grid: _Grid, comp: list[int], offsets: list[int]) -> int:
    """Optimal offsets of `comp` (its first job fixed at 0) into `offsets`; returns the evaluations."""
    links = _links_of(grid, comp)
    middle, last = comp[1:-1], comp[-1]
    best: Optional[tuple[int, list[int]]] = None
    count = 0
    offsets[comp[0]] = 0
    for combo in product(*(range(grid.periods[j]) for j in middle)):
        for j, o in zip(middle, combo):
            offsets[j] = o
        offsets[last] = 0
        base = sum(int(np.maximum(grid.counts(link, offsets, skip=last) - 1, 0).sum()) for link in links)
        values = grid.response(last, offsets, links)
        count += 1
        total = base + int(values.min())
        if best is None or total < best[0]:
            best = (total, list(combo) + [_pick(values)])
    assert best is not None
    for j, o in zip(comp[1:], best[1]):
        offsets[j] = o
    return count


def _sweeps(grid: _Grid, offsets: list[int], jobs: Sequence[int], links: Sequence[str], max_sweeps: int = 50) -> int:
    """Best-response sweeps over `jobs` (moves only when the excess strictly drops); returns the evaluations."""
    count = 0
    for _ in range(max_sweeps):
        moved = False
        for j in jobs:
            values = grid.response(j, offsets, links)
            count += 1
            if values.min() < values[offsets[j]]:
                offsets[j] = _pick(values)
                moved = True
        if not moved:
            break
    return count


def _center(grid: _Grid, offsets: list[int], jobs: Sequence[int], links: Sequence[str], passes: int = 2) -> int:
    """Moves each job but the first, in turn, to the middle of its widest run of best offsets when that is no
    worse (the excess never rises): equally good offsets with more slack around the phases."""
    count = 0
    for _ in range(passes):
        for j in jobs[1:]:
            values = grid.response(j, offsets, links)
            count += 1
            best = _pick(values)
            if values[best] <= values[offsets[j]]:
                offsets[j] = best
    return count


def _affinity(grid: _Grid, comp: list[int], offsets: list[int], restarts: int, rng: np.random.Generator) -> tuple[int, int]:
    """CASSINI's affinity-graph offsets for `comp`, improved by best-response sweeps and random restarts."""
    links = _links_of(grid, comp)
    count = 0
    shifts: dict[tuple[int, str], int] = {}
    for link in links:
        jobs = sorted(grid.shared[link], key=lambda j: (-int(grid.patterns[j][link].sum()) * (grid.horizon // grid.periods[j]), j))
        local = [0] * grid.n
        placed: list[int] = []
        for j in jobs:
            if placed:  # only the jobs placed so far count
                values = _response_among(grid, j, local, link, placed)
                count += 1
                local[j] = _pick(values)
            placed.append(j)
        count += _sweeps_link(grid, local, jobs, link)
        for j in jobs:
            shifts[(j, link)] = local[j]
    # breadth-first over the affinity graph
    conflicts = 0
    assigned: dict[int, int] = {comp[0]: 0}
    queue = [comp[0]]
    seen_links: set[str] = set()
    while queue:
        i = queue.pop(0)
        for link in links:
            if link in seen_links or i not in grid.shared[link]:
                continue
            seen_links.add(link)
            for j in grid.shared[link]:
                t = (assigned[i] - shifts[(i, link)] + shifts[(j, link)]) % grid.periods[j]
                if j not in assigned:
                    assigned[j] = t
                    queue.append(j)
                elif j != i and assigned[j] != t:
                    conflicts += 1
    for j in comp:
        offsets[j] = assigned.get(j, 0)
    count += _sweeps(grid, offsets, comp, links)
    best_total, best = grid.total(offsets, links), [offsets[j] for j in comp]
    for _ in range(restarts):
        trial = list(offsets)
        for j in comp[1:]:
            trial[j] = int(rng.integers(grid.periods[j]))
        trial[comp[0]] = 0
        count += _sweeps(grid, trial, comp, links)
        total = grid.total(trial, links)
        if total < best_total:
            best_total, best = total, [trial[j] for j in comp]
    for j, o in zip(comp, best):
        offsets[j] = o
    return count, conflicts


def _response_among(grid: _Grid, j: int, offsets: list[int], link: str, among: Sequence[int]) -> np.ndarray:
    """Best response of j on one link counting only the jobs `among`."""
    n = np.zeros(grid.horizon, dtype=np.int64)
    for k in among:
        if k != j:
            n += grid.tiled(k, link, offsets[k])
    return grid.correlate(j, link, (n >= 1).astype(np.int8))


def _sweeps_link(grid: _Grid, local: list[int], jobs: Sequence[int], link: str) -> int:
    count = 0
    for _ in range(50):
        moved = False
        for j in jobs:
            values = _response_among(grid, j, local, link, jobs)
            count += 1
            if values.min() < values[local[j]]:
                local[j] = _pick(values)
                moved = True
        if not moved:
            break
    return count


def search_offsets(profiles: Sequence[CommProfile], *, grid_ns: Optional[int] = None,
                   start_ns: Optional[Sequence[int]] = None, method: str = "auto", max_work: int = DEFAULT_MAX_WORK,
                   max_cells: int = DEFAULT_MAX_CELLS, restarts: int = DEFAULT_RESTARTS, seed: int = 0,
                   cells_per_period: int = DEFAULT_CELLS_PER_PERIOD) -> OffsetPlan:
    """Start offsets for `profiles` that minimise the excess on shared links
    (module doc). `start_ns`: the offsets to compare against (``before``;
    default all 0). `method`: ``auto``, ``exact`` or ``affinity``."""
    if not profiles:
        raise PlanError("offset search: give at least one job profile")
    names = [p.name for p in profiles]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise PlanError(f"offset search: two jobs are named {dup!r}; give each job its own name")
    for p in profiles:
        if int(p.period_ns) <= 0:
            raise PlanError(f"offset search: job {p.name!r} has period {p.period_ns} ns; a period must be > 0")
    if method not in ("auto", "exact", "affinity"):
        raise PlanError(f"offset search: method {method!r}: choose auto, exact or affinity")
    periods_ns = [int(p.period_ns) for p in profiles]
    if grid_ns is None:
        grid_ns = default_grid_ns(periods_ns, cells_per_period)
    if int(grid_ns) <= 0:
        raise PlanError(f"offset search: grid {grid_ns} ns; the grid step must be > 0")
    grid = _Grid(profiles, int(grid_ns), int(max_cells))
    notes = []
    if any(p % grid.grid for p in periods_ns):
        notes.append(f"periods rounded to the {grid.grid} ns grid: "
                     + ", ".join(f"{n} {p} ns -> {c * grid.grid} ns" for n, p, c in zip(names, periods_ns, grid.periods)
                                 if p % grid.grid))
    if not grid.exact_circle:
        notes.append(f"the unified circle (lcm of the periods) exceeds {max_cells} cells; the overlap is counted over "
                     f"the first {grid.horizon * grid.grid} ns")
    starts_before = [0] * grid.n if start_ns is None else [int(x) for x in start_ns]
    if len(starts_before) != grid.n:
        raise PlanError(f"offset search: {len(starts_before)} start offsets for {grid.n} jobs")
    before_cells = [_cell(p.rotation_ns(x), grid.grid) for p, x in zip(profiles, starts_before)]
    offsets = [0] * grid.n
    comps = _components(grid)
    rng = np.random.default_rng(seed)
    used, evaluations, conflicts = set(), 0, 0
    for comp in comps:
        if len(comp) < 2:
            continue
        links = _links_of(grid, comp)
        combos = 1
        for j in comp[1:-1]:
            combos *= grid.periods[j]
        work = combos * grid.horizon * max(1, len(links))
        use = method if method != "auto" else ("exact" if work <= max_work else "affinity")
        if use == "exact" and method == "exact" and work > 20 * max_work:
            raise PlanError(f"offset search: the exact search would take {combos} combinations of {grid.horizon} cells; "
                            "use method \"affinity\" or a coarser grid")
        if use == "exact":
            evaluations += _exact(grid, comp, offsets)
        else:
            n, c = _affinity(grid, comp, offsets, restarts, rng)
            evaluations += n
            conflicts += c
        evaluations += _center(grid, offsets, comp, links)
        # normalise: the component's first job at 0
        shift = offsets[comp[0]]
        for j in comp:
            offsets[j] = (offsets[j] - shift) % grid.periods[j]
        used.add(use)
    before = grid.evaluation(before_cells, starts_before)
    after = grid.evaluation(offsets, [p.start_for(o * grid.grid) for p, o in zip(profiles, offsets)])
    if used and after.total_excess_cells >= before.total_excess_cells:
        after = before  # the given starts are already as good: keep them
        notes.append("the start offsets given are as good as any found; kept")
    method_used = "none" if not used else ("exact" if used == {"exact"} else ("affinity" if used == {"affinity"} else "exact+affinity"))
    if conflicts:
        notes.append(f"the affinity graph has loops: {conflicts} per-link shift(s) could not all be kept")
    return OffsetPlan(
        names=names, periods_ns=periods_ns, grid_ns=grid.grid, periods_cells=list(grid.periods),
        horizon_cells=grid.horizon, exact_circle=grid.exact_circle, method=method_used,
        shared_links={link: [names[j] for j in js] for link, js in grid.shared.items()},
        before=before, after=after, components=[[names[j] for j in c] for c in comps],
        conflicts=conflicts, evaluations=evaluations, notes=notes,
    )


def overlap_ns(profiles: Sequence[CommProfile], offsets_ns: Sequence[int], grid_ns: int,
               max_cells: int = DEFAULT_MAX_CELLS) -> int:
    """Total excess (ns over the unified circle) of `profiles` started at `offsets_ns` on the grid."""
    grid = _Grid(profiles, int(grid_ns), int(max_cells))
    return grid.total([_cell(p.rotation_ns(o), grid.grid) for p, o in zip(profiles, offsets_ns)]) * grid.grid


def _cell(ns: int, grid: int) -> int:
    """The grid cell nearest to `ns` (halves up)."""
    return (2 * int(ns) + grid) // (2 * grid)


# ------------------------------------------------------------------ profiles from a simulation

_MASK = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    """SplitMix64's finaliser, the engine's ECMP hash (network/topology.rs)."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _net(network: Any, key: str, default: Any) -> Any:
    if isinstance(network, Mapping):
        return network.get(key, default)
    return getattr(network, key, default)


def route_links(network: Any, src_host: int, dst_host: int, src_rank: int = -1, dst_rank: int = -1) -> list[str]:
    """The directed links a transfer between two hosts crosses, named as the
    engine names its ports (``host 3 -> leaf 0``, ``leaf 0 -> spine 1``,
    ``spine 1 -> leaf 2``, ``leaf 2 -> host 17``, ``host 0 -> star``,
    ``rank 4 -> host fabric``...), following its routing: ECMP takes spine
    ``splitmix64(src_host << 32 | dst_host) % spines``, spray every spine.
    `network`: a scenario's ``network`` (NetworkConfig or its dict)."""
    a, b = int(src_host), int(dst_host)
    topology = str(_net(network, "topology", "star")).replace("_", "-")
    ranks_per_host = int(_net(network, "ranks_per_host", 1))
    if a == b and ranks_per_host > 1 and src_rank >= 0 and dst_rank >= 0:
        return [f"rank {src_rank} -> host fabric", f"host fabric -> rank {dst_rank}"]
    if topology != "leaf-spine":
        return [f"host {a} -> star", f"star -> host {b}"]
    per_leaf, spines = int(_net(network, "hosts_per_leaf", 8)), int(_net(network, "spines", 2))
    la, lb = a // per_leaf, b // per_leaf
    links = [f"host {a} -> leaf {la}"]
    if la != lb:
        if str(_net(network, "routing", "ecmp")) == "spray":
            links += [f"leaf {la} -> spine {s}" for s in range(spines)] + [f"spine {s} -> leaf {lb}" for s in range(spines)]
        else:
            s = _splitmix64((a << 32) | b) % spines
            links += [f"leaf {la} -> spine {s}", f"spine {s} -> leaf {lb}"]
    links.append(f"leaf {lb} -> host {b}")
    return links


def profile_from_log(log: Any, name: str, network: Any = None, iteration: int = -1) -> CommProfile:
    """A job's :class:`CommProfile` from the event log of a run of it alone
    (an EventLog with its flows table, as ``simulate(..., record_flows=True)``
    writes; or a SimulationResult): the flows that start in iteration
    `iteration`'s window (default the last), each busy on every link of its
    route (:func:`route_links`) from its start to its end, measured from the
    window's start; the period is the time from that iteration's start to
    the next one's (the last iteration: its window's length); the anchor is
    that iteration's start less the first one's.
    `network`: the run's network (default: the log's scenario)."""
    from ..analyze.breakdown import window_arrays

    events = getattr(log, "events", log)  # a SimulationResult
    if network is None:
        scenario = getattr(log, "scenario", None)
        network = scenario.network if scenario is not None else ((events.metadata or {}).get("scenario") or {}).get("network") or {}
    flows = getattr(events, "flows", None)
    if flows is None:
        raise PlanError(f"job {name!r}: the run has no flows table; simulate it with record_flows = true (--record-flows)")
    numbers, starts, ends = window_arrays(events)
    if len(numbers) == 0:
        raise PlanError(f"job {name!r}: the run has no iteration")
    k = iteration if iteration >= 0 else len(numbers) + iteration
    if not 0 <= k < len(numbers):
        raise PlanError(f"job {name!r}: iteration {iteration} is not in the run ({len(numbers)} iterations)")
    a, b = int(starts[k]), int(ends[k])
    period = int(starts[k + 1] - a) if k + 1 < len(numbers) else b - a
    cols, finished = _flow_columns(flows)
    phases: dict[str, list[tuple[int, int]]] = {}
    routes: dict[tuple, list[str]] = {}
    # the job's own flows (a background tenant's have no rank) that start in the window
    take = finished & (cols["src"] >= 0) & (cols["start_ns"] >= a) & (cols["start_ns"] < a + period)
    for i in np.flatnonzero(take):
        key = (int(cols["src_host"][i]), int(cols["dst_host"][i]), int(cols["src"][i]), int(cols["dst"][i]))
        if key not in routes:
            routes[key] = route_links(network, *key)
        s, e = int(cols["start_ns"][i]) - a, int(cols["end_ns"][i]) - a
        for link in routes[key]:
            phases.setdefault(link, []).append((s, e))
    return CommProfile(name, period, {link: _merged(v, period) for link, v in sorted(phases.items())},
                       anchor_ns=a - int(starts[0]))


def _flow_columns(flows: Any) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(src, dst, src_host, dst_host, start_ns, end_ns as int64 arrays; finished mask) of a flows table: a
    pyarrow Table (an EventLog's) or a dict of arrays, end_ns masked where unfinished (a run's ArrayLog)."""
    names = ("src", "dst", "src_host", "dst_host", "start_ns", "end_ns")
    if hasattr(flows, "column_names"):
        end = flows.column("end_ns")
        finished = ~end.is_null().to_numpy(zero_copy_only=False)
        cols = {c: (end.fill_null(0) if c == "end_ns" else flows.column(c)).to_numpy(zero_copy_only=False).astype(np.int64)
                for c in names}
        return cols, finished
    end = flows["end_ns"]
    finished = ~np.ma.getmaskarray(end)
    cols = {c: np.asarray(np.ma.getdata(flows[c]), dtype=np.int64) for c in names}
    return cols, finished
