"""What the docs and help texts say about the reduction cost (gamma) and the grouping pass is what the code does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import ddlsim
from ddlsim.cli.app import app
from ddlsim.plan.cost import CostModel
from ddlsim.simulation import lowering
from ddlsim.simulation.scenario import scenario_from_dict

DOCS = Path(__file__).resolve().parent.parent / "docs"


def words(path: str) -> str:
    return " ".join((DOCS / path).read_text(encoding="utf-8").split())


@pytest.mark.parametrize("strategy", ["ring", "ps"])
def test_gamma_is_charged_in_both_strategies_and_no_doc_says_otherwise(strategy):
    free = ddlsim.simulate(model="lenet5", workers=4, iterations=1, strategy=strategy)
    charged = ddlsim.simulate(model="lenet5", workers=4, iterations=1, strategy=strategy, gamma_ns_per_byte=1.0)
    assert charged.iteration_time_s > free.iteration_time_s
    assert "is not charged (zero)" not in words("allreduce-algorithms.md")
    assert "Not modelled: the all-reduce reduction cost" not in words("parameter-server.md")
    assert "charged on both sides" in words("parameter-server.md")


def test_mg_wfbp_cost_takes_the_scenarios_gamma_as_grouping_md_says():
    base = {"model": {"name": "lenet5"}, "workers": 4}
    free = lowering.allreduce_cost(scenario_from_dict(base))
    charged = lowering.allreduce_cost(scenario_from_dict({**base, "strategy": {"kind": "ring", "gamma_ns_per_byte": 2.0}}))
    assert charged.b == pytest.approx(free.b + 2.0 * 3 / 4)  # Table II's ring: + (N - 1) / N gamma
    row = next(line for line in (DOCS / "grouping.md").read_text().splitlines() if line.startswith("| `mg-wfbp`"))
    assert "gamma = 0)" not in row and "strategy.gamma_ns_per_byte" in row


def test_fit_help_says_what_gamma_does():
    result = CliRunner().invoke(app, ["fit", "--help"], terminal_width=400)
    text = " ".join(result.output.split())
    assert "the simulator models none" not in text
    assert "charges it in the simulated all-reduces" in text
    assert CostModel("ring", 1_000.0, 0.8, 0.5).network(4)["gamma_ns_per_byte"] == 0.5  # what plan --cost-model uses


def test_design_md_names_the_grouping_code_that_exists():
    text = words("design.md")
    assert "group_per_tensor" not in text
    for name in re.findall(r"`lowering\.(\w+)`", text):
        assert hasattr(lowering, name), name
    assert "lowering.build_groups" in text
