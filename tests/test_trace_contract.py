"""The engine and the trace schema agree: vocabulary, and every log the
engine emits is a valid schema v2 event log when handed over as raw columns
(codes + dictionaries, CSR deps), the way the simulate bridge does."""

import numpy as np
import pytest

from ddlsim import _core
from ddlsim.analyze import iteration_table, rpc_table
from ddlsim.trace import KINDS, event_log_from_arrays


def test_engine_kinds_are_the_schema_kinds_in_code_order():
    # the engine's kind codes index KINDS, so (codes, KINDS) is a valid dictionary pair
    assert tuple(_core.KIND_NAMES) == KINDS


def engine_log(**overrides):
    # the engine's input documents, as ddlsim.simulation.run builds them
    from ddlsim.simulation.run import _resolve
    from ddlsim.simulation.lowering import engine_json, network_document, resolve_trace_detail, training_document
    from ddlsim.simulation.model_build import build_model, layer_times_ns

    sc = _resolve(None, overrides)
    model = build_model(sc.model, sc.base_dir)
    training = training_document(sc, model, layer_times_ns(model, sc.model))
    detail = resolve_trace_detail(sc, [g["bytes"] for g in training["groups"]])
    out = _core.simulate_training_json(engine_json(training), engine_json(network_document(sc)), detail)
    raw = {name: np.frombuffer(data, dtype=np.dtype(dtype)) for name, (dtype, data) in out["columns"].items()}
    names = ("id", "iteration", "rank", "layer", "tensor", "group", "peer", "message", "bytes", "priority",
             "tenant", "collective", "step", "rpc", "ready_ns", "start_ns", "end_ns")
    columns = {name: raw[name] for name in names}
    columns["kind"] = (raw["kind_code"], list(_core.KIND_NAMES))
    columns["op"] = (raw["op_code"], list(out["op_names"]))
    columns["role"] = ((raw["rank"] >= sc.workers).astype(np.int8), ["worker", "server"])
    return event_log_from_arrays(columns, deps_offsets=raw["dep_offsets"], deps_values=raw["deps"],
                                 source=f"engine log {overrides}")


@pytest.mark.parametrize(
    "overrides",
    [
        dict(strategy="ring", trace_detail="step", jitter=0.1, seed=3),
        dict(strategy="ring", algorithm="halving-doubling", trace_detail="step"),
        dict(strategy="ring", trace_detail="collective"),
        dict(strategy="ring", trace_detail="step", stream_policy="priority", preemption="chunk"),
        dict(strategy="ps", servers=2, jitter=0.2, seed=5),
        dict(strategy="ps", servers=1, fidelity="analytic", topology="leaf-spine"),
    ],
)
def test_every_engine_log_is_a_valid_v2_log(overrides):
    log = engine_log(model="resnet50", workers=4, iterations=2, **overrides)  # validated, causality included
    kinds = set(log.column("kind"))
    assert {"compute", "send", "recv"} <= kinds or "collective" in kinds
    assert len(iteration_table(log)) == 2
    rpcs = rpc_table(log)
    if overrides["strategy"] == "ps":
        assert len(rpcs) and rpcs["n_tx_ns"].notna().all()
        total = rpcs["n_tx_ns"] + rpcs["ps_queue_ns"] + rpcs["ps_proc_ns"] + rpcs["w_queue_ns"] + rpcs["w_proc_ns"]
        assert (total == rpcs["total_ns"]).all()
    else:
        assert rpcs.empty
