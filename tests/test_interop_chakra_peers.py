"""Chakra files the way other tools write them, through convert, analyze and replay; and ddlsim's export
through ASTRA-sim where a binary is available (DDLSIM_ASTRA_SIM, see docs/interop.md).

The files are written here with the protobuf machinery ddlsim's Chakra writer uses (built from et_def.proto's
field numbers), laid out as Chakra's text-to-ET converter lays out a data-parallel workload: per rank and pass,
forward nodes ``COMP_NODE_<layer>_FWD``, then per layer from the last one ``COMP_NODE_<layer>_BWD_WG``, its
all-reduce ``COMM_COLL_NODE_<layer>_ALLREDUCE`` (one collective node per rank) and ``COMP_NODE_<layer>_BWD_IG``;
dependencies, durations and no start times. A send without ``comm_src`` and a receive without ``comm_dst``
(rank 0 hands rank 1 its loss after each forward pass) are in it too.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ddlsim
from ddlsim.trace import read_chakra, read_trace, write_chakra

pytest.importorskip("google.protobuf", reason="protobuf is not installed (pip install -e '.[interop]'); Chakra ET needs it")

# LeNet-5's layers (ddlsim models --layers lenet5): name, forward us, backward us (WG + IG), gradient bytes
LAYERS = [("conv1", 10, 20, 624), ("conv2", 30, 60, 9664), ("fc1", 5, 10, 192480), ("fc2", 2, 4, 40656), ("fc3", 1, 2, 3400)]
PASSES = 2
ENV = {**os.environ, "PYTHONPATH": str(Path(ddlsim.__file__).resolve().parents[1])}


def generated(tmp_path, names=("COMP_NODE_{}_FWD", "COMP_NODE_{}_BWD_WG", "COMP_NODE_{}_BWD_IG"), one_off=False):
    from ddlsim.trace.chakra import _delimited, _message_classes

    classes = _message_classes()
    Node, Attr = classes["Node"], classes["AttributeProto"]
    fwd_name, wg_name, ig_name = names
    for rank in range(2):
        nodes, prev, comm_of = [], None, {}

        def add(name, node_type, deps, dur=0, **attrs):
            node = Node(id=len(nodes), name=name, type=node_type, data_deps=[d for d in deps if d is not None],
                        duration_micros=dur, attr=[Attr(name=k, **v) for k, v in attrs.items()])
            nodes.append(node)
            return node.id

        for _ in range(PASSES):
            for name, fwd, _, _ in LAYERS:
                prev = add(fwd_name.format(name), 4, [prev, comm_of.get(name)], fwd)
            if rank == 0:  # no comm_src: the file's rank
                add("COMM_SEND_NODE_loss", 5, [prev], comm_dst={"int32_val": 1}, comm_size={"int64_val": 4},
                    comm_tag={"int32_val": 5})
            else:  # no comm_dst
                prev = add("COMM_RECV_NODE_loss", 6, [prev], comm_src={"int32_val": 0}, comm_size={"int64_val": 4},
                           comm_tag={"int32_val": 5})
            for name, _, bwd, size in reversed(LAYERS):
                wg = add(wg_name.format(name), 4, [prev], bwd // 2)
                comm_of[name] = add(f"COMM_COLL_NODE_{name}_ALLREDUCE", 7, [wg], comm_type={"int64_val": 0},
                                    comm_size={"uint64_val": size})
                prev = add(ig_name.format(name), 4, [wg], bwd - bwd // 2)
        if one_off and rank == 0:  # e.g. a final checkpoint, once
            add("COMP_NODE_checkpoint", 4, [prev], 50)
        meta = _delimited(classes["GlobalMetadata"](version="0.0.4"))
        (tmp_path / f"gen.{rank}.et").write_bytes(meta + b"".join(_delimited(n) for n in nodes))
    return tmp_path / "gen"


def cli(*args, cwd):
    run = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "ddlsim", *map(str, args)],
                         capture_output=True, text=True, cwd=cwd, env=ENV)
    assert "Warning" not in run.stderr, run.stderr
    return run


def test_generated_files_give_layer_rows_iterations_and_numbered_collectives(tmp_path):
    log = read_chakra(generated(tmp_path))
    df = log.to_pandas(["rank", "kind", "op", "name", "iteration", "collective", "bytes", "peer", "start_ns", "end_ns"])
    layers = df[df["kind"] == "compute"]
    assert set(layers["op"]) == {"forward", "backward"}
    assert set(layers["name"]) == {name for name, *_ in LAYERS}
    assert sorted(set(df["iteration"])) == list(range(PASSES))
    for rank in (0, 1):
        coll = df[(df["kind"] == "collective") & (df["rank"] == rank)].sort_values("start_ns", kind="stable")
        assert coll["collective"].tolist() == list(range(PASSES * len(LAYERS)))  # the k-th of the rank is k
        assert coll["bytes"].tolist() == [size for _ in range(PASSES) for *_, size in reversed(LAYERS)]
    # collective k is the same layer's all-reduce on both ranks
    sizes = df[df["kind"] == "collective"].groupby("collective")["bytes"].nunique()
    assert (sizes == 1).all()
    messages = df[df["kind"].isin(["send", "recv"])]
    assert sorted(messages[["rank", "peer"]].itertuples(index=False, name=None)) == [(0, 1)] * PASSES + [(1, 0)] * PASSES
    from ddlsim.workload.profile import layer_times_from_log

    times = layer_times_from_log(log)
    assert {k: (round(f * 1e6), round(b * 1e6)) for k, (f, b) in times.items()} == {n: (f, b) for n, f, b, _ in LAYERS}


def test_generated_files_convert_analyze_and_replay_on_the_cli(tmp_path):
    prefix = generated(tmp_path)
    assert cli("convert", prefix, "gen.parquet", cwd=tmp_path).returncode == 0
    analyze = cli("analyze", "gen.parquet", cwd=tmp_path)
    assert analyze.returncode == 0, analyze.stderr
    out = analyze.stdout + analyze.stderr
    assert "no collective rows" not in out and f"{PASSES * len(LAYERS)} collectives" in out, out
    assert "2 iterations" in out
    replay = cli("replay", "gen.parquet", "--model", "lenet5", cwd=tmp_path)
    assert replay.returncode == 0, replay.stderr
    # the replayed compute is the file's: forward + backward of every layer, per iteration
    result = ddlsim.replay(tmp_path / "gen.parquet", model="lenet5")
    compute_us = sum(f + b for _, f, b, _ in LAYERS)
    assert result.iterations["compute_s"].round(9).tolist() == [compute_us / 1e6] * len(result.iterations)


def test_a_file_whose_compute_names_no_layer_is_refused_by_replay_in_one_line(tmp_path):
    prefix = generated(tmp_path, names=("aten::addmm_{}", "aten::mm_{}", "aten::mm_t_{}"))
    assert cli("convert", prefix, "gen.parquet", cwd=tmp_path).returncode == 0
    replay = cli("replay", "gen.parquet", "--model", "lenet5", cwd=tmp_path)
    assert replay.returncode == 2
    lines = replay.stderr.strip().splitlines()
    assert len(lines) == 1 and "no forward/backward compute rows with a layer name" in lines[0]
    assert "COMP_NODE_conv1_FWD" in lines[0] and "Traceback" not in replay.stderr


def test_layer_names_the_zoo_model_lacks_are_refused_in_one_line(tmp_path):
    prefix = generated(tmp_path)
    assert cli("convert", prefix, "gen.parquet", cwd=tmp_path).returncode == 0
    replay = cli("replay", "gen.parquet", "--model", "resnet18", cwd=tmp_path)
    assert replay.returncode == 2 and "layer(s) not in model resnet18" in replay.stderr
    assert len(replay.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("name, expected", [
    ("COMP_NODE_conv1_FWD", ("forward", "conv1")), ("COMP_NODE_layer1.0.conv1_BWD_WG", ("backward", "layer1.0.conv1")),
    ("COMP_NODE_fc_1_BWD_IG", ("backward", "fc_1")), ("forward conv1", ("forward", "conv1")),
    ("backward fc3", ("backward", "fc3")), ("conv1.fwd", ("forward", "conv1")), ("aten::convolution", None),
    ("COMP_NODE_gpu0_tb1", None),
])
def test_node_names_to_layers(name, expected):
    from ddlsim.trace.chakra import layer_of_node_name

    assert layer_of_node_name(name) == expected


# ---------------------------------------------------------------- ASTRA-sim

ASTRA_SIM = os.environ.get("DDLSIM_ASTRA_SIM")


def astra_configs(directory: Path, ranks: int, bandwidth_bps: float, latency_ns: float, gamma_ns_per_byte: float = 0.0
                  ) -> list[str]:
    """ASTRA-sim's analytical backend configuration for ddlsim's star at ddlsim's link rate (ASTRA-sim's GB/s is 2^30
    bytes per second). ddlsim's ``latency`` is host to host, split over the two links through the switch; ASTRA-sim's
    ``Switch`` charges its ``latency`` on each of its two hops, so it gets half. ASTRA-sim reduces each received chunk
    in 3 x bytes / local-mem-bw ns (a write and two reads; PacketBundle.cc): ddlsim's gamma = 3 / local-mem-bw, and
    no reduction cost is so large a bandwidth that the cost truncates to 0 ns."""
    network = directory / "network.yml"
    network.write_text(f"topology: [ Switch ]\nnpus_count: [ {ranks} ]\nbandwidth: [ {bandwidth_bps / 8 / 2**30!r} ]\n"
                       f"latency: [ {latency_ns / 2!r} ]\n")
    system = directory / "system.json"
    system.write_text(json.dumps({
        "scheduling-policy": "FIFO", "endpoint-delay": 0, "active-chunks-per-dimension": 1, "preferred-dataset-splits": 1,
        "all-reduce-implementation": ["ring"], "all-gather-implementation": ["ring"],
        "reduce-scatter-implementation": ["ring"], "all-to-all-implementation": ["ring"],
        "collective-optimization": "baseline", "local-mem-bw": 3 / gamma_ns_per_byte if gamma_ns_per_byte else 1e15,
        "boost-mode": 0}))
    memory = directory / "memory.json"
    memory.write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}))
    return [f"--system-configuration={system}", f"--network-configuration={network}",
            f"--remote-memory-configuration={memory}"]


@pytest.mark.skipif(not ASTRA_SIM, reason="set DDLSIM_ASTRA_SIM to an ASTRA-sim analytical binary "
                    "(tools/build_astra_sim.sh builds AstraSim_Analytical_Congestion_Unaware) to run ddlsim's Chakra "
                    "export through it; docs/interop.md")
@pytest.mark.parametrize("iterations,gamma", [(1, 0.0), (2, 0.0), (1, 3 / 1600)])
def test_astra_sim_runs_the_export_to_the_same_time(tmp_path, iterations, gamma):
    binary = shutil.which(ASTRA_SIM) or ASTRA_SIM
    ranks = 4
    strategy = {"kind": "ring", "algorithm": "ring", **({"gamma_ns_per_byte": gamma} if gamma else {})}
    sc = {"model": {"name": "lenet5"}, "workers": ranks, "iterations": iterations, "trace_detail": "collective",
          "strategy": strategy, "network": {"bandwidth": "10Gbps", "latency": "500ns", "topology": "star"}}
    result = ddlsim.simulate(sc)
    write_chakra(result.events, tmp_path / "job")
    run = subprocess.run([binary, f"--workload-configuration={tmp_path / 'job'}",
                          *astra_configs(tmp_path, ranks, 10e9, 500, gamma)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    finished = {int(r): int(t) for r, t in re.findall(r"sys\[(\d+)\],? finished,? (\d+) cycles", run.stdout + run.stderr)}
    assert sorted(finished) == list(range(ranks)), "every rank finishes: " + (run.stdout + run.stderr)[-2000:]
    ends = result.events.to_pandas(["rank", "kind", "end_ns"])
    ends = ends[ends["kind"] != "barrier"].groupby("rank")["end_ns"].max()
    for rank, cycles in finished.items():
        # compute nodes are whole microseconds (each rounded end - rounded start): up to 1 us off per rank; ring
        # steps and reductions are whole ns in both (ASTRA-sim truncates, ddlsim rounds up): 1 ns each
        assert abs(cycles - int(ends[rank])) <= 1000 + 1e-3 * ends[rank], (rank, cycles, int(ends[rank]))


def astra_issue_rule_deadlocks(paths: list[Path]) -> list[str]:
    """ASTRA-sim's issue rule without time (Workload::issue_dep_free_nodes, HardwareResource::is_available, at the
    commit tools/build_astra_sim.sh builds): a node is issued once its data_deps are done; a rank runs one
    communication node (send, recv, collective) at a time, the first ready one in file order; compute takes time,
    so each round issues communication before the ready compute ends. A send ends once issued, a recv once the
    matching send (src, dst, tag, size) has been issued, the k-th collective once every rank has issued its k-th.
    Returns the nodes left when nothing can move (empty: every rank finishes)."""
    from ddlsim.trace.chakra import NODE_TYPES, _message_classes, _split_delimited

    Node = _message_classes()["Node"]
    nodes = {}
    for rank, path in enumerate(paths):
        for _, payload in _split_delimited(path.read_bytes(), path)[1:]:
            node = Node()
            node.ParseFromString(payload)
            attrs = {a.name: getattr(a, a.WhichOneof("value")) for a in node.attr}
            nodes[rank, node.id] = (node, attrs)
    comm_types = {NODE_TYPES[t] for t in ("COMM_SEND_NODE", "COMM_RECV_NODE", "COMM_COLL_NODE")}
    done, issued, in_flight, collectives_issued = set(), set(), {}, {}

    def ready(key):
        return key not in issued and all((key[0], dep) in done for dep in nodes[key][0].data_deps)

    def message(key):
        node, attrs = nodes[key]
        return attrs["comm_src"], attrs["comm_dst"], attrs["comm_tag"], attrs["comm_size"]

    sends_issued: dict[tuple, int] = {}
    recvs_done: dict[tuple, int] = {}
    collective_index = {key: sum(1 for other in nodes if other[0] == key[0] and other[1] < key[1]
                                 and nodes[other][0].type == NODE_TYPES["COMM_COLL_NODE"])
                        for key in nodes if nodes[key][0].type == NODE_TYPES["COMM_COLL_NODE"]}
    while len(done) < len(nodes):
        before = len(done) + len(issued)
        for rank in range(len(paths)):  # issue: one communication node per rank
            if rank not in in_flight:
                key = next((k for k in nodes if k[0] == rank and nodes[k][0].type in comm_types and ready(k)), None)
                if key is not None:
                    issued.add(key)
                    in_flight[rank] = key
                    kind = nodes[key][0].type
                    if kind == NODE_TYPES["COMM_SEND_NODE"]:
                        sends_issued[message(key)] = sends_issued.get(message(key), 0) + 1
                    elif kind == NODE_TYPES["COMM_COLL_NODE"]:
                        index = collective_index[key]
                        collectives_issued[index] = collectives_issued.get(index, 0) + 1
        for rank, key in list(in_flight.items()):  # end what can end
            kind = nodes[key][0].type
            if kind == NODE_TYPES["COMM_RECV_NODE"]:
                if sends_issued.get(message(key), 0) <= recvs_done.get(message(key), 0):
                    continue
                recvs_done[message(key)] = recvs_done.get(message(key), 0) + 1
            elif kind == NODE_TYPES["COMM_COLL_NODE"] and collectives_issued.get(collective_index[key], 0) < len(paths):
                continue
            done.add(key)
            del in_flight[rank]
        for key in [k for k in nodes if nodes[k][0].type not in comm_types and ready(k)]:  # compute ends
            issued.add(key)
            done.add(key)
        if len(done) + len(issued) == before:
            return sorted(f"rank {k[0]} node {k[1]} {nodes[k][0].name}" for k in nodes if k not in done)
    return []


PS_JOB = {"model": {"name": "lenet5"}, "workers": 4, "iterations": 2, "trace_detail": "collective",
          "strategy": {"kind": "ps", "servers": 2}, "network": {"bandwidth": "10Gbps", "latency": "500ns"}}


@pytest.mark.parametrize("strategy", [{"kind": "ps", "servers": 1}, {"kind": "ps", "servers": 2},
                                      {"kind": "ring", "algorithm": "ring"}])
def test_the_export_runs_under_astra_sims_one_communication_at_a_time(tmp_path, strategy):
    """A receive with no dependency on its rank was issued at time 0 and held the rank's only communication slot
    while the send that brings its message about waited behind it: ASTRA-sim ran no PS rank to the end (exit 0).
    Each communication node now also waits for the one before it on its rank, in ddlsim's order."""
    result = ddlsim.simulate({**PS_JOB, "strategy": strategy})
    paths = write_chakra(result.events, tmp_path / "job")
    assert astra_issue_rule_deadlocks(paths) == []
    # our own import is still exact: the added dependencies are not ddlsim's
    back = read_chakra(tmp_path / "job").to_pandas(["id", "deps"]).set_index("id")["deps"].map(list).to_dict()
    mine = result.events.to_pandas(["id", "kind", "deps"])
    mine = mine[~mine["kind"].isin(["barrier"])].set_index("id")["deps"].map(list).to_dict()
    assert {k: sorted(v) for k, v in back.items() if k in mine} == {k: sorted(v) for k, v in mine.items()}


