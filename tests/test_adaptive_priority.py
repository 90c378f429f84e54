"""The adaptive band policy (issue 19, docs/adaptive-priority.md): each gradient group's network band from its
slack. The slack plan against values worked out on paper, the bands the engine puts on the wire, and the job alone
(no tenants), where the band cannot change anything."""

from __future__ import annotations

import numpy as np
import forked_cli
import pytest

import ddlsim
from ddlsim.errors import ScenarioError
from ddlsim.simulation import band_policy
from ddlsim.simulation.scenario import scenario_from_dict

# ----------------------------------------------------------------- the plan on hand-made profiles
#
# Profile A (barrier on): 3 layers, one group per layer, backward b = (2, 10, 4), costs c = (3, 2, 1).
#   Gradients ready (backward runs from layer 2 down): R2 = 4, R1 = 4 + 10 = 14, R0 = 14 + 2 = 16.
#   FIFO in issue order g2, g1, g0: EF2 = 4 + 1 = 5, EF1 = max(14, 5) + 2 = 16, EF0 = max(16, 16) + 3 = 19.
#   Barrier: every deadline is max(R0, EF0) = 19. Latest finish backwards: LF0 = 19 (LS0 = 16), LF1 = min(19, 16)
#   = 16 (LS1 = 14), LF2 = min(19, 14) = 14. Slack = LF - EF: g2 14 - 5 = 9, g1 0, g0 0.
TIMES_A = [(1, 2), (1, 10), (1, 4)]
GROUPS_A = [[0], [1], [2]]
COSTS_A = [3, 2, 1]


def test_slack_on_a_hand_made_profile_equals_the_paper_values():
    rows = band_policy.plan(TIMES_A, GROUPS_A, COSTS_A, barrier=True)
    assert [r.group for r in rows] == [2, 1, 0]
    assert [r.ready_ns for r in rows] == [4, 14, 16]
    assert [r.early_finish_ns for r in rows] == [5, 16, 19]
    assert [r.deadline_ns for r in rows] == [19, 19, 19]
    assert [r.latest_finish_ns for r in rows] == [14, 16, 19]
    assert [r.slack_ns for r in rows] == [9, 0, 0]


def test_slack_without_the_barrier_uses_each_layers_next_forward():
    # Profile B (pipelined forward): 2 layers, f = (5, 7), b = (1, 1); groups g0 = [0] (c 1), g1 = [1] (c 1).
    #   R1 = 1, R0 = 2. EF1 = 2, EF0 = 3. Forward of layer 0 waits for g0: F0 = max(R0, EF0) = 3; F1 = max(F0 + 5,
    #   EF1) = 8. Deadlines: g0 3, g1 8. LF0 = 3 (LS0 = 2); LF1 = min(8, 2) = 2: slack g1 = 0 (the FIFO stream: g0
    #   cannot start before g1 ends), g0 = 0.
    rows = band_policy.plan([(5, 1), (7, 1)], [[0], [1]], [1, 1], barrier=False)
    assert [(r.group, r.deadline_ns, r.latest_finish_ns, r.slack_ns) for r in rows] == [(1, 8, 2, 0), (0, 3, 3, 0)]
    # A gap before g0 (b0 = 6: R0 = 7) gives g1 the gap: EF1 = 2, EF0 = 8, F0 = 8; LF1 = min(F1, LS0) = 7; slack 5.
    rows = band_policy.plan([(5, 6), (7, 1)], [[0], [1]], [1, 1], barrier=False)
    assert [(r.group, r.slack_ns) for r in rows] == [(1, 5), (0, 0)]


def test_bands_demote_what_can_wait_and_the_slack_is_shared_along_the_stream():
    # Profile A: only g2 has slack (9 >= stretch x c2 = 1 for stretch <= 9).
    assert band_policy.adaptive_bands(TIMES_A, GROUPS_A, lambda m: m, COSTS_A, 0, 2, stretch=1.0) == [0, 0, 2]
    assert band_policy.adaptive_bands(TIMES_A, GROUPS_A, lambda m: m, COSTS_A, 0, 2, stretch=9.0) == [0, 0, 2]
    assert band_policy.adaptive_bands(TIMES_A, GROUPS_A, lambda m: m, COSTS_A, 0, 2, stretch=9.5) == [0, 0, 0]
    # Profile C: b = (10, 1, 1), c = 1 each. R2 = 1, R1 = 2, R0 = 12; EF = 2, 3, 13; deadline 13; g2 and g1 share
    # the gap of 9 before g0 (slack 9 each). Stretch 5: g2 goes low (cost 6, EF2 = 7, EF1 = 8), which leaves g1
    # 12 - 8 = 4 < 5: g1 stays high. Stretch 4: g2 low (EF2 = 6, EF1 = 7), g1 has 5 >= 4: low too.
    times_c, groups_c = [(1, 10), (1, 1), (1, 1)], [[0], [1], [2]]
    assert [r.slack_ns for r in band_policy.plan(times_c, groups_c, [1, 1, 1])] == [9, 9, 0]
    assert band_policy.adaptive_bands(times_c, groups_c, lambda m: m, [1, 1, 1], 0, 2, stretch=5.0) == [0, 0, 2]
    assert band_policy.adaptive_bands(times_c, groups_c, lambda m: m, [1, 1, 1], 0, 2, stretch=4.0) == [0, 2, 2]
    # the high band is the job's band, whatever it is
    assert band_policy.adaptive_bands(times_c, groups_c, lambda m: m, [1, 1, 1], 1, 3, stretch=4.0) == [1, 3, 3]


