"""Several jobs on one fabric ([[job]] tables, docs/jobs.md): jobs on disjoint hosts run exactly as alone, two
jobs sharing a bottleneck get the slowdown derived on paper, placement and its errors, the log's job column
(schema v3) with v2 logs still readable, and byte-identical output twice."""

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import forked_cli
import pytest

import ddlsim
from ddlsim.errors import ScenarioError
from ddlsim.simulation.jobs import check_budget, job_scenarios, place_jobs, plan_jobs, run_jobs
from ddlsim.simulation.scenario import scenario_from_dict
from ddlsim.trace import read_event_log, write_event_log

ROOT = Path(__file__).resolve().parent.parent

# One 10 MB tensor (2.5 M fp32 parameters), 1 ms forward and 1 ms backward.
ONE_LAYER = {"name": "one", "layers": [{"name": "l0", "params": 2_500_000, "fwd_ms": 1.0, "bwd_ms": 1.0}]}
TWO_LAYERS = {"name": "two", "layers": [{"name": "a", "params": 300_000, "fwd_ms": 0.5, "bwd_ms": 1.0},
                                        {"name": "b", "params": 700_000, "fwd_ms": 0.25, "bwd_ms": 0.5}]}


def _cli(args, cwd):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "COLUMNS": "200"}
    return forked_cli.run(args, cwd=cwd, env=env)


# Columns that say what happened, with ranks made job-local; ids (message, collective, rpc, row id) are
# renumbered when jobs are merged and are left out.
_KEY = ("rank", "peer", "iteration", "kind", "op", "name", "layer", "tensor", "group", "bytes", "step", "stream", "role",
        "ready_ns", "start_ns", "end_ns")


def _rows(log, first_rank=0, job=None, shift_ns=0):
    """The log's rows (of `job`) as sorted tuples of _KEY, ranks and peers made local, times shifted back by shift_ns."""
    frame = log.to_pandas([c for c in _KEY] + ["job"])
    if job is not None:
        frame = frame[frame["job"] == job]
    frame = frame.drop(columns="job").copy()
    frame["rank"] -= first_rank
    frame.loc[frame["peer"] >= 0, "peer"] -= first_rank
    for c in ("ready_ns", "start_ns", "end_ns"):
        frame[c] = frame[c].astype("int64") - shift_ns
    return sorted(map(tuple, frame.itertuples(index=False)))


def _jobs_scenario(fidelity="flow", **network):
    return {
        "seed": 3, "jitter": 0.1, "iterations": 3,
        "network": {"fidelity": fidelity, "bandwidth": "10Gbps", "latency": "5us", **network},
        "job": [
            {"name": "resnet", "model": {"name": "lenet5"}, "workers": 4},
            {"name": "ps", "model": TWO_LAYERS, "workers": 3, "strategy": {"kind": "ps", "servers": 1}, "start": "3ms",
             "seed": 11},
            {"name": "hd", "model": TWO_LAYERS, "workers": 4, "strategy": {"kind": "ring", "algorithm": "halving-doubling",
                                                                           "grouping": "fixed:size=1MB"}},
        ],
    }


@pytest.mark.parametrize("fidelity", ["analytic", "flow", "packet"])
def test_jobs_on_disjoint_hosts_equal_each_job_alone_exactly(fidelity):
    """On a star, jobs on disjoint hosts share no link: every job's rows (times included) equal its run alone,
    both the alone run of the same placement and an ordinary one-job `ddlsim.simulate` of it (ranks on hosts
    0.., the same by the star's symmetry); a job's start offset shifts it and nothing else."""
    sc = scenario_from_dict(_jobs_scenario(fidelity))
    run = run_jobs(sc)
    log = run.events
    meta = {m["job"]: m for m in log.metadata["jobs"]}
    assert [m["hosts"] for m in meta.values()] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert run.contention() == []
    subs = job_scenarios(sc)
    for j, job in enumerate(run.jobs()):
        assert job["iteration_times_s"] == job["alone_iteration_times_s"] and job["slowdown"] == 1.0
        together = _rows(log, meta[j]["first_rank"], job=j, shift_ns=meta[j]["start_ns"])
        alone = ddlsim.simulate(subs[j]).events  # the job as the one-job simulator runs it (start 0)
        assert together == _rows(alone), j
        assert len(together) > 0
    # the offset job: its first op starts at its offset
    ps = log.to_pandas(["job", "start_ns"])
    assert ps[ps["job"] == 1]["start_ns"].min() == 3_000_000


