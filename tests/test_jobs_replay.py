"""`ddlsim replay` / `ddlsim.replay` of a log of several jobs on one fabric (docs/jobs.md, "Replaying a jobs run"):
the replay of a run under its own settings reproduces every job's rows exactly, jobs on disjoint hosts replay as
each replayed alone (--job), a what-if on the shared bottleneck changes the contended jobs by the amount derived on
paper, and logs that cannot be replayed as jobs are refused in one line (exit status 2)."""

import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import forked_cli
import pytest

import ddlsim
from ddlsim.errors import DdlsimError, ScenarioError
from ddlsim.simulation.jobs import JobsRun, run_jobs
from ddlsim.simulation.scenario import scenario_from_dict
from ddlsim.trace import read_event_log
from ddlsim.trace.schema import METADATA_KEY

ROOT = Path(__file__).resolve().parent.parent

# One 10 MB tensor (2.5 M fp32 parameters), 1 ms forward and 1 ms backward.
ONE_LAYER = {"name": "one", "layers": [{"name": "l0", "params": 2_500_000, "fwd_ms": 1.0, "bwd_ms": 1.0}]}
TWO_LAYERS = {"name": "two", "layers": [{"name": "a", "params": 300_000, "fwd_ms": 0.5, "bwd_ms": 1.0},
                                        {"name": "b", "params": 700_000, "fwd_ms": 0.25, "bwd_ms": 0.5}]}

# Columns that say what happened (ids, renumbered when jobs are merged, left out).
_KEY = ("job", "rank", "peer", "iteration", "kind", "op", "name", "layer", "tensor", "group", "bytes", "step", "stream",
        "role", "ready_ns", "start_ns", "end_ns")


def _cli(args, cwd=ROOT):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "COLUMNS": "200"}
    return forked_cli.run([*args], cwd=cwd, env=env, timeout=300)


def _rows(log, job=None, first_rank=0, shift_ns=0):
    """The log's rows (of `job`) as sorted tuples of _KEY; with `job`, ranks made local and times shifted back."""
    frame = log.to_pandas(list(_KEY))
    if job is not None:
        frame = frame[frame["job"] == job].drop(columns="job").copy()
        frame["rank"] -= first_rank
        frame.loc[frame["peer"] >= 0, "peer"] -= first_rank
        for c in ("ready_ns", "start_ns", "end_ns"):
            frame[c] = frame[c].astype("int64") - shift_ns
    return sorted(map(tuple, frame.itertuples(index=False)))


def _mixed_jobs(fidelity):
    """Three jobs unlike each other on a 2:1 oversubscribed leaf-spine fabric, where they contend: a zoo model
    spread over the leaves, a parameter-server job of another model in band 1 starting later, and a
    halving-doubling job with fixed groups at a seeded random placement; job k starts k x 1 ms later on top."""
    return {
        "seed": 3, "iterations": 3, "job_stagger": "1ms",
        "network": {"fidelity": fidelity, "bandwidth": "10Gbps", "latency": "5us", "topology": "leaf-spine",
                    "hosts_per_leaf": 4, "spines": 1, "oversubscription": 2.0},
        "job": [
            {"name": "le", "model": {"name": "lenet5"}, "workers": 4, "placement": "spread"},
            {"name": "ps", "model": TWO_LAYERS, "workers": 3, "strategy": {"kind": "ps", "servers": 1}, "start": "3ms",
             "seed": 11, "band": 1, "placement": "spread"},
            {"name": "hd", "model": TWO_LAYERS, "workers": 4, "placement": "random", "placement_seed": 5,
             "strategy": {"kind": "ring", "algorithm": "halving-doubling", "grouping": "fixed:size=1MB"}},
        ],
    }


