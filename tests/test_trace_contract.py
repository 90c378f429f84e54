"""The engine and the trace schema agree on the vocabulary."""

from ddlsim import _core
from ddlsim.simulation.run import _V1_KIND
from ddlsim.trace.schema import KINDS


def test_every_engine_kind_maps_onto_a_schema_kind():
    # recv rows fold into their message's transfer row
    assert set(_core.KIND_NAMES) == set(_V1_KIND) | {"recv"}
    assert set(_V1_KIND.values()) <= set(KINDS)


def test_every_op_a_training_run_logs_is_a_schema_op(resnet_runs):
    from ddlsim.trace.schema import OPS_BY_KIND

    for run in resnet_runs.values():
        for kind, op in run.events[["kind", "op"]].drop_duplicates().itertuples(index=False):
            assert op in OPS_BY_KIND[kind], (kind, op)
