"""A set of point-to-point flows run through the engine (ddlsim.simulation.flowset):
completion times at flow fidelity against closed forms derived on paper, the
release and dependency rules, and one-line errors for a malformed set."""

from __future__ import annotations

import random

import pytest

from ddlsim.errors import ScenarioError
from ddlsim.simulation.flowset import Flow, graph_columns, network, run_flows, run_flows_raw

B = 10e9          # bits per second
L = 10_000        # host-to-host latency, ns
NET = network(B, L, "flow")


def serial_ns(nbytes: int) -> int:
    return round(nbytes * 8 / B * 1e9)


def test_one_flow_alone_takes_latency_plus_bytes_over_bandwidth():
    (r,) = run_flows([Flow(0, 1, 1_250_000)], NET)
    assert (r.start_ns, r.end_ns, r.fct_ns) == (0, L + 1_000_000, L + 1_000_000)


def test_two_equal_flows_into_one_port_each_get_half_the_rate():
    done = run_flows([Flow(1, 0, 1_250_000), Flow(2, 0, 1_250_000)], NET)
    assert [r.fct_ns for r in done] == [L + 2_000_000] * 2


def test_flows_from_one_sender_to_two_receivers_share_its_nic():
    done = run_flows([Flow(0, 1, 1_250_000), Flow(0, 2, 1_250_000)], NET)
    assert [r.fct_ns for r in done] == [L + 2_000_000] * 2


def test_disjoint_flows_do_not_interfere():
    done = run_flows([Flow(0, 1, 1_250_000), Flow(2, 3, 2_500_000)], NET)
    assert [r.fct_ns for r in done] == [L + 1_000_000, L + 2_000_000]


def test_a_high_band_flow_is_unchanged_by_a_low_band_flow_on_its_port():
    alone = run_flows([Flow(1, 0, 1_250_000, band=0)], NET)[0].fct_ns
    high, low = run_flows([Flow(1, 0, 1_250_000, band=0), Flow(2, 0, 1_250_000, band=2)], NET)
    assert high.fct_ns == alone == L + 1_000_000
    # The low band gets the port once the high band is done: all the bytes at full rate.
    assert low.fct_ns == L + 2_000_000


def test_a_release_time_delays_the_start():
    (r,) = run_flows([Flow(0, 1, 1_250_000, start_ns=7_000)], NET)
    assert (r.start_ns, r.end_ns) == (7_000, 7_000 + L + 1_000_000)


def test_after_and_gap_start_a_flow_once_another_was_delivered():
    first, second = run_flows([Flow(0, 1, 1_250_000), Flow(1, 2, 125_000, after=0, gap_ns=3_000)], NET)
    assert second.start_ns == first.end_ns + 3_000
    assert second.fct_ns == L + 100_000


@pytest.mark.parametrize("hosts", [2, 3, 8])
def test_a_ring_all_reduce_of_dependent_steps_matches_its_closed_form(hosts):
    # 2(N-1) steps; each host sends model/N bytes to its successor once its predecessor's previous step
    # arrived. Every step's N flows use disjoint NIC and switch ports: each step takes L + chunk/B.
    chunk = 1_250_000
    steps = 2 * (hosts - 1)
    flows = []
    for step in range(steps):
        for h in range(hosts):
            after = None if step == 0 else (step - 1) * hosts + (h - 1) % hosts
            flows.append(Flow(h, (h + 1) % hosts, chunk, after=after))
    done = run_flows(flows, NET)
    assert max(r.end_ns for r in done) == steps * (L + serial_ns(chunk))
    for i, (f, r) in enumerate(zip(flows, done)):
        if f.after is not None:
            assert r.start_ns == done[f.after].end_ns, i


def test_a_random_incast_keeps_the_receiver_port_busy():
    # Property, seeded: flows from distinct senders into one receiver, all at t=0, any sizes. Max-min
    # sharing is work-conserving at the bottleneck (the receiver's port), so the last byte arrives at
    # latency + total bytes / bandwidth (to the nanosecond, up to the engine's rounding of each rate change).
    rng = random.Random(17)
    for _ in range(20):
        n = rng.randint(1, 7)
        sizes = [rng.randint(1, 400) * 12_500 for _ in range(n)]
        done = run_flows([Flow(s + 1, 0, size) for s, size in enumerate(sizes)], NET)
        last = max(r.end_ns for r in done)
        assert abs(last - (L + serial_ns(sum(sizes)))) <= n, (sizes, last)
        assert [r.bytes for r in done] == sizes


def test_results_come_back_in_the_order_given_and_runs_repeat_exactly():
    flows = [Flow(3, 0, 500_000, start_ns=50_000), Flow(1, 0, 1_000_000), Flow(2, 3, 125_000, band=1, after=1)]
    first = run_flows(flows, NET)
    assert [(r.src, r.dst, r.bytes) for r in first] == [(f.src, f.dst, f.bytes) for f in flows]
    assert run_flows(flows, NET) == first


