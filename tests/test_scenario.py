import re
from pathlib import Path

import pytest

import ddlsim
from ddlsim import ScenarioError, load_scenario
from ddlsim.errors import DdlsimError, InternalError
from ddlsim.simulation.scenario import PSStrategy, RingStrategy, Scenario, scenario_from_dict, with_overrides

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"



def test_unknown_key_names_the_field_and_suggests_the_fix(tmp_path):
    f = tmp_path / "typo.toml"
    f.write_text('[network]\nbandwith = "10Gbps"\n')
    with pytest.raises(ScenarioError) as exc:
        load_scenario(f)
    msg = str(exc.value)
    assert str(f) in msg and "network.bandwith" in msg and "did you mean 'bandwidth'" in msg


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
    ev = r.events.to_pandas()
    fwd = ev[(ev["op"] == "forward") & (ev["rank"] == 0) & (ev["iteration"] == 0)].sort_values("layer")
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
    from ddlsim.simulation.lowering import place_tensors

    sizes = [100, 60, 50, 40, 10]
    assert place_tensors(sizes, 2, "round-robin") == [0, 1, 0, 1, 0]
    owner = place_tensors(sizes, 2, "size-balanced")
    load = [sum(s for s, o in zip(sizes, owner) if o == k) for k in range(2)]
    # greedy largest-first: 100|60, 50 -> s1, 40 -> s0, 10 -> s1
    assert owner == [0, 1, 1, 0, 1]
    assert load == [140, 120]


# ------------------------------------------------------------ shape and defaults


def write(tmp_path, text, name="s.toml"):
    f = tmp_path / name
    f.write_text(text)
    return f


def test_defaults_serve_the_common_case():
    s = Scenario()
    assert (s.model.name, s.workers, s.strategy.kind, s.network.fidelity, s.network.topology) == (
        "resnet50", 8, "ring", "flow", "star")
    assert isinstance(s.strategy, RingStrategy)
    assert (s.strategy.algorithm, s.strategy.stream_policy, s.strategy.preemption) == ("ring", "fifo", "none")
    assert s.strategy.servers == 0 and s.servers == 0 and s.ranks == 8
    assert s.network.bandwidth_bps == 10e9 and s.network.latency_ns == 10_000
    net = s.network
    assert (net.routing, net.ranks_per_host, net.rack_placement, net.server_hosts, net.priority_bands) == (
        "ecmp", 1, "packed", "separate", False)
    assert net.intra_host_bandwidth == "300GB/s" and net.intra_host_bandwidth_bps == 2.4e12
    assert net.intra_host_latency_ns == 1_000
    assert s.migration_notes == []


def test_tagged_ps_section_loads(tmp_path):
    f = write(tmp_path,
              'workers = 4\n[strategy]\nkind = "ps"\nservers = 2\nplacement = "size-balanced"\n'
              'update_bandwidth = "10GB/s"\nheader_bytes = 64\nstream_policy = "priority"\npreemption = "chunk"\n'
              '[network]\nbandwidth = "25Gbps"\nlatency = "5us"\nserver_hosts = "colocated"\npriority_bands = true\n'
              '[model]\nname = "vgg16"\nbatch_size = 16\n')
    s = load_scenario(f)
    assert isinstance(s.strategy, PSStrategy)
    st = s.strategy
    assert (st.kind, st.servers, st.placement, st.header_bytes, st.stream_policy, st.preemption) == (
        "ps", 2, "size-balanced", 64, "priority", "chunk")
    assert st.update_bandwidth_bps == 80e9  # bytes/s
    assert s.servers == 2 and s.ranks == 6
    assert (s.network.server_hosts, s.network.priority_bands, s.network.bandwidth_bps) == ("colocated", True, 25e9)
    assert s.migration_notes == []


