"""The all-reduce algorithms: one registry that every module reads.

Which algorithms exist, the rank counts they accept, whether the
closed-form collective model times them, the log op of their steps and
their code in the workload graph come from the engine
(``ddlsim._core.algorithms()``, built from ``Algorithm`` in
crates/ddlsim-core/src/collective/mod.rs): an algorithm the engine gains
appears here without a Python edit. This module adds what the Python side
needs of each one, keyed by the engine's name, and a test checks that the
two sides list the same algorithms:

- the scenario's spelling (``halving-doubling`` for ``halving_doubling``);
- its **idle-network cost** ``T(M) = a + b M`` (:meth:`Algorithm.cost`),
  derived from the engine's step schedule: every transfer of ``x`` bytes
  costs ``alpha + beta x`` (alpha the latency, beta = 8e9 / bandwidth ns per
  byte) and every reduced byte ``gamma`` ns, as in MG-WFBP (Shi et al.,
  ICDCS 2019, Eq. 9 and Table II) and the engine's closed form
  (crates/ddlsim-core/src/collective/closed_form.rs, which also rounds each
  transfer up to the nanosecond; this cost does not);
- MG-WFBP's **Table II** (:meth:`Algorithm.table2`) for the four algorithms
  the paper lists, which is how ``ddlsim fit`` reads measured tables;
- the point-to-point steps a rank logs per all-reduce
  (:meth:`Algorithm.steps_per_rank`, for the run-size estimate).

The costs, with N ranks, p the largest power of two <= N, k = log2 p and
f = 1 if N is not a power of two (MPICH's fold: the N - p extra ranks hand
their vector to a partner before the power-of-two core and get the result
back after it), else 0:

====================  ====================  =================================================
algorithm             a / alpha             b
====================  ====================  =================================================
ring, direct          2 (N - 1)             2 (N-1)/N beta + (N-1)/N gamma
recursive-doubling,   k + 2f                (k + 2f) beta + (k + f) gamma
butterfly
halving-doubling      2k + 2f               (2 (1 - 1/p) + 2f) beta + (1 - 1/p + f) gamma
binary-tree           U + D                 (U + D) beta + U gamma
double-binary-tree    U + D                 ((U + D) beta + U gamma) / 2  (two trees, M/2 each)
hierarchical-ring     2 (L-1) alpha_intra   2 (L-1)/L beta_intra + 2 (H-1)/(L H) beta
                      + 2 (H-1) alpha       + ((L-1)/L + (H-1)/(L H)) gamma
====================  ====================  =================================================

For a power of two N the ring, recursive doubling and halving-doubling rows
are Table II's. The trees take a parent's children one after the other: U
is the reduce's depth in transfers (each followed by a reduction), D the
broadcast's (a parent sends its k-th child its result k transfers after
getting it), both counted on the engine's in-order tree; Table II's
``2 log2 N`` ignores that two children share their parent's link (for
N = 8, U + D = 10 where Table II says 6). The hierarchical ring has L ranks
on each of H hosts (its intra-host steps on the intra-host link); when the
hosts do not hold equally many ranks it is the flat ring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Optional


@dataclass(frozen=True)
class AllReduceCost:
    """T_ar(M) = a + b M (MG-WFBP Eq. 9): a in ns, b in ns per byte."""

    a: float
    b: float

    def __call__(self, nbytes: float) -> float:
        return self.a + self.b * nbytes

    @classmethod
    def table2(cls, algorithm: str, n: int, alpha_ns: float, beta_ns_per_byte: float,
               gamma_ns_per_byte: float = 0.0) -> "AllReduceCost":
        """MG-WFBP Table II for `algorithm` (any spelling) over `n` workers."""
        return get(algorithm).table2(n, alpha_ns, beta_ns_per_byte, gamma_ns_per_byte)


@dataclass(frozen=True)
class Link:
    """alpha (ns) and beta (ns per byte) of one transfer."""

    alpha_ns: float
    beta_ns_per_byte: float


# ----------------------------------------------------------------- schedules


def _fold(n: int) -> tuple[int, int, int]:
    """(p, k, f): the largest power of two p <= n, k = log2 p, f = 1 if n != p."""
    p = 1 << (n.bit_length() - 1)
    return p, p.bit_length() - 1, int(p != n)


def in_order_children(n: int, r: int) -> list[int]:
    """Children of rank r (left first) in NCCL's in-order binary tree over n
    ranks (crates/ddlsim-core/src/collective/binary_tree.rs): rank 0 has one
    child, the largest power of two below n; rank r with lowest set bit b has
    r - b/2 (if b > 1) and r + h, h the largest power of two below b with r + h < n."""
    if n <= 1:
        return []
    if r == 0:
        return [1 << (n - 1).bit_length() - 1]
    b = r & -r
    if b == 1:
        return []
    kids = [r - b // 2]
    h = b // 2
    while h > 0 and r + h >= n:
        h //= 2
    if h > 0:
        kids.append(r + h)
    return kids


@lru_cache(maxsize=256)
def tree_depths(n: int) -> tuple[int, int]:
    """(U, D) of the in-order tree over n ranks: the reduce ends at the root
    after U transfer-and-reduce stages (children taken one after the other),
    the broadcast reaches its last rank D transfers later."""
    if n <= 1:
        return 0, 0
    up: dict[int, int] = {}

    def reduce_depth(v: int) -> int:  # iterative would be longer; depth is ~log2 n
        t = 0
        for c in in_order_children(n, v):
            t = max(t, reduce_depth(c)) + 1
        up[v] = t
        return t

    total_up = reduce_depth(0)
    down = 0
    frontier = [(0, 0)]
    while frontier:
        v, got = frontier.pop()
        kids = in_order_children(n, v)
        down = max(down, got + len(kids))
        frontier.extend((c, got + i + 1) for i, c in enumerate(kids))
    return total_up, down


def _hosts_shape(n: int, ranks_per_host: int) -> Optional[tuple[int, int]]:
    """(H, L) of the hierarchical ring when ranks fill hosts of `ranks_per_host` evenly, else None (flat ring)."""
    if ranks_per_host >= n:
        return 1, n
    if n % ranks_per_host == 0:
        return n // ranks_per_host, ranks_per_host
    return None


def _ring_cost(n: int, net: Link, gamma: float) -> tuple[float, float]:
    return 2 * (n - 1) * net.alpha_ns, 2 * (n - 1) / n * net.beta_ns_per_byte + (n - 1) / n * gamma


def _cost_ring(n: int, net: Link, intra: Link, gamma: float, ranks_per_host: int) -> tuple[float, float]:
    return _ring_cost(n, net, gamma)


def _cost_doubling(n: int, net: Link, intra: Link, gamma: float, ranks_per_host: int) -> tuple[float, float]:
    _, k, f = _fold(n)
    return (k + 2 * f) * net.alpha_ns, (k + 2 * f) * net.beta_ns_per_byte + (k + f) * gamma


def _cost_halving_doubling(n: int, net: Link, intra: Link, gamma: float, ranks_per_host: int) -> tuple[float, float]:
    p, k, f = _fold(n)
    moved = 1 - 1 / p  # share of the vector each rank sends in the halving stages (and again in the doubling ones)
    return (2 * k + 2 * f) * net.alpha_ns, (2 * moved + 2 * f) * net.beta_ns_per_byte + (moved + f) * gamma


def _cost_tree(n: int, net: Link, intra: Link, gamma: float, ranks_per_host: int) -> tuple[float, float]:
    up, down = tree_depths(n)
    return (up + down) * net.alpha_ns, (up + down) * net.beta_ns_per_byte + up * gamma


def _cost_double_tree(n: int, net: Link, intra: Link, gamma: float, ranks_per_host: int) -> tuple[float, float]:
    a, b = _cost_tree(n, net, intra, gamma, ranks_per_host)
    return a, b / 2  # two trees side by side, each over half of the vector


def _cost_hierarchical_ring(n: int, net: Link, intra: Link, gamma: float, ranks_per_host: int) -> tuple[float, float]:
    shape = _hosts_shape(n, ranks_per_host)
    if shape is None:
        return _ring_cost(n, net, gamma)
    h, l = shape
    a = 2 * (l - 1) * intra.alpha_ns + 2 * (h - 1) * net.alpha_ns
    b = (2 * (l - 1) / l * intra.beta_ns_per_byte + 2 * (h - 1) / (l * h) * net.beta_ns_per_byte
         + ((l - 1) / l + (h - 1) / (l * h)) * gamma)
    return a, b


def _steps_ring(n: int, ranks_per_host: int, messages: int) -> int:
    return 2 * (n - 1) * max(1, messages)


def _steps_direct(n: int, ranks_per_host: int, messages: int) -> int:
    return 2 * (n - 1)


def _steps_doubling(n: int, ranks_per_host: int, messages: int) -> int:
    _, k, f = _fold(n)
    return k + 2 * f


def _steps_halving_doubling(n: int, ranks_per_host: int, messages: int) -> int:
    _, k, f = _fold(n)
    return 2 * k + 2 * f


def _steps_tree(n: int, ranks_per_host: int, messages: int) -> int:
    return -(-2 * (n - 1) // n)  # every edge up and down: 2 (n - 1) transfers over n ranks


def _steps_double_tree(n: int, ranks_per_host: int, messages: int) -> int:
    return 2 * _steps_tree(n, ranks_per_host, messages)


def _steps_hierarchical_ring(n: int, ranks_per_host: int, messages: int) -> int:
    if ranks_per_host >= 1 and n % ranks_per_host == 0:
        return 2 * (ranks_per_host - 1) + 2 * (n // ranks_per_host - 1)
    return 2 * (n - 1)  # uneven hosts: the engine runs the flat ring


CostFn = Callable[[int, Link, Link, float, int], tuple[float, float]]
StepsFn = Callable[[int, int, int], int]

# What Python adds to each engine algorithm, by the engine's name.
_SCHEDULES: dict[str, tuple[CostFn, StepsFn]] = {
    "ring": (_cost_ring, _steps_ring),
    "halving_doubling": (_cost_halving_doubling, _steps_halving_doubling),
    "recursive_doubling": (_cost_doubling, _steps_doubling),
    "binary_tree": (_cost_tree, _steps_tree),
    "double_binary_tree": (_cost_double_tree, _steps_double_tree),
    "direct": (_cost_ring, _steps_direct),
    "butterfly": (_cost_doubling, _steps_doubling),
    "hierarchical_ring": (_cost_hierarchical_ring, _steps_hierarchical_ring),
}


def _table2_coefficients(name: str, n: int) -> Optional[tuple[float, float, float]]:
    """(ka, kb, kg) of MG-WFBP Table II (a = ka alpha, b = kb beta + kg gamma), None if the table lacks it."""
    log_n = math.log2(n)
    if name == "ring":
        return 2 * (n - 1), 2 * (n - 1) / n, (n - 1) / n
    if name == "halving_doubling":  # 2 beta - (2 beta + gamma) / N + gamma
        return 2 * log_n, 2 - 2 / n, 1 - 1 / n
    if name == "recursive_doubling":
        return log_n, log_n, log_n
    if name == "binary_tree":
        return 2 * log_n, 2 * log_n, log_n
    return None


# Other spellings people use for the same algorithms.
ALIASES = {
    "recursive-halving-doubling": "halving-doubling",
    "rabenseifner": "halving-doubling",
    "tree": "binary-tree",
    "dbt": "double-binary-tree",
    "hring": "hierarchical-ring",
}


@dataclass(frozen=True)
class Algorithm:
    """One all-reduce algorithm: the engine's facts and Python's formulas."""

    name: str  # scenario spelling: halving-doubling
    engine_name: str  # halving_doubling
    code: int
    step_op: str
    closed_form: bool
    min_ranks: int
    folds_non_power_of_two: bool
    uses_hosts: bool
    partitions: bool

    @property
    def in_table2(self) -> bool:
        """MG-WFBP's Table II lists it (so measured tables can be fitted with it)."""
        return _table2_coefficients(self.engine_name, 2) is not None

    def accepts(self, ranks: int) -> bool:
        return ranks >= self.min_ranks

    def cost(self, n: int, alpha_ns: float, beta_ns_per_byte: float, gamma_ns_per_byte: float = 0.0,
             ranks_per_host: int = 1, intra_alpha_ns: Optional[float] = None,
             intra_beta_ns_per_byte: Optional[float] = None) -> AllReduceCost:
        """The engine's schedule on an idle network: T(M) = a + b M for `n` ranks."""
        if n <= 1:
            return AllReduceCost(0.0, 0.0)
        net = Link(float(alpha_ns), float(beta_ns_per_byte))
        intra = Link(net.alpha_ns if intra_alpha_ns is None else float(intra_alpha_ns),
                     net.beta_ns_per_byte if intra_beta_ns_per_byte is None else float(intra_beta_ns_per_byte))
        a, b = _SCHEDULES[self.engine_name][0](n, net, intra, float(gamma_ns_per_byte), max(1, ranks_per_host))
        return AllReduceCost(a, b)

    def table2_coefficients(self, n: int) -> tuple[float, float, float]:
        """(ka, kb, kg) of Table II for `n` workers; raises ValueError if Table II lacks the algorithm."""
        if n <= 1:
            return 0.0, 0.0, 0.0
        coefficients = _table2_coefficients(self.engine_name, n)
        if coefficients is None:
            raise ValueError(f"MG-WFBP's Table II has no cost for the {self.name} all-reduce; "
                             f"use one of {', '.join(a.name for a in table2_algorithms())}")
        return coefficients

    def table2(self, n: int, alpha_ns: float, beta_ns_per_byte: float, gamma_ns_per_byte: float = 0.0) -> AllReduceCost:
        """MG-WFBP Table II: T_ar(M) = a + b M over `n` workers."""
        ka, kb, kg = self.table2_coefficients(n)
        return AllReduceCost(ka * alpha_ns, kb * beta_ns_per_byte + kg * gamma_ns_per_byte)

    def steps_per_rank(self, n: int, ranks_per_host: int = 1, messages: int = 1) -> int:
        """Point-to-point steps (send rows) a rank logs per all-reduce over `n` ranks, on average
        (a partitioned ring runs one ring per message)."""
        if n <= 1:
            return 0
        return _SCHEDULES[self.engine_name][1](n, ranks_per_host, messages)