@pytest.mark.parametrize("fidelity", ["analytic", "flow"])
def test_self_replay_reproduces_every_jobs_rows_exactly(fidelity, tmp_path):
    """Replayed under its own settings, a run of several jobs is the same run: each job's layer times are the
    median of its own compute rows (in a run without jitter every rank and iteration has the scenario's times,
    so the median is that time to the nanosecond), its groups are derived again from the same model and
    strategy, and it runs on its recorded hosts from its recorded start in its band. So every row of the replay
    (job, rank, op, bytes, times...) equals the recorded one: no tolerance. The jobs contend (shared uplinks), so
    this also checks that they meet as they did. A replay of the replay is the same again."""
    run = run_jobs(_mixed_jobs(fidelity))
    assert run.contention(), "the setting is meant to make the jobs share links"
    run.save(tmp_path / "run", timeline=False)
    log = read_event_log(tmp_path / "run" / "events.parquet")
    replay = ddlsim.replay(tmp_path / "run" / "events.parquet")
    assert isinstance(replay, JobsRun)
    assert _rows(replay.events) == _rows(log)
    recorded, replayed = run.jobs(), replay.jobs()
    assert [j["name"] for j in replayed] == ["le", "ps", "hd"]
    for rec, rep in zip(recorded, replayed):
        assert rep["iteration_times_s"] == rec["iteration_times_s"]
        assert rep["alone_iteration_times_s"] == rec["alone_iteration_times_s"]
        assert (rep["hosts"], rep["start_ns"], rep["band"]) == (rec["hosts"], rec["start_ns"], rec["band"])
        assert rep["recorded_iteration_time_s"] == rec["iteration_time_s"] and rep["recorded_difference"] == 0.0
    assert [j["start_ns"] for j in replayed] == [0, 4_000_000, 2_000_000]  # the stagger is not added twice
    replay.save(tmp_path / "again", timeline=False)
    twice = ddlsim.replay(tmp_path / "again" / "events.parquet")
    assert _rows(twice.events) == _rows(log)


def test_sampled_rank_times_replay_a_jittered_jobs_run_exactly(tmp_path):
    """With jitter the median layer times are not the run's; `rank_times="sampled"` gives each rank of each job, at
    the recorded worker count, its own recorded (rank, iteration) layer times in iteration order, drawn from that
    job's rows only (model.profile_job), and the recorded jitter is not applied again: every row comes back exactly.
    Drawn from the rows of all jobs, the jobs' ranks would not match their workers and the steps would be drawn at
    random (and from other models' layers)."""
    data = _mixed_jobs("flow")
    data["jitter"] = 0.1
    run_jobs(data, alone=False).save(tmp_path / "run", timeline=False)
    log = read_event_log(tmp_path / "run" / "events.parquet")
    replay = ddlsim.replay(tmp_path / "run" / "events.parquet", rank_times="sampled")
    assert _rows(replay.events) == _rows(log)
    assert any("jitter not applied again" in n for n in replay.notes)
    assert _rows(ddlsim.replay(tmp_path / "run" / "events.parquet").events) != _rows(log)  # the median times: not


def test_cli_replay_of_a_jobs_log_writes_a_jobs_run(tmp_path):
    """The reproduction of the report: `ddlsim simulate` of the example, then `ddlsim replay` of its log, exit 0,
    a jobs run (jobs.csv with the recorded time beside, per-job iteration times, contention) equal to the
    recorded one."""
    sim = _cli(["simulate", "examples/jobs/offsets.toml", "--iterations", "2", "-o", str(tmp_path / "run"), "--quiet"])
    assert sim.returncode == 0, sim.stderr
    rep = _cli(["replay", str(tmp_path / "run" / "events.parquet"), "-o", str(tmp_path / "rep"), "--quiet"])
    assert rep.returncode == 0, rep.stderr
    assert "recorded run, job a:" in rep.stdout and "(+0.00%)" in rep.stdout
    import pandas as pd

    recorded = pd.read_csv(tmp_path / "run" / "jobs.csv")
    replayed = pd.read_csv(tmp_path / "rep" / "jobs.csv")
    assert list(replayed["name"]) == ["a", "b"]
    assert list(replayed["iteration_time_s"]) == list(recorded["iteration_time_s"])
    assert list(replayed["recorded_iteration_time_s"]) == list(recorded["iteration_time_s"])
    assert list(replayed["slowdown"]) == list(recorded["slowdown"])
    assert (tmp_path / "rep" / "contention.csv").read_text() == (tmp_path / "run" / "contention.csv").read_text()
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert [j["iteration_times_s"] for j in summary["jobs"]] == \
        [j["iteration_times_s"] for j in json.loads((tmp_path / "run" / "summary.json").read_text())["jobs"]]


