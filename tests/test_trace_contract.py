"""The engine and the trace schema agree on the vocabulary."""

from ddlsim import _core
from ddlsim.trace.schema import KINDS


def test_engine_kinds_are_the_schema_kinds_in_code_order():
    # the engine's kind codes index KINDS, so (codes, KINDS) is a valid dictionary pair
    assert tuple(_core.KIND_NAMES) == KINDS
