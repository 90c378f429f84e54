"""`ddlsim capture merge` of a capture whose facts files are damaged or hand-edited (found by tools/fuzz_readers.py's
``merge`` target, which changes a real capture's rank files, DDP facts files and job.json): before, a bucket's
offset given as 1.5, infinity or a string, a layout's buckets as a number, a PS job.json's server count as
infinity, NaN or 2^32, its seed as text, or a job.json that is a list escaped as OverflowError, ValueError,
TypeError, KeyError or AttributeError. Each is now one line naming the file and the field; without torch (the
files are written here as the capture's ranks write them)."""

from __future__ import annotations

import json
from pathlib import Path

import forked_cli
import pytest

from ddlsim.capture import RankRecorder, now_ns
from ddlsim.cli.capture_command import merge_directory
from ddlsim.errors import DdlsimError, TraceError
from ddlsim.trace import read_event_log, write_event_log

ROOT = Path(__file__).resolve().parent.parent


def ddp_capture(directory: Path) -> dict:
    """Two DDP ranks' rows (a forward, a backward, one all-reduce each) and rank 0's facts file, as ddp.py writes it."""
    t = now_ns()
    for rank in (0, 1):
        rec = RankRecorder(directory, rank, "worker")
        f = rec.row("compute", "forward", t, t + 100, deps=[], iteration=0, name="fc")
        b = rec.row("compute", "backward", t + 100, t + 300, deps=[f], iteration=0, name="fc")
        rec.row("collective", "allreduce", t + 300, t + 500, deps=[b], iteration=0, bytes=48, coll_type="allreduce",
                collective=0, group=0)
        rec.close()
    facts = {"job": {"job": "ddp", "model": "tiny", "workers": 2, "iterations": 1, "backend": "gloo",
                     "gamma_ns_per_byte": 0.02},
             "parameters": [{"name": "fc.weight", "elements": 8, "bytes": 32}, {"name": "fc.bias", "elements": 4, "bytes": 16}],
             "layers": ["fc"],
             "layouts": [{"from_iteration": 0, "buckets": [{"bucket": 0, "group": 0, "tensors": [1, 0],
                                                             "offsets": [0, 4], "tensor_bytes": [16, 32], "bytes": 48}]}]}
    (directory / "0.ddp.json").write_text(json.dumps(facts), encoding="utf-8")
    return facts


def ps_capture(directory: Path, job: object) -> None:
    t = now_ns()
    worker, server = RankRecorder(directory, 0, "worker"), RankRecorder(directory, 1, "server")
    m = worker.new_message()
    worker.row("send", "push_request", t, t + 10, deps=[], peer=1, message=m, bytes=64, rpc=7, iteration=0, tensor=3)
    server.row("recv", "push_request", t + 5, t + 20, deps=[], peer=0, message=m, bytes=64, rpc=7, iteration=0, tensor=3)
    worker.close()
    server.close()
    (directory / "job.json").write_text(json.dumps(job), encoding="utf-8")


PS_JOB = {"job": "ps", "world_size": 2, "model": "lenet5", "workers": 1, "servers": 1, "iterations": 1,
          "batch_size": 16, "sync": True, "lr": 0.1, "seed": 0}


def test_intact_facts_merge_into_a_log_ddlsim_reads(tmp_path):
    ddp_capture(tmp_path / "ddp")
    write_event_log(merge_directory(tmp_path / "ddp"), tmp_path / "ddp.parquet")
    log = read_event_log(tmp_path / "ddp.parquet")
    assert log.metadata["job"] == "ddp" and log.metadata["buckets"][0]["tensors"] == [1, 0]
    assert sorted(log.groups.to_pandas().offset) == [0, 4]
    ps_capture(tmp_path / "ps", PS_JOB)
    log = merge_directory(tmp_path / "ps")
    assert log.metadata["job"] == "ps" and log.metadata["servers"] == 1


