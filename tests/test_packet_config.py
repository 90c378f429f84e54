"""Packet fidelity on the Python side (issue 17): the scenario's
[network.packet] table, the refusals at packet level (one line, exit status 2
through the CLI, no traceback), the CLI flags, and the "packet" object of
the engine's network description, field for field as the contract between
the Rust model and Python states it (docs/packet-model.md)."""

import json

import forked_cli
import pytest

from ddlsim.errors import ScenarioError
from ddlsim.simulation.lowering import engine_json, network_document
from ddlsim.simulation.scenario import PacketConfig, Scenario, load_scenario, scenario_from_dict, with_overrides

# The contract's defaults, written out by hand (notes/packet_contract.md), ns units.
CONTRACT_DEFAULTS = {
    "mtu": 1500, "framing": "ethernet", "tcp_timestamps": False, "transport": "newreno", "bands": 3,
    "queue_limit": 1000, "queue_limit_unit": "packets", "queue_scope": "band", "ecn_threshold": None,
    "initial_window": 10, "rto_min_ns": 200_000_000, "rto_initial_ns": 1_000_000_000, "delayed_ack": False,
    "delayed_ack_timeout_ns": 40_000_000, "receive_window": 6_291_456, "restart_after_idle": True,
    "connection_per_message": False, "dctcp_g": 0.0625, "queue_sample_ns": None, "queue_sample_cap": 1_000_000,
}


def ddlsim(*args, cwd=None):
    return forked_cli.run(list(args), cwd=cwd)


def packet(**network):
    return scenario_from_dict({"network": {"fidelity": "packet", **network}})


def test_the_default_packet_object_is_the_contracts():
    doc = network_document(packet())
    assert doc["fidelity"] == "packet"
    assert doc["packet"] == CONTRACT_DEFAULTS
    assert list(doc["packet"]) == list(CONTRACT_DEFAULTS)  # every field, in the contract's order
    # the JSON the engine reads: null for the unset options
    assert json.loads(engine_json(doc))["packet"] == CONTRACT_DEFAULTS


def test_user_units_become_the_contracts_ns_and_bytes():
    sc = packet(packet={"mtu": 9000, "framing": "PPP", "tcp_timestamps": True, "transport": "dctcp", "bands": 8,
                        "queue_limit": 262144, "queue_limit_unit": "bytes", "queue_scope": "port", "ecn_threshold": 65,
                        "initial_window": 4, "rto_min": "10ms", "rto_initial": "250ms", "delayed_ack": True,
                        "delayed_ack_timeout": "1ms", "receive_window": "1MiB", "restart_after_idle": False,
                        "connection_per_message": True, "dctcp_g": 0.125, "queue_sample": "100us", "queue_sample_cap": 5})
    assert network_document(sc)["packet"] == {
        "mtu": 9000, "framing": "ppp", "tcp_timestamps": True, "transport": "dctcp", "bands": 8,
        "queue_limit": 262144, "queue_limit_unit": "bytes", "queue_scope": "port", "ecn_threshold": 65,
        "initial_window": 4, "rto_min_ns": 10_000_000, "rto_initial_ns": 250_000_000, "delayed_ack": True,
        "delayed_ack_timeout_ns": 1_000_000, "receive_window": 1_048_576, "restart_after_idle": False,
        "connection_per_message": True, "dctcp_g": 0.125, "queue_sample_ns": 100_000, "queue_sample_cap": 5,
    }
    assert sc.network.packet.mss == 9000 - 52


@pytest.mark.parametrize("fidelity", ["analytic", "flow"])
def test_other_fidelities_send_no_packet_object(fidelity):
    doc = network_document(scenario_from_dict({"network": {"fidelity": fidelity}}))
    assert "packet" not in doc and doc["fidelity"] == fidelity


def test_the_mss_follows_the_timestamp_option():
    assert PacketConfig().mss == 1460 and PacketConfig(tcp_timestamps=True).mss == 1448


