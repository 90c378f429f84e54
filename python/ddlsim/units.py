"""Parsing of human-friendly quantities: "10Gbps", "10us", "100MB".

Decimal units unless the suffix says binary: 1 Gbit/s = 1e9 bit/s,
1 MB = 1e6 B, 1 MiB = 2**20 B. Plain numbers are in base units
(bit/s, seconds for durations given as float, bytes).
"""

from __future__ import annotations

import math
import re

_NUMBER = r"([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"

_BANDWIDTH = {
    "bps": 1.0, "bit/s": 1.0, "b/s": 1.0,
    "kbps": 1e3, "kbit/s": 1e3, "kb/s": 1e3,
    "mbps": 1e6, "mbit/s": 1e6, "mb/s": 1e6,
    "gbps": 1e9, "gbit/s": 1e9, "gb/s": 1e9,
    "tbps": 1e12, "tbit/s": 1e12, "tb/s": 1e12,
}
# Byte rates: case matters (GB/s is bytes, Gb/s is bits).
_BYTE_RATE = {"B/s": 8.0, "KB/s": 8e3, "kB/s": 8e3, "MB/s": 8e6, "GB/s": 8e9, "TB/s": 8e12,
              "KiB/s": 8.0 * 2**10, "MiB/s": 8.0 * 2**20, "GiB/s": 8.0 * 2**30}
_TIME_NS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
_SIZE = {"B": 1, "KB": 10**3, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
         "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def _split(text: str, what: str, example: str) -> tuple[float, str]:
    m = re.fullmatch(rf"\s*{_NUMBER}\s*([A-Za-zµ/]*)\s*", str(text))
    if not m:
        raise ValueError(f"cannot read {what} {text!r}; write e.g. {example}")
    return float(m.group(1)), m.group(2)


def parse_bandwidth(value: str | float | int) -> float:
    """Bandwidth in bit/s, e.g. "10Gbps", "100 Gbit/s", "12.5GB/s"."""
    if isinstance(value, (int, float)):
        number, unit = float(value), "bps"
    else:
        number, unit = _split(value, "bandwidth", '"10Gbps" or "1.25GB/s"')
    if unit in _BYTE_RATE:
        return number * _BYTE_RATE[unit]
    if unit.lower() in _BANDWIDTH and not unit.endswith("B/s"):
        return number * _BANDWIDTH[unit.lower()]
    if unit == "":
        return number
    raise ValueError(f"unknown bandwidth unit {unit!r} in {value!r}; use Gbps, Mbps, Gbit/s or GB/s")


def _scaled(value: str | float | int, table: dict, base_unit: str, what: str, example: str, units: str) -> int:
    """`value` in the table's base unit, rounded to an integer."""
    if isinstance(value, (int, float)):
        number, unit = float(value), base_unit
    else:
        number, unit = _split(value, what, example)
        unit = unit or base_unit
    if unit not in table:
        raise ValueError(f"unknown {what} unit {unit!r} in {value!r}; use {units}")
    return int(round(number * table[unit]))


def parse_duration_ns(value: str | float | int) -> int:
    """Duration in integer nanoseconds, e.g. "10us", "0.01ms", "5ns"; plain numbers are seconds."""
    return _scaled(value, _TIME_NS, "s", "duration", '"10us" or "1.5ms"', "ns, us, ms or s")


def parse_size_bytes(value: str | float | int) -> int:
    """Size in bytes, e.g. "100MB", "6.28MiB", 4096."""
    return _scaled(value, _SIZE, "B", "size", '"100MB" or "64MiB"', "B, KB, MB, GB, KiB, MiB or GiB")


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


def format_seconds(s: float) -> str:
    if not math.isfinite(s):
        return str(s)
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(s) >= scale:
            return f"{s / scale:.3f} {unit}"
    return f"{s * 1e9:.0f} ns"