def test_the_reserve_is_required_but_not_used_up():
    # Profile A: g2's slack 9 covers stretch 1 x c2 = 1 plus a reserve of 8, not of 8.5.
    assert band_policy.adaptive_bands(TIMES_A, GROUPS_A, lambda m: m, COSTS_A, 0, 2, 1.0, reserve_ns=8.0) == [0, 0, 2]
    assert band_policy.adaptive_bands(TIMES_A, GROUPS_A, lambda m: m, COSTS_A, 0, 2, 1.0, reserve_ns=8.5) == [0, 0, 0]
    # Profile C, stretch 4, reserve 1: g2 (slack 9 >= 5) goes low and uses 4 of the shared gap; g1 has 5 >= 4 + 1
    # left and goes low too. Were the reserve used up (g2's cost 1 + 4 + 1), g1 would have 4 and stay high.
    times_c, groups_c = [(1, 10), (1, 1), (1, 1)], [[0], [1], [2]]
    assert band_policy.adaptive_bands(times_c, groups_c, lambda m: m, [1, 1, 1], 0, 2, 4.0, reserve_ns=1.0) == [0, 2, 2]
    assert band_policy.adaptive_bands(times_c, groups_c, lambda m: m, [1, 1, 1], 0, 2, 4.0, reserve_ns=1.5) == [0, 0, 2]


def test_contention_scales_every_planned_cost():
    # Profile C with contention 2 is profile C with costs 2: R = (1, 2, 12), EF = 3, 5, 14, deadline 14; g2 and g1
    # share a gap of 7 (LF1 = 12, LF2 = 10: slack 7 each). Stretch 2 (2 x 2 = 4): g2 low (EF2 = 7, EF1 = 9), g1
    # has 3 < 4 left: high. At contention 1 the same stretch demotes both (slack 9, then 9 - 2 = 7 >= 2).
    times_c, groups_c = [(1, 10), (1, 1), (1, 1)], [[0], [1], [2]]
    assert [r.slack_ns for r in band_policy.plan(times_c, groups_c, [2, 2, 2])] == [7, 7, 0]
    assert band_policy.adaptive_bands(times_c, groups_c, lambda m: m, [1, 1, 1], 0, 2, 2.0, contention=2.0) == [0, 0, 2]
    assert band_policy.adaptive_bands(times_c, groups_c, lambda m: m, [1, 1, 1], 0, 2, 2.0) == [0, 2, 2]


def test_the_default_reserve_is_the_packet_transports_minimum_rto():
    packet = scenario_from_dict(_scenario("adaptive", "packet"))
    assert band_policy.reserve_ns(packet) == 200e6
    tuned = scenario_from_dict(_scenario("adaptive", "packet", packet={"rto_min": "5ms"}))
    assert band_policy.reserve_ns(tuned) == 5e6
    assert band_policy.reserve_ns(scenario_from_dict(_scenario("adaptive", "flow"))) == 0.0
    assert band_policy.reserve_ns(scenario_from_dict(_scenario("adaptive", "flow", adaptive_reserve="3ms"))) == 3e6


