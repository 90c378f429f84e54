"""The CLI's two rich consoles, made on first use: importing rich costs about
0.1 s, which `ddlsim simulate --json` never needs."""

from __future__ import annotations

import sys
from typing import Any


class LazyConsole:
    """Stands for a `rich.console.Console(**options)` built when first used."""

    def __init__(self, **options: Any):
        self._options = options
        self._console = None

    def get(self):
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.get(), name)


def real_console(console: Any):
    """The rich Console behind `console` (itself if it is one)."""
    return console.get() if isinstance(console, LazyConsole) else console


# --quiet means the same on every command (docs/cli.md, "Quiet"): no progress
# bar and none of the lines about the run itself (timings, counts, cache use,
# files written); the results, the notes that qualify them and errors stay.
QUIET_HELP = "No progress bar and no chatter (timings, files written); results, notes and errors are still printed."

err = LazyConsole(stderr=True)
# Tables stay readable when piped (rich would otherwise assume 80 columns).
out = LazyConsole(width=None if sys.stdout.isatty() else 150)
