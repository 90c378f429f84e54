"""A ``ddlsim plan`` applied to the real DDP job (``capture ddp --plan``, ``plan --apply``).

Oracles: the plan's own groups (the captured all-reduces must be exactly them, adjacent layers or not, with the
bytes of their tensors); plain DDP (a job whose gradients travel in other groups must end with the same weights,
bit for bit: with 2 ranks every averaged element is (a/2 + b/2) whatever the grouping); and the logs themselves
(apply.json's measured times are the logs' iteration means, its predictions the plan's)."""

import json
import shlex
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the DDP capture needs PyTorch (pip install ddlsim[capture])")

from typer.testing import CliRunner  # noqa: E402

from ddlsim.analyze.breakdown import iteration_arrays, iteration_mean  # noqa: E402
from ddlsim.capture.ddp_models import build_model  # noqa: E402
from ddlsim.capture.ddp_plan import (ONE_BYTE_MB, contiguous_buckets, ddp_takes_bucket_cap_list,  # noqa: E402
                                     gradient_ready_order, job_plan_config, load_plan, plan_config)
from ddlsim.capture.ddp_run import run_ddp_capture  # noqa: E402
from ddlsim.cli.app import app  # noqa: E402
from ddlsim.errors import DdlsimError  # noqa: E402
from ddlsim.trace import read_event_log  # noqa: E402

NAMES = [n for n, _ in build_model("lenet5").named_parameters()]
SIZES = {n: p.numel() * 4 for n, p in build_model("lenet5").named_parameters()}
# merges that are not neighbours in the backward order: the last layer with the first, fc1 with conv2
NON_ADJACENT = [["fc3.weight", "conv1.weight", "conv1.bias"], ["fc3.bias", "fc2.weight", "fc2.bias"],
                ["fc1.weight", "fc1.bias", "conv2.weight", "conv2.bias"]]


# groups that are contiguous in the order LeNet-5's gradients become ready (fc3.bias first; a conv's weight is
# ready before its bias, a linear layer's bias before its weight)
CONTIGUOUS = [["fc3.bias", "fc3.weight", "fc2.bias"], ["fc2.weight", "fc1.bias", "fc1.weight"],
              ["conv2.weight", "conv2.bias", "conv1.weight", "conv1.bias"]]


def hand_plan(groups) -> dict:
    return {"ddlsim_plan": 1, "model": {"name": "lenet5"}, "ddp": {"iteration_time_s": 2.0, "bucket_cap_mb": 0.1},
            "mg_wfbp": {"iteration_time_s": 1.0, "plan": [{"tensors": g} for g in groups]},
            "baselines": {"ddp_default": {"iteration_time_s": 3.0}}}


# The README's `plan --apply` example: its run (four real 2-rank captures) is made once per session and shared with
# test_readme (conftest.ddlsim_once); these tests read what it wrote.
README_APPLY = "ddlsim plan --apply applied/ --model lenet5 --workers 2 --capture-iterations 3 --repeats 2"