@pytest.mark.skipif(not ASTRA_SIM, reason="set DDLSIM_ASTRA_SIM to an ASTRA-sim analytical binary "
                    "(tools/build_astra_sim.sh builds AstraSim_Analytical_Congestion_Unaware) to run ddlsim's Chakra "
                    "export through it; docs/interop.md")
def test_astra_sim_runs_a_parameter_server_export_to_the_end(tmp_path):
    result = ddlsim.simulate(PS_JOB)
    paths = write_chakra(result.events, tmp_path / "job")
    run = subprocess.run([shutil.which(ASTRA_SIM) or ASTRA_SIM, f"--workload-configuration={tmp_path / 'job'}",
                          *astra_configs(tmp_path, len(paths), 10e9, 500)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    finished = {int(r) for r, _ in re.findall(r"sys\[(\d+)\],? finished,? (\d+) cycles", run.stdout + run.stderr)}
    assert finished == set(range(len(paths))), "every rank finishes: " + (run.stdout + run.stderr)[-2000:]


@pytest.mark.parametrize("binary", [None, "no-such-astra-sim-binary"])
def test_the_comparison_benchmark_without_a_binary_says_so_in_one_line(tmp_path, binary):
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "astra_sim_compare.py"
    env = {k: v for k, v in ENV.items() if k != "DDLSIM_ASTRA_SIM"}
    run = subprocess.run([sys.executable, str(script), *(["--binary", binary] if binary else [])], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=300)
    assert run.returncode == 2 and run.stdout == "", run.stderr
    assert len(run.stderr.splitlines()) == 1 and "tools/build_astra_sim.sh" in run.stderr, run.stderr


def test_the_docs_example_for_other_tools_files_runs(tmp_path):
    text = (Path(__file__).resolve().parent.parent / "docs" / "interop.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```sh\n(.*?)```", text, flags=re.S) if "gen/trace" in b)
    (tmp_path / "gen").mkdir()
    source = generated(tmp_path / "gen")
    for rank in (0, 1):
        source.with_name(f"gen.{rank}.et").rename(tmp_path / "gen" / f"trace.{rank}.et")
    for line in block.splitlines():
        command = line.split("#", 1)[0].split()
        if command:
            run = cli(*command[1:], cwd=tmp_path)
            assert run.returncode == 0, (line, run.stderr[-2000:])


def test_a_one_off_node_does_not_merge_the_passes(tmp_path):
    """A node that occurs once beside the passes: the layer rows keep their iterations (else replay would add
    up the passes' times), the one-off node has none."""
    log = read_chakra(generated(tmp_path, one_off=True))
    df = log.to_pandas(["kind", "op", "name", "iteration"])
    layers = df[(df["kind"] == "compute") & (df["name"] != "")]
    assert sorted(set(layers["iteration"])) == list(range(PASSES))
    assert df.loc[df["op"] == "COMP_NODE_checkpoint", "iteration"].tolist() == [-1]
    from ddlsim.workload.profile import layer_times_from_log

    times = layer_times_from_log(log)
    assert {k: (round(f * 1e6), round(b * 1e6)) for k, (f, b) in times.items()} == {n: (f, b) for n, f, b, _ in LAYERS}
