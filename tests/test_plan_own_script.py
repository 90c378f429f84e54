"""A ``ddlsim plan`` run by your own DDP script (``ddlsim.capture.plan_for`` + ``attach(..., plan=)``) and measured
against its prediction from your own captures (``ddlsim plan --apply DIR --before ... --after ...``).

Oracles: the plan's own groups (the all-reduces the capture records after DDP's first iteration must be exactly
them, with their tensors' bytes, computed here from the model's shapes); plain DDP (with 2 ranks every averaged
element is a/2 + b/2 whatever the grouping, so the trained weights must be equal bit for bit); and the logs
themselves (apply.json's measured means are the logs' iteration means, its predictions the plan's numbers)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from script_helpers import ROOT, free_port, run_python

torch = pytest.importorskip("torch", reason="the plan runs in a real 2-rank DDP job (pip install ddlsim[capture])")

from typer.testing import CliRunner  # noqa: E402

from ddlsim.analyze.breakdown import iteration_arrays, iteration_mean  # noqa: E402
from ddlsim.capture.ddp_plan import plan_for  # noqa: E402
from ddlsim.cli.app import app  # noqa: E402
from ddlsim.errors import DdlsimError  # noqa: E402
from ddlsim.trace import read_event_log  # noqa: E402
from own_net import Net  # noqa: E402

# the script's model (own_net.Net): nested modules, so names are "body.0.weight" ... and "head.weight"
SHAPES = {"body.0.weight": (16, 12), "body.0.bias": (16,), "body.2.weight": (8, 16), "body.2.bias": (8,),
          "head.weight": (3, 8), "head.bias": (3,)}
NAMES = list(SHAPES)
BYTES = {name: 4 * (shape[0] * (shape[1] if len(shape) > 1 else 1)) for name, shape in SHAPES.items()}
# not neighbours in the backward order (head first, body.0 last): the merge hook's path
NON_ADJACENT = [["head.weight", "body.0.weight", "body.0.bias"], ["head.bias", "body.2.weight", "body.2.bias"]]
# runs of the order the gradients become ready (a linear layer's bias before its weight, the head first)
CONTIGUOUS = [["head.bias", "head.weight", "body.2.bias"], ["body.2.weight", "body.0.bias", "body.0.weight"]]

SCRIPT = textwrap.dedent("""
    import os, sys, hashlib
    import torch, torch.distributed as dist, torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel
    import ddlsim.capture
    from own_net import Net

    def train(rank, out, plan_path):
        torch.manual_seed(0)
        model = Net()
        plan = None
        if plan_path == "-":
            ddp = DistributedDataParallel(model, bucket_cap_mb=25)
        else:
            x0, y0 = torch.randn(2, 12), torch.randint(0, 3, (2,))
            plan = ddlsim.capture.plan_for(model, plan_path, loss=lambda m: torch.nn.functional.cross_entropy(m(x0), y0))
            ddp = DistributedDataParallel(model, **plan.ddp_kwargs)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        rec = ddlsim.capture.attach(ddp, out, plan=plan)
        g = torch.Generator().manual_seed(rank)
        for _ in range(4):
            x, y = torch.randn(5, 12, generator=g), torch.randint(0, 3, (5,), generator=g)
            with rec.iteration():
                opt.zero_grad()
                torch.nn.functional.cross_entropy(ddp(x), y).backward()
                with rec.optimizer_step():
                    opt.step()
        rec.close(measure=False)
        if rank == 0:
            digest = hashlib.sha256()
            for name, p in model.named_parameters():
                digest.update(name.encode() + p.detach().numpy().tobytes())
            with open(out + ".sha", "w") as f:
                f.write(digest.hexdigest())

    def rank_main(rank, port, jobs):
        os.environ.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo")
        for out, plan_path in jobs:  # one training run (its own model, DDP and recorder) after the other
            train(rank, out, plan_path)
        dist.destroy_process_group()

    if __name__ == "__main__":
        torch.set_num_threads(1)
        # ARGV: PORT OUT PLAN [OUT PLAN ...] (PLAN "-": plain DDP)
        mp.spawn(rank_main, args=(sys.argv[1], list(zip(sys.argv[2::2], sys.argv[3::2]))), nprocs=2)
