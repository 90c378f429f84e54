"""Parsing of human-friendly quantities: "10Gbps", "10GB/s", "10us", "100MB".

The rules (README-ready):

* **Bandwidth** needs a unit. A lowercase ``b`` (or ``bit``) means *bits*, an
  uppercase ``B`` (or ``byte``) means *bytes*; ``ps`` and ``/s`` are the same:
  ``10Gbps`` = ``10Gbit/s`` = ``10Gb/s`` = 10e9 bit/s, while ``10GBps`` =
  ``10GB/s`` = 10e9 byte/s = 80e9 bit/s. Prefixes are decimal (k, M, G, T =
  1e3 .. 1e12, any case) unless binary (Ki, Mi, Gi, Ti = 2**10 .. 2**40).
  A bare number (``10`` or ``"10"``) is an error: write ``"10Gbps"`` (bits/s)
  or ``"10GB/s"`` (bytes/s). Allowed range: 1 kbit/s .. 1e15 bit/s.
* **Duration** needs a unit: ``ns``, ``us`` (also ``µs``/``μs``), ``ms``,
  ``s``. It becomes an integer number of nanoseconds, computed exactly from
  the decimal text (``"0.1us"`` is exactly 100 ns) and rounded to the nearest
  nanosecond, halves away from zero (``"1.0000000001s"`` -> 1_000_000_000 ns,
  ``"2.5ns"`` -> 3 ns). Allowed range: 0 .. 1e6 s (which also keeps every
  value far inside 64-bit nanoseconds; values past 2**63-1 ns are refused as
  overflowing).
* **Size** is in bytes: a bare whole number (``4096`` or ``"4096"``) is bytes;
  units ``B``, ``KB``/``kB`` (1e3), ``MB``, ``GB``, ``TB`` (decimal) or
  ``KiB``, ``MiB``, ``GiB``, ``TiB`` (binary). A lowercase ``b`` (bits) is
  refused for sizes. Exact decimal arithmetic, rounded to the nearest byte
  (halves away from zero). Allowed range: 0 .. 1e15 B.
* Negative values, ``inf`` and ``nan`` are always errors. Whether zero is
  allowed is the field's choice (a latency may be 0, a model size may not);
  a bandwidth is never zero.

Every parser raises ``ValueError`` with a message that shows the input once
and says what to write instead; the scenario model adds the field name.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from fractions import Fraction

MAX_BANDWIDTH_BPS = 10**15
MIN_BANDWIDTH_BPS = 10**3
MAX_DURATION_NS = 10**15  # 1e6 s
MAX_SIZE_BYTES = 10**15
INT64_MAX = 2**63 - 1

_NUMBER = r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
_SPLIT = re.compile(rf"\s*({_NUMBER}|[-+]?inf(?:inity)?|[-+]?nan)\s*(\S*)\s*", re.IGNORECASE)

_DECIMAL_PREFIX = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY_PREFIX = {"ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}
_RATE = re.compile(r"(?P<prefix>[kKmMgGtT][iI]?)?(?P<base>bit|byte|b|B)(?:ps|/s)")
_SIZE = re.compile(r"(?P<prefix>[kKmMgGtT][iI]?)?(?P<base>B|bytes?)")
_TIME_NS = {"ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6, "s": 10**9}

_BANDWIDTH_HINT = '"10Gbps" (bits/s) or "10GB/s" (bytes/s)'
_DURATION_HINT = '"10us" or "1.5ms"'
_SIZE_HINT = '"100MB", "64MiB" or a whole number of bytes'


def _prefix_scale(prefix: str | None) -> int:
    p = (prefix or "").lower()
    return _BINARY_PREFIX[p] if p.endswith("i") else _DECIMAL_PREFIX[p]


def _number(value: object, what: str, hint: str, positive: bool = False) -> tuple[Fraction, str]:
    """(exact number, unit text) of `value`; refuses non-finite and negative numbers."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or len(str(value)) > 64:
        raise ValueError(f"cannot read {what} {value!r}; write e.g. {hint}")
    if isinstance(value, (int, float)):
        text, unit = repr(value), ""
    else:
        m = _SPLIT.fullmatch(value)
        if not m:
            raise ValueError(f"cannot read {what} {value!r}; write e.g. {hint}")
        text, unit = m.group(1), m.group(2)
    try:
        number = Decimal(text)
    except InvalidOperation:  # pragma: no cover - the regex only lets numbers through
        raise ValueError(f"cannot read {what} {value!r}; write e.g. {hint}") from None
    if not number.is_finite():
        raise ValueError(f"{what} must be a finite number, got {value!r}; write e.g. {hint}")
    if number < 0 or (positive and number == 0):
        must = "must be positive" if positive else "must not be negative"
        raise ValueError(f"{what} {must}, got {value!r}; write e.g. {hint}")
    if number != 0 and number.adjusted() > 30:  # keeps the exact arithmetic small
        raise ValueError(f"{what} {value!r} is absurdly large; write e.g. {hint}")
    if number != 0 and number.adjusted() < -30:
        number = Decimal(0)
    return Fraction(number), unit