def test_demoted_groups_stretched_as_planned_still_meet_every_deadline():
    # Property over seeded random profiles: stretch every demoted group's cost by (1 + stretch) and replan with the
    # original deadlines: every group still ends by its deadline, with the reserve left for each demoted one
    # (the one-pass greedy's guarantee); the group issued last has slack 0 and stays high.
    rng = np.random.default_rng(19)
    for _ in range(300):
        layers = int(rng.integers(1, 12))
        times = [(float(rng.integers(0, 50)), float(rng.integers(0, 50))) for _ in range(layers)]
        cuts = sorted(set(rng.integers(1, layers + 1, size=int(rng.integers(0, layers + 1))).tolist()) | {layers})
        groups, start = [], 0
        for c in cuts:
            groups.append(list(range(start, c)))
            start = c
        costs = [float(rng.integers(1, 30)) for _ in groups]
        stretch, reserve = float(rng.choice([0.0, 0.5, 1.0, 3.0])), float(rng.choice([0.0, 5.0, 40.0]))
        barrier = bool(rng.integers(0, 2))
        base = band_policy.plan(times, groups, costs, barrier)
        deadlines = {r.group: r.deadline_ns for r in base}
        bands = band_policy.adaptive_bands(times, groups, lambda m: m, costs, 0, 2, stretch, barrier, reserve)
        stretched = [c * (1 + stretch) if b == 2 else c for c, b in zip(costs, bands)]
        after = band_policy.plan(times, groups, stretched, barrier, deadlines)
        for r in after:
            assert r.early_finish_ns <= r.deadline_ns + 1e-6
            if bands[r.group] == 2:
                assert r.slack_ns >= reserve - 1e-6
        assert bands[base[-1].group] == 0 or stretch * costs[base[-1].group] + reserve == 0  # the last group: slack 0


# ----------------------------------------------------------------- in the engine

def _scenario(band_policy_name: str = "fixed", fidelity: str = "flow", **network) -> dict:
    """2 workers, 4 layers of 1 MB, 40 ms of compute: the early layers' gradients wait long in a barrier'd
    iteration, layer 0's is on the critical path."""
    return {"workers": 2, "iterations": 2, "seed": 3,
            "model": {"name": "synthetic", "synthetic": {"profile": "thesis-simulator", "layers": 4, "model_size": "4MB",
                                                          "compute": "40ms"}},
            "strategy": {"kind": "ring", "grouping": {"kind": "per-tensor"}},
            "network": {"fidelity": fidelity, "record_flows": True, "band_policy": band_policy_name, **network}}


def _band_of_group(run) -> dict[int, set[int]]:
    events = run.events.table.to_pandas()
    flows = run.events.flows.to_pandas()
    job = flows[flows["message"] >= 0].merge(events[events["message"] >= 0][["message", "group"]].drop_duplicates("message"),
                                             on="message")
    return {int(g): set(int(b) for b in part["band"]) for g, part in job.groupby("group")}


def test_the_engine_puts_a_group_with_large_slack_in_the_low_band_and_a_critical_one_in_the_high_band():
    run = ddlsim.simulate(_scenario("adaptive", adaptive_low_band=2))
    document = _document(run)
    layer_of = {i: min(g["layers"]) for i, g in enumerate(document["groups"])}
    on_wire = _band_of_group(run)
    assert set(on_wire) == set(layer_of)
    critical = next(g for g, layer in layer_of.items() if layer == 0)  # issued last: slack 0 under the barrier
    waiting = next(g for g, layer in layer_of.items() if layer == 3)  # issued first, ~30 ms of backward left
    assert on_wire[critical] == {0}
    assert on_wire[waiting] == {2}
    assert document["group_bands"][critical] == 0 and document["group_bands"][waiting] == 2
    # the fixed policy keeps every group in job_band
    fixed = _band_of_group(ddlsim.simulate(_scenario("fixed")))
    assert all(b == {0} for b in fixed.values())


def _document(run) -> dict:
    from ddlsim.simulation.lowering import training_document
    from ddlsim.simulation.run import layer_times_ns

    return training_document(run.scenario, run.model, layer_times_ns(run.model, run.scenario.model))


@pytest.mark.parametrize("fidelity", ["analytic", "flow"])
def test_with_no_tenants_adaptive_gives_the_same_iteration_as_the_same_band(fidelity):
    # Why: each worker's communication stream is FIFO and runs one all-reduce at a time, and in a ring every link
    # (host -> switch, switch -> next host) carries one sender's flows only, so two flows never share a link unless
    # they belong to the same step of the same all-reduce, which is in one band. Strict priority decides only between
    # flows that share a link, so with nothing else on the links the bands decide nothing: the same times, exactly.
    fixed = ddlsim.simulate(_scenario("fixed", fidelity))
    adaptive = ddlsim.simulate(_scenario("adaptive", fidelity))
    if fidelity == "flow":
        assert {b for s in _band_of_group(adaptive).values() for b in s} == {0, 2}  # the bands did differ
    a, b = fixed.events.table, adaptive.events.table
    for column in ("start_ns", "end_ns"):
        assert np.array_equal(a.column(column).to_numpy(), b.column(column).to_numpy())