def test_tagged_ring_section_and_leaf_spine_options(tmp_path):
    f = write(tmp_path,
              'workers = 16\n[strategy]\nkind = "ring"\nalgorithm = "halving-doubling"\nstream_policy = "priority"\n'
              '[network]\ntopology = "leaf-spine"\nrouting = "spray"\nrack_placement = "spread"\nranks_per_host = 4\n'
              'intra_host_bandwidth = "600GB/s"\nintra_host_latency = "500ns"\n')
    s = load_scenario(f)
    assert (s.strategy.kind, s.strategy.algorithm, s.strategy.stream_policy, s.strategy.preemption) == (
        "ring", "halving-doubling", "priority", "none")
    net = s.network
    assert (net.routing, net.rack_placement, net.ranks_per_host) == ("spray", "spread", 4)
    assert net.intra_host_bandwidth_bps == 4.8e12 and net.intra_host_latency_ns == 500


def test_dump_round_trips_and_has_the_tagged_shape():
    s = scenario_from_dict({"strategy": {"kind": "ps", "servers": 3}, "network": {"ranks_per_host": 2}})
    dumped = s.model_dump()
    assert dumped["strategy"]["kind"] == "ps" and dumped["strategy"]["servers"] == 3 and "ps" not in dumped
    assert scenario_from_dict(dumped) == s


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.name)
def test_examples_use_the_new_form(path):
    s = load_scenario(path)
    assert s.migration_notes == []
    text = path.read_text()
    assert "[strategy]" in text and "[ps]" not in text


# ------------------------------------------------------------ migration of the old form


def test_old_form_file_is_migrated_with_a_note(tmp_path):
    f = write(tmp_path,
              'workers = 4\nstrategy = "ps"\n[ps]\nservers = 2\nplacement = "size-balanced"\n'
              '[network]\nbandwidth = "25Gbps"\nlatency = "5us"\n[model]\nname = "vgg16"\nbatch_size = 16\n')
    s = load_scenario(f)
    assert (s.workers, s.strategy.kind, s.strategy.servers, s.strategy.placement) == (4, "ps", 2, "size-balanced")
    assert (s.model.name, s.network.bandwidth_bps) == ("vgg16", 25e9)
    [note] = s.migration_notes
    assert "deprecated" in note and 'strategy = "ps"' in note and "[ps]" in note
    assert '[strategy] kind = "ps", servers = 2, placement = "size-balanced"' in note


def test_old_converted_example_still_loads_identically(tmp_path):
    """The PS example written the old way reads as the same scenario."""
    new = (EXAMPLES / "resnet50_ps.toml").read_text()
    old = new.replace('[strategy]\nkind = "ps"\n', '[ps]\n').replace("workers = 16\n", 'workers = 16\nstrategy = "ps"\n')
    old = old.replace('stream_policy = "fifo"\n', "")
    assert "[strategy]" not in old
    a, b = load_scenario(EXAMPLES / "resnet50_ps.toml"), load_scenario(write(tmp_path, old))
    assert a.model_dump() == b.model_dump()
    assert b.migration_notes and not a.migration_notes


def test_old_string_strategy_alone_is_migrated(tmp_path):
    s = load_scenario(write(tmp_path, 'strategy = "ring"\n'))
    assert s.strategy.kind == "ring" and len(s.migration_notes) == 1
    assert '[strategy] kind = "ring"' in s.migration_notes[0]


@pytest.mark.parametrize("head", ['strategy = "ring"\n', ""])
def test_old_ps_section_with_a_ring_strategy_is_ignored_as_before_with_a_note(tmp_path, head):
    s = load_scenario(write(tmp_path, head + "[ps]\nservers = 4\n"))
    assert s.strategy.kind == "ring"
    [note] = s.migration_notes
    assert "[ps] section was ignored" in note


def test_ps_section_next_to_a_strategy_table_is_an_error(tmp_path):
    f = write(tmp_path, '[strategy]\nkind = "ps"\n[ps]\nservers = 2\n')
    with pytest.raises(ScenarioError, match=r"\[ps\] section is the old form.*into \[strategy\]"):
        load_scenario(f)