@pytest.mark.parametrize("change, field", [
    (lambda f: f["layouts"][0]["buckets"][0]["offsets"].__setitem__(1, 1.5), "layouts.0.buckets.0.offsets.1"),  # OverflowError-kin
    (lambda f: f["layouts"][0]["buckets"][0]["offsets"].__setitem__(1, float("inf")), "layouts.0.buckets.0.offsets.1"),
    (lambda f: f["layouts"][0]["buckets"][0]["tensor_bytes"].__setitem__(0, "fc1"), "layouts.0.buckets.0.tensor_bytes.0"),
    (lambda f: f["layouts"][0].__setitem__("buckets", 1e30), "layouts.0.buckets"),  # TypeError before
    (lambda f: f["layouts"][0]["buckets"][0].pop("group"), "layouts.0.buckets.0.group"),  # KeyError before
    (lambda f: f["layouts"][0]["buckets"][0].pop("bytes"), "layouts.0.buckets.0.bytes"),  # KeyError (seed 12)
    (lambda f: f["layouts"][0]["buckets"][0].__setitem__("group", {}), "layouts.0.buckets.0.group"),
    (lambda f: f["job"].__setitem__("gamma_ns_per_byte", "0.02"), "job.gamma_ns_per_byte"),  # merged, then unreadable
    (lambda f: f["parameters"][0].__setitem__("bytes", -32), "parameters.0.bytes"),
])
def test_a_wrong_fact_in_rank_0s_facts_file_is_refused_naming_the_file_and_field(tmp_path, change, field):
    facts = ddp_capture(tmp_path)
    change(facts)
    (tmp_path / "0.ddp.json").write_text(json.dumps(facts), encoding="utf-8")
    with pytest.raises(TraceError) as caught:
        merge_directory(tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / '0.ddp.json'}: the DDP capture facts' field '{field}': ")
    assert message.endswith("capture again, or delete it to merge without the bucket table") and "\n" not in message


def test_a_wrong_fact_in_a_later_ranks_facts_file_leaves_that_file_out(tmp_path):
    facts = ddp_capture(tmp_path)
    bad = json.loads(json.dumps(facts))
    bad["layouts"][0]["buckets"][0]["offsets"] = [0, None]
    (tmp_path / "1.ddp.json").write_text(json.dumps(bad), encoding="utf-8")
    log = merge_directory(tmp_path)  # rank 0's facts make the bucket table, as with an unreadable later file
    assert log.metadata["buckets"][0]["tensors"] == [1, 0]


@pytest.mark.parametrize("job, fragment", [
    ({**PS_JOB, "servers": float("inf")}, "servers = inf; give a whole number"),  # OverflowError before
    ({**PS_JOB, "servers": 2**32}, "servers = 4294967296; give a whole number of magnitude below 2^31"),
    ({**PS_JOB, "iterations": float("nan")}, "iterations = nan"),  # ValueError before
    ({**PS_JOB, "seed": "\u00e9"}, "seed = 'é'"),  # ValueError in metadata() before
    ({**PS_JOB, "sync": "x"}, "sync = 'x'; give true or false (e.g. true)"),
    ({**PS_JOB, "workers": [[2]]}, "workers = [[2]]"),  # TypeError before
    ([PS_JOB], "not a job description (a JSON object"),  # AttributeError before
])
def test_a_wrong_ps_job_description_is_refused_naming_job_json(tmp_path, job, fragment):
    ps_capture(tmp_path, job)
    with pytest.raises(DdlsimError) as caught:
        merge_directory(tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'job.json'}: ") and fragment in message and "\n" not in message


def test_the_command_refuses_it_in_one_line_with_status_2_and_writes_no_log(tmp_path):
    facts = ddp_capture(tmp_path)
    facts["layouts"][0]["buckets"][0]["offsets"][1] = 1.5
    (tmp_path / "0.ddp.json").write_text(json.dumps(facts), encoding="utf-8")
    run = forked_cli.run(["capture", "merge", str(tmp_path)], timeout=120, env={"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr
    assert "layouts.0.buckets.0.offsets.1" in run.stderr and not (tmp_path / "events.parquet").exists()