def test_jobs_on_disjoint_hosts_replay_as_each_replayed_alone(tmp_path):
    """On a star, jobs on disjoint hosts share no link, so the replay of them all gives each job exactly the rows
    of its replay alone (`--job NAME`, on the same fabric without the others), shifted by its start; and its
    iteration times equal the times alone the recorded run measured (metadata)."""
    data = {"iterations": 2, "seed": 4,
            "network": {"fidelity": "flow", "bandwidth": "10Gbps", "latency": "5us"},
            "job": [{"name": "le", "model": {"name": "lenet5"}, "workers": 4},
                    {"name": "ps", "model": TWO_LAYERS, "workers": 3, "strategy": {"kind": "ps", "servers": 1},
                     "start": "2ms"}]}
    run_jobs(data).save(tmp_path / "run", timeline=False)
    path = tmp_path / "run" / "events.parquet"
    meta = {m["name"]: m for m in read_event_log(path).metadata["jobs"]}
    together = ddlsim.replay(path)
    assert together.contention() == []
    for j, name in enumerate(["le", "ps"]):
        alone = ddlsim.replay(path, jobs=[name])
        assert [r["name"] for r in alone.jobs()] == [name]
        assert alone.jobs()[0]["hosts"] == meta[name]["hosts"]
        assert together.jobs()[j]["iteration_times_s"] == alone.jobs()[0]["iteration_times_s"] \
            == meta[name]["alone_iteration_times_s"]
        first = together.columns.metadata["jobs"][j]["first_rank"]
        assert _rows(together.events, job=j, first_rank=first, shift_ns=meta[name]["start_ns"]) == \
            _rows(alone.events, job=0, shift_ns=meta[name]["start_ns"])
    # the CLI, --job given twice: both jobs, as the replay of all
    out = _cli(["replay", str(path), "--job", "ps", "--job", "le", "--json"])
    assert out.returncode == 0, out.stderr
    assert [j["iteration_times_s"] for j in json.loads(out.stdout)["jobs"]] == \
        [j["iteration_times_s"] for j in together.jobs()]


def _bottleneck_log(tmp_path):
    """Two identical jobs, 2 workers each, ring all-reduce of one 10 MB tensor (1 ms forward, 1 ms backward), on a
    leaf-spine fabric, 2 hosts per leaf, 1 spine, oversubscription 2: a leaf's uplink carries
    B x hosts_per_leaf / (spines x oversubscription) = B = 10 Gbit/s. Job a on hosts 0 and 2, b on 1 and 3: every
    ring step crosses leaf 0 <-> spine <-> leaf 1. Latency 0, flow fidelity. Recorded (tests/test_jobs.py): 10 ms
    alone, 18 ms together."""
    data = {"workers": 2, "iterations": 2, "model": ONE_LAYER,
            "network": {"bandwidth": "10Gbps", "latency": "0s", "topology": "leaf-spine", "hosts_per_leaf": 2,
                        "spines": 1, "oversubscription": 2.0},
            "job": [{"name": "a", "placement": [0, 2]}, {"name": "b", "placement": [1, 3]}]}
    run_jobs(data).save(tmp_path / "run", timeline=False)
    return tmp_path / "run" / "events.parquet"


