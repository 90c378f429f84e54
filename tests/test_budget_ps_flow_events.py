"""At flow fidelity a PS transfer's arrival and departure re-rate the transfers sharing its server's link and its
worker's link, and each re-rated one's completion is scheduled again, so the engine pops more events than
transfers. The run budget's event estimate (which sets the refusal limit and the time guess) must bound the
engine's count. Before, it took 1.4 events per transfer and worker, which fell short: ResNet-18, 8 workers,
2 servers, 45,879 estimated against 48,452; LeNet-5, 3 workers, 3 servers, split in 40 kB chunks, 4,088 against
5,316 (with 2 n - 1 per transfer)."""

from __future__ import annotations

import random

import pytest

import ddlsim
from ddlsim.simulation import budget


def _events(scenario):
    seen = []
    with budget.run_control(force=True, on_start=lambda sc, est: seen.append(est)):
        r = ddlsim.simulate(scenario)
    (est,) = seen
    return est.events, r.stats["events"]


@pytest.mark.parametrize("strategy,workers,model", [
    ({"kind": "ps", "servers": 2}, 8, "resnet18"),
    ({"kind": "ps", "servers": 3, "placement": "split", "chunk_bytes": 40_000}, 3, "lenet5"),
])
def test_the_flow_event_estimate_bounds_the_cases_it_missed(strategy, workers, model):
    est, real = _events({"model": {"name": model}, "workers": workers, "iterations": 2, "trace_detail": "step",
                         "network": {"fidelity": "flow"}, "strategy": strategy})
    assert est >= real, (est, real)


@pytest.mark.parametrize("seed", range(40))
def test_the_flow_event_estimate_bounds_seeded_ps_scenarios(seed):
    rng = random.Random(seed)
    asynchronous = rng.random() < 0.3
    strategy = {"kind": "ps", "servers": rng.randint(1, 4),
                "placement": rng.choice(["split", "round-robin", "size-balanced"]), "asynchronous": asynchronous,
                "distribution": "immediate" if asynchronous else rng.choice(["immediate", "round-robin"])}
    if rng.random() < 0.5:
        strategy["chunk_bytes"] = rng.choice([20_000, 100_000, 1_000_000])
    scenario = {"model": {"name": "lenet5"}, "workers": rng.randint(2, 10), "iterations": 2, "trace_detail": "step",
                "network": {"fidelity": "flow"}, "strategy": strategy}
    est, real = _events(scenario)
    assert est >= real, (scenario, est, real)