def test_notes_survive_overrides(tmp_path):
    s = load_scenario(write(tmp_path, 'strategy = "ps"\n'))
    t = with_overrides(s, {"servers": 3})
    assert t.strategy.servers == 3 and t.migration_notes == s.migration_notes and len(t.migration_notes) == 1
    assert t.base_dir == s.base_dir


# ------------------------------------------------------------ errors


def test_unknown_key_names_the_field_and_suggests_the_fix(tmp_path):
    f = write(tmp_path, '[network]\nbandwith = "10Gbps"\n', "typo.toml")
    with pytest.raises(ScenarioError) as exc:
        load_scenario(f)
    msg = str(exc.value)
    assert str(f) in msg and "network.bandwith" in msg and "did you mean 'bandwidth'" in msg


def test_unknown_strategy_key_lists_the_keys_of_that_kind(tmp_path):
    with pytest.raises(ScenarioError) as exc:
        load_scenario(write(tmp_path, '[strategy]\nkind = "ps"\nserver = 2\n'))
    msg = str(exc.value)
    assert "'strategy.server'" in msg and "did you mean 'servers'" in msg and "known keys here: kind, " in msg
    assert "strategy.ps" not in msg  # the union tag is not shown as part of the path


@pytest.mark.parametrize(
    "text, field",
    [
        ("workers = 0", "workers"),
        ('[network]\nbandwidth = "-10Gbps"', "network.bandwidth"),
        ('strategy = "allgather"', "strategy.kind"),
        ('[strategy]\nkind = "allgather"', "strategy.kind"),
        ("[strategy]\nservers = 2", "strategy.kind"),
        ("strategy = 3", "strategy"),
        ('[strategy]\nkind = "ps"\nservers = 0', "strategy.servers"),
        ('[strategy]\nkind = "ps"\nplacement = "random"', "strategy.placement"),
        ('[strategy]\nkind = "ring"\nalgorithm = "tree"', "strategy.algorithm"),
        ('[strategy]\nkind = "ring"\nstream_policy = "lifo"', "strategy.stream_policy"),
        ('[network]\nlatency = "10 lightyears"', "network.latency"),
        ('[network]\nrouting = "random"', "network.routing"),
        ("[network]\nranks_per_host = 0", "network.ranks_per_host"),
        ('[network]\nrack_placement = "scattered"', "network.rack_placement"),
        ('[network]\nserver_hosts = "shared"', "network.server_hosts"),
        ('[network]\npriority_bands = "yes please"', "network.priority_bands"),
    ],
)
def test_impossible_values_name_the_field(tmp_path, text, field):
    with pytest.raises(ScenarioError) as exc:
        load_scenario(write(tmp_path, text + "\n", "bad.toml"))
    msg = str(exc.value)
    assert f"'{field}'" in msg or f"{field} " in msg, msg
    assert msg.count("(got") <= 1


@pytest.mark.parametrize(
    "data, both",
    [
        ({"strategy": {"kind": "ring", "servers": 4}}, ("strategy.servers", 'strategy.kind is "ring"')),
        ({"strategy": {"kind": "ring", "placement": "size-balanced"}}, ("strategy.placement", 'strategy.kind is "ring"')),
        ({"strategy": {"kind": "ps", "algorithm": "halving-doubling"}}, ("strategy.algorithm", 'strategy.kind is "ps"')),
        ({"strategy": {"kind": "ring", "preemption": "chunk"}}, ("strategy.preemption", "strategy.stream_policy")),
        ({"strategy": {"kind": "ps", "preemption": "chunk", "stream_policy": "fifo"}},
         ("strategy.preemption", "strategy.stream_policy")),
        ({"network": {"server_hosts": "colocated"}}, ("network.server_hosts", "strategy.kind")),
        ({"network": {"routing": "spray"}}, ("network.routing", "network.topology")),
        ({"network": {"rack_placement": "spread"}}, ("network.rack_placement", "network.topology")),
        ({"network": {"spines": 4}}, ("network.spines", "network.topology")),
        ({"network": {"topology": "star", "oversubscription": 2.0}}, ("network.oversubscription", "network.topology")),
    ],
)
def test_contradictions_name_both_fields(data, both):
    with pytest.raises(ScenarioError) as exc:
        scenario_from_dict(data)
    msg = str(exc.value)
    assert all(f in msg for f in both), msg
    assert len(msg.splitlines()) == 2, msg  # one line per fault, no repeated field prefix
    assert "field 'network': network." not in msg and "field 'strategy': strategy." not in msg


