"""Numbers given to the Python API's functions, checked before any arithmetic: a NaN, an infinity, a float where a
count is meant, or a value out of its range is ddlsim's own error naming the argument (not a TypeError or an
OverflowError from deep inside)."""

from __future__ import annotations

import math
import numbers
import os
from pathlib import Path
from typing import Any

from .errors import ArgumentTypeError, DdlsimError


def whole(value: Any, name: str, lo: int, hi: int, error: type[DdlsimError] = DdlsimError) -> int:
    """`value` as an int in [lo, hi]: an int, or a float with no fraction (4.0); else `error` naming `name`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
            (not isinstance(value, numbers.Integral) and not (math.isfinite(value) and float(value).is_integer())):
        raise error(f"{name} must be a whole number from {lo:,} to {hi:,}, got {value!r}")
    n = int(value)
    if not lo <= n <= hi:
        raise error(f"{name} must be a whole number from {lo:,} to {hi:,}, got {value!r}")
    return n


def real(value: Any, name: str, lo: float, hi: float, error: type[DdlsimError] = DdlsimError, *,
         open_lo: bool = False, open_hi: bool = False) -> float:
    """`value` as a finite float in the range (`open_lo` / `open_hi`: the bound itself excluded); else `error`."""
    left, right = "(" if open_lo else "[", ")" if open_hi else "]"
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or \
            not (lo < value if open_lo else lo <= value) or not (value < hi if open_hi else value <= hi):
        raise error(f"{name} must be a finite number in {left}{lo:g}, {hi:g}{right}, got {value!r}")
    return float(value)


def path_arg(value: Any, name: str) -> Path:
    """`value` as a Path where it is one (a str or an os.PathLike); else :class:`~ddlsim.errors.ArgumentTypeError`
    naming `name` (not Python's "expected str, bytes or os.PathLike object" from deep inside)."""
    if isinstance(value, (str, os.PathLike)) and not isinstance(value, bytes):
        text = os.fspath(value)
        if isinstance(text, str) and text and "\0" not in text:
            return Path(text)
        raise ArgumentTypeError(f"{name} must name a file or directory, got {value!r}")
    raise ArgumentTypeError(f"{name} must be a path (a str or a pathlib.Path), got {type(value).__name__} {value!r}")