def test_the_engine_output_has_one_flow_row_per_flow():
    flows = [Flow(0, 1, 1000), Flow(1, 0, 2000, after=0, gap_ns=10)]
    _, out = run_flows_raw(flows, NET)
    assert out["makespan_ns"] > 0 and len(out["flows"]["message"][1]) == 8 * len(flows)


def test_a_dependency_gap_is_a_compute_op_on_the_sender():
    columns, send = graph_columns([Flow(0, 1, 1000), Flow(1, 0, 2000, after=0, gap_ns=10)])
    kinds = list(columns["kind"][1])
    assert kinds == [1, 0, 1] and send == [0, 2]


@pytest.mark.parametrize("flows, message", [
    ([], "at least one flow"),
    ([Flow(1, 1, 10)], "flow 0: src and dst are both rank 1"),
    ([Flow(0, 1, 0)], "flow 0: bytes must be positive"),
    ([Flow(0, 1, -5)], "flow 0: bytes must be a non-negative integer"),
    ([Flow(0, 1, 10, band=8)], "flow 0: band 8 is past the last band"),
    ([Flow(0, 1, 10), Flow(1, 0, 10, after=1)], "flow 1: after must be the index of an earlier flow"),
    ([Flow(0, 1, 10, gap_ns=5)], "flow 0: gap_ns needs after"),
    ([Flow(0, 1, 10.5)], "flow 0: bytes must be a non-negative integer"),
])
def test_a_malformed_set_is_one_line_naming_the_flow(flows, message):
    with pytest.raises(ScenarioError, match=message) as caught:
        run_flows(flows, NET)
    assert "\n" not in str(caught.value)


def test_too_few_ranks_and_packet_parameters_off_packet_fidelity_are_refused():
    with pytest.raises(ScenarioError, match="ranks up to 2 but only 2"):
        run_flows([Flow(0, 2, 10)], NET, ranks=2)
    with pytest.raises(ScenarioError, match="packet parameters need fidelity 'packet'"):
        network(B, L, "flow", {"mtu": 1500})


def test_an_engine_refusal_is_a_scenario_error():
    with pytest.raises(ScenarioError, match="rejected"):
        run_flows([Flow(0, 1, 10)], {**NET, "fidelity": "no-such-fidelity"})


# The validation cases against ns-3 (tools/packet_validation/validate.py), without ns-3: their flows run at
# flow fidelity, the ring is the ring of the closed form, and their packet parameters are the contract's.
PACKET_KEYS = {"mtu", "framing", "tcp_timestamps", "transport", "bands", "queue_limit", "queue_limit_unit", "queue_scope",
               "ecn_threshold", "initial_window", "rto_min_ns", "rto_initial_ns", "delayed_ack", "delayed_ack_timeout_ns",
               "receive_window", "restart_after_idle", "connection_per_message", "dctcp_g", "queue_sample_ns",
               "queue_sample_cap"}


def _validation_module():
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "tools" / "packet_validation" / "validate.py"
    spec = importlib.util.spec_from_file_location("packet_validate", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


def test_the_validation_cases_run_at_flow_fidelity_and_use_only_contract_parameters():
    validate = _validation_module()
    cases = {c.name: c for c in validate.cases()}
    assert {"one_flow", "incast8_newreno", "incast8_dctcp", "two_bands", "ring8"} <= set(cases)
    for case in cases.values():
        assert set(case.packet) <= PACKET_KEYS, case.name
        assert case.packet["framing"] == "ppp" and case.packet["queue_scope"] == "port"
        done, note = validate.run_ddlsim(case, "flow")
        assert note == "" and len(done) == len(case.flows), case.name
    ring, _ = validate.run_ddlsim(cases["ring8"], "flow")
    assert validate._last(ring) == 14 * (L + serial_ns(12_500_000))
    two, _ = validate.run_ddlsim(cases["two_bands"], "flow")
    assert [validate._fct(0)(two), validate._fct(1)(two)] == [L + serial_ns(20_000_000), L + serial_ns(40_000_000)]


def test_ring_flows_repeat_with_a_gap_after_the_last_step():
    validate = _validation_module()
    flows = validate.ring_flows(4, 4_000_000, iterations=2, gap_ns=1_000_000)
    assert len(flows) == 2 * 6 * 4
    first_of_second = flows[6 * 4 + 1]  # host 1, step 0 of iteration 1: after host 0's last step of iteration 0
    assert (first_of_second.after, first_of_second.gap_ns) == (5 * 4 + 0, 1_000_000)
    done = run_flows(flows, NET)
    one = 6 * (L + serial_ns(1_000_000))
    assert max(r.end_ns for r in done) == 2 * one + 1_000_000