def test_leaf_spine_defaults_on_a_star_are_fine():
    s = scenario_from_dict({"network": {"topology": "star", "routing": "ecmp", "spines": 2, "rack_placement": "packed"}})
    assert s.network.topology == "star"


def test_input_is_shown_once():
    with pytest.raises(ScenarioError) as exc:
        scenario_from_dict({"network": {"bandwidth": "1"}, "workers": 0})
    msg = str(exc.value)
    assert msg.count("'1'") == 1 and msg.count("(got 0)") == 1 and len(msg.splitlines()) == 3


def test_internal_error_carries_the_saved_scenario_path():
    e = InternalError("engine panicked: index out of bounds", scenario_path="/tmp/ddlsim-crash/scenario.json")
    assert isinstance(e, DdlsimError) and e.scenario_path == "/tmp/ddlsim-crash/scenario.json"
    assert str(e).startswith("internal error, please report it; the scenario was saved to /tmp/ddlsim-crash/scenario.json")
    assert InternalError("boom").scenario_path is None and "saved" not in str(InternalError("boom"))


def test_an_engine_failure_on_a_valid_scenario_is_an_internal_error_with_the_scenario_saved(monkeypatch):
    import json
    import os

    from ddlsim import _core
    from ddlsim.simulation.run import run_scenario

    def broken(*_args):
        raise RuntimeError("the workload graph cannot finish: 3 of 9 operations never ran")

    monkeypatch.setattr(_core, "simulate_training_json", broken)
    with pytest.raises(InternalError) as exc:
        run_scenario(model="resnet50", workers=3)
    path = exc.value.scenario_path
    try:
        assert "internal error, please report it" in str(exc.value) and "cannot finish" in str(exc.value)
        assert json.loads(open(path, encoding="utf-8").read())["workers"] == 3
    finally:
        os.unlink(path)


def test_a_scenario_beyond_the_engines_time_range_is_a_user_error_not_internal():
    from ddlsim.simulation.run import run_scenario

    with pytest.raises(ScenarioError) as exc:
        run_scenario({"model": {"layers": [{"name": "l", "params": 1, "fwd_ms": 1e14, "bwd_ms": 1e14}]}, "iterations": 30})
    assert not isinstance(exc.value, InternalError)


# ------------------------------------------------------------ flat overrides (CLI flags, simulate(**kw))


def test_flat_strategy_overrides():
    s = with_overrides(Scenario(), {"servers": 4, "placement": "size-balanced", "strategy": "ps"})  # any order
    assert (s.strategy.kind, s.strategy.servers, s.strategy.placement) == ("ps", 4, "size-balanced")
    r = with_overrides(Scenario(), {"algorithm": "halving-doubling", "stream_policy": "priority", "preemption": "chunk"})
    assert (r.strategy.kind, r.strategy.algorithm, r.strategy.stream_policy, r.strategy.preemption) == (
        "ring", "halving-doubling", "priority", "chunk")
    assert with_overrides(Scenario(), {"strategy": "ring", "servers": None}).strategy == RingStrategy()