def _round_exact(x: Fraction) -> int:
    floor = x.numerator // x.denominator
    return floor + 1 if 2 * (x - floor) >= 1 else floor


def parse_bandwidth(value: str | float | int) -> float:
    """Bandwidth in bit/s: "10Gbps" -> 1e10, "10GB/s" -> 8e10 (bytes!). A unit is required."""
    number, unit = _number(value, "bandwidth", _BANDWIDTH_HINT, positive=True)
    if unit == "":
        n = value if isinstance(value, (int, float)) else value.strip()
        raise ValueError(f'bandwidth {value!r} has no unit; add a unit: "{n}Gbps" (bits/s) or "{n}GB/s" (bytes/s)')
    m = _RATE.fullmatch(unit)
    if not m:
        raise ValueError(f"unknown bandwidth unit {unit!r} in {value!r}; use Gbps, Gbit/s, Mbps (bits) or GB/s, GBps (bytes)")
    bits = 8 if m.group("base") in ("B", "byte") else 1
    bps = number * _prefix_scale(m.group("prefix")) * bits
    if bps == 0:
        raise ValueError(f"bandwidth must be positive, got {value!r}; write e.g. {_BANDWIDTH_HINT}")
    if bps > MAX_BANDWIDTH_BPS:
        raise ValueError(f"bandwidth {value!r} is absurdly large (limit 1e15 bit/s = 1 Pbit/s); check the unit, e.g. {_BANDWIDTH_HINT}")
    if bps < MIN_BANDWIDTH_BPS:
        raise ValueError(f"bandwidth {value!r} is below 1 kbit/s; check the unit, e.g. {_BANDWIDTH_HINT}")
    return float(bps)


def parse_duration_ns(value: str | float | int) -> int:
    """Duration in integer nanoseconds, exact for decimal text: "0.1us" -> 100. A unit is required."""
    number, unit = _number(value, "duration", _DURATION_HINT)
    if unit == "":
        n = value if isinstance(value, (int, float)) else value.strip()
        raise ValueError(f'duration {value!r} has no unit; add a unit: "{n}s", "{n}ms", "{n}us" or "{n}ns"')
    if unit not in _TIME_NS:
        raise ValueError(f"unknown duration unit {unit!r} in {value!r}; use ns, us, ms or s")
    ns = _round_exact(number * _TIME_NS[unit])
    if ns > INT64_MAX:
        raise ValueError(f"duration {value!r} overflows 64-bit nanoseconds; durations are limited to 1e6 s")
    if ns > MAX_DURATION_NS:
        raise ValueError(f"duration {value!r} is absurdly long (limit 1e6 s); check the unit, e.g. {_DURATION_HINT}")
    return ns


def parse_size_bytes(value: str | float | int) -> int:
    """Size in bytes: "100MB" -> 100_000_000, "1MiB" -> 1_048_576, 4096 -> 4096."""
    number, unit = _number(value, "size", _SIZE_HINT)
    if unit == "":
        scale = 1
    else:
        m = _SIZE.fullmatch(unit)
        if not m:
            hint = "; a lowercase 'b' means bits, sizes are bytes: write 'B'" if unit.endswith("b") else ""
            raise ValueError(f"unknown size unit {unit!r} in {value!r}; use B, KB, MB, GB, KiB, MiB or GiB{hint}")
        scale = _prefix_scale(m.group("prefix"))
    exact = number * scale
    n = _round_exact(exact)
    if exact != n:  # found by probing the options: --chunk-bytes 0.5 ran with 1 byte, 0.4 with 0 (no chunking)
        raise ValueError(f"size {value!r} is {float(exact):.12g} bytes, not a whole number of bytes; write a whole "
                         f"number, e.g. {max(n, 1)}B")
    if n > MAX_SIZE_BYTES:
        raise ValueError(f"size {value!r} is absurdly large (limit 1e15 B = 1 PB); check the unit, e.g. {_SIZE_HINT}")
    return n


def format_bandwidth(bps: float) -> str:
    for unit, scale in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:g} {unit}"
    return f"{bps:g} bit/s"


def format_bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def format_binary_size(n: int) -> str:
    """A whole number of bytes in the largest binary unit that divides it: 1048576 -> "1 MiB", 1500 -> "1500 B"."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def format_seconds(s: float) -> str:
    if not math.isfinite(s):
        return str(s)
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(s) >= scale:
            return f"{s / scale:.3f} {unit}"
    return f"{s * 1e9:.0f} ns"
