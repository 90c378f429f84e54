"""Every override of the Python API (`ddlsim.simulate(KEY=VALUE)`) given a value of the wrong kind or out of range
either runs or is refused with ddlsim's own error (a `DdlsimError` naming the field), never a TypeError or
ValueError from inside. Seeded: a sample of the keys x values each run, all of them over the seeds.
Found by this test when it was written: `strategy=-1` (and any value that is neither a kind nor a dict) raised
"TypeError: 'int' object is not iterable"."""

from __future__ import annotations

import random

import pytest

import ddlsim
from ddlsim.errors import DdlsimError
from ddlsim.simulation.scenario import FLAT_KEYS, PACKET_KEYS

KEYS = sorted(set(FLAT_KEYS) | set(PACKET_KEYS) | {"workers", "iterations", "seed", "jitter", "barrier", "stagger",
                                                   "trace_detail", "straggler", "background", "rank_classes"})
VALUES = ["abc", -1, 0, float("inf"), float("nan"), [], {}, 10**30, "", " ", [1, 2], {"x": 1}, -0.5, "1e400"]
BASE = dict(model="lenet5", workers=2, iterations=1, network="analytic")


@pytest.mark.parametrize("seed", range(4))
def test_a_bad_override_is_refused_as_ddlsim_s_own_error(seed):
    rng = random.Random(seed)
    pairs = [(k, v) for k in KEYS for v in VALUES]
    rng.shuffle(pairs)
    for key, value in pairs[seed::4]:  # a quarter each: every pair over the four seeds
        kwargs = {**BASE, key: value}
        if key in PACKET_KEYS:
            kwargs["network"] = "packet"
        try:
            ddlsim.simulate(**kwargs)
        except DdlsimError:
            pass
        except Exception as exc:  # noqa: BLE001 - the test is that none escapes
            pytest.fail(f"simulate({key}={value!r}) raised {type(exc).__name__}: {exc}")


def test_a_strategy_that_is_neither_a_kind_nor_a_section_is_named():
    from ddlsim.errors import ScenarioError

    with pytest.raises(ScenarioError, match=r"field 'strategy': give a kind \("):
        ddlsim.simulate(model="lenet5", workers=2, strategy=-1)


def test_an_empty_list_of_speedup_kinds_is_refused_as_such():
    from ddlsim.errors import ScenarioError

    with pytest.raises(ScenarioError, match=r"field 'model.speedup_kinds': List should have at least 1 item"):
        ddlsim.simulate(model="lenet5", workers=2, compute_speedup=2.0, speedup_kinds=[])
