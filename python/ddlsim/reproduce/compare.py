"""'Paper vs ddlsim' tables: each reproduced table with the paper's value beside ddlsim's, as text or rich tables."""

from __future__ import annotations

import math
from typing import Any

from . import paper_values as paper



def _cell(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.3g}"
        return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def _title(name: str, reproduction: Any) -> str:
    title = reproduction.titles[name]  # says the workers and bandwidth that ran
    return title + (" (quick subset)" if reproduction.plan.quick else "")


def frame_rows(frame) -> tuple[list[str], list[list[str]]]:
    columns = [str(c) for c in frame.columns]
    rows = [[_cell(v) for v in record] for record in frame.itertuples(index=False, name=None)]
    return columns, rows


def text_table(title: str, frame) -> str:
    columns, rows = frame_rows(frame)
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]
    line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    return "\n".join([title, line(columns), line(["-" * w for w in widths]), *(line(r) for r in rows)]) + "\n"


def comparison_text(reproduction: Any) -> str:
    """Every table and figure as plain text, paper beside ddlsim, and the paper's claims about the figures."""
    parts = []
    for name, frame in reproduction.tables.items():
        parts.append(text_table(_title(name, reproduction), frame))
        claim = _claim(name)
        if claim:
            parts.append(f"paper: {claim}\n")
    parts.extend(f"note: {n}\n" for n in reproduction.notes)
    return "\n".join(parts)


def _claim(name: str) -> str:
    for key, text in paper.TEXT_CLAIMS.items():
        if not isinstance(text, str):
            continue
        if key == name or (key.startswith("fig") and "-" in key and _in_range(name, key)):
            return text
    return ""


def _in_range(name: str, key: str) -> bool:
    if not name.startswith("fig"):
        return False
    lo, hi = key[3:].split("-")
    return int(lo) <= int(name[3:]) <= int(hi.replace("fig", ""))


def rich_tables(reproduction: Any) -> list:
    """The same as rich Tables (for the terminal), with the claim as caption."""
    from rich.table import Table

    out = []
    for name, frame in reproduction.tables.items():
        columns, rows = frame_rows(frame)
        table = Table(title=_title(name, reproduction), title_justify="left", caption=_claim(name) or None,
                      caption_justify="left")
        for i, col in enumerate(columns):
            style = "bold" if col.startswith("ddlsim") else ("cyan" if col.startswith("paper") else None)
            table.add_column(col, justify="left" if i == 0 else "right", style=style)
        for row in rows:
            table.add_row(*row)
        out.append(table)
    return out
