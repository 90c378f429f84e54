"""Comma-separated option values (``--models lenet5,resnet18``, ``--bucket-caps
1,5,25``, ``--connections 1,2,4``): one reading for every command, so that an
empty item (``1,,2``, a trailing comma) or a value given twice is a one-line
error naming the option, not silently dropped or run twice."""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, TypeVar

from .errors import DdlsimError

T = TypeVar("T")


def _number(kind: type) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a {'whole number' if kind is int else 'number'}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{text!r} is not a finite number")
        return value

    return convert


whole_number = _number(int)
number = _number(float)


def comma_list(text: str, option: str, convert: Callable[[str], T] = str, *, example: str, what: str = "values",
               same: Optional[Callable[[T], Any]] = None, repeats: bool = False) -> list[T]:
    """The items of `text` separated by commas, each through `convert` (a
    ValueError there is the item's error). Refused in one line naming `option`
    and saying to give `what` as in `example`: an empty text or item, an item `convert` refuses,
    and (unless `repeats`) an item equal to an earlier one (compared through
    `same`, e.g. "1Gbps" and "1 Gbit/s")."""
    hint = f"give {what} separated by commas, e.g. {option} {example}"
    if not text.strip():
        raise DdlsimError(f"{option} {text!r}: empty; {hint}")
    items = [x.strip() for x in text.split(",")]
    if any(not x for x in items):
        raise DdlsimError(f"{option} {text!r}: an empty item (two commas in a row, or one at an end); {hint}")
    values: list[T] = []
    for item in items:
        try:
            values.append(convert(item))
        except ValueError as exc:
            raise DdlsimError(f"{option} {text!r}: {exc}; {hint}") from None
    if not repeats:
        seen: dict[Any, str] = {}
        for item, value in zip(items, values):
            key = same(value) if same is not None else value
            if key in seen:
                again = f"{item!r} again" if item == seen[key] else f"{item!r}, the same as {seen[key]!r}"
                raise DdlsimError(f"{option} {text!r}: {again}; give each value once, e.g. {option} {example}")
            seen[key] = item
    return values


def connection_counts(text: str, option: str = "--connections") -> list[int]:
    """Connection counts written as whole numbers >= 1 separated by commas
    (1,2,4,8), at least two different ones (the fit is a line), none twice;
    sorted. Anything else is one line naming `option`, before anything runs
    (here, where no capture module and no PyTorch is imported)."""
    example = f"e.g. {option} 1,2,4,8"
    counts = comma_list(text, option, whole_number, example="1,2,4,8", what="connection counts")
    if min(counts) < 1:
        raise DdlsimError(f"{option} {text!r}: a count of {min(counts)}; connection counts are at least 1, {example}")
    if len(counts) < 2:
        raise DdlsimError(f"{option} {text!r}: the fit of server time against connections needs at least two different "
                          f"counts, {example}")
    return sorted(counts)