def test_switching_kind_keeps_only_shared_fields():
    ps = scenario_from_dict({"strategy": {"kind": "ps", "servers": 4, "stream_policy": "priority"}})
    ring = with_overrides(ps, {"strategy": "ring"})
    assert ring.strategy == RingStrategy(stream_policy="priority")
    back = with_overrides(ring, {"strategy": "ps"})
    assert back.strategy == PSStrategy(stream_policy="priority")  # servers back to the default
    same = with_overrides(ps, {"strategy": "ps"})
    assert same.strategy.servers == 4


def test_nested_strategy_override():
    s = with_overrides(Scenario(), {"strategy": {"kind": "ps", "servers": 2}})
    assert (s.strategy.kind, s.strategy.servers) == ("ps", 2)
    t = with_overrides(s, {"strategy": {"placement": "size-balanced"}})
    assert (t.strategy.servers, t.strategy.placement) == (2, "size-balanced")


def test_flat_network_overrides():
    s = with_overrides(Scenario(), {
        "topology": "leaf-spine", "routing": "spray", "ranks_per_host": 8, "rack_placement": "spread",
        "intra_host_bandwidth": "900GB/s", "intra_host_latency": "2us", "priority_bands": True,
        "bandwidth": "100Gbps", "network": "analytic",
    })
    net = s.network
    assert (net.topology, net.routing, net.ranks_per_host, net.rack_placement, net.priority_bands, net.fidelity) == (
        "leaf-spine", "spray", 8, "spread", True, "analytic")
    assert net.intra_host_bandwidth_bps == 7.2e12 and net.intra_host_latency_ns == 2000 and net.bandwidth_bps == 1e11
    t = with_overrides(Scenario(), {"strategy": "ps", "server_hosts": "colocated"})
    assert t.network.server_hosts == "colocated"


@pytest.mark.parametrize(
    "overrides, both",
    [
        ({"strategy": "ring", "servers": 4}, ("strategy.servers", 'strategy.kind is "ring"')),
        ({"servers": 4}, ("strategy.servers", 'strategy.kind is "ring"')),
        ({"strategy": "ps", "algorithm": "halving-doubling"}, ("strategy.algorithm", 'strategy.kind is "ps"')),
        ({"preemption": "chunk"}, ("strategy.preemption", "strategy.stream_policy")),
        ({"routing": "spray"}, ("network.routing", "network.topology")),
        ({"server_hosts": "colocated"}, ("network.server_hosts", "strategy.kind")),
    ],
)
def test_contradicting_overrides_name_both_fields(overrides, both):
    with pytest.raises(ScenarioError) as exc:
        with_overrides(Scenario(), overrides)
    msg = str(exc.value)
    assert msg.startswith("arguments: invalid scenario") and all(f in msg for f in both), msg


def test_simulate_accepts_the_new_flat_keywords_up_to_the_bridge():
    """simulate(**kw) resolves the new keywords through with_overrides."""
    from ddlsim.simulation.run import _resolve

    s = _resolve(None, {"strategy": "ps", "servers": 4, "stream_policy": "priority", "routing": "spray",
                        "topology": "leaf-spine"})
    assert (s.strategy.kind, s.strategy.servers, s.strategy.stream_policy, s.network.routing) == ("ps", 4, "priority", "spray")


def test_cli_declares_the_new_simulate_flags():
    from typer.testing import CliRunner

    from ddlsim.cli import app

    result = CliRunner().invoke(app, ["simulate", "--help"], env={"COLUMNS": "250", "TERM": "dumb"})
    assert result.exit_code == 0
    text = result.output
    for flag, choices in [("--algorithm", "halving-doubling"), ("--stream-policy", "priority"), ("--preemption", "chunk"),
                          ("--routing", "spray"), ("--ranks-per-host", ""), ("--rack-placement", "spread"),
                          ("--server-hosts", "colocated"), ("--priority-bands", "--no-priority-bands")]:
        assert flag in text and choices in text, flag


