"""The run budget bounds background tenants' real cost: flows and packet hops counted by the engine."""

import numpy as np
import pytest

import ddlsim
from ddlsim.simulation import budget


def _run(**kw):
    seen = []
    with budget.run_control(on_start=lambda sc, est: seen.append(est)):
        r = ddlsim.simulate(**kw)
    return r, seen[0]


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("network", ["flow", "packet"])
def test_the_estimate_bounds_tenant_flows_and_packet_hops(network, seed):
    rng = np.random.default_rng(seed)
    # Offered loads up to 0.8 of a host's link in all (web search, 1.7 MB mean, plus data mining).
    rate = float(rng.uniform(50, 350))  # x 1.7 MB x 8 / 10 Gbit/s: 7 % to 48 %
    hosts = int(rng.integers(3, 6))
    background = [f"websearch:flows_per_host={rate:.0f},seed={seed}", f"datamining:load={rng.uniform(0.05, 0.3):.3f},seed={seed + 7}"]
    r, est = _run(model="resnet18", workers=2, iterations=2, network=network, hosts=hosts, background=background)
    flows = r.columns.flows
    tenant_flows = int((np.asarray(flows["tenant"]) > 0).sum())
    job = ddlsim.simulate(model="resnet18", workers=2, iterations=2, network=network)
    assert est.transfers >= r.stats["transfers"] + tenant_flows
    if network == "packet":
        assert est.packet_hops >= r.summary()["packet"]["counters"]["packets_forwarded"]
    assert tenant_flows > 0 and job.stats["transfers"] == r.stats["transfers"]
