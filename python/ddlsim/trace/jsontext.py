"""JSON text read by the trace readers: every failure is a :class:`TraceError` naming where."""

from __future__ import annotations

import json
import reprlib
from typing import Any

from ..errors import TraceError

_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 60
_SHORT.maxlevel = 3


def short_repr(value: Any) -> str:
    """``repr`` cut to a few dozen characters and three levels (safe for any nesting)."""
    try:
        return _SHORT.repr(value)
    except (RecursionError, ValueError):
        return f"<{type(value).__name__}>"


def parse_json(text: str | bytes, where: str, what: str = "JSON") -> Any:
    """``json.loads(text)``; malformed, too deeply nested or undecodable text is a TraceError naming ``where``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise TraceError(f"{where}:{err.lineno}:{err.colno}: not valid {what} ({err.msg})") from None
    except RecursionError:
        raise TraceError(f"{where}: {what} nested too deeply to read") from None
    except (UnicodeDecodeError, ValueError, TypeError) as err:
        raise TraceError(f"{where}: not valid {what} ({err})") from None
