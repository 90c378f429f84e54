import pytest

import ddlsim
from ddlsim import ScenarioError, load_scenario
from ddlsim.scenario import Scenario


def test_defaults_serve_the_common_case():
    s = Scenario()
    assert (s.model.name, s.workers, s.strategy, s.network.fidelity, s.network.topology) == (
        "resnet50", 8, "ring", "flow", "star")
    assert s.network.bandwidth_bps == 10e9 and s.network.latency_ns == 10_000


def test_toml_scenario_loads(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text(
        'workers = 4\nstrategy = "ps"\n[ps]\nservers = 2\nplacement = "size-balanced"\n'
        '[network]\nbandwidth = "25Gbps"\nlatency = "5us"\n[model]\nname = "vgg16"\nbatch_size = 16\n'
    )
    s = load_scenario(f)
    assert (s.workers, s.ps.servers, s.model.name, s.network.bandwidth_bps) == (4, 2, "vgg16", 25e9)


def test_unknown_key_names_the_field_and_suggests_the_fix(tmp_path):
    f = tmp_path / "typo.toml"
    f.write_text('[network]\nbandwith = "10Gbps"\n')
    with pytest.raises(ScenarioError) as exc:
        load_scenario(f)
    msg = str(exc.value)
    assert str(f) in msg and "network.bandwith" in msg and "did you mean 'bandwidth'" in msg


@pytest.mark.parametrize(
    "text, field",
    [
        ("workers = 0", "workers"),
        ('[network]\nbandwidth = "-10Gbps"', "network.bandwidth"),
        ('strategy = "allgather"', "strategy"),
        ('[network]\nlatency = "10 lightyears"', "network.latency"),
    ],
)
def test_impossible_values_name_the_field(tmp_path, text, field):
    f = tmp_path / "bad.toml"
    f.write_text(text + "\n")
    with pytest.raises(ScenarioError, match=field.replace(".", r"\.")):
        load_scenario(f)


def test_malformed_toml_names_the_file_and_line(tmp_path):
    f = tmp_path / "broken.toml"
    f.write_text("workers = \n")
    with pytest.raises(ScenarioError, match=r"broken\.toml: not valid TOML.*line 1"):
        load_scenario(f)


def test_missing_scenario_file():
    with pytest.raises(ScenarioError, match="not found"):
        load_scenario("/nonexistent/scenario.toml")


def test_custom_inline_model_and_profile(tmp_path):
    profile = tmp_path / "prof.csv"
    profile.write_text("layer,fwd_ms,bwd_ms\nconv1,1.5,3\nfc,0.5,1\n")
    scenario = tmp_path / "s.toml"
    scenario.write_text(
        'workers = 2\niterations = 1\n[model]\nname = "tiny"\nprofile = "prof.csv"\n'
        '[[model.layers]]\nname = "conv1"\nparams = 1000\nfwd_ms = 9\nbwd_ms = 9\n'
        '[[model.layers]]\nname = "fc"\nparams = 5000\nfwd_ms = 9\nbwd_ms = 9\n'
    )
    r = ddlsim.simulate(scenario)
    fwd = r.events[(r.events["op"] == "forward") & (r.events["rank"] == 0) & (r.events["iteration"] == 0)].sort_values("layer")
    # the profile (relative to the scenario file) wins over inline times
    assert list(fwd["end_ns"] - fwd["start_ns"]) == [1_500_000, 500_000]


def test_profile_with_unknown_layer_is_rejected(tmp_path):
    profile = tmp_path / "prof.csv"
    profile.write_text("layer,fwd_ms,bwd_ms\nconv9,1,2\n")
    with pytest.raises(ddlsim.ModelError, match="conv9"):
        ddlsim.simulate(model="lenet5", profile=str(profile))


def test_synthetic_model_in_a_scenario():
    r = ddlsim.simulate({"model": {"name": "synthetic", "synthetic": {"layers": 10, "model_size": "10MB", "compute": "90ms"}},
                         "workers": 2, "iterations": 1})
    assert r.model.size_bytes == 10_000_000
    assert r.iterations["compute_s"].iloc[0] == pytest.approx(0.09, abs=1e-8)


def test_size_balanced_placement_balances_servers():
    from ddlsim.strategy import place_tensors

    sizes = [100, 60, 50, 40, 10]
    assert place_tensors(sizes, 2, "round-robin") == [0, 1, 0, 1, 0]
    owner = place_tensors(sizes, 2, "size-balanced")
    load = [sum(s for s, o in zip(sizes, owner) if o == k) for k in range(2)]
    # greedy largest-first: 100|60, 50 -> s1, 40 -> s0, 10 -> s1
    assert owner == [0, 1, 1, 0, 1]
    assert load == [140, 120]