def test_a_packet_table_in_a_toml_file(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[network]\nfidelity = "packet"\n[network.packet]\ntransport = "dctcp"\necn_threshold = 20\n'
                    'rto_min = "1ms"\nqueue_limit = 100\n')
    sc = load_scenario(path)
    assert sc.network.packet.transport == "dctcp" and sc.network.packet.rto_min_ns == 1_000_000
    assert network_document(sc)["packet"]["queue_limit"] == 100


# (scenario, words the one-line error must hold: the option and the fix)
REFUSED = [
    ({"network": {"fidelity": "flow", "packet": {"bands": 2}}}, ["network.packet", 'fidelity = "packet"']),
    ({"network": {"fidelity": "analytic", "packet": {}}}, ["network.packet", 'fidelity = "packet"']),
    ({"network": {"fidelity": "packet", "topology": "leaf-spine", "routing": "spray"}},
     ['network.routing = "spray"', 'routing = "ecmp"']),
    ({"network": {"fidelity": "packet", "collective_model": "closed-form"}},
     ['collective_model = "closed-form"', 'collective_model = "steps"']),
    ({"network": {"fidelity": "packet"}, "strategy": {"kind": "ring", "in_network": "multicast"}},
     ["strategy.in_network = 'multicast'", 'in_network = "none"']),
    ({"network": {"fidelity": "packet"}, "strategy": {"kind": "ps", "in_network": "aggregation"}},
     ["strategy.in_network = 'aggregation'", 'in_network = "none"']),
    ({"network": {"fidelity": "packet"}, "strategy": {"kind": "ps", "in_network": "multiagg"}},
     ["strategy.in_network = 'multiagg'", 'fidelity = "flow"']),
    ({"network": {"fidelity": "packet", "packet": {"transport": "dctcp"}}}, ["ecn_threshold", 'transport = "newreno"']),
    ({"network": {"fidelity": "packet", "packet": {"bands": 9}}}, ["network.packet.bands", "less than or equal to 8"]),
    ({"network": {"fidelity": "packet", "packet": {"bands": 0}}}, ["network.packet.bands"]),
    ({"network": {"fidelity": "packet", "packet": {"mtu": 100}}}, ["network.packet.mtu", "576"]),
    ({"network": {"fidelity": "packet", "packet": {"rto_min": "0ms"}}}, ["network.packet.rto_min", "longer than 0"]),
    ({"network": {"fidelity": "packet", "packet": {"rto_min": 5}}}, ["network.packet.rto_min", "unit"]),
    ({"network": {"fidelity": "packet", "packet": {"queue_sample": "-1us"}}}, ["network.packet.queue_sample"]),
    ({"network": {"fidelity": "packet", "packet": {"queue_limit_unit": "frames"}}}, ["network.packet.queue_limit_unit"]),
    ({"network": {"fidelity": "packet", "packet": {"trnsport": "dctcp"}}}, ["network.packet.trnsport", "'transport'"]),
]


@pytest.mark.parametrize("data,words", REFUSED, ids=[str(i) for i in range(len(REFUSED))])
def test_refused_with_one_line_naming_the_option_and_the_fix(data, words):
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(data)
    lines = str(info.value).splitlines()
    assert lines[0] == "scenario: invalid scenario:" and len(lines) == 2, lines  # the project's header plus one line
    for word in words:
        assert word in lines[1], (word, lines[1])


