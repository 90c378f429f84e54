"""A plan file with a wrong fact (found by tools/fuzz_readers.py's ``plan`` target, which changes what ``ddlsim
plan --out`` wrote and runs what ``ddlsim capture ddp --plan`` does with it): before, a missing time was a KeyError
when ``best`` chose its entry, a list among the tensor names a TypeError, a number for the baselines an
AttributeError. Each is now refused where the plan is loaded, naming the field; and an idle curve CSV with an
over-long field is refused as a CSV error, not csv's own exception."""

import json
import math
from pathlib import Path

import forked_cli
import pytest

from ddlsim.capture.ddp_plan import load_plan, plan_config
from ddlsim.errors import DdlsimError
from ddlsim.simulation.idle_wake import read_curve

ROOT = Path(__file__).resolve().parent.parent
# LeNet-5's parameters (ddlsim.capture.ddp_models), written out: these tests need no PyTorch
NAMES = ["conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight", "fc1.bias", "fc2.weight",
         "fc2.bias", "fc3.weight", "fc3.bias"]


def good_plan() -> dict:
    return {"ddlsim_plan": 1, "model": {"name": "lenet5"}, "ddp": {"iteration_time_s": 2.0, "bucket_cap_mb": 0.1},
            "mg_wfbp": {"iteration_time_s": 1.0, "plan": [{"tensors": NAMES[:4]}, {"tensors": NAMES[4:]}]},
            "baselines": {"ddp_default": {"iteration_time_s": 3.0}}, "other": {"kept": [1, "x"]}}


def write(tmp_path: Path, plan: dict) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan), encoding="utf-8")
    return path


def test_a_good_plan_passes_and_every_entry_applies(tmp_path):
    path = write(tmp_path, good_plan())
    plan = load_plan(path)
    assert plan == good_plan()  # unchanged, unknown keys kept
    assert plan_config(plan, "ddp", NAMES, path)["bucket_cap_mb"] == 0.1
    assert plan_config(plan, "best", NAMES, path)["merge_groups"] == [[0, 1, 2, 3], list(range(4, 10))]


@pytest.mark.parametrize("change, field", [
    (lambda p: p["ddp"].pop("iteration_time_s"), "ddp.iteration_time_s"),  # KeyError in choose_entry before
    (lambda p: p["mg_wfbp"].pop("iteration_time_s"), "mg_wfbp.iteration_time_s"),
    (lambda p: p["ddp"].update(iteration_time_s="2.0"), "ddp.iteration_time_s"),  # TypeError: str < float
    (lambda p: p["mg_wfbp"].update(iteration_time_s=math.inf), "mg_wfbp.iteration_time_s"),
    (lambda p: p["ddp"].update(bucket_cap_mb=True), "ddp.bucket_cap_mb"),  # a boolean is no size
    (lambda p: p["ddp"].update(bucket_cap_mb=1e309), "ddp.bucket_cap_mb"),
    (lambda p: p["mg_wfbp"]["plan"][0]["tensors"].insert(0, ["conv1.weight"]), "mg_wfbp.plan.0.tensors.0"),  # TypeError
    (lambda p: p["mg_wfbp"]["plan"][1].update(tensors=[]), "mg_wfbp.plan.1.tensors"),
    (lambda p: p["mg_wfbp"].update(plan={"tensors": NAMES}), "mg_wfbp.plan"),
    (lambda p: p.update(baselines=-9223372036854775809), "baselines"),  # AttributeError before
    (lambda p: p["baselines"].update(ddp_default=[3.0]), "baselines.ddp_default"),
    (lambda p: p["baselines"]["ddp_default"].update(iteration_time_s=-1), "baselines.ddp_default.iteration_time_s"),
    (lambda p: p["model"].update(name=["lenet5"]), "model.name"),
])
def test_a_wrong_fact_is_refused_where_the_plan_is_loaded_naming_the_field(tmp_path, change, field):
    plan = good_plan()
    change(plan)
    path = write(tmp_path, plan)
    with pytest.raises(DdlsimError) as caught:
        for entry in ("best", "ddp", "mg_wfbp"):  # what capture ddp does with the plan
            plan_config(load_plan(path), entry, NAMES, path)
    message = str(caught.value)
    assert message.startswith(f"--plan {path}: field '{field}': ") and message.endswith("write the plan again with "
                                                                                         "ddlsim plan --out")
    assert "\n" not in message and "_Baselines" not in message and "instance of" not in message


def test_the_command_refuses_it_in_one_line_with_status_2_and_writes_nothing(tmp_path):
    plan = good_plan()
    plan["mg_wfbp"]["plan"][0]["tensors"][0] = {"name": "conv1.weight"}
    path = write(tmp_path, plan)
    run = forked_cli.run(["capture", "ddp", "--plan", str(path), "--out", str(tmp_path / "run")], timeout=120, env={"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "field 'mg_wfbp.plan.0.tensors.0'" in lines[0] and "Traceback" not in run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def test_an_idle_curve_with_a_field_over_csvs_limit_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "idle.csv"
    path.write_text("mode,idle_ms,step_ms,forward_ms,backward_ms\nsleep,0,0.4,1.1," + "7" * 140_000 + "\n",
                    encoding="utf-8")
    with pytest.raises(DdlsimError, match=r"idle\.csv: not a readable CSV \(field larger than field limit"):
        read_curve(path)  # _csv.Error before


def test_an_idle_curve_whose_median_is_zero_past_the_first_idle_is_refused_naming_the_csv(tmp_path):
    """A zero time at a later idle gave a ratio of 0, which read_curve returned and the replay's scenario then
    refused as "(recorded scenario): invalid scenario: model.idle_wake.backward[1]", blaming the capture (the
    fuzzer's idlecurve target: what read_curve returns must be a curve check_curve accepts)."""
    from ddlsim.simulation.idle_wake import check_curve

    path = tmp_path / "idle.csv"
    rows = ["mode,idle_ms,step_ms,forward_ms,backward_ms", "sleep,0,0.4,1.1,2.3", "sleep,0.5,0.4,1.1,-0",
            "sleep,2,0.5,1.2,2.4"]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    with pytest.raises(DdlsimError, match=r"idle\.csv: the backward at idle 0\.5 ms has a median of -?0 ms; it must be > 0"):
        read_curve(path)
    rows[2] = "sleep,0.5,0.4,1.1,2.35"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    assert check_curve(read_curve(path), "idle_curve")["backward"] == [[0.0, 1.0], [0.5, 2.35 / 2.3], [2.0, 2.4 / 2.3]]
