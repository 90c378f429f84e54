"""Typed engine errors: the core's error kinds arrive as distinct Python
exception classes (`ddlsim._core.ERROR_KINDS`), which ddlsim maps to its
own classes without reading the message; `_core.pyi` types every export."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import ddlsim
from ddlsim import _core
from ddlsim.errors import InternalError, ResourceError, ScenarioError, from_engine_error

STUBS = Path(ddlsim.__file__).with_name("_core.pyi")


def graph(ops: list[dict], deps: list[list[int]], ranks: int = 2) -> dict:
    """Graph columns with no collective and no stream (the layout of src/lib.rs)."""
    def col(dtype, values):
        import numpy as np
        return (dtype, np.asarray(values, dtype=np.dtype(dtype)).tobytes())
    fields = {"kind": "u1", "name": "<u4", "rank": "<u4", "peer": "<i4", "stream": "<u4", "duration": "<u8", "bytes": "<u8",
              "priority": "<i4", "band": "u1", "tenant": "<u4", "iteration": "<i4", "layer": "<i4", "tensor": "<i4",
              "group": "<i4", "collective": "<i8", "member": "<u4", "rpc": "<i8"}
    default = {"peer": -1, "stream": 2**32 - 1, "duration": 0, "bytes": 0, "priority": 0, "band": 0, "tenant": 0,
               "iteration": -1, "layer": -1, "tensor": -1, "group": -1, "collective": -1, "member": 0, "rpc": -1, "name": 0, "rank": 0}
    g = {k: col(t, [op.get(k, default.get(k)) for op in ops]) for k, t in fields.items()}
    offsets = [0]
    for d in deps:
        offsets.append(offsets[-1] + len(d))
    g.update(dep_offsets=col("<u4", offsets), deps=col("<u4", [x for d in deps for x in d]),
             coll_algorithm=col("u1", []), coll_bytes=col("<u8", []), coll_member_offsets=col("<u4", [0]), coll_members=col("<u4", []),
             stream_rank=col("<u4", []), stream_name=col("<u4", []), stream_policy=col("u1", []),
             host_of_rank=col("<u4", list(range(ranks))), op_names=["op"], stream_names=[])
    return g


NET = ('{"fidelity": "flow", "bandwidth_bps": 1000.0, "latency_ns": 1000, "topology": {"kind": "star"}, '
       '"intra_host_bandwidth_bps": null, "intra_host_latency_ns": 0, "record_flows": false}')


def test_every_kind_has_its_own_class_under_engine_error_and_its_old_builtin():
    kinds = _core.ERROR_KINDS
    assert set(kinds) == {"bad_input", "out_of_range", "stuck", "memory", "interrupted", "internal"}
    assert len(set(kinds.values())) == len(kinds)
    for name, cls in kinds.items():
        assert issubclass(cls, _core.EngineError) and cls.kind == name
    assert issubclass(kinds["bad_input"], ValueError) and issubclass(kinds["out_of_range"], ValueError)
    assert issubclass(kinds["memory"], MemoryError) and issubclass(kinds["internal"], RuntimeError)


def test_bad_input_is_a_scenario_error():
    with pytest.raises(_core.BadInputError) as caught:
        _core.run_graph_columns(graph([{"kind": 1, "peer": 0}], [[]]), NET, "step")  # a transfer to itself
    assert type(caught.value) is _core.BadInputError
    assert isinstance(from_engine_error(caught.value), ScenarioError)
    with pytest.raises(_core.BadInputError):
        _core.simulate_training_json("{", NET, "step")


def test_a_transfer_past_the_clock_is_out_of_range_not_a_bug():
    # 10^15 bytes at 1 kbit/s end after the engine's 146-year clock: "would end after" was an InternalError before.
    with pytest.raises(_core.OutOfRangeError) as caught:
        _core.run_graph_columns(graph([{"kind": 1, "peer": 1, "bytes": 10**15}], [[]]), NET, "step")
    assert "146 years" in str(caught.value)
    assert isinstance(from_engine_error(caught.value), ScenarioError)


def test_a_scenario_past_the_clock_is_a_scenario_error_end_to_end():
    scenario = {"model": {"name": "huge", "layers": [{"name": "l0", "params": 10**15, "fwd_ms": 0.01, "bwd_ms": 0.01}]},
                "iterations": 1, "workers": 2, "trace_detail": "collective", "strategy": {"kind": "ps"},
                "network": {"fidelity": "flow", "bandwidth": "1Kbps", "latency": "1us"}}
    with pytest.raises(ScenarioError, match="would end after") as caught:
        ddlsim.simulate(scenario)
    assert not isinstance(caught.value, InternalError)


def test_a_graph_that_cannot_finish_is_stuck():
    cycle = graph([{"kind": 0, "duration": 5}, {"kind": 0, "duration": 5}], [[1], [0]])
    with pytest.raises(_core.StuckGraphError, match="cannot finish") as caught:
        _core.run_graph_columns(cycle, NET, "step")
    assert isinstance(from_engine_error(caught.value), ScenarioError)


@pytest.mark.parametrize("kind, expected", [
    ("bad_input", ScenarioError), ("out_of_range", ScenarioError), ("stuck", ScenarioError),
    ("memory", ResourceError), ("interrupted", KeyboardInterrupt), ("internal", InternalError),
])
def test_each_kind_maps_to_its_ddlsim_class_whatever_the_message(kind, expected):
    # The message says the opposite of the kind: the class decides, not a substring.
    exc = _core.ERROR_KINDS[kind]("simulated time would overflow; internal error")
    mapped = from_engine_error(exc)
    assert type(mapped) is expected


def test_a_rust_panic_or_other_exception_is_an_internal_error():
    mapped = from_engine_error(RuntimeError("boom"), lambda: "/tmp/x.json")
    assert isinstance(mapped, InternalError) and mapped.scenario_path == "/tmp/x.json"


def test_the_stubs_type_every_export_of_the_extension():
    tree = ast.parse(STUBS.read_text())
    stubbed = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    stubbed |= {t.id for n in tree.body if isinstance(n, ast.AnnAssign) for t in [n.target] if isinstance(t, ast.Name)}
    exported = {name for name in dir(_core) if not name.startswith("_")} | {"__version__"}
    assert exported - stubbed == set(), "exports without a stub"
    assert stubbed - exported - {"Column", "ProgressCallback"} == set(), "stubs of nothing"
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            assert node.returns is not None and all(a.annotation is not None for a in node.args.args), node.name
            real = inspect.signature(getattr(_core, node.name))
            assert [a.arg for a in node.args.args] == list(real.parameters), node.name
