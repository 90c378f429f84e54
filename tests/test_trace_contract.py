"""The engine and the trace schema agree on the vocabulary."""

from ddlsim import _core
from ddlsim.trace.schema import KINDS


def test_the_engine_and_the_schema_share_one_kind_vocabulary():
    assert tuple(_core.KIND_NAMES) == tuple(KINDS)


def test_every_simulated_log_is_a_valid_v2_log_with_send_recv_pairs(resnet_runs):
    from ddlsim.trace import validate_event_log

    for run in resnet_runs.values():
        log = validate_event_log(run.events.table, source="simulated run")
        kind, message = log.column("kind"), log.column("message")
        sends, recvs = message[kind == "send"], message[kind == "recv"]
        assert sorted(sends.tolist()) == sorted(recvs.tolist()) and len(sends) > 0
