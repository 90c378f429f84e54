"""Background tenants ([[tenant]] tables, --background, network.hosts): the
scenario checks, the engine's "tenants"/"hosts" JSON written out by hand
(docs/tenants.md, the contract with the engine), the load <-> rate
conversion, the command-line form, and a run through ddlsim.simulate."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import forked_cli
import pytest

import ddlsim
from ddlsim.errors import ScenarioError
from ddlsim.simulation.lowering import network_document, tenant_rate_per_host
from ddlsim.simulation.scenario import TenantConfig, load_scenario, parse_background, scenario_from_dict, with_overrides

ROOT = Path(__file__).resolve().parent.parent


def _err(data) -> str:
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(data)
    return str(info.value)


# ----------------------------------------------------------------- validation


def test_load_is_given_one_way():
    assert "give exactly one of load" in _err({"tenant": [{"sizes": "websearch"}]})
    assert "got both" in _err({"tenant": [{"load": 0.3, "flows_per_second_per_host": 23}]})
    for bad in (0, 1.5, -0.1, float("nan")):
        assert "0 < load <= 1" in _err({"tenant": [{"load": bad}]}), bad
    assert "tenant.0.flows_per_second_per_host" in _err({"tenant": [{"flows_per_second_per_host": 0}]})


def test_tenant_field_checks():
    assert "tenant.0.band" in _err({"tenant": [{"load": 0.1, "band": 8}]})
    assert "did you mean 'websearch'" in _err({"tenant": [{"load": 0.1, "sizes": "web-serch"}]})
    assert "to itself" in _err({"tenant": [{"load": 0.1, "pairs": [[2, 2]]}]})
    assert "pairs and hosts" in _err({"tenant": [{"load": 0.1, "pairs": [[0, 1]], "hosts": [0, 1]}]})
    assert "at least two different hosts" in _err({"tenant": [{"load": 0.1, "hosts": [3]}]})
    assert "twice" in _err({"tenant": [{"load": 0.1, "hosts": [0, 1, 1]}]})
    assert "is not after start" in _err({"tenant": [{"load": 0.1, "start": "2s", "stop": "1s"}]})
    assert "used twice" in _err({"tenant": [{"load": 0.1, "name": "a"}, {"load": 0.2, "name": "a"}]})
    assert "unknown key 'tenant.0.rate'" in _err({"tenant": [{"load": 0.1, "rate": 3}]})
    assert "network.hosts" in _err({"network": {"hosts": 0}})
    assert "would never meet the job's" in _err({"network": {"fidelity": "analytic", "collective_model": "closed-form"},
                                                 "tenant": [{"load": 0.1}]})


def test_hosts_must_hold_the_ranks():
    sc = scenario_from_dict({"workers": 8, "network": {"hosts": 4}, "tenant": [{"load": 0.1}]})
    with pytest.raises(ScenarioError, match=r"network.hosts = 4 is fewer than the 8 hosts the ranks use.*at least 8"):
        network_document(sc)
    # two ranks per host and a separate PS server: 4 worker hosts + 1
    sc = scenario_from_dict({"workers": 8, "strategy": {"kind": "ps"}, "network": {"hosts": 4, "ranks_per_host": 2}})
    with pytest.raises(ScenarioError, match="fewer than the 5 hosts"):
        network_document(sc)
    sc = scenario_from_dict({"workers": 2, "tenant": [{"load": 0.1, "pairs": [[0, 7]]}]})
    with pytest.raises(ScenarioError, match=r"tenant 1: host 7 is not in the fabric \(hosts 0 to 1\).*at least 8"):
        network_document(sc)
    sc = scenario_from_dict({"workers": 1, "tenant": [{"load": 0.1}]})
    with pytest.raises(ScenarioError, match="one host"):
        network_document(sc)


# ----------------------------------------------------------------- lowering


def test_lowering_writes_the_contract_json(tmp_path):
    (tmp_path / "mine.csv").write_text("bytes,cum\n1000,0.5\n3000,1\n", encoding="utf-8")
    (tmp_path / "s.toml").write_text("""
