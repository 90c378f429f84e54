"""User text on figures: model, layer, scenario and file names are shown as
written, never read as matplotlib mathtext (a name such as ``$\\frac{x$``
would otherwise break the figure)."""

from __future__ import annotations

import re
from typing import Any

_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")


def plain_text(text: Any) -> str:
    """`text` (any value, as ``str``) with every ``$`` escaped, so that
    matplotlib draws it literally. Idempotent: an escaped ``\\$`` stays as it is.
    Every label, title, legend entry and tick label that carries user text
    goes through it (a figure's own fixed text needs it not)."""
    return _UNESCAPED_DOLLAR.sub(r"\\$", str(text))
