"""A ``ddlsim plan`` applied to the real DDP job (``capture ddp --plan``, ``plan --apply``).

Oracles: the plan's own groups (the captured all-reduces must be exactly them, adjacent layers or not, with the
bytes of their tensors); plain DDP (a job whose gradients travel in other groups must end with the same weights,
bit for bit: with 2 ranks every averaged element is (a/2 + b/2) whatever the grouping); and the logs themselves
(apply.json's measured times are the logs' iteration means, its predictions the plan's)."""

import json

import pytest

torch = pytest.importorskip("torch", reason="the DDP capture needs PyTorch (pip install ddlsim[capture])")

from typer.testing import CliRunner  # noqa: E402

from ddlsim.analyze.breakdown import iteration_arrays, iteration_mean  # noqa: E402
from ddlsim.capture.ddp_models import build_model  # noqa: E402
from ddlsim.capture.ddp_plan import ONE_BYTE_MB, load_plan, plan_config  # noqa: E402
from ddlsim.capture.ddp_run import run_ddp_capture  # noqa: E402
from ddlsim.cli.app import app  # noqa: E402
from ddlsim.errors import DdlsimError  # noqa: E402
from ddlsim.trace import read_event_log  # noqa: E402

NAMES = [n for n, _ in build_model("lenet5").named_parameters()]
SIZES = {n: p.numel() * 4 for n, p in build_model("lenet5").named_parameters()}
# merges that are not neighbours in the backward order: the last layer with the first, fc1 with conv2
NON_ADJACENT = [["fc3.weight", "conv1.weight", "conv1.bias"], ["fc3.bias", "fc2.weight", "fc2.bias"],
                ["fc1.weight", "fc1.bias", "conv2.weight", "conv2.bias"]]


def hand_plan(groups) -> dict:
    return {"ddlsim_plan": 1, "model": {"name": "lenet5"}, "ddp": {"iteration_time_s": 2.0, "bucket_cap_mb": 0.1},
            "mg_wfbp": {"iteration_time_s": 1.0, "plan": [{"tensors": g} for g in groups]},
            "baselines": {"ddp_default": {"iteration_time_s": 3.0}}}


@pytest.fixture(scope="module")
def applied(tmp_path_factory):
    out = tmp_path_factory.mktemp("apply") / "run"
    result = CliRunner().invoke(app, ["plan", "--apply", str(out), "--model", "lenet5", "--workers", "2",
                                      "--capture-iterations", "3", "--batch-size", "4", "--json"])
    assert result.exit_code == 0, result.output
    return out, json.loads(result.stdout)


def test_apply_reports_the_logs_own_iteration_means_and_the_plans_predictions(applied):
    out, report = applied
    assert json.loads((out / "apply.json").read_text()) == report
    for side in ("before", "after"):
        log = read_event_log(out / side / "events.parquet")
        mean = iteration_mean(iteration_arrays(log), log.metadata)
        assert report[side]["mean_s"] == mean["mean_s"] and report["measured"][f"{side}_s"] == mean["mean_s"]
    plan = json.loads((out / "plan.json").read_text())
    entry = report["entry"]
    assert report["predicted"]["before_s"] == plan["baselines"]["ddp_default"]["iteration_time_s"]
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
    config = {"model": "lenet5", "iterations": 3, "batch_size": 4, "image_size": 32, "bucket_cap_mb": 25.0, "seed": 0}
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