def test_half_the_bottleneck_bandwidth_slows_the_contended_jobs_as_derived(tmp_path):
    """What-if: the uplinks at half their rate. Oversubscription 4 makes a leaf's uplink
    10 x 2 / (1 x 4) = 5 Gbit/s, the host links stay 10 Gbit/s.

    Alone: a ring of n = 2 ranks takes 2 (n - 1) = 2 steps of M / n = 5 MB; a step's flow is limited by the
    uplink, 5 Gbit/s: 5e6 x 8 / 5e9 s = 8 ms, so 16 ms of communication + 2 ms compute = 18 ms (was 10).
    Together: the two jobs' steps coincide and share each uplink, 2.5 Gbit/s each: 16 ms a step, 32 ms of
    communication, 34 ms an iteration (was 18), slowdown 34 / 18. Halving every link (--bandwidth 5Gbps) gives
    the same, since the uplink is the bottleneck both ways. The compute (the recorded layer times) is unchanged.
    With --iterations 1 every job runs one such iteration."""
    path = _bottleneck_log(tmp_path)
    recorded = ddlsim.replay(path)
    for job in recorded.jobs():
        assert job["iteration_times_s"] == [0.018, 0.018] and job["alone_iteration_times_s"] == [0.010, 0.010]
    for what_if in ({"oversubscription": 4.0}, {"bandwidth": "5Gbps"}):
        run = ddlsim.replay(path, **what_if)
        for job in run.jobs():
            assert job["iteration_times_s"] == [0.034, 0.034], what_if
            assert job["alone_iteration_times_s"] == [0.018, 0.018], what_if
            assert job["slowdown"] == pytest.approx(34 / 18, rel=1e-12)
            assert job["recorded_iteration_time_s"] == 0.018
    alone = ddlsim.replay(path, jobs=["a"], oversubscription=4.0)  # without b: the uplink to itself
    assert alone.jobs()[0]["iteration_times_s"] == [0.018, 0.018]
    one = ddlsim.replay(path, oversubscription=4.0, iterations=1)
    assert [j["iteration_times_s"] for j in one.jobs()] == [[0.034], [0.034]]
    # staggered by one alone-iteration (b starts 10 ms after its recorded start): a's iteration 0 is alone (10 ms),
    # a's iteration 1 and b's iteration 0 share the link (18 ms each), b's iteration 1 is alone (tests/test_jobs.py)
    staggered = ddlsim.replay(path, job_stagger="10ms").jobs()
    assert [j["start_ns"] for j in staggered] == [0, 10_000_000]
    assert staggered[0]["iteration_times_s"] == [0.010, 0.018] and staggered[1]["iteration_times_s"] == [0.018, 0.010]
    cli = _cli(["replay", str(path), "--oversubscription", "4", "--json"])
    assert cli.returncode == 0, cli.stderr
    assert [j["iteration_times_s"] for j in json.loads(cli.stdout)["jobs"]] == [[0.034, 0.034]] * 2


def test_a_dumped_jobs_scenario_loads_again():
    """The root of the reported error: a jobs scenario dumped whole (as a run records it) holds every [[job]] key,
    the unset ones as None, and a None is a key left out, not an invalid value."""
    sc = scenario_from_dict(_mixed_jobs("analytic"))
    again = scenario_from_dict(sc.model_dump(mode="json", exclude={"base_dir"}))
    assert [j["iteration_times_s"] for j in run_jobs(again, alone=False).jobs()] == \
        [j["iteration_times_s"] for j in run_jobs(sc, alone=False).jobs()]


def _one_line_error(result, *words):
    assert result.returncode == 2, (result.stdout, result.stderr)
    text = result.stderr.strip()
    assert text.startswith("error:") and "\n" not in text and "Traceback" not in text, text
    for w in words:
        assert w in text, (w, text)


