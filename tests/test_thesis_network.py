"""`network.job_band` (the whole job in one priority band) and `ddlsim reproduce thesis-network` (thesis chapter 5)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ddlsim
from ddlsim.errors import ScenarioError


def _job(job_band=None, compute="40ms", iterations=2, tenants=True, fidelity="flow"):
    network = {"bandwidth": "10Gbps", "latency": "10us", "fidelity": fidelity, "record_flows": True}
    if job_band is not None:
        network["job_band"] = job_band
    sc = {"workers": 4, "iterations": iterations, "seed": 5,
          "model": {"name": "synthetic", "synthetic": {"profile": "thesis-simulator", "layers": 10, "model_size": "10MB",
                                                        "compute": compute}},
          "strategy": {"kind": "ring", "grouping": {"kind": "thesis-fusion", "fusion_buffer_size": "2MB"}},
          "network": network}
    if tenants:
        sc["tenant"] = [{"sizes": "websearch", "flows_per_second_per_host": 300, "band": 0, "stop": "80ms"}]
    return ddlsim.simulate(sc)


def _flows(result):
    return result.events.flows.to_pandas()


@pytest.mark.parametrize("band", [0, 1, 2, 7])
def test_job_band_puts_every_job_transfer_in_that_band(band):
    f = _flows(_job(job_band=band))
    assert set(f[f["tenant"] == 0]["band"]) == {band}
    assert set(f[f["tenant"] == 1]["band"]) == {0}
    assert (f["tenant"] == 0).sum() > 0 and (f["tenant"] == 1).sum() > 0


def test_job_band_defaults_to_zero():
    f = _flows(_job())
    assert set(f[f["tenant"] == 0]["band"]) == {0}


def test_job_band_out_of_range_is_refused():
    with pytest.raises(ScenarioError, match="job_band"):
        _job(job_band=8)


def test_a_lower_band_job_is_invisible_to_band_0_tenants_at_flow_level():
    """Strict priority: band-0 tenant flows take what they need first, so their
    completion times do not depend on a band-1 job at all (here: jobs of
    different compute, hence different traffic timing, give identical tenant
    flows), while a band-0 job slows some of them down."""
    def tenant_flows(**kw):
        f = _flows(_job(iterations=3, **kw))
        t = f[f["tenant"] == 1].sort_values(["start_ns", "src_host", "dst_host"])
        return t[["src_host", "dst_host", "bytes", "start_ns", "end_ns"]].reset_index(drop=True)

    a = tenant_flows(job_band=1, compute="40ms")
    b = tenant_flows(job_band=1, compute="25ms")
    assert len(a) > 20
    assert a.equals(b)
    same = tenant_flows(job_band=0, compute="40ms")
    assert same[["bytes", "start_ns"]].equals(a[["bytes", "start_ns"]])  # the same arrivals (the tenant's seed)
    fct_lower = (a["end_ns"] - a["start_ns"]).to_numpy(dtype=float)
    fct_same = (same["end_ns"] - same["start_ns"]).to_numpy(dtype=float)
    assert fct_same.sum() > fct_lower.sum()
