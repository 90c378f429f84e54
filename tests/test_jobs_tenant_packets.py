"""The budget of a run of several jobs bounds its background tenants' packets, as a single job's does
(tests/test_tenant_budget.py): packet hops counted by the engine in the run of all jobs."""

import pytest

from ddlsim.simulation import budget
from ddlsim.simulation.jobs import _run_engine, check_budget, plan_jobs
from ddlsim.simulation.scenario import scenario_from_dict


@pytest.mark.parametrize("seed,rate", [(1, 200), (2, 120)])
def test_a_jobs_runs_estimate_bounds_its_tenants_packet_hops(seed, rate):
    """Two ResNet-18 jobs beside web-search tenants at packet level: the engine forwards several million packets,
    most of them the tenants'; the estimate of the run of all jobs (alone runs left out) must be at least that."""
    sc = scenario_from_dict({
        "workers": 2, "iterations": 2, "model": {"name": "resnet18"},
        "network": {"fidelity": "packet", "bandwidth": "10Gbps", "topology": "star", "hosts": 6},
        "tenant": [{"name": "ws", "sizes": "websearch", "flows_per_second_per_host": rate, "seed": seed}],
        "job": [{"name": "a"}, {"name": "b"}]})
    plan = plan_jobs(sc)
    seen = []
    with budget.run_control(on_start=lambda _sc, est: seen.append(est)):
        check_budget(plan, alone=False)
    forwarded = _run_engine(plan)["network"]["packets_forwarded"]
    assert forwarded > 0 and seen[0].packet_hops >= forwarded, (seen[0], forwarded)
