"""What the training-paper reproductions (thesis, MG-WFBP) share: a paper's
transcribed values, a reproduction's tables and figures, and writing them.

A :class:`Reproduction` holds named DataFrames (written as CSV) and named
figure builders (written as PNG and SVG); :func:`write_reproduction` writes
them all through the staged-output mechanism, so a failed or interrupted run
leaves no partial output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    import pandas as pd

# progress(done, total, label): called before each simulation and once at the end.
Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class PaperValue:
    """One number a paper reports, with where it says so."""

    value: float
    unit: str
    source: str  # section / figure caption and the words it is read from


@dataclass
class Reproduction:
    """A paper's reproduction: tables (CSV) and figures (PNG + SVG)."""

    title: str
    tables: dict[str, "pd.DataFrame"] = field(default_factory=dict)
    figures: dict[str, Callable[[], object]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def files(self) -> list[str]:
        """Names of every file :func:`write_reproduction` writes."""
        names = [f"{name}.csv" for name in self.tables]
        for name in self.figures:
            names += [f"{name}.png", f"{name}.svg"]
        return names


class Counter:
    """Counts simulations for a progress callback."""

    def __init__(self, total: int, progress: Optional[Progress]):
        self.total = total
        self.done = 0
        self.progress = progress

    def step(self, label: str) -> None:
        if self.progress is not None:
            self.progress(self.done, self.total, label)
        self.done += 1

    def finish(self) -> None:
        if self.progress is not None:
            self.progress(self.total, self.total, "done")


def write_reproduction(reproduction: Reproduction, out_dir: str | Path) -> list[Path]:
    """Writes every table and figure into `out_dir`, all or nothing; returns the paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..analyze.figures import save_deterministic
    from ..output import staged_directory

    out_dir = Path(out_dir)
    with staged_directory(out_dir) as stage:
        for name, frame in reproduction.tables.items():
            frame.to_csv(stage / f"{name}.csv", index=False)
        for name, build in reproduction.figures.items():
            fig = build()
            save_deterministic(fig, stage / f"{name}.png")
            save_deterministic(fig, stage / f"{name}.svg")
            plt.close(fig)
    return [out_dir / name for name in reproduction.files()]


def paper_beside(frame: "pd.DataFrame") -> "pd.DataFrame":
    """The same table with each `paper_X` column moved right after our `X`."""
    order = [c for c in frame.columns if not c.startswith("paper_")]
    placed = []
    for column in order:
        placed.append(column)
        if f"paper_{column}" in frame.columns:
            placed.append(f"paper_{column}")
    placed += [c for c in frame.columns if c not in placed]
    return frame[placed]