def test_adaptive_refuses_what_its_plan_does_not_model():
    base = _scenario("adaptive")
    with pytest.raises(ScenarioError, match=r"band_policy = \"adaptive\" cannot be used here: strategy.kind is \"ps\""):
        scenario_from_dict({**base, "strategy": {"kind": "ps"}})
    with pytest.raises(ScenarioError, match=r"stream_policy is 'priority'"):
        scenario_from_dict({**base, "strategy": {"kind": "ring", "stream_policy": "priority"}})
    with pytest.raises(ScenarioError, match=r"adaptive_low_band = 1 is not below job_band = 1"):
        scenario_from_dict({**base, "network": {**base["network"], "job_band": 1, "adaptive_low_band": 1}})
    with pytest.raises(ScenarioError, match=r"priority_bands is on"):
        scenario_from_dict({**base, "network": {**base["network"], "priority_bands": True}})


def _cli(*args: str):

    return forked_cli.run([*args])


def test_the_cli_flag_runs_and_refuses_in_one_line():
    ok = _cli("simulate", "--model", "lenet5", "--workers", "2", "--iterations", "1", "--band-policy", "adaptive", "--json")
    assert ok.returncode == 0, ok.stderr
    bad = _cli("simulate", "--model", "lenet5", "--workers", "2", "--strategy", "ps", "--band-policy", "adaptive")
    assert bad.returncode == 2
    # the CLI's form for a scenario error: "invalid scenario:" and one line per problem
    problems = [line for line in bad.stderr.strip().splitlines() if "invalid scenario" not in line]
    assert len(problems) == 1 and "band_policy = \"adaptive\" cannot be used here: strategy.kind is \"ps\"" in problems[0]
    assert "Traceback" not in bad.stderr
    typo = _cli("simulate", "--model", "lenet5", "--band-policy", "adaptve")
    assert typo.returncode == 2 and "--band-policy adaptve: " in typo.stderr and "Traceback" not in typo.stderr


# ----------------------------------------------------------------- the chapter 5 comparison's arithmetic

def test_cells_compare_adaptive_with_same_and_lower_per_seed():
    import pandas as pd

    from ddlsim.reproduce.adaptive_priority import cells, label

    rows = []
    # seed 1: same 100 ms / FCT 1.0; lower 120 / 0.5; adaptive 101 / 0.6. seed 2: 200 / 3.0; 200 / 1.5; 204 / 1.8.
    for seed, values in ((1, {"same": (100, 1.0), "lower": (120, 0.5), "adaptive": (101, 0.6)}),
                         (2, {"same": (200, 3.0), "lower": (200, 1.5), "adaptive": (204, 1.8)})):
        for band, (it, fct) in values.items():
            rows.append({"ratio": 4, "rate": 92, "band": band, "seed": seed, "iteration_ms": it, "small_fct_mean_ms": fct,
                         "small_fct_p90_ms": fct, "job_low_band_bytes_pct": 50.0, "job_timeouts": 1})
    rows.append({"ratio": 4, "rate": 92, "band": "same", "seed": 3, "iteration_ms": 1, "small_fct_mean_ms": 1,
                 "small_fct_p90_ms": 1, "job_low_band_bytes_pct": 0.0, "job_timeouts": 0})  # seed 3 incomplete: left out
    c = cells(pd.DataFrame(rows)).iloc[0]
    assert c["seeds"] == 2
    assert c["iteration_change_adaptive_pct"] == pytest.approx((1 + 2) / 2)  # +1 % and +2 %
    assert c["iteration_change_adaptive_worst_pct"] == pytest.approx(2)
    assert c["iteration_change_lower_pct"] == pytest.approx((20 + 0) / 2)
    # seed means: same 2.0, lower 1.0, adaptive 1.2: adaptive gets (2.0 - 1.2) / (2.0 - 1.0) = 80 % of the gain
    assert c["small_gain_share_pct"] == pytest.approx(80)
    assert c["goal_fct"] and not c["goal_iteration"]
    # labels come from the run's own scenario
    scenario = {"model": {"synthetic": {"compute": "560ms"}}, "seed": 2, "tenant": [{"flows_per_second_per_host": 92}],
                "network": {"job_band": 0, "band_policy": "adaptive"}}
    assert label(scenario) == {"ratio": 4, "rate": 92, "band": "adaptive", "seed": 2}
    assert label({**scenario, "network": {"job_band": 2}})["band"] == "lower"
    assert label({**scenario, "tenant": []})["band"] == "alone"