def test_two_ring_jobs_sharing_a_bottleneck_double_their_communication():
    """Two identical jobs, 2 workers each, ring all-reduce of one 10 MB tensor, on a leaf-spine fabric with
    2 hosts per leaf, 1 spine and oversubscription 2: a leaf's uplink has capacity
    B x hosts_per_leaf / (spines x oversubscription) = B = 10 Gbit/s. Job a is on hosts 0 and 2, job b on 1 and 3,
    so every step of either ring crosses leaf 0 <-> spine <-> leaf 1. Latency 0, flow fidelity (max-min).

    Alone: a ring over n = 2 ranks takes 2(n - 1) = 2 steps of M / n = 5 MB; a step's flow has the path to
    itself: 5e6 x 8 / 1e10 s = 4 ms. Iteration = forward 1 ms + backward 1 ms + 2 x 4 ms = 10 ms.
    Together: both jobs start at 0 and are identical, so their steps coincide; in each step the leaf 0 -> spine
    link carries a's flow 0 -> 2 and b's flow 1 -> 3 (and the reverse links a's 2 -> 0 and b's 3 -> 1). Max-min
    gives each B / 2, so a step takes 8 ms: communication doubles (8 -> 16 ms), iteration = 2 + 16 = 18 ms,
    slowdown 1.8. Each of the 4 fabric links is shared for 2 iterations x 16 ms = 32 ms, carrying 2 x 2 steps x
    5 MB = 20 MB of each job."""
    data = {"workers": 2, "iterations": 2, "model": ONE_LAYER,
            "network": {"bandwidth": "10Gbps", "latency": "0s", "topology": "leaf-spine", "hosts_per_leaf": 2,
                        "spines": 1, "oversubscription": 2.0},
            "job": [{"name": "a", "placement": [0, 2]}, {"name": "b", "placement": [1, 3]}]}
    run = run_jobs(data)
    for job in run.jobs():
        assert job["alone_iteration_times_s"] == [0.010, 0.010]
        assert job["iteration_times_s"] == [0.018, 0.018]
        assert job["slowdown"] == pytest.approx(1.8, rel=1e-12)
        assert job["communication_s"] == pytest.approx(0.016, rel=1e-12)
        assert job["contended_links"] == ["leaf 0 -> spine 0", "spine 0 -> leaf 0", "leaf 1 -> spine 0", "spine 0 -> leaf 1"]
    for link in run.contention():
        assert link["shared_ns"] == 32_000_000
        assert [(u["owner"], u["id"], u["bytes"], u["busy_ns"]) for u in link["uses"]] == \
            [("job", 0, 20e6, 32_000_000), ("job", 1, 20e6, 32_000_000)]
    # Staggered by one alone-iteration (job_stagger = 10 ms: b starts at 10 ms): a's iteration 0 (0-10 ms) is
    # alone; a's iteration 1 and b's iteration 0 both compute 10-12 and share the link 12-28 (18 ms each); b's
    # iteration 1 (28-38) is alone again.
    shifted = run_jobs({**data, "job_stagger": "10ms"}).jobs()
    assert [j["start_ns"] for j in shifted] == [0, 10_000_000]
    assert shifted[0]["iteration_times_s"] == [0.010, 0.018] and shifted[1]["iteration_times_s"] == [0.018, 0.010]
    assert shifted[0]["slowdown"] == shifted[1]["slowdown"] == pytest.approx(1.4, rel=1e-12)


def test_placement_modes():
    data = {"workers": 4, "seed": 5,
            "network": {"topology": "leaf-spine", "hosts_per_leaf": 4, "spines": 2, "hosts": 24},
            "job": [{"name": "p"}, {"name": "s", "placement": "spread"}, {"name": "r", "placement": "random"},
                    {"name": "x", "placement": [15, 14, 13, 12], "workers": 2, "strategy": {"kind": "ps", "servers": 2}}]}
    sc = scenario_from_dict(data)
    hosts, fabric = place_jobs(sc, job_scenarios(sc))
    assert fabric == 24
    assert hosts[3] == [15, 14, 13, 12]  # explicit first: 2 workers then 2 servers, in the given order
    assert hosts[0] == [0, 1, 2, 3]  # packed: the lowest free hosts
    assert hosts[1] == [4, 8, 16, 20]  # spread: one per leaf in turn (leaf 0 is full; leaf 3 taken by x)
    assert sorted(set(hosts[2])) == hosts[2] and len(hosts[2]) == 4 and not set(hosts[2]) & set(sum(hosts[:2] + hosts[3:], []))
    again, _ = place_jobs(sc, job_scenarios(sc))
    assert again == hosts  # seeded
    other = scenario_from_dict({**data, "job": [*data["job"][:2], {**data["job"][2], "placement_seed": 99}, data["job"][3]]})
    assert place_jobs(other, job_scenarios(other))[0][2] != hosts[2]
    plan = plan_jobs(sc)
    assert plan.trainings[3]["host_of_rank"] == [15, 14, 13, 12]
    # ranks_per_host: two ranks to a host
    two = scenario_from_dict({"workers": 4, "network": {"ranks_per_host": 2}, "job": [{}, {}]})
    assert place_jobs(two, job_scenarios(two)) == ([[0, 1], [2, 3]], 4)
    assert plan_jobs(two).trainings[1]["host_of_rank"] == [2, 2, 3, 3]


