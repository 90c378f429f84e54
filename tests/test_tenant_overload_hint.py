"""The refusal of overloading background tenants names a rate that really ends the overload (docs/tenants.md)."""

import re

import pytest

import ddlsim
from ddlsim.errors import ScenarioError
from ddlsim.simulation import budget

_JOB = {"workers": 2, "iterations": 1,
        "model": {"name": "synthetic", "synthetic": {"layers": 2, "model_size": "1MB", "compute": "100ms"}},
        "network": {"fidelity": "flow", "bandwidth": "10Gbps", "topology": "star", "hosts": 8}}


class _Admitted(Exception):
    pass


def _admitted(tenants: list[dict]) -> bool:
    """Whether the budget admits the job beside `tenants` (nothing is simulated)."""
    def stop(_sc, _est):
        raise _Admitted

    try:
        with budget.run_control(on_start=stop):
            ddlsim.simulate({**_JOB, "tenant": tenants})
    except _Admitted:
        return True
    return False


@pytest.mark.parametrize("rates", [[800], [400, 400], [500, 150, 150], [500, 100, 100, 100], [700, 300, 300]])
def test_the_rate_the_refusal_suggests_ends_the_overload(rates):
    """Web-search tenants (1.71 MB mean) at `rates` flows/s per host offer 110 % to 178 % of a 10 Gbit/s link. The
    refusal says to lower one tenant's flows_per_second_per_host to under some rate: with that tenant just under it,
    the same job is admitted. (With several tenants the hint was the busiest's rate / the total load, which left
    the others' load on top: still overloaded, refused again.)"""
    tenants = [{"name": f"t{k}", "sizes": "websearch", "flows_per_second_per_host": r} for k, r in enumerate(rates)]
    with pytest.raises(ScenarioError, match="overloaded") as refused:
        _admitted(tenants)
    text = str(refused.value)
    number, under = re.search(r"lower flows_per_second_per_host of tenant (\d+)[^)]*\)? to under ([0-9.e+]+)", text).groups()
    lowered = [{**t, "flows_per_second_per_host": float(under) * 0.999} if k == int(number) - 1 else t
               for k, t in enumerate(tenants)]
    assert _admitted(lowered), text


def test_tenants_whose_open_ended_load_fits_are_admitted_beside_an_overload_that_stops():
    """A 150 % burst that stops after 50 ms beside a 20 % tenant without a stop: the run has a bound (the burst
    ends, the rest is under the link's rate), so it is admitted; the open-ended tenant alone at 110 % is refused."""
    burst = {"name": "burst", "sizes": "websearch", "flows_per_second_per_host": 1100, "stop": "50ms"}
    steady = {"name": "steady", "sizes": "websearch", "flows_per_second_per_host": 150}
    assert _admitted([burst, steady])
    with pytest.raises(ScenarioError, match="overloaded"):
        _admitted([{**steady, "flows_per_second_per_host": 800}])
