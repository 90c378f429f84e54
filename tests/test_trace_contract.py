"""The engine and the trace schema agree on the vocabulary."""

from ddlsim import _core
from ddlsim.trace.schema import KINDS, OPS_BY_KIND


def test_engine_op_and_kind_names_are_the_schema_ones():
    assert tuple(_core.KIND_NAMES) == KINDS
    assert set(_core.OP_NAMES) == {op for ops in OPS_BY_KIND.values() for op in ops}