@pytest.mark.parametrize("job,network,expected", [
    ([{"workers": 4}, {"workers": 4}], {"hosts": 6},
     "job 1: needs 4 host(s) (4 worker(s), 1 per host), but only 2 of network.hosts = 6 are free after the jobs before it"),
    ([{"name": "a", "placement": [0, 1]}, {"name": "b", "placement": [1, 2]}], {},
     "job 1 (b): host 1 is also in job 0 (a)'s placement"),
    ([{"placement": [0, 1, 2]}], {}, "job 0: placement lists 3 host(s), but the job needs 2"),
    ([{"placement": [0, 9]}], {"hosts": 4}, "job 0: host 9 is not in the fabric (network.hosts = 4"),
    ([{"placement": [0, 0]}], {}, "lists a host twice"),
    ([{"name": "a"}, {"name": "a"}], {}, "job name 'a' is used twice"),
    ([{"workers": 0}], {}, "job.0.workers"),
    ([{"placement": "scattered"}], {}, "job.0.placement"),
    ([{"strategy": {"kind": "ring", "servers": 2}}], {}, "job 0: invalid scenario"),
])
def test_placement_and_job_errors_are_one_line_exit_2(job, network, expected, tmp_path):
    path = tmp_path / "jobs.toml"
    lines = ["workers = 2", "[network]"] + [f"{k} = {json.dumps(v)}" for k, v in network.items()]
    for table in job:
        lines.append("[[job]]")
        lines.extend(f"{k} = {_toml(v)}" for k, v in table.items())
    path.write_text("\n".join(lines) + "\n")
    run = _cli(["simulate", str(path)], tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert expected in run.stderr, run.stderr
    if expected.startswith("job ") and "invalid scenario" not in expected:  # placement: one line (field checks use
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr       # the scenario's "invalid scenario:" form)


def _toml(v):
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + " }"
    return json.dumps(v)


def test_one_job_path_refuses_a_jobs_scenario_and_simulate_dispatches():
    data = {"workers": 2, "iterations": 1, "model": TWO_LAYERS, "job": [{}, {"start": "1ms"}], "job_stagger": "1ms"}
    from ddlsim.simulation.run import run_scenario

    with pytest.raises(ScenarioError, match=r"\[\[job\]\] tables"):
        run_scenario(data)
    result = ddlsim.simulate(data)
    assert [j["name"] for j in result.jobs()] == ["job0", "job1"]
    assert [j["start_ns"] for j in result.jobs()] == [0, 2_000_000]
    # each job's own scenario is a plain one-job scenario (no job_stagger left over): the one-job path runs it
    assert all(ddlsim.simulate(sub).iteration_time_s > 0 for sub in job_scenarios(scenario_from_dict(data)))
    with pytest.raises(ScenarioError, match=r"job_stagger = '1ms' staggers the starts of \[\[job\]\] tables, but the scenario has none"):
        run_scenario({"job_stagger": "1ms"})


def test_log_has_a_job_column_and_v2_logs_read_as_one_job(tmp_path):
    """Every row, group and flow says its job (v3); a v2 file (no job columns, version 2) reads as job 0, its
    background tenants' flows as job -1, in memory and streaming."""
    data = {"workers": 2, "iterations": 2, "model": TWO_LAYERS, "network": {"hosts": 6},
            "tenant": [{"sizes": "websearch", "load": 0.2, "seed": 1}],
            "job": [{"name": "a"}, {"name": "b", "workers": 3}]}
    run = run_jobs(data, alone=False)
    log = run.events
    rank, job = log.column("rank"), log.column("job")
    assert set(job[rank < 2]) == {0} and set(job[rank >= 2]) == {1}
    assert set(log.groups.column("job").to_pylist()) == {0, 1}
    flows = log.flows.to_pandas()
    assert set(flows[flows["tenant"] == 1]["job"]) == {-1}
    assert set(flows[flows["tenant"] == 0]["job"]) == {0, 1}
    (tmp_path / "v3").mkdir()
    write_event_log(log, tmp_path / "v3" / "events.parquet")
    # the same log in v2 form: no job columns, version 2
    v2 = tmp_path / "v2"
    v2.mkdir()
    for name in ("events", "groups", "flows"):
        table = pq.read_table(tmp_path / "v3" / f"{name}.parquet")
        meta = dict(table.schema.metadata or {})
        if name == "events":
            meta[b"ddlsim.schema_version"] = b"2"
            meta[b"ddlsim.metadata"] = json.dumps({**json.loads(meta[b"ddlsim.metadata"]), "schema_version": 2}).encode()
        table = table.drop(["job"]).replace_schema_metadata(meta)
        pq.write_table(table, v2 / f"{name}.parquet")
    old = read_event_log(v2 / "events.parquet")
    assert old.metadata["converted_from_schema_version"] == 2 and old.metadata["schema_version"] == 3
    assert set(old.column("job")) == {0}
    assert old.table.column_names.index("job") == old.table.column_names.index("tenant") + 1
    old_flows = old.flows.to_pandas()
    assert set(old_flows[old_flows["tenant"] == 1]["job"]) == {-1} and set(old_flows[old_flows["tenant"] == 0]["job"]) == {0}
    assert set(old.groups.column("job").to_pylist()) == {0}
    assert np.array_equal(old.column("start_ns"), log.column("start_ns"))
    from ddlsim.analyze.streaming import open_analysis

    streamed = open_analysis(v2 / "events.parquet", stream=True)
    assert streamed.file.metadata["schema_version"] == 2
    assert sorted(set(streamed.iterations()["iteration"])) == [0, 1]


def test_same_scenario_twice_gives_byte_identical_files(tmp_path):
    scenario = tmp_path / "jobs.toml"
    scenario.write_text('workers = 2\niterations = 2\nseed = 4\njitter = 0.2\nmodel = { name = "lenet5" }\n'
                        '[network]\ntopology = "leaf-spine"\nhosts_per_leaf = 2\nspines = 1\noversubscription = 2.0\n'
                        '[[job]]\nname = "a"\nplacement = "spread"\n[[job]]\nname = "b"\nplacement = "random"\nstart = "100us"\n')
    outputs = []
    for k in range(2):
        run = _cli(["simulate", str(scenario), "--out", str(tmp_path / f"out{k}"), "--quiet"], tmp_path)
        assert run.returncode == 0, run.stderr
        outputs.append(tmp_path / f"out{k}")
    # summary.json too (before: its wall_s, the engine's wall time, differed from run to run)
    for name in ("events.parquet", "flows.parquet", "groups.parquet", "jobs.csv", "contention.csv", "trace.json",
                 "summary.json"):
        assert (outputs[0] / name).read_bytes() == (outputs[1] / name).read_bytes(), name


def test_the_shell_lines_of_docs_jobs_run(tmp_path):
    """docs/jobs.md's ```sh block, line by line, as written (from a directory with the examples)."""
    import re
    import shlex

    text = (ROOT / "docs" / "jobs.md").read_text(encoding="utf-8")
    block = re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M)[0]
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    for line in block.strip().splitlines():
        argv = shlex.split(line.split("#")[0])
        assert argv[0] == "ddlsim"
        run = _cli([*argv[1:], "--quiet"] if argv[1] == "simulate" else argv[1:], tmp_path)
        assert run.returncode == 0, (line, run.stderr)
    assert (tmp_path / "two-jobs" / "jobs.csv").exists() and "Jobs" in (tmp_path / "two-jobs.html").read_text()