CLI_REFUSED = [
    (["--network", "flow", "--transport", "newreno"], "network.packet configures the packet-level model"),
    (["--network", "packet", "--transport", "dctcp"], "ecn_threshold"),
    (["--network", "packet", "--collective-model", "closed-form"], 'collective_model = "closed-form"'),
    (["--network", "packet", "--in-network", "multicast"], "strategy.in_network = 'multicast'"),
    (["--network", "packet", "--strategy", "ps", "--in-network", "aggregation"], "strategy.in_network = 'aggregation'"),
    (["--network", "packet", "--topology", "leaf-spine", "--routing", "spray"], 'network.routing = "spray"'),
    (["--network", "packet", "--bands", "9"], "error: --bands 9: Input should be less than or equal to 8"),
    (["--network", "packet", "--queue-limit", "lots"], "--queue-limit 'lots'"),
    (["--network", "packet", "--rto-min", "5"], "error: --rto-min 5: duration '5' has no unit"),
    (["--network", "fast"], "error: --network fast: Input should be 'analytic', 'flow' or 'packet'"),
]


@pytest.mark.parametrize("flags,words", CLI_REFUSED, ids=[" ".join(f) for f, _ in CLI_REFUSED])
def test_the_cli_refuses_with_status_2_and_no_traceback(flags, words):
    p = ddlsim("simulate", "--model", "lenet5", "--workers", "2", "--iterations", "1", *flags)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and words in p.stderr, p.stderr
    assert p.stdout == ""


@pytest.mark.parametrize("command", [["replay", "no-such-log.parquet"], ["plan"]])
def test_replay_and_plan_take_the_packet_flags(command):
    # an option at another fidelity is refused by the scenario, before any file is read or simulated
    p = ddlsim(*command, "--network", "flow", "--queue-limit", "64KB")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "No such option" not in p.stderr
    help_text = ddlsim(command[0], "--help").stdout
    for flag in ("--transport", "--queue-limit", "--ecn-threshold", "--rto-min", "--bands", "--queue-sample"):
        assert flag in help_text, (command[0], flag)
    assert "analytic | flow | packet" in " ".join(help_text.split())


def test_the_cli_flags_become_packet_options():
    from ddlsim.cli.app import _packet_overrides

    assert _packet_overrides("dctcp", "256KB", 65, "10ms", 2, "50us") == {
        "transport": "dctcp", "ecn_threshold": 65, "rto_min": "10ms", "bands": 2, "queue_sample": "50us",
        "queue_limit": 256_000, "queue_limit_unit": "bytes"}
    assert _packet_overrides(None, "1000", None, None, None, None) == {"queue_limit": 1000, "queue_limit_unit": "packets"}
    assert _packet_overrides(None, "80p", None, None, None, None) == {"queue_limit": 80, "queue_limit_unit": "packets"}
    assert _packet_overrides(None, None, None, None, None, None) == {}
    sc = with_overrides(Scenario(), {"network": "packet", **_packet_overrides("dctcp", "100", 30, "1ms", 4, None)})
    p = network_document(sc)["packet"]
    assert (p["transport"], p["queue_limit"], p["ecn_threshold"], p["rto_min_ns"], p["bands"]) == ("dctcp", 100, 30, 1_000_000, 4)


def test_the_same_scenario_runs_at_another_fidelity():
    sc = packet(packet={"transport": "dctcp", "ecn_threshold": 65})
    flow = with_overrides(sc, {"network": "flow"})
    assert flow.network.fidelity == "flow" and flow.network.packet is None
    assert "packet" not in network_document(flow)
    # overrides that keep the fidelity keep the packet options; a packet flag at flow level is an error
    assert with_overrides(sc, {"workers": 4}).network.packet.ecn_threshold == 65
    with pytest.raises(ScenarioError, match="network.packet configures"):
        with_overrides(sc, {"network": "flow", "bands": 2})


def test_overrides_merge_into_the_packet_table():
    sc = packet(packet={"transport": "dctcp", "ecn_threshold": 65, "rto_min": "5ms"})
    sc = with_overrides(sc, {"bands": 2, "queue_sample": "1ms"})
    assert (sc.network.packet.transport, sc.network.packet.rto_min, sc.network.packet.bands) == ("dctcp", "5ms", 2)
    assert sc.network.packet.queue_sample_ns == 1_000_000