@pytest.fixture(scope="module")
def applied(ddlsim_once):
    assert README_APPLY in (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    run, cwd = ddlsim_once(*shlex.split(README_APPLY)[1:])
    assert run.returncode == 0, run.stderr[-2000:]
    out = cwd / "applied"
    return out, json.loads((out / "apply.json").read_text())


def test_apply_json_prints_the_report_it_writes(applied, tmp_path, monkeypatch):
    """`plan --apply ... --json` prints the report apply_plan returned (the one it wrote as apply.json), and hands it
    the job's arguments as given (apply_plan stands in here: its captures are the shared run's)."""
    import ddlsim.plan.apply

    _, report = applied
    asked = {}

    def stand_in(out_dir, **kwargs):
        asked.update(kwargs, out_dir=out_dir)
        return report

    monkeypatch.setattr(ddlsim.plan.apply, "apply_plan", stand_in)
    result = CliRunner().invoke(app, ["plan", "--apply", str(tmp_path / "run"), "--model", "lenet5", "--workers", "2",
                                      "--capture-iterations", "3", "--batch-size", "4", "--repeats", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == report
    assert (asked["out_dir"], asked["model"], asked["workers"], asked["iterations"], asked["batch_size"],
            asked["repeats"]) == (tmp_path / "run", "lenet5", 2, 3, 4, 2)


def test_apply_reports_the_logs_own_iteration_means_and_the_plans_predictions(applied, tmp_path):
    out, report = applied
    # two pairs, the second in the other order, in directories of their own
    assert report["repeats"] == 2 and report["order"] == ["before", "after", "after-2", "before-2"]
    assert sorted(p.name for p in out.iterdir()) == ["after", "after-2", "apply.json", "apply.png", "before", "before-2",
                                                     "plan.json"]
    # the figure of the pairs: a PNG, the same bytes again from the same report
    from ddlsim.plan.apply import plot_pairs

    png = (out / "apply.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    again = tmp_path / "again.png"
    plot_pairs(report, again)
    assert again.read_bytes() == png
    sides = {}
    for side in ("before", "after"):
        means = []
        for name in (side, f"{side}-2"):
            log = read_event_log(out / name / "events.parquet")
            means.append(iteration_mean(iteration_arrays(log), log.metadata)["mean_s"])
        sides[side] = means
        assert report[side]["mean_s"] == means[0] and report[side]["means_s"] == means
        # the captures as the command named them (relative to where it ran)
        assert report[side]["captures"] == [str(Path(out.name) / side / "events.parquet"),
                                            str(Path(out.name) / f"{side}-2" / "events.parquet")]
        assert report["measured"][f"{side}_s"] == pytest.approx((means[0] + means[1]) / 2, rel=1e-15)
        assert report[side]["spread_pct"] == pytest.approx(abs(means[0] - means[1]) / ((means[0] + means[1]) / 2) * 100)
    assert report["measured"]["pair_gains"] == pytest.approx([1 - a / b for a, b in zip(sides["after"], sides["before"])])
    plan = json.loads((out / "plan.json").read_text())
    entry = report["entry"]
    # the predicted "before" is the replay of the "before" capture, to the last digit (the plan simulates the job as
    # captured, with its own buckets, gaps and ring rate, through the replay's scenario)
    import ddlsim

    replayed = ddlsim.replay(out / "before" / "events.parquet").iteration_time_s
    assert report["predicted"]["before_s"] == plan["captured"]["iteration_time_s"] == replayed
    assert report["predicted"]["ddp_default_s"] == plan["baselines"]["ddp_default"]["iteration_time_s"]
    assert report["predicted"]["after_s"] == plan[entry]["iteration_time_s"]
    expected = 1 - report["measured"]["after_s"] / report["measured"]["before_s"]
    assert report["measured"]["gain"] == pytest.approx(expected, rel=1e-12)
    # the after-capture ran the entry the plan predicts faster, and its all-reduces are that entry's
    faster = "mg_wfbp" if plan["mg_wfbp"]["iteration_time_s"] < plan["ddp"]["iteration_time_s"] else "ddp"
    assert entry == faster
    if entry == "mg_wfbp":
        assert sorted(map(sorted, report["after"]["groups"])) == sorted(sorted(g["tensors"]) for g in plan["mg_wfbp"]["plan"])
    assert report["same_weights"] is True


def test_non_adjacent_merges_run_as_planned_and_train_the_same_weights_as_plain_ddp(applied, tmp_path):
    out, report = applied
    before = read_event_log(out / "before" / "events.parquet")
    config = {"model": "lenet5", "iterations": 3, "batch_size": 8, "image_size": 32, "bucket_cap_mb": 25.0, "seed": 0}
    config = {**config, **plan_config(hand_plan(NON_ADJACENT), "best", NAMES, "hand.json")}
    assert config["bucket_cap_mb"] == ONE_BYTE_MB
    log, failure = run_ddp_capture(config, 2, tmp_path / "run", timeout_s=120)
    assert failure is None
    assert log.metadata["parameter_sha256"] == before.metadata["parameter_sha256"]
    df = log.to_pandas()
    coll = df[(df.kind == "collective") & (df.iteration >= 1)]  # iteration 0: DDP's provisional single bucket
    names = [p["name"] for p in log.metadata["parameters"]]
    groups = log.groups.to_pandas()
    seen = []
    for group, rows in coll.groupby("group"):
        tensors = sorted(names[t] for t in groups[groups.group == group].tensor)
        seen.append(tensors)
        assert (rows.bytes == sum(SIZES[t] for t in tensors)).all()
        assert len(rows) == 2 * 2  # 2 ranks x iterations 1-2
        # an all-reduce of a group starts only once the backward of every layer in it has ended
        for row in rows.itertuples():
            layers = {t.rsplit(".", 1)[0] for t in tensors}
            bwd = df[(df.op == "backward") & (df["rank"] == row.rank) & (df.iteration == row.iteration) & df.name.isin(layers)]
            assert len(bwd) == len(layers) and row.start_ns >= bwd.end_ns.max()
    assert sorted(seen) == sorted(sorted(g) for g in NON_ADJACENT)
    assert log.metadata["plan"]["entry"] == "mg_wfbp" and log.metadata["plan"]["groups"] == 3


@pytest.mark.parametrize("change, message", [
    (lambda p: p.update(ddlsim_plan=2), "not a ddlsim plan"),
    (lambda p: p["mg_wfbp"]["plan"][0]["tensors"].append("fc9.weight"), "names 'fc9.weight'"),
    (lambda p: p["mg_wfbp"]["plan"][1]["tensors"].append("fc3.weight"), "'fc3.weight' is in two groups"),
    (lambda p: p["mg_wfbp"]["plan"].pop(), "leaves out"),
    (lambda p: p.pop("ddp"), "field 'ddp' is missing"),
])
def test_a_bad_plan_is_refused_with_the_field_and_the_fix(tmp_path, change, message):
    plan = hand_plan([list(g) for g in NON_ADJACENT])
    change(plan)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    with pytest.raises(DdlsimError, match=message):
        plan_config(load_plan(path), "mg_wfbp", NAMES, path)


def test_cli_refuses_a_plan_for_another_model_and_an_entry_without_a_plan(tmp_path):
    path = tmp_path / "plan.json"
    plan = hand_plan(NON_ADJACENT)
    plan["model"]["name"] = "resnet18"
    path.write_text(json.dumps(plan))
    runner = CliRunner()
    result = runner.invoke(app, ["capture", "ddp", "--plan", str(path), "--model", "lenet5", "--out", str(tmp_path / "r")])
    assert isinstance(result.exception, DdlsimError) and "was made for resnet18" in str(result.exception)
    result = runner.invoke(app, ["capture", "ddp", "--plan-entry", "ddp", "--out", str(tmp_path / "r")])
    assert isinstance(result.exception, DdlsimError) and "--plan-entry needs --plan" in str(result.exception)
    result = runner.invoke(app, ["capture", "ddp", "--plan", str(tmp_path / "none.json"), "--out", str(tmp_path / "r")])
    assert isinstance(result.exception, DdlsimError) and "no such file" in str(result.exception)
    assert not (tmp_path / "r").exists()


def test_apply_refuses_a_directory_that_holds_something(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    result = CliRunner().invoke(app, ["plan", "--apply", str(tmp_path), "--model", "lenet5"])
    assert isinstance(result.exception, DdlsimError) and "not an empty directory" in str(result.exception)
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_contiguous_buckets_are_the_runs_of_the_ready_order_and_none_otherwise():
    import random

    rng = random.Random(20)
    for _ in range(300):
        n = rng.randint(1, 12)
        order = rng.sample(range(n), n)
        cuts = sorted(rng.sample(range(1, n), rng.randint(0, n - 1))) if n > 1 else []
        runs = [order[a:b] for a, b in zip([0, *cuts], [*cuts, n])]
        groups = [sorted(r, key=lambda _: rng.random()) for r in runs]  # a group's own order does not matter
        rng.shuffle(groups)  # nor the plan's group order
        assert contiguous_buckets(groups, order) == runs
        if len(runs) >= 2:
            # one tensor of the first run moved behind a later run's tensor: that group is split in two runs
            moved = list(order)
            t = moved.pop(rng.randrange(len(runs[0])))
            moved.insert(len(runs[0]) + rng.randrange(len(runs[1])), t)
            if len(runs[0]) > 1:
                assert contiguous_buckets(groups, moved) is None
        assert contiguous_buckets(groups, order[:-1]) is None  # the order must hold exactly the groups' tensors


def test_a_plan_contiguous_in_ddps_order_takes_the_ddp_bucket_path_else_the_hook():
    order, sizes = gradient_ready_order("lenet5", 32)
    assert [NAMES[t] for t in order] == [t for g in CONTIGUOUS for t in g]
    assert sizes == [SIZES[n] for n in NAMES]
    config = job_plan_config(hand_plan(CONTIGUOUS), "mg_wfbp", "lenet5", 32, "hand.json")
    assert "merge_groups" not in config and config["plan"]["path"] == "ddp-buckets"
    assert config["bucket_cap_mb_list"] == [sum(SIZES[t] for t in g) / 2**20 for g in CONTIGUOUS]
    assert config["plan"]["buckets"] == CONTIGUOUS
    # registration order reversed is not the order DDP sees (conv2.bias is ready after conv2.weight)
    reversed_groups = [["fc3.bias", "fc3.weight", "fc2.bias"], ["fc2.weight", "fc1.bias", "fc1.weight", "conv2.bias"],
                       ["conv2.weight", "conv1.bias", "conv1.weight"]]
    config = job_plan_config(hand_plan(reversed_groups), "mg_wfbp", "lenet5", 32, "hand.json")
    assert config["bucket_cap_mb"] == ONE_BYTE_MB and len(config["merge_groups"]) == 3
    assert config["plan"]["path"] == "hook" and "not one contiguous run" in config["plan"]["why"]
    config = plan_config(hand_plan(CONTIGUOUS), "mg_wfbp", NAMES, "hand.json", parameter_bytes=sizes,
                         ready_order=order, ddp_takes_cap_list=False)
    assert config["plan"]["path"] == "hook" and "bucket_cap_mb_list" in config["plan"]["why"]


@pytest.mark.skipif(not ddp_takes_bucket_cap_list(), reason="this torch's DDP has no bucket_cap_mb_list")
def test_ddps_own_buckets_built_for_a_contiguous_plan_are_the_plans_groups(applied, tmp_path):
    out, _ = applied
    before = read_event_log(out / "before" / "events.parquet")
    config = {"model": "lenet5", "iterations": 3, "batch_size": 8, "image_size": 32, "bucket_cap_mb": 25.0, "seed": 0}
    config = {**config, **job_plan_config(hand_plan(CONTIGUOUS), "best", "lenet5", 32, "hand.json")}
    log, failure = run_ddp_capture(config, 2, tmp_path / "run", timeout_s=120)
    assert failure is None
    names = [p["name"] for p in log.metadata["parameters"]]
    # DDP's own account of the buckets it rebuilt, and the capture's bucket table: exactly the plan's groups
    rebuilt = log.metadata["ddp_reducer"]["rebuilt_per_bucket_param_indices"]
    assert [sorted(names[int(t)] for t in b.split()) for b in rebuilt.split(", ")] == [sorted(g) for g in CONTIGUOUS]
    assert [sorted(names[t] for t in b["tensors"]) for b in log.metadata["buckets"]] == [sorted(g) for g in CONTIGUOUS]
    df = log.to_pandas()
    coll = df[(df.kind == "collective") & (df.iteration >= 1)]
    assert sorted(coll.bytes.unique()) == sorted(sum(SIZES[t] for t in g) for g in CONTIGUOUS)
    assert len(coll) == 3 * 2 * 2  # 3 buckets x 2 ranks x iterations 1-2
    assert log.metadata["plan"]["path"] == "ddp-buckets"
    # the capture measured its ring's rate on its links (replay takes it): two sizes, the larger slower
    assert log.metadata["allreduce_rate_bps"] > 0 and log.metadata["allreduce_rate_sizes"] == [2 << 20, 8 << 20]
    assert log.metadata["parameter_sha256"] == before.metadata["parameter_sha256"]


def test_the_pairs_alternate_their_order_and_each_holds_one_capture_of_each_side():
    from ddlsim.plan.apply import capture_dir_name, capture_order

    for repeats in range(1, 9):
        order = capture_order(repeats)
        assert order[:2] == [("before", 1), ("after", 1)]  # the plan is made from the first capture, DDP's default
        assert sorted(order) == sorted((side, k) for k in range(1, repeats + 1) for side in ("before", "after"))
        for k in range(1, repeats + 1):  # pair k's two captures run one after the other, before first in odd pairs
            i = order.index(("before", k))
            assert order[i + (1 if k % 2 else -1)] == ("after", k)
        # a drift that is linear in time falls on both sides alike over each two pairs: the positions balance
        if repeats % 2 == 0:
            assert sum(i for i, (side, _) in enumerate(order) if side == "before") == \
                sum(i for i, (side, _) in enumerate(order) if side == "after")
        names = [capture_dir_name(side, k) for side, k in order]
        assert len(set(names)) == len(names) and "before" in names and "after" in names


def test_repeats_without_apply_is_refused():
    result = CliRunner().invoke(app, ["plan", "--model", "lenet5", "--workers", "2", "--repeats", "4"])
    assert isinstance(result.exception, DdlsimError) and "--repeats" in str(result.exception) and "--apply" in str(result.exception)


@pytest.mark.parametrize("value", ["0", "-1"])
def test_apply_refuses_fewer_than_one_pair(value, tmp_path):
    result = CliRunner().invoke(app, ["plan", "--apply", str(tmp_path / "x"), "--model", "lenet5", "--repeats", value])
    assert isinstance(result.exception, DdlsimError) and "--repeats" in str(result.exception)
    assert not (tmp_path / "x").exists()


def test_the_sign_test_is_the_share_of_all_sign_patterns_at_least_as_uneven():
    import itertools

    from ddlsim.plan.apply import sign_test_p

    for pairs in range(1, 13):
        patterns = list(itertools.product((0, 1), repeat=pairs))  # every outcome of fair coins, brute force
        for faster in range(pairs + 1):
            uneven = abs(2 * faster - pairs)
            expected = sum(abs(2 * sum(p) - pairs) >= uneven for p in patterns) / len(patterns)
            assert sign_test_p(faster, pairs) == pytest.approx(expected, rel=1e-12), (faster, pairs)
    assert sign_test_p(0, 0) == 1.0


def test_the_help_states_the_default_number_of_pairs_the_command_uses():
    from ddlsim.plan.apply import DEFAULT_REPEATS

    result = CliRunner().invoke(app, ["plan", "--help"], env={"COLUMNS": "400"})
    assert f"before/after capture pairs (default {DEFAULT_REPEATS})" in " ".join(result.output.split())


def _with_host(before, where, **facts):
    """A copy of the capture `before` (its events and side tables) whose metadata says `facts` of its host."""
    import pyarrow.parquet as pq

    from ddlsim.trace.parquet import METADATA_KEY, with_side_tables

    where.mkdir()
    for path in with_side_tables(before):
        if path.is_file():  # the side tables this capture has
            (where / path.name).write_bytes(path.read_bytes())
    table = pq.read_table(where / before.name)
    meta = {**json.loads(table.schema.metadata[METADATA_KEY.encode()]), **facts}
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, METADATA_KEY.encode(): json.dumps(meta).encode()}),
                   where / before.name)
    return where / before.name


def test_the_plan_lists_the_entries_that_gain_by_more_overlap_where_the_capture_s_transport_shared_the_cores(applied,
                                                                                                          tmp_path):
    """The capture of the fixture (LeNet-5, 2 CPU ranks, unshaped: the loopback does not bind) planned as if its
    host had had as many cores as compute threads (none to spare) and as if it had had 64: the first plan's
    ``shared_cores`` lists exactly the entries of its own JSON faster than the job as captured with more
    communication under compute; the second has none. apply.json carries the plan's."""
    from ddlsim.plan.planner import make_plan

    out, report = applied
    assert report["shared_cores"] == json.loads((out / "plan.json").read_text())["shared_cores"]
    before = out / "before" / "events.parquet"
    facts = read_event_log(before).metadata
    full = make_plan(profile=str(_with_host(before, tmp_path / "full", host_cores=facts["processes"] * facts["threads"])),
                     model="lenet5", workers=2).to_dict()
    spare = make_plan(profile=str(_with_host(before, tmp_path / "spare", host_cores=64)), model="lenet5", workers=2).to_dict()
    assert spare["shared_cores"] is None
    captured = full["captured"]
    gaining = [name for name in ("mg_wfbp", "ddp", "p3", "bytescheduler") if full[name] is not None
               and full[name]["iteration_time_s"] < captured["iteration_time_s"]
               and full[name]["overlap_s"] > captured["overlap_s"]]
    if not gaining:
        assert full["shared_cores"] is None
        return
    assert list(full["shared_cores"]["entries"]) == gaining
    assert "loopback" in full["shared_cores"]["why"] and full["shared_cores"]["note"] in full["notes"]
    # the entries agree with the rest of the plan, which is the same but for the caveat
    for name in gaining:
        assert full["shared_cores"]["entries"][name]["gain"] == 1 - full[name]["iteration_time_s"] / captured["iteration_time_s"]
    assert {k: v for k, v in full.items() if k not in ("shared_cores", "notes", "wall_s", "scenario")} == \
        {k: v for k, v in spare.items() if k not in ("shared_cores", "notes", "wall_s", "scenario")}
