"""Chunk preemption makes VGG-16 slower (docs/grouping.md, "Why chunk
preemption can make a run slower"): with the barrier, a priority order
cannot shorten an iteration, and when the two ranks of a ring decide
differently at the same instant, the two directions of one fc6 ring step
(205.5 MB each way, 164.4 ms at 10 Gbit/s) run one after the other instead of
side by side. The cost is one such step plus the small all-reduces it holds
up, and FIFO and priority without preemption are equal.
"""

from __future__ import annotations

import ddlsim


def _run(**strategy):
    r = ddlsim.simulate({"model": {"name": "vgg16"}, "workers": 2, "iterations": 1, "trace_detail": "step",
                         "strategy": {"kind": "ring", **strategy}})
    return r, r.stats["makespan_ns"]


def test_chunk_preemption_costs_one_big_ring_step_on_two_workers():
    _, fifo = _run(stream_policy="fifo")
    _, priority = _run(stream_policy="priority")
    r, chunk = _run(stream_policy="priority", preemption="chunk")
    assert priority == fifo
    step_ns = 411_041_792 // 2 * 8 / 10  # one fc6 ring step: M/2 bytes at 10 Gbit/s
    assert step_ns <= chunk - fifo <= 1.1 * step_ns, (fifo, chunk)
    # The mechanism: rank 0 sends its half of fc6's second step while rank 1's link is idle,
    # and rank 1 sends its half only after rank 0's has ended.
    ev = r.events.to_pandas()
    fc6 = ev[(ev["kind"] == "send") & (ev["bytes"] == 411_041_792 // 2) & (ev["step"] == 1)]
    first, second = sorted(fc6["start_ns"]), sorted(fc6["end_ns"])
    assert len(fc6) == 2 and first[1] >= second[0]