def test_a_jobs_run_over_the_memory_budget_is_refused(tmp_path):
    """The budget is the sum of the jobs' estimates: two jobs that each fit a budget alone can be refused together."""
    scenario = tmp_path / "jobs.toml"
    scenario.write_text('workers = 4\niterations = 1\nmodel = { name = "resnet50" }\n[[job]]\n[[job]]\n')
    from ddlsim.simulation import budget

    sc = scenario_from_dict({"workers": 4, "iterations": 1, "model": {"name": "resnet50"}, "job": [{}, {}]})
    plan = plan_jobs(sc)
    one = budget.estimate(plan.subs[0], len(plan.trainings[0]["layers"]), [g["bytes"] for g in plan.trainings[0]["groups"]],
                          plan.detail)
    limit = one.memory_bytes + (one.memory_bytes - budget.BASE_BYTES) // 2  # one job fits, two do not
    run = _cli(["simulate", str(scenario), "--max-memory", str(limit)], tmp_path)
    assert run.returncode == 2 and "over the memory budget" in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert _cli(["simulate", str(scenario), "--max-memory", str(limit), "--force", "--quiet"], tmp_path).returncode == 0


def test_a_job_in_a_lower_band_yields_the_shared_link():
    """The bottleneck setting above, job b in band 1 (strict priority, flow fidelity: band 1 gets what band 0
    leaves). Job a never sees b: 10 ms iterations, as alone. Job b: compute 0-2 ms; its steps cannot move while
    a's run (2-10 ms), so b's step 1 runs 10-12 ms at full rate (half its 5 MB); a's second iteration computes
    10-12 and communicates 12-20, pausing b; b's step 1 finishes 20-22, step 2 22-26: b's iteration 0 is 26 ms.
    b's iteration 1 (26-36 ms) has the link alone: 10 ms."""
    data = {"workers": 2, "iterations": 2, "model": ONE_LAYER,
            "network": {"bandwidth": "10Gbps", "latency": "0s", "topology": "leaf-spine", "hosts_per_leaf": 2,
                        "spines": 1, "oversubscription": 2.0},
            "job": [{"name": "a", "placement": [0, 2]}, {"name": "b", "placement": [1, 3], "band": 1}]}
    a, b = run_jobs(data).jobs()
    assert a["iteration_times_s"] == [0.010, 0.010] and a["slowdown"] == 1.0
    assert b["iteration_times_s"] == [0.026, 0.010] and b["band"] == 1


