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


NUMBERS = [-1, 0, float("inf"), float("nan"), 10**30, -0.5, 0.5, 2.5, True, "3", None]
ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


def _calls(value):
    plan = {"model": {"name": "lenet5"}, "workers": 2, "network": {"fidelity": "analytic"}}
    jobs = ROOT / "examples" / "jobs" / "offsets.toml"
    return {
        "synthetic_model(layers)": lambda: ddlsim.synthetic_model(layers=value),
        "synthetic_model(model_size_bytes)": lambda: ddlsim.synthetic_model(model_size_bytes=value),
        "synthetic_model(compute_s)": lambda: ddlsim.synthetic_model(compute_s=value),
        "synthetic_model(forward_share)": lambda: ddlsim.synthetic_model(forward_share=value),
        "synthetic_model(first_to_last_forward)": lambda: ddlsim.synthetic_model(first_to_last_forward=value),
        "synthetic_model(dtype_bytes)": lambda: ddlsim.synthetic_model(dtype_bytes=value),
        "thesis_simulator_model(layers)": lambda: ddlsim.thesis_simulator_model(layers=value),
        "thesis_simulator_model(model_size_bytes)": lambda: ddlsim.thesis_simulator_model(model_size_bytes=value),
        "thesis_simulator_model(compute_s)": lambda: ddlsim.thesis_simulator_model(compute_s=value),
        "make_plan(bucket_caps_mb)": lambda: ddlsim.make_plan(plan, bucket_caps_mb=[value], slice_bytes=(), credit_bytes=()),
        "make_plan(slice_bytes)": lambda: ddlsim.make_plan(plan, bucket_caps_mb=[25], slice_bytes=[value], credit_bytes=()),
        "make_plan(credit_bytes)": lambda: ddlsim.make_plan(plan, bucket_caps_mb=[25], slice_bytes=(), credit_bytes=[value]),
        "make_jobs_plan(grid_ns)": lambda: ddlsim.make_jobs_plan(jobs, groupings="keep", grid_ns=value, max_cells=64),
        "make_jobs_plan(max_cells)": lambda: ddlsim.make_jobs_plan(jobs, groupings="keep", max_cells=value),
        "make_jobs_plan(restarts)": lambda: ddlsim.make_jobs_plan(jobs, groupings="keep", max_cells=64, restarts=value),
    }


@pytest.mark.parametrize("value", NUMBERS, ids=repr)
def test_the_api_s_numeric_arguments_are_checked_before_any_arithmetic(value):
    # before: synthetic_model(model_size_bytes=inf) raised "ValueError: cannot convert float NaN to integer",
    # thesis_simulator_model(layers=inf) a TypeError, make_plan(slice_bytes=[nan]) and make_jobs_plan(max_cells=inf)
    # an OverflowError or ValueError, and thesis_simulator_model(layers=10**30) ran without end
    import signal

    def too_long(*_):
        raise TimeoutError

    previous = signal.signal(signal.SIGALRM, too_long)
    try:
        for name, call in _calls(value).items():
            if value is None and "grid_ns" in name:
                continue  # grid_ns=None is its default: the grid the search chooses
            signal.alarm(60)
            try:
                call()
            except DdlsimError as exc:
                assert "\n" not in str(exc), (name, str(exc))
            except Exception as exc:  # noqa: BLE001 - the test is that none escapes
                pytest.fail(f"{name} = {value!r} raised {type(exc).__name__}: {exc}")
            finally:
                signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_a_count_given_as_a_whole_float_is_taken():
    assert len(ddlsim.synthetic_model(layers=4.0, model_size_bytes=4e6).layers) == 4
    with pytest.raises(DdlsimError, match=r"synthetic model: layers must be a whole number from 1 to 1,000,000, got 4\.5"):
        ddlsim.synthetic_model(layers=4.5)


@pytest.mark.parametrize("workers, words", [
    # before: a count alone raised "TypeError: 'int' object is not iterable", [nan] a ValueError from a comparison
    (8, "workers = 8: give a list of worker counts"),
    ("8,64", "workers = '8,64': give a list of worker counts"),
    ([], "give at least one worker count"),
    ([float("nan")], "worker count in the scaling list must be a whole number from 1 to 65,536, got nan"),
    ([0], "worker count in the scaling list must be a whole number from 1 to 65,536, got 0"),
    ([2.5], "got 2.5"),
])
def test_replay_scaling_names_a_worker_list_it_cannot_use(tmp_path, workers, words):
    log = ddlsim.simulate(model="lenet5", workers=2, iterations=2, network="analytic")
    log.save(tmp_path / "run", timeline=False)
    with pytest.raises(DdlsimError, match=__import__("re").escape(words)):
        ddlsim.replay_scaling(tmp_path / "run" / "events.parquet", workers=workers)