""")


def _plan(groups, *, ddp_time=2.0, mg_time=1.0, cap=0.001, captured=None) -> dict:
    plan = {"ddlsim_plan": 1, "model": {"name": "Net"},
            "ddp": {"iteration_time_s": ddp_time, "bucket_cap_mb": cap, "parameter_order": NAMES},
            "mg_wfbp": {"iteration_time_s": mg_time, "plan": [{"tensors": g} for g in groups]},
            "baselines": {"ddp_default": {"iteration_time_s": 3.0}}}
    if captured is not None:
        plan["captured"] = {"iteration_time_s": captured}
    return plan


def _run(tmp: Path, jobs: dict[str, dict | None]) -> dict[str, tuple[Path, str]]:
    """The script run once, training each of `jobs` (name -> its plan; None: plain DDP) in turn: each name's
    capture directory and the sha256 of its trained weights."""
    args = [str(tmp / "train.py"), str(free_port())]
    (tmp / "train.py").write_text(SCRIPT)
    for name, plan in jobs.items():
        plan_path = "-"
        if plan is not None:
            plan_path = str(tmp / f"{name}.plan.json")
            Path(plan_path).write_text(json.dumps(plan))
        args += [str(tmp / name), plan_path]
    done = run_python(args, tmp, PYTHONPATH=f"{ROOT / 'python'}:{ROOT / 'tests'}")  # the ranks import own_net's Net
    assert done.returncode == 0, done.stderr[-3000:]
    return {name: (tmp / name, (tmp / f"{name}.sha").read_text()) for name in jobs}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    import shutil

    tmp = tmp_path_factory.mktemp("own-plan")
    done = _run(tmp, {"plain": None, "hook": _plan(NON_ADJACENT), "buckets": _plan(CONTIGUOUS, captured=2.5),
                      "ddp": _plan(CONTIGUOUS, ddp_time=0.5, cap=0.0005)})
    shutil.copytree(done["plain"][0], tmp / "plain-copy")
    return {**done, "plain-copy": (tmp / "plain-copy", done["plain"][1])}


def _all_reduced_groups(out: Path) -> list[list[str]]:
    """The tensors of each all-reduce the capture recorded after DDP's first iteration (its provisional bucket)."""
    log = read_event_log(out / "events.parquet")
    df = log.to_pandas()
    names = [p["name"] for p in log.metadata["parameters"]]
    groups = log.groups.to_pandas()
    coll = df[(df.kind == "collective") & (df.iteration >= 1)]
    seen = []
    for group, rows in coll.groupby("group"):
        tensors = sorted(names[t] for t in groups[groups.group == group].tensor)
        assert (rows.bytes == sum(BYTES[t] for t in tensors)).all()
        assert len(rows) == 2 * 3  # 2 ranks x iterations 1-3
        seen.append(tensors)
    return sorted(seen)


@pytest.mark.parametrize("case, groups, path", [("hook", NON_ADJACENT, "hook"), ("buckets", CONTIGUOUS, "ddp-buckets")])
def test_your_script_runs_the_merge_plan_exactly_and_trains_plain_ddps_weights(runs, case, groups, path):
    out, digest = runs[case]
    assert _all_reduced_groups(out) == sorted(sorted(g) for g in groups)
    assert digest == runs["plain"][1]
    meta = read_event_log(out / "events.parquet").metadata
    assert meta["plan"]["entry"] == "mg_wfbp" and meta["plan"]["path"] == path
    assert meta["plan"]["predicted_iteration_s"] == 1.0 and meta["plan"]["predicted_default_s"] == 3.0
    if path == "ddp-buckets":  # each bucket's cap is exactly its group's bytes, in DDP's bucket order
        assert meta["bucket_cap_mb_list"] == [sum(BYTES[t] for t in g) / 2**20 for g in CONTIGUOUS]
        assert meta["plan"]["predicted_captured_s"] == 2.5