def test_the_shared_bottleneck_at_analytic_fidelity_is_first_come_first_served():
    """The bottleneck setting at analytic fidelity: a link is a FIFO server (a transfer waits until every link
    of its route is free, then holds them for 4 ms per 5 MB step). Simultaneous requests go in graph order, job
    a's first. Iteration 0: a's step 1 2-6 ms, b's 6-10; a's step 2 waits for b: 10-14; b's step 2 14-18. So a's
    iteration 0 is 14 ms, b's 18 ms. Iteration 1: a computes 14-16, its step 1 waits for b's step 2: 18-22; b
    computes 18-20, its step 1 waits: 22-26; a's step 2 26-30 (a's iteration 1: 14 -> 30, 16 ms); b's step 2
    30-34 (b's iteration 1: 18 -> 34, 16 ms)."""
    data = {"workers": 2, "iterations": 2, "model": ONE_LAYER,
            "network": {"fidelity": "analytic", "bandwidth": "10Gbps", "latency": "0s", "topology": "leaf-spine",
                        "hosts_per_leaf": 2, "spines": 1, "oversubscription": 2.0},
            "job": [{"name": "a", "placement": [0, 2]}, {"name": "b", "placement": [1, 3]}]}
    a, b = run_jobs(data).jobs()
    assert a["alone_iteration_times_s"] == b["alone_iteration_times_s"] == [0.010, 0.010]
    assert a["iteration_times_s"] == [0.014, 0.016] and b["iteration_times_s"] == [0.018, 0.016]


def test_analyze_reads_the_per_job_results_back_from_the_log(tmp_path):
    """`ddlsim analyze` of a saved jobs log gives each job's iteration time, its time alone (kept in the
    metadata) and slowdown as the run did, and the shared links; streamed, it says its table covers one iteration."""
    from ddlsim.analyze import Analysis
    from ddlsim.analyze.streaming import open_analysis

    data = {"workers": 2, "iterations": 2, "model": ONE_LAYER,
            "network": {"bandwidth": "10Gbps", "latency": "0s", "topology": "leaf-spine", "hosts_per_leaf": 2,
                        "spines": 1, "oversubscription": 2.0},
            "job": [{"name": "a", "placement": [0, 2]}, {"name": "b", "placement": [1, 3]}]}
    run = run_jobs(data)
    run.save(tmp_path / "out", timeline=False)
    analysis = Analysis(tmp_path / "out" / "events.parquet")
    table = analysis.jobs()
    assert list(table["name"]) == ["a", "b"] and list(table["iteration_time_s"]) == [0.018, 0.018]
    assert list(table["alone_iteration_time_s"]) == [0.010, 0.010] and list(table["shared_links"]) == [4, 4]
    assert table["slowdown"].tolist() == pytest.approx([1.8, 1.8], rel=1e-12)
    shared = analysis.job_contention()
    assert len(shared) == 8 and set(shared["owner"]) == {"a", "b"} and set(shared["shared_ns"]) == {32_000_000}
    assert [j["slowdown"] for j in analysis.headline()["jobs"]] == pytest.approx([1.8, 1.8], rel=1e-12)
    streamed = open_analysis(tmp_path / "out" / "events.parquet", stream=True)
    assert len(streamed.jobs()) == 2 and any("covers the rows of one iteration" in n for n in streamed.notes)


