"""Through the Python API: idle-network closed forms, exact to the ns."""

import pytest

import ddlsim


def one_tensor(params: int, **kw):
    return ddlsim.simulate(
        {
            "model": {"name": "one-tensor", "layers": [{"name": "l0", "params": params, "fwd_ms": 0, "bwd_ms": 0}]},
            "iterations": 1,
            **kw,
        }
    )


@pytest.mark.parametrize("fidelity", ["flow", "analytic"])
@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_ring_allreduce_time_is_2_n_minus_1_steps(fidelity, n):
    # M = N * 2500 B, so M/N at 10 Gbit/s is exactly 2000 ns; latency 7 us.
    m_bytes = n * 2500
    r = one_tensor(m_bytes // 4, workers=n, strategy="ring", network={"fidelity": fidelity, "bandwidth": "10Gbps", "latency": "7us"})
    expected_ns = 2 * (n - 1) * (m_bytes / n * 8 / 10e9 * 1e9 + 7000)
    ev = r.events.to_pandas()
    assert ev["end_ns"].max() == expected_ns
    steps = ev[(ev["op"] == "ring_step") & (ev["kind"] == "send")]
    assert len(steps) == n * 2 * (n - 1)
    assert steps["bytes"].sum() == 2 * (n - 1) * m_bytes


@pytest.mark.parametrize("n", [1, 3, 8])
def test_ps_incast_is_n_times_m_over_b_plus_latency(n):
    m_bytes = 1_000_000
    r = one_tensor(m_bytes // 4, workers=n, strategy="ps", network={"bandwidth": "10Gbps", "latency": "10us"})
    ev = r.events.to_pandas()
    pushes = ev[(ev["op"] == "push_request") & (ev["kind"] == "recv")]
    assert len(pushes) == n and (pushes["end_ns"] == n * m_bytes * 8 / 10 + 10_000).all()
    update = ev[ev["op"] == "update"].iloc[0]
    assert update["ready_ns"] == n * m_bytes * 8 / 10 + 10_000


def test_analytic_transfer_is_latency_plus_size_over_bandwidth():
    # Links are FIFO servers: a message arrives the latency after its
    # transmission ends, which is at least its size over the bandwidth after
    # it was started (later when it queued behind others on the server link);
    # the server's downlink carries the 8 pushes one after another.
    r = one_tensor(250_000, workers=8, strategy="ps", network={"fidelity": "analytic", "latency": "10us"})
    ev = r.events.to_pandas()
    sends = ev[ev["kind"] == "send"].set_index("message")
    recvs = ev[ev["kind"] == "recv"].set_index("message").loc[sends.index]
    tx = sends["bytes"] * 8 / 10
    assert len(sends) == 8 * 4
    assert ((recvs["end_ns"] - sends["end_ns"]) == 10_000).all()
    assert ((sends["end_ns"] - sends["start_ns"]) >= tx).all()
    assert ((recvs["end_ns"] - sends["start_ns"]) == 10_000 + tx).any()
    pushes = sends[sends["op"] == "push_request"].sort_values("end_ns")
    first = pushes["start_ns"].min()
    size = int(pushes["bytes"].iloc[0])
    assert (pushes["bytes"] == size).all()
    assert list(pushes["end_ns"] - first) == [k * size * 8 // 10 for k in range(1, 9)]