def test_bad_input_is_refused_in_one_line(tmp_path):
    """An unknown --job (named, with the log's jobs), a log whose rows belong to several jobs but whose metadata does
    not record them, --model or --scaling with a log of several jobs, --job with a log of one job, and
    model.profile_job without an event-log profile: one line, exit status 2, nothing written."""
    path = _bottleneck_log(tmp_path)
    _one_line_error(_cli(["replay", str(path), "--job", "zzz", "-o", str(tmp_path / "out")]), "--job zzz", "a, b")
    assert not (tmp_path / "out").exists()
    _one_line_error(_cli(["replay", str(path), "--model", "resnet50"]), "--model")
    _one_line_error(_cli(["replay", str(path), "--scaling", "2,4"]), "several jobs")
    with pytest.raises(DdlsimError, match="no such job"):
        ddlsim.replay(path, jobs=["c"])
    # the same rows without the jobs in the metadata
    bare = tmp_path / "bare"
    bare.mkdir()
    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[METADATA_KEY.encode()])
    for key in ("jobs", "scenario"):
        meta.pop(key)
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, METADATA_KEY.encode(): json.dumps(meta).encode()}),
                   bare / "events.parquet")
    _one_line_error(_cli(["replay", str(bare / "events.parquet")]), "2 jobs", "cannot be replayed as jobs")
    # --job on a log of one job
    one = _cli(["simulate", "--model", "lenet5", "-n", "2", "-i", "1", "-o", str(tmp_path / "one"), "--quiet"])
    assert one.returncode == 0, one.stderr
    _one_line_error(_cli(["replay", str(tmp_path / "one" / "events.parquet"), "--job", "a"]), "--job", "one job")
    with pytest.raises(ScenarioError, match="profile_job"):
        scenario_from_dict({"model": {"name": "lenet5", "profile_job": 1}})
    shutil.rmtree(bare)


def test_the_shell_lines_of_docs_jobs_replaying_section_run(tmp_path):
    """docs/jobs.md's "Replaying a jobs run": its ```sh lines run as written (exit 0), and the first replay prints
    the recorded and replayed times the doc shows."""
    import re
    import shlex

    text = (ROOT / "docs" / "jobs.md").read_text(encoding="utf-8")
    section = text.split("## Replaying a jobs run", 1)[1]
    block = re.findall(r"^```sh\n(.*?)^```", section, flags=re.S | re.M)[0]
    shown = re.findall(r"^```text\n(.*?)^```", section, flags=re.S | re.M)[0]
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    outputs = []
    for line in block.strip().splitlines():
        argv = shlex.split(line.split("#")[0])
        assert argv[0] == "ddlsim"
        run = _cli(argv[1:], tmp_path)
        assert run.returncode == 0, (line, run.stderr)
        outputs.append(run.stdout)
    assert argv[1] == "replay" and "--job" in argv
    for expected in shown.strip().splitlines():
        assert expected in outputs[1], expected
    assert "1008.434 ms" in outputs[2] and "554.763 ms" in outputs[2] and "3250.616 ms" in outputs[2]


@pytest.mark.parametrize("override", [{"workers": 3}, {"strategy": "ps"}])
def test_a_job_recorded_on_an_explicit_host_list_is_placed_again_when_it_needs_other_hosts(tmp_path, override):
    """docs/jobs.md: a job that needs another number of hosts (other workers, separate servers) is placed again.
    Jobs a and b were recorded on explicit lists ([0, 2], [1, 3]): a list of the old length cannot place 3 hosts,
    so they take the free hosts in order (packed) on the fabric grown to what they need: 0-2 and 3-5."""
    path = _bottleneck_log(tmp_path)
    r = ddlsim.replay(path, **override)
    assert [j.placement for j in r.scenario.job] == ["packed", "packed"]
    assert [j["hosts"] for j in r.jobs()] == [[0, 1, 2], [3, 4, 5]]
    assert sum("placed again by its rule ('packed')" in n for n in r.notes) == 2, r.notes


def test_one_job_named_as_a_string_is_that_job_not_its_letters(tmp_path):
    """ddlsim.replay(log, jobs="left") picks the job "left", as jobs=["left"] does; before, the string was taken
    letter by letter ("--job l: no such job"), and a name that held other names' letters picked those jobs too."""
    data = {"workers": 2, "iterations": 1, "model": ONE_LAYER, "network": {"fidelity": "analytic", "hosts": 4},
            "job": [{"name": "left"}, {"name": "l"}]}
    run_jobs(data, alone=False).save(tmp_path / "run", timeline=False)
    path = tmp_path / "run" / "events.parquet"
    one = ddlsim.replay(path, jobs="left")
    assert [j["name"] for j in one.jobs()] == ["left"]
    assert one.jobs()[0]["iteration_times_s"] == ddlsim.replay(path, jobs=["left"]).jobs()[0]["iteration_times_s"]
