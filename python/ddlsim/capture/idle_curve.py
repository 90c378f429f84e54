"""Compute after a wait, measured on a capturing rank (docs/validation.md, "Compute after a wait"): the optimizer
step, then a forward and a backward of the captured model, timed right after the thread slept ``idle`` ms, the
idle lengths in a seeded random order (a machine drifting over the run spreads over every length alike).

``benchmarks/idle_wake.py`` runs :func:`trials` on its own (sleeping or spinning); ``ddlsim capture ddp`` runs it
on each rank after training, the ranks together (sleeping, as a rank blocked on its all-reduce does, within a few
seconds: :func:`capture_trials`), each rank's trials go in its sidecar, and the merge pools them into the log's
``idle_curve`` metadata (:func:`pooled_curve`), which ``ddlsim replay`` applies
(:mod:`ddlsim.simulation.idle_wake`).
"""

from __future__ import annotations

import random
import time
from typing import Any, Optional

IDLES_MS = (0.0, 0.5, 2.0, 8.0, 16.0, 32.0)
# capture: at most this long for the trials (a model whose cycle is too long for MIN_REPEATS is not measured)
BUDGET_S = 3.0
MIN_REPEATS, MAX_REPEATS = 3, 12
SKIP_ABOVE_S = 10.0


def _wait(mode: str, seconds: float) -> None:
    if seconds <= 0:
        return
    if mode == "sleep":
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def trial_order(idles, modes, repeats: int, seed: int) -> list[tuple[str, float]]:
    """Every (mode, idle) pair `repeats` times, in a seeded random order."""
    order = [(mode, idle) for _ in range(repeats) for mode in modes for idle in idles]
    random.Random(seed).shuffle(order)
    return order


class Bench:
    """A model, its SGD optimizer and one batch, ready to time a step, a forward and a backward."""

    def __init__(self, model, images, labels, lr: float = 0.01):
        import torch

        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.images, self.labels = images, labels

    def forward_backward(self) -> tuple[float, float]:
        t0 = time.perf_counter()
        loss = self.loss_fn(self.model(self.images), self.labels)
        t1 = time.perf_counter()
        loss.backward()
        return t1 - t0, time.perf_counter() - t1

    def cycle(self) -> float:
        """One untimed-idle cycle (zero_grad, forward, backward, step); its wall time, s."""
        t0 = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        self.forward_backward()
        self.optimizer.step()
        return time.perf_counter() - t0

    def trial(self, mode: str, idle_ms: float, sync=None) -> dict[str, Any]:
        self.optimizer.zero_grad(set_to_none=True)
        self.forward_backward()
        if sync is not None:  # every rank's trial starts together (a capture's ranks, as after an all-reduce)
            sync()
        _wait(mode, idle_ms / 1000.0)
        t0 = time.perf_counter()
        self.optimizer.step()
        step = time.perf_counter() - t0
        self.optimizer.zero_grad(set_to_none=True)
        fwd, bwd = self.forward_backward()
        return {"mode": mode, "idle_ms": idle_ms, "step_ms": step * 1e3, "forward_ms": fwd * 1e3, "backward_ms": bwd * 1e3}


def trials(bench: Bench, idles, modes, repeats: int, seed: int, warmup: int = 5, sync=None) -> list[dict[str, Any]]:
    """The timed trials (each: trial, mode, idle_ms, step_ms, forward_ms, backward_ms) after `warmup` cycles;
    `sync` (optional) is called before each trial's wait."""
    for _ in range(warmup):
        bench.cycle()
    return [{"trial": k, **bench.trial(mode, idle, sync)}
            for k, (mode, idle) in enumerate(trial_order(idles, modes, repeats, seed))]


def capture_trials(model, images, labels, seed: int, sync=None, agree=None) -> Optional[dict[str, Any]]:
    """A capturing rank's trials, sleeping, as many repeats of :data:`IDLES_MS` as fit :data:`BUDGET_S` (3 to 12),
    on `model` (a copy of the captured model, not the DDP-wrapped one: its backward must not all-reduce), with the
    training's threads. The capture's ranks run them together, as they compute after an all-reduce: the same seed
    (the same order of waits) on every rank, `sync` (a barrier) before each wait, and `agree` (the minimum over
    the ranks) on the number of repeats. None (with the reason) where even 3 repeats would take over
    :data:`SKIP_ABOVE_S`."""
    bench = Bench(model, images, labels)
    started = time.perf_counter()
    cycle = min(bench.cycle() for _ in range(3))
    per_repeat = sum(IDLES_MS) / 1e3 + len(IDLES_MS) * 2 * cycle
    repeats = 0 if MIN_REPEATS * per_repeat > SKIP_ABOVE_S else max(MIN_REPEATS, min(MAX_REPEATS, int(BUDGET_S / per_repeat)))
    if agree is not None:
        repeats = agree(repeats)
    if repeats == 0:
        return {"skipped": f"a training cycle takes {cycle * 1e3:.0f} ms: {MIN_REPEATS} repeats would take over "
                           f"{SKIP_ABOVE_S:g} s"}
    rows = trials(bench, IDLES_MS, ("sleep",), repeats, seed, warmup=2, sync=sync)
    return {"trials": [[r["idle_ms"], r["step_ms"], r["forward_ms"], r["backward_ms"]] for r in rows],
            "repeats": repeats, "seconds": round(time.perf_counter() - started, 3)}


def pooled_curve(sidecars: list[dict]) -> Optional[dict[str, Any]]:
    """The idle curve of every rank's :func:`capture_trials` (sidecar key ``idle_trials``), pooled
    (:func:`ddlsim.simulation.idle_wake.curve_from_trials`), with ``ranks``; None where no rank measured one."""
    from ..simulation.idle_wake import curve_from_trials

    rows, ranks, skipped = [], 0, []
    for facts in sidecars:
        found = facts.get("idle_trials")
        if not isinstance(found, dict):
            continue
        if "skipped" in found:
            skipped.append(str(found["skipped"]))
            continue
        ranks += 1
        rows.extend({"idle_ms": t[0], "step_ms": t[1], "forward_ms": t[2], "backward_ms": t[3]} for t in found["trials"])
    if not rows:
        return {"skipped": skipped[0]} if skipped else None
    try:
        curve = curve_from_trials(rows, source="ddlsim capture ddp (each rank after training)")
    except ValueError as exc:
        return {"skipped": str(exc)}
    return {**curve, "ranks": ranks}