def test_your_script_runs_the_ddp_entry_at_the_plans_cap(runs):
    out, digest = runs["ddp"]
    meta = read_event_log(out / "events.parquet").metadata
    assert meta["plan"]["entry"] == "ddp" and meta["plan"]["path"] == "ddp"
    assert meta["bucket_cap_mb"] == int(0.0005 * 2**20) / 2**20
    assert "bucket_cap_mb_list" not in meta
    assert digest == runs["plain"][1]


def test_the_report_compares_the_captures_means_with_the_plans_predictions(runs, tmp_path):
    before, after = runs["plain"][0], runs["buckets"][0]
    result = CliRunner().invoke(app, ["plan", "--apply", str(tmp_path / "rep"), "--before", str(before),
                                      "--after", str(after / "events.parquet"), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert json.loads((tmp_path / "rep" / "apply.json").read_text()) == report
    assert (tmp_path / "rep" / "apply.png").read_bytes().startswith(b"\x89PNG")
    means = {}
    for side, out in (("before", before), ("after", after)):
        log = read_event_log(out / "events.parquet")
        means[side] = iteration_mean(iteration_arrays(log), log.metadata)["mean_s"]
        assert report[side]["mean_s"] == means[side] and report["measured"][f"{side}_s"] == means[side]
    assert report["measured"]["gain"] == 1 - means["after"] / means["before"]
    # the plan was made "from a capture" (its captured entry, 2.5 s): that is the predicted before
    assert report["predicted"] == {"before_s": 2.5, "after_s": 1.0, "gain": 1 - 1.0 / 2.5, "ddp_default_s": 3.0}
    assert report["entry"] == "mg_wfbp" and report["path"] == "ddp-buckets" and report["same_weights"] is None
    assert sorted(map(sorted, report["after"]["groups"])) == sorted(sorted(g) for g in CONTIGUOUS)
    # two pairs (copies of the captures) from a comma-separated list; a plan made without a capture predicts
    # "before" as DDP's default
    import shutil

    shutil.copytree(before, tmp_path / "plain-2")
    shutil.copytree(runs["hook"][0], tmp_path / "hook-2")
    report = __import__("ddlsim").measure_plan(tmp_path / "rep2", before=f"{before},{tmp_path / 'plain-2'}",
                                               after=[runs["hook"][0], tmp_path / "hook-2"])
    assert report["repeats"] == 2 and report["predicted"]["before_s"] == 3.0
    assert report["predicted_before_from"].startswith("the plan's DDP default")
    assert report["measured"]["pair_gains"] == [1 - report["after"]["mean_s"] / report["before"]["mean_s"]] * 2
    # the copies keep their captures' start times: both pairs ran "before" first, and the report says what that does
    assert report["order_known"] and not report["alternated"]
    assert report["order"] == ["before 1", "before 2", "after 1", "after 2"] or \
        report["order"] == ["before 2", "before 1", "after 2", "after 1"]
    assert report["order_note"].startswith("every pair ran its before capture first")


def _with_start(source: Path, into: Path, started: int | None) -> Path:
    """A copy of the capture at `source` whose ranks started at `started` (unix ns; None: not recorded, as before)."""
    import shutil

    import pyarrow.parquet as pq

    shutil.copytree(source, into)
    table = pq.read_table(into / "events.parquet")
    meta = json.loads(table.schema.metadata[b"ddlsim.metadata"])
    for rank in meta["ranks"].values():
        if started is None:
            rank.pop("started_unix_ns")
        else:
            rank["started_unix_ns"] = started
    table = table.replace_schema_metadata({**table.schema.metadata, b"ddlsim.metadata": json.dumps(meta).encode()})
    pq.write_table(table, into / "events.parquet")
    return into


def test_the_report_orders_the_captures_as_they_ran_and_knows_an_alternated_order(runs, tmp_path):
    """Pair 1 ran before, after; pair 2 after, before (as plan --apply alternates them): no caveat. Captures that do
    not record when they started (made before 2026-11-29) leave the order unknown, and no caveat either."""
    import ddlsim

    t = 1_800_000_000 * 10**9
    b1, a1 = _with_start(runs["plain"][0], tmp_path / "b1", t), _with_start(runs["hook"][0], tmp_path / "a1", t + 10)
    a2, b2 = _with_start(runs["hook"][0], tmp_path / "a2", t + 20), _with_start(runs["plain"][0], tmp_path / "b2", t + 30)
    report = ddlsim.measure_plan(tmp_path / "rep", before=[b1, b2], after=[a1, a2])
    assert report["order"] == ["before 1", "after 1", "after 2", "before 2"]
    assert report["alternated"] and report["order_known"] and report["order_note"] is None
    old = [_with_start(runs[k][0], tmp_path / f"old-{k}", None) for k in ("plain", "hook")]
    report = ddlsim.measure_plan(tmp_path / "rep2", before=[old[0]], after=[old[1]])
    assert not report["order_known"] and report["order"] == ["before 1", "after 1"] and report["order_note"] is None


@pytest.mark.parametrize("args, message", [
    (lambda r, t: ["--before", str(r["plain"][0]), "--after", str(r["plain"][0])], "ran no plan"),
    (lambda r, t: ["--before", str(r["hook"][0]), "--after", str(r["hook"][0])], "ran a plan"),
    (lambda r, t: ["--before", f"{r['plain'][0]},{r['plain-copy'][0]}", "--after", str(r["hook"][0])],
     "one of each per pair"),
    (lambda r, t: ["--before", f"{r['plain'][0]},{r['plain-copy'][0]}", "--after", f"{r['hook'][0]},{r['ddp'][0]}"],
     "ran another plan"),
    (lambda r, t: ["--before", str(r["plain"][0]), "--after", f"{r['hook'][0]},{r['ddp'][0]}"], "one of each per pair"),
    (lambda r, t: ["--before", f"{r['plain'][0]},{r['plain'][0]}/events.parquet", "--after", str(r["hook"][0])],
     "named twice"),
    (lambda r, t: ["--before", str(t / "nothing"), "--after", str(r["hook"][0])], "no such capture"),
    (lambda r, t: ["--before", str(r["plain"][0])], "give both"),
    (lambda r, t: ["--before", str(r["plain"][0]), "--after", str(r["hook"][0]), "--model", "lenet5"], "leave out --model"),
])
def test_bad_comparisons_are_one_line_errors_that_write_nothing(runs, tmp_path, args, message):
    out = tmp_path / "rep"
    result = CliRunner().invoke(app, ["plan", "--apply", str(out), *args(runs, tmp_path)])
    assert result.exit_code != 0 and isinstance(result.exception, DdlsimError), result.output
    assert message in str(result.exception) and "\n" not in str(result.exception)
    assert not out.exists()


def test_a_report_directory_that_holds_something_is_refused(runs, tmp_path):
    (tmp_path / "rep").mkdir()
    (tmp_path / "rep" / "mine.txt").write_text("keep")
    with pytest.raises(DdlsimError, match="not an empty directory"):
        __import__("ddlsim").measure_plan(tmp_path / "rep", before=[runs["plain"][0]], after=[runs["hook"][0]])
    assert [p.name for p in (tmp_path / "rep").iterdir()] == ["mine.txt"]


def test_plan_for_refuses_a_plan_for_another_model_a_frozen_parameter_and_bad_arguments(tmp_path):
    plan = _plan(CONTIGUOUS)
    wrong = {**plan, "ddp": {**plan["ddp"], "parameter_order": ["body.0.weight", "other"]}}
    with pytest.raises(DdlsimError, match=r"parameter 1 is 'other'; this module's is 'body.0.bias'"):
        plan_for(Net(), wrong)
    frozen = Net()
    frozen.head.bias.requires_grad_(False)
    with pytest.raises(DdlsimError, match="'head.bias' does not require grad"):
        plan_for(frozen, {**plan, "ddp": {**plan["ddp"], "parameter_order": None}})
    with pytest.raises(DdlsimError, match="entry 'fast'"):
        plan_for(Net(), plan, entry="fast")
    with pytest.raises(DdlsimError, match="must be a torch.nn.Module"):
        plan_for("Net", plan)
    with pytest.raises(DdlsimError, match="loss must be a function"):
        plan_for(Net(), plan, loss=3)
    with pytest.raises(DdlsimError, match="must return a scalar tensor"):
        plan_for(Net(), plan, loss=lambda m: m(torch.randn(2, 12)))
    with pytest.raises(DdlsimError, match="no such file"):
        plan_for(Net(), tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(DdlsimError, match="not a readable JSON plan"):
        plan_for(Net(), tmp_path / "bad.json")


def test_without_a_loss_a_contiguous_merge_plan_takes_the_hook_and_says_why():
    """The order the gradients become ready is not known without loss=: the hook path (which the captures above show
    running the plan's groups exactly), and the reason says how to learn the order."""
    got = plan_for(Net(), _plan(CONTIGUOUS))
    assert got.path == "hook" and got.ddp_kwargs == {"bucket_cap_mb": 1 / 2**20}
    assert sorted(map(sorted, got.merge_groups)) == sorted(sorted(NAMES.index(t) for t in g) for g in CONTIGUOUS)
    assert "give plan_for a loss= to learn it" in got.facts["why"]


def test_plan_for_leaves_the_models_own_gradients_alone():
    """The backward pass that learns the ready order runs on a copy."""
    net = Net()
    got = plan_for(net, _plan(CONTIGUOUS), loss=lambda m: m(torch.randn(2, 12)).sum())
    assert got.path == "ddp-buckets" and all(p.grad is None for p in net.parameters())
    assert got.ddp_kwargs == {"bucket_cap_mb": max(got.ddp_kwargs["bucket_cap_mb_list"]),
                              "bucket_cap_mb_list": [sum(BYTES[t] for t in g) / 2**20 for g in CONTIGUOUS]}


def test_attach_refuses_a_ddp_model_not_built_with_the_plans_arguments(tmp_path):
    script = textwrap.dedent(f"""
        import os, torch, torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        import ddlsim.capture
        from ddlsim.errors import DdlsimError
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
        dist.init_process_group("gloo", rank=0, world_size=1)
        model = torch.nn.Linear(4, 2)
        plan = ddlsim.capture.plan_for(model, {{"ddlsim_plan": 1, "model": {{}},
            "ddp": {{"iteration_time_s": 1.0, "bucket_cap_mb": 0.5}},
            "mg_wfbp": {{"iteration_time_s": 2.0, "plan": [{{"tensors": ["weight", "bias"]}}]}}}})
        for ddp, what in ((DistributedDataParallel(model), "bucket_bytes_cap"), ("plan", "plan must be")):
            try:
                ddlsim.capture.attach(ddp if ddp != "plan" else DistributedDataParallel(model, **plan.ddp_kwargs),
                                      {str(tmp_path / "x")!r}, plan=plan if ddp != "plan" else "plan.json")
            except DdlsimError as exc:
                assert what in str(exc), str(exc)
                print("refused:", exc)
            else:
                raise SystemExit("not refused")
        dist.destroy_process_group()
    """)
    done = run_python(["-c", script], tmp_path, timeout=120, PORT=str(free_port()))
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout
    assert done.stdout.count("refused:") == 2


def test_plan_for_takes_make_plans_plan_as_it_takes_its_file(tmp_path):
    import ddlsim

    plan = ddlsim.make_plan(model="lenet5", workers=2)
    plan.save(tmp_path / "plan.json")
    from ddlsim.capture.ddp_models import build_model

    model = build_model("lenet5")
    from_object, from_file = plan_for(model, plan), plan_for(model, tmp_path / "plan.json")
    assert (from_object.entry, from_object.path, from_object.ddp_kwargs, from_object.merge_groups) == \
        (from_file.entry, from_file.path, from_file.ddp_kwargs, from_file.merge_groups)
    assert from_object.facts["predicted_iteration_s"] == from_file.facts["predicted_iteration_s"]


@pytest.mark.parametrize("change, message", [
    (lambda m: m.update(plan="mg_wfbp"), "field 'plan'"),
    (lambda m: m["plan"].update(predicted_iteration_s="1.0"), "field 'plan.predicted_iteration_s'"),
    (lambda m: m["plan"].update(predicted_captured_s=0.0), "field 'plan.predicted_captured_s'"),
    (lambda m: m["plan"].pop("entry"), "does not say which entry ran"),
    (lambda m: m.update(bucket_cap_mb_list=[0.1, "x"]), "field 'bucket_cap_mb_list.1'"),
])
def test_a_damaged_plan_record_in_an_after_capture_is_a_one_line_error(runs, tmp_path, change, message):
    """The report reads the after capture's plan facts: a damaged one (a string for a time, a zero) is refused with
    its field named, not a traceback in the report's arithmetic or its figure."""
    import shutil

    import pyarrow.parquet as pq

    copy = tmp_path / "after"
    shutil.copytree(runs["buckets"][0], copy)
    table = pq.read_table(copy / "events.parquet")
    meta = json.loads(table.schema.metadata[b"ddlsim.metadata"])
    change(meta)
    table = table.replace_schema_metadata({**table.schema.metadata, b"ddlsim.metadata": json.dumps(meta).encode()})
    pq.write_table(table, copy / "events.parquet")
    with pytest.raises(DdlsimError, match=message.replace(".", r"\.")) as caught:
        __import__("ddlsim").measure_plan(tmp_path / "rep", before=[runs["plain"][0]], after=[copy])
    assert "\n" not in str(caught.value) and not (tmp_path / "rep").exists()


def test_an_after_capture_whose_buckets_name_a_tensor_it_lacks_reports_no_groups(runs, tmp_path):
    """A bucket table that names tensor 99 of 6 (a damaged log) stopped the report with an IndexError; the
    report's groups are then unknown, and the rest stands."""
    import shutil

    import pyarrow.parquet as pq

    copy = tmp_path / "after"
    shutil.copytree(runs["buckets"][0], copy)
    table = pq.read_table(copy / "events.parquet")
    meta = json.loads(table.schema.metadata[b"ddlsim.metadata"])
    meta["buckets"][0]["tensors"] = [99]
    table = table.replace_schema_metadata({**table.schema.metadata, b"ddlsim.metadata": json.dumps(meta).encode()})
    pq.write_table(table, copy / "events.parquet")
    report = __import__("ddlsim").measure_plan(tmp_path / "rep", before=[runs["plain"][0]], after=[copy])
    assert report["after"]["groups"] is None and report["predicted"]["after_s"] == 1.0


def test_a_report_that_cannot_be_written_leaves_no_directory_behind(runs, tmp_path, monkeypatch):
    """Ctrl-C (or a failing write) while the report is written: no apply.json, no apply.png, and the directory this
    call made is gone (its parent kept)."""
    import ddlsim.plan.apply as apply_module

    def interrupted(target, report):
        raise KeyboardInterrupt

    monkeypatch.setattr(apply_module, "plot_pairs", lambda report, target: interrupted(target, report))
    with pytest.raises(KeyboardInterrupt):
        apply_module.measure_plan(tmp_path / "rep", before=[runs["plain"][0]], after=[runs["hook"][0]])
    assert list(tmp_path.iterdir()) == []
