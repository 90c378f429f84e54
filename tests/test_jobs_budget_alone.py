"""The budget of a run of several jobs bounds all the engine runs it makes: the run of all jobs, then (with `alone`,
the default) each job again alone for its slowdown. Events and transfers are counted by the engine in every run; the
barrier's event per iteration is counted too (a single job's estimate fell 1 event an iteration short)."""

import pytest

import ddlsim
from ddlsim.simulation import budget
from ddlsim.simulation.jobs import _run_engine, check_budget, plan_jobs
from ddlsim.simulation.scenario import scenario_from_dict


@pytest.mark.parametrize("model,other", [("resnet18", "vgg16"), ("lenet5", "alexnet")])
def test_a_jobs_runs_estimate_bounds_the_engine_work_of_the_run_and_of_each_job_alone(model, other):
    sc = scenario_from_dict({"workers": 2, "iterations": 2, "model": {"name": model}, "trace_detail": "step",
                             "network": {"fidelity": "flow", "bandwidth": "10Gbps", "topology": "star", "hosts": 4},
                             "job": [{"name": "a"}, {"name": "b", "model": {"name": other}}]})
    plan = plan_jobs(sc)
    seen = []
    with budget.run_control(on_start=lambda _sc, est: seen.append(est)):
        check_budget(plan, alone=True)
    runs = [_run_engine(plan)] + [_run_engine(plan, only=j) for j in range(len(plan.subs))]
    events = sum(r["events"] for r in runs)
    transfers = sum(r["transfers"] for r in runs)
    assert seen[0].events >= events and seen[0].transfers >= transfers, (seen[0], events, transfers)


@pytest.mark.parametrize("barrier", [True, False])
def test_a_single_runs_estimate_counts_the_barriers_events(barrier):
    seen = []
    with budget.run_control(on_start=lambda _sc, est: seen.append(est)):
        r = ddlsim.simulate({"workers": 2, "iterations": 3, "model": {"name": "lenet5"}, "barrier": barrier,
                             "network": {"fidelity": "flow", "topology": "star"}})
    assert seen[0].events >= r.stats["events"], (seen[0].events, r.stats["events"])
