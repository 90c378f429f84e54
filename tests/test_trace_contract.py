"""The engine and the trace schema agree on the vocabulary."""

from ddlsim import _core
from ddlsim.trace.schema import KINDS


def test_engine_kinds_are_the_schema_kinds_in_code_order():
    # the engine's kind codes index KINDS, so (codes, KINDS) is a valid dictionary pair
    assert tuple(_core.KIND_NAMES) == KINDS


def test_every_simulated_log_is_a_valid_v2_log_with_send_recv_pairs(resnet_runs):
    from ddlsim.trace import validate_event_log

    for run in resnet_runs.values():
        log = validate_event_log(run.events.table, source="simulated run")
        kind, message = log.column("kind"), log.column("message")
        sends, recvs = message[kind == "send"], message[kind == "recv"]
        assert sorted(sends.tolist()) == sorted(recvs.tolist()) and len(sends) > 0
