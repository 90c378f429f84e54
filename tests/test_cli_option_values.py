"""Odd option values, run as a user would (found by probing every command's options, 2026-11-28): each was a Python
traceback, an "internal error" with crash files, or a crash of the ranks after the output directory was made. Now
one line, exit status 2, nothing written (docs/cli.md, "Bad input")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import forked_cli
import pytest

ROOT = Path(__file__).resolve().parent.parent


def ddlsim(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin", "TMPDIR": str(cwd), "HOME": str(cwd)}
    return forked_cli.run(list(args), cwd=cwd, env=env)


def refused(run: subprocess.CompletedProcess, why: str) -> None:
    line = run.stderr.strip()
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert "\n" not in line and line.startswith("error: ") and why in line, line


@pytest.fixture(scope="module")
def log(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    run = ddlsim("simulate", "-m", "lenet5", "-n", "2", "-i", "2", "-q", "-o", str(out / "run"), cwd=out)
    assert run.returncode == 0, run.stderr
    return out / "run" / "events.parquet"


@pytest.mark.parametrize("command", [["export", "{log}", "-f", "chakra", "-o", ""],
                                     ["convert", "{log}", "", "--to", "chakra"]])
def test_an_empty_chakra_prefix_is_refused_and_leaves_no_staging_files(tmp_path, log, command):
    # before: a ValueError from the staging's relative paths, exit 1, and .ddlsim-staging-*.et left in the directory
    run = ddlsim(*[a.format(log=log) for a in command], cwd=tmp_path)
    refused(run, "'': empty; give a value")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("rto", ["61s", "1e6s"])
def test_a_retransmission_timeout_beyond_the_engines_bound_is_the_users_error_not_an_internal_one(tmp_path, rto):
    # before: "internal error, please report it" and crash files in the temporary directory
    run = ddlsim("simulate", "-m", "lenet5", "-n", "2", "-i", "1", "-q", "--network", "packet", "--rto-min", rto,
                 cwd=tmp_path)
    assert run.returncode == 2 and "internal error" not in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert "rto_min must be at most 60s" in run.stderr, run.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, why", [
    (["--bandwidth", "10"], "--bandwidth 10: bandwidth '10' has no unit"),  # a ValueError traceback before
    (["--bandwidth", "0"], "--bandwidth 0: bandwidth must be positive"),
    (["--bandwidth", "nan"], "--bandwidth nan: bandwidth must be a finite number"),
    (["--seed", "-1"], "ps capture: seed = -1; give a whole number from 0"),  # the ranks' numpy ValueError before
    # before: "zipf_s, lr and timeout must be > 0" for either; --timeout inf crashed the connection scaling's ranks
    (["--zipf-s", "0"], "ps capture: --zipf-s 0.0; give a positive finite number"),
    (["--timeout", "0"], "--timeout 0: give a positive number of seconds"),
    (["--timeout", "inf"], "--timeout inf: give a positive number of seconds"),
])
def test_capture_ps_refuses_a_rate_or_seed_before_it_makes_the_capture_directory(tmp_path, args, why):
    pytest.importorskip("torch")
    run = ddlsim("capture", "ps", "--workers", "2", "--iterations", "2", "--connections", "none", "--timeout", "50",
                 *args, "-o", "cap", cwd=tmp_path)
    refused(run, why)
    assert not (tmp_path / "cap").exists()


@pytest.mark.parametrize("timeout", ["nan", "inf", "0", "-1"])
def test_capture_connections_refuses_a_timeout_that_is_not_a_positive_number(tmp_path, timeout):
    # before: nan and inf failed in the ranks (RuntimeError, OverflowError), 0 and -1 ran into the time limit
    pytest.importorskip("torch")
    run = ddlsim("capture", "connections", "--connections", "1,2", "--requests", "20", "--timeout", timeout, "-o", "cc",
                 cwd=tmp_path)
    refused(run, f"--timeout {float(timeout):g}: give a positive number of seconds")
    assert not (tmp_path / "cc").exists()


@pytest.mark.parametrize("args, why", [
    (["--batch-size", "99999999999999999999"], "batch_size must be a positive integer below 2^31"),  # torch's overflow
    (["--timeout", "nan"], "--timeout nan: give a positive number of seconds"),  # accepted before
    (["--timeout", "inf"], "--timeout inf: give a positive number of seconds"),
])
def test_capture_ddp_refuses_sizes_and_timeouts_it_cannot_run(tmp_path, args, why):
    pytest.importorskip("torch")
    run = ddlsim("capture", "ddp", "-m", "lenet5", "-n", "2", "-i", "2", *args, "-o", "cap", cwd=tmp_path)
    refused(run, why)
    assert not (tmp_path / "cap").exists()


@pytest.mark.parametrize("command", ["connections", "ps"])
@pytest.mark.parametrize("counts, why", [("1,1", "'1' again"), ("1,,2", "an empty item"), ("2,2,4,4", "'2' again"),
                                         ("0,1", "a count of 0"), ("-1,2", "a count of -1"), ("1", "the fit of server time against connections needs at least two"),
                                         ("1,x", "'x' is not a whole number")])
def test_connection_counts_are_checked_before_the_first_run(tmp_path, command, counts, why):
    # before: capture connections ran c1/ (and printed "1 connections done") before 1,1 failed on c1/ existing;
    # 1,,2 was taken as 1,2; capture ps took 1,1 as 1 and refused it as "at least two"
    run = ddlsim("capture", command, "--connections", counts, "--requests" if command == "connections" else "--iterations",
                 "20" if command == "connections" else "2", "-o", "cc", cwd=tmp_path)
    refused(run, f"--connections '{counts}': {why}")
    assert not (tmp_path / "cc").exists()


LIST_OPTIONS = [
    # (argv, the option named) -- before: an empty item was dropped and a repeated one run twice (or, for
    # validate --jobs ddp,ddp, captured into the same directory twice)
    (["plan", "-m", "lenet5", "-n", "2", "--bucket-caps", "{v}"], "--bucket-caps", "1,,5", "5,5"),
    (["plan", "-m", "lenet5", "-n", "2", "--slice-sizes", "{v}"], "--slice-sizes", "1MB,", "1MB,1000KB"),
    (["replay", "{log}", "--scaling", "{v}"], "--scaling", ",4", "4,8,4"),
    (["reproduce", "thesis-network", "--quick", "--ratios", "{v}", "-o", "out"], "--ratios", "4,,8", "8,8"),
    (["reproduce", "network-operator", "--only", "{v}", "-o", "out"], "--only", "table1,,fig3", "fig3,FIG3"),
    (["validate", "--quick", "--jobs", "{v}", "-o", "out"], "--jobs", "ddp,", "ddp,ddp"),
    (["validate", "--quick", "--models", "{v}", "-o", "out"], "--models", ",lenet5", "lenet5,lenet5"),
    (["validate", "--quick", "--links", "{v}", "-o", "out"], "--links", "unshaped,,1Gbps", "1Gbps,1000Mbps"),
]


@pytest.mark.parametrize("argv, option, empty, twice", LIST_OPTIONS, ids=[f"{a[0]} {o}" for a, o, _, _ in LIST_OPTIONS])
def test_a_list_option_with_an_empty_or_repeated_item_is_refused(tmp_path, log, argv, option, empty, twice):
    for value, why in ((empty, "an empty item"), (twice, "give each value once"), ("", "empty; give")):
        run = ddlsim(*(a.format(v=value, log=log) for a in argv), cwd=tmp_path)
        refused(run, f"{option} '{value}': ")
        assert why in run.stderr, run.stderr
        assert not (tmp_path / "out").exists()


def test_validate_refuses_a_grid_without_a_case_before_it_makes_the_directory(tmp_path):
    run = ddlsim("validate", "--quick", "--jobs", "ps", "--models", "resnet18", "-o", "out", cwd=tmp_path)
    refused(run, "no case: models resnet18 for jobs ps")
    assert not (tmp_path / "out").exists()  # before: an empty out/ was left


@pytest.mark.parametrize("seed", range(40))
def test_comma_lists_read_back_what_was_written_and_refuse_gaps_and_repeats(seed):
    import random

    from ddlsim.errors import DdlsimError
    from ddlsim.option_lists import comma_list, whole_number

    rng = random.Random(seed)
    values = rng.sample(range(-10**6, 10**6), rng.randint(1, 8))
    text = ",".join(f"{' ' * rng.randint(0, 2)}{v}{' ' * rng.randint(0, 2)}" for v in values)
    assert comma_list(text, "--x", whole_number, example="1,2") == values
    items = [str(v) for v in values]
    cut = rng.randint(0, len(items))
    with pytest.raises(DdlsimError, match="--x .*: an empty item"):
        comma_list(",".join(items[:cut] + [""] + items[cut:]), "--x", whole_number, example="1,2")
    again = rng.choice(items)
    with pytest.raises(DdlsimError, match=f"'{again}' again; give each value once"):
        comma_list(",".join(items[:cut] + [again] + items[cut:]), "--x", whole_number, example="1,2")


@pytest.mark.parametrize("argv, line", [
    # before: "error: arguments: invalid scenario:" and a second line naming the scenario field (workers,
    # network.latency, strategy.kind), not the flag
    (["simulate", "--workers", "0"], "error: --workers 0: Input should be greater than or equal to 1 (got 0)"),
    (["simulate", "--bandwidth", "1x", "--latency", "-1us"],
     "error: --bandwidth 1x: unknown bandwidth unit 'x' in '1x'; use Gbps, Gbit/s, Mbps (bits) or GB/s, GBps (bytes); "
     "--latency -1us: duration must not be negative, got '-1us'; write e.g. \"10us\" or \"1.5ms\""),
    (["simulate", "--strategy", "bogus"], "error: --strategy bogus: unknown strategy kind 'bogus'"),
    (["simulate", "--gamma", "-1"], "error: --gamma -1.0: Input should be greater than or equal to 0"),
    (["simulate", "--async"], "error: --async: strategy.asynchronous is an option of kind = \"ps\""),
    (["replay", "{log}", "--workers", "0"], "error: --workers 0: Input should be greater than or equal to 1 (got 0)"),
    (["replay", "{log}", "--latency", "soon"], "error: --latency soon: "),
    # plan too (before: "error: arguments: invalid scenario:" and the field on a second line)
    (["plan", "-m", "lenet5", "--workers", "0"], "error: --workers 0: Input should be greater than or equal to 1 (got 0)"),
    (["plan", "-m", "lenet5", "-n", "2", "--ecn-threshold", "20"],
     "error: --ecn-threshold 20: network.packet configures the packet-level model"),
])
def test_a_flag_the_scenario_refuses_is_named_as_a_flag_on_one_line(tmp_path, log, argv, line):
    run = ddlsim(*(a.format(log=log) for a in argv), cwd=tmp_path)
    refused(run, line)
    assert run.stderr.startswith(line)


def test_the_api_still_names_the_scenario_fields():
    import ddlsim as api
    from ddlsim.errors import ScenarioError

    with pytest.raises(ScenarioError, match=r"arguments: invalid scenario:\n  field 'workers': Input should be greater"):
        api.simulate(workers=0)


@pytest.mark.parametrize("argv, line", [
    # before: click's four lines ("Usage: ...", "Try ... --help", "", "Error: ...")
    (["simulate", "--workers", "x"], "error: Invalid value for '--workers' / '-n': "),
    (["simulate", "--nope"], "error: No such option: --nope"),
    (["nope"], "error: No such command 'nope'; see python -m ddlsim --help"),
    (["analyze"], "error: Missing argument 'events'; see python -m ddlsim analyze --help"),
    (["capture", "ps", "--workers"], "error: Option '--workers' requires an argument"),
])
def test_usage_errors_are_one_line_with_status_2(tmp_path, argv, line):
    run = ddlsim(*argv, cwd=tmp_path)
    refused(run, line)
    assert run.stdout == ""


@pytest.mark.parametrize("argv", [[], ["capture"], ["reproduce"]])
def test_a_command_group_alone_still_shows_its_help(tmp_path, argv):
    run = ddlsim(*argv, cwd=tmp_path)
    assert run.returncode == 2 and "Usage: python -m ddlsim" in run.stderr and "Traceback" not in run.stderr


def test_help_and_version_still_exit_0(tmp_path):
    assert ddlsim("--version", cwd=tmp_path).returncode == 0
    run = ddlsim("simulate", "--help", cwd=tmp_path)
    assert run.returncode == 0 and "--workers" in run.stdout


@pytest.mark.parametrize("gamma", ["nan", "inf", "-1"])
def test_fit_names_gamma_when_it_is_not_a_reduction_time(tmp_path, gamma):
    # before: nan was refused as "cost model beta_ns_per_byte must be a finite number >= 0, got nan"
    run = ddlsim("fit", str(ROOT / "examples" / "osu_allreduce_8nodes.txt"), "--workers", "8", f"--gamma={gamma}",
                 "-o", "cost.json", cwd=tmp_path)
    refused(run, f"--gamma {gamma}: the reduction time per byte is a finite number of ns >= 0")
    assert not (tmp_path / "cost.json").exists()


def test_reproduce_thesis_network_names_runs_when_it_is_a_file(tmp_path):
    (tmp_path / "runs").write_text("mine")
    run = ddlsim("reproduce", "thesis-network", "--quick", "--runs", "runs", "-o", "out", cwd=tmp_path)
    refused(run, "--runs runs: exists and is not a directory")  # before: "--out runs/R4: cannot write here"
    assert (tmp_path / "runs").read_text() == "mine" and not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, line", [
    # before: -o '' wrote into the current directory, --speedup-kind '' ran as if none were given
    (["simulate", "-m", "lenet5", "-n", "2", "-i", "1", "-o", ""], "error: -o '': empty; give a value (for the current directory, write .)"),
    (["simulate", "-m", "lenet5", "-n", "2", "-i", "1", "--out="], "error: --out '': empty; give a value"),
    (["simulate", "-m", "lenet5", "-n", "2", "-i", "1", "--speedup-kind", ""], "error: --speedup-kind '': empty; give a value"),
    (["sweep", "--set", "", "-o", "s"], "error: --set '': empty; give a value"),
    (["analyze", ""], "error: an argument '': empty; give a value"),
])
def test_an_empty_value_is_refused_before_anything_runs(tmp_path, argv, line):
    run = ddlsim(*argv, cwd=tmp_path)
    refused(run, line)
    assert list(tmp_path.iterdir()) == []


def test_the_current_directory_written_as_dot_is_still_an_output(tmp_path):
    run = ddlsim("simulate", "-m", "lenet5", "-n", "2", "-i", "1", "-q", "-o", ".", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "events.parquet").is_file()


@pytest.mark.parametrize("argv, line", [
    # before: the last bucket_cap_mb was taken, and an empty item dropped, without a word
    (["--grouping", "ddp:bucket_cap_mb=5,bucket_cap_mb=10"], "error: --grouping ddp:bucket_cap_mb=5,bucket_cap_mb=10: "
                                                             "grouping option bucket_cap_mb is given twice; give it once"),
    (["--grouping", "ddp:bucket_cap_mb=5,"], "error: --grouping ddp:bucket_cap_mb=5,: an empty option"),
    (["--network", "packet", "--background", "websearch:load=0.3,,band=0"],
     "error: --background 'websearch:load=0.3,,band=0': an empty option"),
])
def test_options_inside_a_value_are_given_once_and_none_is_empty(tmp_path, argv, line):
    run = ddlsim("simulate", "-m", "lenet5", "-n", "2", "-i", "1", *argv, cwd=tmp_path)
    refused(run, line)
    assert run.stderr.startswith(line)


@pytest.mark.parametrize("argv, line", [
    # a field inside a flag's value is named too (found by CI: "--straggler: Input should be ..." lost "probability")
    (["--workers", "4", "--transient-straggler", "1.5:2"],
     "error: --straggler / --transient-straggler: probability: Input should be less than or equal to 1 (got 1.5)"),
    (["--grouping", "ddp:bucket_cap_mb=-1"], "error: --grouping ddp:bucket_cap_mb=-1: bucket_cap_mb: Input should be greater than 0"),
])
def test_a_field_inside_a_flags_value_is_named(tmp_path, argv, line):
    run = ddlsim("simulate", "-m", "lenet5", "-i", "1", "--network", "analytic", *argv, cwd=tmp_path)
    refused(run, line)


@pytest.mark.parametrize("argv, line", [
    # before: a check across fields named only the scenario's keys ("error: network.hosts_per_leaf = 4 only applies
    # to ...", "... set fidelity = \"analytic\""), neither the flags given nor --network, which sets the fidelity
    (["--hosts-per-leaf", "4"], "error: --hosts-per-leaf 4: network.hosts_per_leaf = 4 only applies to topology = "),
    (["--topology", "star", "--spines", "3"], "error: --topology star, --spines 3: network.spines = 3 only applies"),
    (["--collective-model", "closed-form", "--network", "flow"],
     "error: --network flow, --collective-model closed-form: network.collective_model = \"closed-form\" needs "
     "fidelity = \"analytic\" (got 'flow')"),
    (["--ecn-threshold", "20"], "error: --ecn-threshold 20: network.packet configures the packet-level model"),
    (["--preemption", "chunk", "--stream-policy", "fifo"],
     "error: --stream-policy fifo, --preemption chunk: strategy.preemption = 'chunk' needs"),
    (["--staleness", "2", "--strategy", "ps"], "error: --strategy ps, --staleness 2: strategy.staleness = 2 bounds"),
    (["--workers", "2", "--straggler", "3:1.5"],
     "error: --workers 2, --straggler / --transient-straggler: straggler rank 3 is not a worker"),
    # one flag that sets two fields is named once (before: "--queue-limit 10, --queue-limit packets")
    (["--queue-limit", "10", "--network", "flow"], "error: --network flow, --queue-limit 10: network.packet configures"),
    (["--network", "analytic", "--collective-model", "closed-form", "--background", "websearch:load=0.3"],
     "error: --collective-model closed-form, --background: network.collective_model = \"closed-form\" times"),
])
def test_options_that_contradict_are_named_as_the_flags_given(tmp_path, argv, line):
    run = ddlsim("simulate", "-m", "lenet5", "-i", "1", *argv, cwd=tmp_path)
    refused(run, line)
    assert run.stderr.startswith(line) and run.stderr.count("\n") == 1


@pytest.mark.parametrize("argv, setter", [
    # a field the fix names whose flag has another name: the flag that sets it follows the message
    (["--collective-model", "closed-form"], "(--network sets network.fidelity)"),
    (["--strategy", "ring", "--servers", "4"], "(--strategy sets strategy.kind)"),
    (["--strategy", "ps", "--staleness", "2"], "(--async sets strategy.asynchronous)"),
])
def test_a_field_set_by_a_flag_of_another_name_says_which(tmp_path, argv, setter):
    run = ddlsim("simulate", "-m", "lenet5", "-i", "1", *argv, cwd=tmp_path)
    assert run.returncode == 2 and run.stderr.rstrip().endswith(setter), run.stderr


def test_the_api_names_the_scenario_fields_of_options_that_contradict():
    import ddlsim as api
    from ddlsim.errors import ScenarioError

    with pytest.raises(ScenarioError, match=r"arguments: invalid scenario:\n  network.hosts_per_leaf = 4 only applies"):
        api.simulate(hosts_per_leaf=4)


def test_a_scenario_files_problems_are_one_line(tmp_path):
    # before: "error: typo.toml: invalid scenario:" and then a line per problem
    (tmp_path / "typo.toml").write_text('[network]\nbandwith = "10Gbps"\nlatency = "-1us"\n')
    run = ddlsim("simulate", "typo.toml", cwd=tmp_path)
    refused(run, "error: typo.toml: invalid scenario: ")
    assert run.stderr.count("\n") == 1, run.stderr
    assert "field 'network.latency': duration must not be negative" in run.stderr
    assert "; unknown key 'network.bandwith': did you mean 'bandwidth'?" in run.stderr


@pytest.mark.parametrize("argv", [["capture", "connections", "--connections", "1,x", "-o", "cc"],
                                  ["capture", "connections", "--connections", "1,2", "--timeout", "0", "-o", "cc"],
                                  ["capture", "connections", "--connections", "1,2", "--request-bytes", "4 parsecs", "-o", "cc"],
                                  ["capture", "ps", "--connections", "1,1", "-o", "cc"]])
def test_a_bad_connection_option_is_refused_before_pytorch_is_imported(tmp_path, argv):
    # before: both commands imported the connection benchmark (and with it PyTorch, 2-10 s) to read --connections
    code = ("import sys\nfrom ddlsim.cli.app import main\nsys.argv = ['ddlsim', *sys.argv[1:]]\ntry:\n    main()\n"
            "finally:\n    print('torch imported:', 'torch' in sys.modules, file=sys.stderr)\n")
    run = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith("error: --") and run.stderr.rstrip().endswith("torch imported: False"), run.stderr
    assert not (tmp_path / "cc").exists()
