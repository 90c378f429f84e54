"""Every scenario in examples/ (the README points at them) really runs."""

from pathlib import Path

import pytest

import ddlsim

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.toml"))


def test_there_are_examples():
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path):
    r = ddlsim.simulate(path)
    assert r.iteration_time_s > 0
    assert len(r.iterations) == r.scenario.iterations