workers = 4
seed = 5
[network]
bandwidth = "10Gbps"
hosts = 6
[[tenant]]
name = "search"
sizes = "websearch"
flows_per_second_per_host = 23
[[tenant]]
sizes = "mine.csv"
load = 0.3
band = 2
seed = 11
pairs = [[0, 5], [4, 1]]
start = "1ms"
stop = "2s"
[[tenant]]
sizes = "datamining"
load = 0.1
hosts = [1, 4, 5]
""", encoding="utf-8")
    sc = load_scenario(tmp_path / "s.toml")
    doc = network_document(sc)
    websearch = [[1, 0.15 / 10_000], [10_000, 0.15], [20_000, 0.2], [30_000, 0.3], [50_000, 0.4], [80_000, 0.53],
                 [200_000, 0.6], [1_000_000, 0.7], [2_000_000, 0.8], [5_000_000, 0.9], [10_000_000, 0.97], [30_000_000, 1.0]]
    datamining = [[1, 0.1 / 180], [180, 0.1], [216, 0.2], [560, 0.3], [900, 0.4], [1_100, 0.5], [1_870, 0.6], [3_160, 0.7],
                  [10_000, 0.8], [400_000, 0.9], [3_160_000, 0.95], [100_000_000, 0.98], [1_000_000_000, 1.0]]
    dm_mean = 0.1 / 180 * 1 + (0.1 - 0.1 / 180) * 181 / 2 + 0.1 * 198 + 0.1 * 388 + 0.1 * 730 + 0.1 * 1000 + 0.1 * 1485 \
        + 0.1 * 2515 + 0.1 * 6580 + 0.1 * 205_000 + 0.05 * 1_780_000 + 0.03 * 51_580_000 + 0.02 * 550_000_000
    assert doc["hosts"] == 6 and doc["record_flows"] is True
    tenants = doc.pop("tenants")
    assert tenants[:2] == [
        {"id": 1, "band": 0, "seed": 5, "cdf": websearch, "rate_per_host": 23.0, "pairs": None, "hosts": None,
         "start_ns": 0, "stop_ns": None},
        # mean 0.5 x 1000 + 0.5 x (1000 + 3000) / 2 = 1500 bytes; 0.3 x 10e9 / (8 x 1500) = 250,000 flows/s per host
        {"id": 2, "band": 2, "seed": 11, "cdf": [[1000, 0.5], [3000, 1.0]], "rate_per_host": 250_000.0,
         "pairs": [[0, 5], [4, 1]], "hosts": None, "start_ns": 1_000_000, "stop_ns": 2_000_000_000},
    ]
    third = dict(tenants[2])
    assert third.pop("rate_per_host") == pytest.approx(0.1 * 10e9 / (8 * dm_mean), rel=1e-12)
    assert third == {"id": 3, "band": 0, "seed": 7, "cdf": datamining, "pairs": None, "hosts": [1, 4, 5],
                     "start_ns": 0, "stop_ns": None}
    # the rest of the network document is the one without tenants
    plain = network_document(scenario_from_dict({"workers": 4, "seed": 5, "network": {"bandwidth": "10Gbps"}}))
    assert plain["record_flows"] is False and "tenants" not in plain and "hosts" not in plain
    assert {k: v for k, v in doc.items() if k not in ("hosts", "record_flows")} == \
        {k: v for k, v in plain.items() if k != "record_flows"}
    json.dumps(doc, allow_nan=False)  # plain JSON the engine reads


def test_load_to_rate_by_hand():
    # web search at 30 % of 10 Gbit/s: 0.3 x 1.25e9 B/s / 1,711,250 B = 219.14 flows/s per sending host;
    # the thesis' 23 flows/s per host is 23 x 1.71125e6 x 8 / 10e9 = 3.15 % of the link (its "3.12 %" with 1.7 MB)
    t = TenantConfig(load=0.3)
    assert tenant_rate_per_host(t, 10e9, 1_711_250) == pytest.approx(219.138, abs=1e-3)
    assert 23 * 1_711_250 * 8 / 10e9 == pytest.approx(0.0315, abs=1e-4)
    doc = network_document(scenario_from_dict({"tenant": [{"load": 0.3}]}))
    assert doc["tenants"][0]["rate_per_host"] == pytest.approx(0.3 * 10e9 / (8 * 1_711_250), rel=1e-6)
    # at 25 Gbit/s the same load is 2.5 x the flows
    doc25 = network_document(scenario_from_dict({"tenant": [{"load": 0.3}], "network": {"bandwidth": "25Gbps"}}))
    assert doc25["tenants"][0]["rate_per_host"] == pytest.approx(2.5 * doc["tenants"][0]["rate_per_host"])


# ----------------------------------------------------------------- command-line form


def test_background_grammar():
    assert parse_background("websearch:load=0.3") == {"sizes": "websearch", "load": 0.3}
    assert parse_background("datamining:flows_per_host=23,band=1,seed=4,start=1s,stop=3s,name=dm") == {
        "sizes": "datamining", "flows_per_second_per_host": 23.0, "band": 1, "seed": 4, "start": "1s", "stop": "3s",
        "name": "dm"}
    assert parse_background("cdf=my sizes.csv:load=0.2") == {"sizes": "my sizes.csv", "load": 0.2}
    for spec, message in [("websearch:load", "write key=value"), ("websearch:lod=1", "did you mean 'load'"),
                          ("websearch:band=x", "not a whole number"), ("cdf=:load=1", "needs the path"),
                          (":load=1", "start with the flow sizes"), ("websearch:load=1,load=2", "given twice")]:
        with pytest.raises(ValueError, match=message):
            parse_background(spec)


def test_background_override_replaces_the_tables():
    base = scenario_from_dict({"tenant": [{"load": 0.5}]})
    sc = with_overrides(base, {"background": ["websearch:load=0.1", "datamining:flows_per_host=5"], "hosts": 12})
    assert [(t.sizes, t.load, t.flows_per_second_per_host) for t in sc.tenants] == [("websearch", 0.1, None),
                                                                                     ("datamining", None, 5.0)]
    assert sc.network.hosts == 12
    assert with_overrides(base, {"background": "websearch:load=0.2"}).tenants[0].load == 0.2


def _cli(args, cwd):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "COLUMNS": "200"}
    return forked_cli.run([*args], cwd=cwd, env=env, timeout=120)


@pytest.mark.parametrize("spec,expected", [
    ("websearch:lod=0.3", "unknown key 'lod'"), ("websearch", "got neither"), ("websearch:load=2", "0 < load <= 1"),
    ("websearch:band=9,load=0.1", "band"), ("websearh:load=0.1", "did you mean 'websearch'"),
    ("cdf=nothere.csv:load=0.1", "nothere.csv: flow-size CDF file not found"),
])
def test_background_errors_are_one_line_exit_2(spec, expected, tmp_path):
    run = _cli(["simulate", "--model", "lenet5", "--workers", "2", "--iterations", "1", "--background", spec], tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert expected in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_hosts_flag_error_exit_2(tmp_path):
    run = _cli(["simulate", "--model", "lenet5", "--workers", "4", "--iterations", "1", "--hosts", "2",
                "--background", "websearch:load=0.1"], tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "network.hosts = 2 is fewer than the 4 hosts" in run.stderr


# ----------------------------------------------------------------- end to end


@pytest.mark.parametrize("fidelity", ["flow", "packet", "analytic"])
def test_a_tenant_runs_beside_the_job(fidelity, tmp_path):
    (tmp_path / "small.csv").write_text("1000,0.5\n3000,1\n", encoding="utf-8")  # mean 1500 bytes
    rate, start_ns = 50_000.0, 100_000  # 50,000 x 1500 x 8 = 0.6 Gbit/s per sending host: 6 % of the link
    r = ddlsim.simulate(model="lenet5", workers=2, iterations=2, network=fidelity,
                          background=[f"cdf={tmp_path / 'small.csv'}:flows_per_host={rate:g},seed=3,start=100us"])
    flows = r.columns.flows
    tenant = np.asarray(flows["tenant"])
    mine = tenant == 1
    assert set(np.unique(tenant)) == {0, 1}
    sizes, starts = np.asarray(flows["bytes"])[mine], np.asarray(flows["start_ns"])[mine]
    assert sizes.min() >= 1000 and sizes.max() <= 3000
    assert sizes.mean() == pytest.approx(1500, rel=0.15)
    assert starts.min() >= start_ns
    src, dst = np.asarray(flows["src_host"])[mine], np.asarray(flows["dst_host"])[mine]
    assert set(src) | set(dst) <= {0, 1} and (src != dst).all()
    # Poisson arrivals until the job ends: 2 sending hosts x rate x window, within 5 standard deviations
    window_s = (r.stats["makespan_ns"] - start_ns) / 1e9
    expected = 2 * rate * window_s
    assert abs(mine.sum() - expected) <= 5 * np.sqrt(expected) + 2, (mine.sum(), expected)


def test_the_docs_examples_run(tmp_path):
    """docs/tenants.md: its scenario and CSV files, every shell line and the Python example that
    needs the engine (a ~~~python block, which tests/test_doc_snippets.py leaves to this test)."""
    text = (ROOT / "docs" / "tenants.md").read_text(encoding="utf-8")
    (tmp_path / "tenants.toml").write_text(re.search(r"```toml\n(.*?)```", text, flags=re.S).group(1), encoding="utf-8")
    (tmp_path / "my_sizes.csv").write_text(re.search(r"```text\n(.*?)```", text, flags=re.S).group(1), encoding="utf-8")
    assert load_scenario(tmp_path / "tenants.toml").tenants[1].hosts == [0, 4, 5]
    runs = [_cli(shlex.split(line)[1:], tmp_path)
            for line in re.search(r"```sh\n(.*?)```", text, flags=re.S).group(1).splitlines() if line.strip()]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python")}
    pending = re.search(r"~~~python\n(.*?)~~~", text, flags=re.S).group(1)
    runs.append(subprocess.run([sys.executable, "-c", pending], cwd=tmp_path, capture_output=True, text=True, env=env,
                               timeout=300))
    for r in runs:
        assert r.returncode == 0, (r.args, r.stderr[-2000:])
    assert (tmp_path / "run-ws" / "flows.parquet").is_file()


def test_replay_takes_background_and_hosts(tmp_path):
    from ddlsim.simulation.replay import replay_plan

    ddlsim.simulate(model="lenet5", workers=2, iterations=1, network="analytic").save(tmp_path / "run")
    events = tmp_path / "run" / "events.parquet"
    scenario, _ = replay_plan(events, background=["websearch:load=0.2"], hosts=3)
    assert [(t.sizes, t.load) for t in scenario.tenants] == [("websearch", 0.2)] and scenario.network.hosts == 3
    run = _cli(["replay", str(events), "--background", "websearch:load=0"], tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr and "0 < load <= 1" in run.stderr, run.stderr