@lru_cache(maxsize=1)
def _registry() -> dict[str, Algorithm]:
    from .. import _core
    from ..errors import InternalError

    if not hasattr(_core, "algorithms"):
        raise InternalError(f"the engine extension {getattr(_core, '__file__', '_core')} is older than the Python package "
                            "(it has no algorithms()); rebuild it: `make` or `maturin develop --release`")
    out: dict[str, Algorithm] = {}
    for info in _core.algorithms():
        engine_name = info["name"]
        if engine_name not in _SCHEDULES:  # a new engine algorithm without its Python formulas
            raise InternalError(f"the engine's all-reduce algorithm {engine_name!r} has no cost model in "
                                "ddlsim/simulation/algorithms.py; add it to _SCHEDULES")
        name = engine_name.replace("_", "-")
        out[name] = Algorithm(name=name, engine_name=engine_name, code=int(info["code"]), step_op=info["step_op"],
                              closed_form=bool(info["closed_form"]), min_ranks=int(info["min_ranks"]),
                              folds_non_power_of_two=bool(info["folds_non_power_of_two"]),
                              uses_hosts=bool(info["uses_hosts"]), partitions=bool(info["partitions"]))
    return out


def all_algorithms() -> tuple[Algorithm, ...]:
    """Every algorithm the engine runs, in its code order."""
    return tuple(_registry().values())


def names() -> tuple[str, ...]:
    """Scenario spellings of every algorithm, in the engine's order."""
    return tuple(_registry())


def table2_algorithms() -> tuple[Algorithm, ...]:
    return tuple(a for a in all_algorithms() if a.in_table2)


def canonical(name: str) -> str:
    """The scenario spelling of `name` (any case, '_' or '-', or an alias); unknown names are returned as given."""
    key = str(name).strip().lower().replace("_", "-").replace(" ", "-")
    return ALIASES.get(key, key)


def get(name: str) -> Algorithm:
    """The algorithm called `name` (any spelling); ValueError naming the choices if there is none."""
    algorithm = _registry().get(canonical(name))
    if algorithm is None:
        import difflib

        close = difflib.get_close_matches(canonical(name), list(_registry()), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(f"unknown all-reduce algorithm {name!r}; {hint}choose one of {', '.join(names())}")
    return algorithm