# ------------------------------------------------------------ no silent misreadings


@pytest.mark.parametrize(
    "data, both",
    [
        ({"model": {"name": "resnet50", "synthetic": {"layers": 5}}}, ("model.name = 'resnet50'", "[model.synthetic]")),
        ({"model": {"name": "vgg16", "layers": [{"name": "l", "params": 1, "fwd_ms": 1, "bwd_ms": 1}]}},
         ("model.name = 'vgg16'", "[[model.layers]]")),
        ({"model": {"synthetic": {"layers": 5}, "layers": [{"name": "l", "params": 1, "fwd_ms": 1, "bwd_ms": 1}]}},
         ("[model.synthetic]", "[[model.layers]]")),
        ({"model": {"device": "A100", "profile": "p.csv"}}, ("model.profile", "model.device")),
    ],
)
def test_contradictory_model_sources_name_both_fields(data, both):
    with pytest.raises(ScenarioError) as exc:
        scenario_from_dict(data)
    assert all(b in str(exc.value) for b in both), str(exc.value)


def test_a_synthetic_or_custom_model_without_a_zoo_name_is_fine():
    assert scenario_from_dict({"model": {"synthetic": {"layers": 5}}}).model.synthetic.layers == 5
    layers = [{"name": "l", "params": 1, "fwd_ms": 1, "bwd_ms": 1}]
    assert scenario_from_dict({"model": {"name": "mine", "layers": layers}}).model.name == "mine"


def test_device_flag_with_a_profile_in_the_file_is_refused_but_defaults_are_not_given_values():
    base = scenario_from_dict({"model": {"profile": "p.csv"}})
    assert with_overrides(base, {"workers": 4}).workers == 4  # the default device is not "given"
    with pytest.raises(ScenarioError, match="model.device"):
        with_overrides(base, {"device": "T4"})


@pytest.mark.parametrize("key, value, path, expected", [
    ("strategy", "PS", ("strategy", "kind"), "ps"),
    ("network", "Flow", ("network", "fidelity"), "flow"),
    ("topology", "Leaf-Spine", ("network", "topology"), "leaf-spine"),
    ("stream_policy", "Priority", ("strategy", "stream_policy"), "priority"),
    ("trace_detail", "STEP", ("trace_detail",), "step"),
    ("precision", "FP16", ("model", "precision"), "fp16"),
])
def test_choices_are_accepted_in_any_case_like_model_names(key, value, path, expected):
    sc = with_overrides(Scenario(), {key: value})
    got = sc
    for p in path:
        got = getattr(got, p)
    assert got == expected


def test_choices_in_any_case_in_a_file_too():
    sc = scenario_from_dict({"strategy": {"kind": "PS", "placement": "Size-Balanced"}, "network": {"fidelity": "Analytic"}})
    assert (sc.strategy.kind, sc.strategy.placement, sc.network.fidelity) == ("ps", "size-balanced", "analytic")


def test_an_empty_scenario_file_says_the_defaults_are_used(tmp_path):
    (tmp_path / "empty.toml").write_text("")
    sc = load_scenario(tmp_path / "empty.toml")
    assert sc.model_dump(exclude={"base_dir"}) == Scenario().model_dump(exclude={"base_dir"})
    assert any("empty: the defaults are used" in n for n in sc.migration_notes)


@pytest.mark.parametrize("data, words", [
    # before: "field 'model': Input should be a valid dictionary or instance of ModelConfig (got 'lenet5')"
    ({"model": "lenet5"}, "field 'model': expected a [model] table (in Python a dict), e.g. [model] name = "),
    ({"network": "flow"}, "field 'network': expected a [network] table (in Python a dict), e.g. [network] bandwidth"),
])
def test_a_section_given_as_a_value_says_it_is_a_table(data, words):
    with pytest.raises(ScenarioError, match=re.escape(words)):
        scenario_from_dict(data)
