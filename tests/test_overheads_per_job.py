"""A log of several jobs (each numbering its ranks from 0) gives each job the framework overheads of its own rows:
`framework_overheads(log, job=j)` (what a replayed job with model.profile_job = j and overheads takes) equals the
same measurement of a log holding only job j's rows, where the jobs' gaps differ."""

from __future__ import annotations

import pytest

from ddlsim.simulation.overheads import framework_overheads
from ddlsim.trace import event_log_from_rows

US = 1_000


def _job_rows(job: int, layers: list[str], gap: int, step: int, optimizer: int) -> list[dict]:
    rows = []
    for rank in range(2):
        now = 0
        for it in range(4):
            for op, names in (("forward", layers), ("backward", layers[::-1])):
                for name in names:
                    now += gap
                    rows.append(dict(job=job, iteration=it, rank=rank, role="worker", kind="compute", op=op, name=name,
                                     start_ns=now, end_ns=now + step))
                    now += step
            rows.append(dict(job=job, iteration=it, rank=rank, role="worker", kind="compute", op="optimizer_step",
                             name="optimizer", start_ns=now, end_ns=now + optimizer))
            now += optimizer
    return rows


@pytest.mark.parametrize("job", [0, 1])
def test_each_jobs_overheads_are_those_of_its_own_rows(job):
    a = _job_rows(0, ["conv1", "fc1"], gap=100 * US, step=500 * US, optimizer=40 * US)
    b = _job_rows(1, ["conv2", "fc2", "fc3"], gap=700 * US, step=200 * US, optimizer=90 * US)
    both = event_log_from_rows([dict(r, id=k) for k, r in enumerate(a + b)])
    alone = event_log_from_rows([dict(r, id=k) for k, r in enumerate([a, b][job])])
    found, oracle = framework_overheads(both, job=job), framework_overheads(alone)
    assert found["layers"] == oracle["layers"] and found["optimizer_s"] == pytest.approx(oracle["optimizer_s"], abs=1e-15)
    assert found["gap_s"] == pytest.approx(oracle["gap_s"], abs=1e-15) and oracle["gap_s"] > 0
    assert framework_overheads(both)["layers"] != oracle["layers"]  # mixing the jobs' ranks differs


@pytest.mark.parametrize("seed", range(20))
def test_rows_grouped_by_rank_and_iteration_are_what_a_mask_over_all_rows_selects(seed):
    """The overheads look at each (rank, iteration) through one grouping of the rows (linear in the log, where a
    mask over all rows per (rank, iteration) grew with the square of the iterations): every group equals the
    brute-force mask's selection, in its order, and no other (rank, iteration) has rows."""
    import numpy as np

    from ddlsim.simulation.overheads import _by_rank_iteration

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 400))
    rows = {"rank": rng.integers(0, 4, n), "iteration": rng.integers(-1, 6, n)}
    idx = np.flatnonzero(rng.random(n) < 0.7)
    groups = _by_rank_iteration(rows, idx)
    for rank in range(4):
        for it in range(-1, 6):
            expected = idx[(rows["rank"][idx] == rank) & (rows["iteration"][idx] == it)]
            got = groups.get((rank, it))
            if len(expected):
                assert got is not None and got.tolist() == expected.tolist()
            else:
                assert got is None
