"""The sweep cache is keyed on the engine build, not only its version string:
a rebuilt engine never gets the old engine's results."""

import hashlib
from pathlib import Path

from ddlsim import _core
from ddlsim.simulation.scenario import scenario_from_dict
from ddlsim.sweep import ResultStore, run_sweep, scenario_key
from ddlsim.sweep import runner as sweep_runner
from ddlsim.sweep import store as sweep_store


def _tiny():
    return scenario_from_dict({"model": {"name": "lenet5"}, "workers": 2, "iterations": 1, "network": {"fidelity": "analytic"}})


def test_the_build_id_is_the_hash_of_the_loaded_extension():
    assert sweep_store.engine_build_id() == hashlib.sha256(Path(_core.__file__).read_bytes()).hexdigest()


def test_a_changed_engine_build_changes_the_key(monkeypatch):
    before = scenario_key(_tiny())
    monkeypatch.setattr(sweep_store, "engine_build_id", lambda: "another-build")
    assert scenario_key(_tiny()) != before
    monkeypatch.setattr(sweep_store, "engine_build_id", lambda: "another-build")
    assert scenario_key(_tiny()) == scenario_key(_tiny())  # still a function of its inputs


def test_a_stale_entry_of_another_build_is_not_served(tmp_path, monkeypatch):
    store = ResultStore(tmp_path)
    monkeypatch.setattr(sweep_store, "engine_build_id", lambda: "old-build")
    stale = {**sweep_runner.simulate_summary(_tiny()), "iteration_times_s": [123.0], "wall_s": 0.0, "stale": True}
    store.put(scenario_key(_tiny()), stale)
    served, stats = run_sweep([_tiny()], store=store)
    assert served == [stale] and stats.cached == 1  # same build: the entry is the answer
    monkeypatch.setattr(sweep_store, "engine_build_id", lambda: "new-build")
    calls = []
    real = sweep_runner.simulate_summary
    monkeypatch.setattr(sweep_runner, "simulate_summary", lambda sc: calls.append(sc) or real(sc))
    fresh, stats = run_sweep([_tiny()], store=store)
    assert len(calls) == 1 and stats.simulated == 1 and stats.cached == 0
    assert "stale" not in fresh[0] and fresh[0]["iteration_times_s"] != [123.0]