# Background tenants in a jobs run: a tiny synthetic job on 8 hosts beside web-search flows.
_TENANT_JOBS = {"workers": 2, "iterations": 100,
                "model": {"name": "synthetic", "synthetic": {"layers": 2, "model_size": "1MB", "compute": "100ms"}},
                "network": {"fidelity": "flow", "bandwidth": "10Gbps", "topology": "star", "hosts": 8},
                "job": [{"name": "a"}, {"name": "b"}]}


def test_a_jobs_runs_estimate_counts_its_background_tenants_flows():
    """The budget of a jobs run counts the tenants' flows (it left them out, so a run whose tenants' flows alone
    exceed the budget was admitted). 300 flows/s per host on 8 hosts over the 10 s the jobs take: about 24,000
    flows in the run of both jobs and as many again in a run alone, at TENANT_FLOW_BYTES each."""
    from ddlsim.simulation import budget

    base = scenario_from_dict(_TENANT_JOBS)
    with_tenants = scenario_from_dict({**_TENANT_JOBS, "tenant": [{"name": "ws", "sizes": "websearch",
                                                                  "flows_per_second_per_host": 300}]})
    seen = []

    def admitted(plan, alone=True):
        with budget.run_control(force=True, on_start=lambda sc, est: seen.append(est)):
            check_budget(plan, alone)
        return seen[-1]

    quiet, busy = admitted(plan_jobs(base)), admitted(plan_jobs(with_tenants))
    # the job's duration beside the tenants is at least its compute, 10 s: 300 x 8 x 10 flows per run, at least
    assert busy.transfers - quiet.transfers >= 2 * 300 * 8 * 10
    assert busy.memory_bytes - quiet.memory_bytes >= 2 * 300 * 8 * 10 * budget.TENANT_FLOW_BYTES
    without_alone = admitted(plan_jobs(with_tenants), alone=False)
    assert quiet.memory_bytes < without_alone.memory_bytes < busy.memory_bytes
    # a budget the jobs fit without tenants refuses them with tenants
    limit = (quiet.memory_bytes + busy.memory_bytes) // 2
    with budget.run_control(max_memory=limit):
        check_budget(plan_jobs(base))
        with pytest.raises(ScenarioError, match="over the memory budget"):
            check_budget(plan_jobs(with_tenants))


@pytest.mark.parametrize("jobs", [False, True])
def test_overloading_tenants_are_refused_in_one_line(tmp_path, jobs):
    """Web-search tenants at 800 flows/s per host offer 110 % of a 10 Gbit/s link: the job's share shrinks as
    their flows pile up, and the run's length (and its flows' memory) has no bound: 1.85 M flows and 1.1 GB
    against an estimate of 172 MB, measured before this check. Refused with the fix, exit 2; --force runs it."""
    lines = ["workers = 2", "iterations = 1",
             'model = { name = "synthetic", synthetic = { layers = 2, model_size = "1MB", compute = "100ms" } }',
             "[network]", 'fidelity = "flow"', 'bandwidth = "10Gbps"', 'topology = "star"', "hosts = 8",
             "[[tenant]]", 'name = "ws"', 'sizes = "websearch"', "flows_per_second_per_host = 800"]
    if jobs:
        lines += ["[[job]]", 'name = "a"', "[[job]]", 'name = "b"']
    path = tmp_path / "overload.toml"
    path.write_text("\n".join(lines) + "\n")
    run = _cli(["simulate", str(path), "--quiet"], tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    err = run.stderr.strip()
    assert "overloaded" in err and "110 %" in err and "--force" in err and "under 730" in err, err
