"""Stragglers ([[straggler]], --straggler RANK:FACTOR, --transient-straggler P:FACTOR): closed forms on paper.

Setup: a barrier between iterations, one ring all-reduce per layer (per-tensor grouping) that starts when every
worker's backward of that layer ended, closed-form collectives on an idle analytic network. Each all-reduce here takes
A ~ 65 us (6 steps of 10 us + 1000 B at 10 Gbit/s), far less than the next layer's backward (>= 1 ms), so the network is
idle whenever a group becomes ready and the iteration is T = (slowest rank's compute) + A_0 (layer 0's all-reduce,
which starts when the slowest rank's last backward ends). A straggler whose compute is f x C therefore makes every
iteration T0 + (f - 1) C, whatever its rank; several persistent ones, T0 + (max f - 1) C; a transient one (each rank
slower by f with probability p per iteration) makes an iteration T0 + (f - 1) C exactly when at least one of the n
ranks straggles, probability 1 - (1 - p)^n, else T0.
"""

from __future__ import annotations

import math
import subprocess
import sys

import forked_cli
import pytest
from typer.testing import CliRunner

import ddlsim
from ddlsim.cli.app import app
from ddlsim.errors import DdlsimError

MS = 1_000_000
FWD_MS, BWD_MS = [1.0, 2.0, 1.5], [2.0, 3.0, 2.5]
C_NS = round(sum(FWD_MS + BWD_MS) * MS)  # one rank's compute per iteration: 12 ms


def scenario(workers=4, iterations=3, **extra):
    return {"model": {"name": "toy", "layers": [{"name": f"l{i}", "params": 1000, "fwd_ms": f, "bwd_ms": b}
                                               for i, (f, b) in enumerate(zip(FWD_MS, BWD_MS))]},
            "workers": workers, "iterations": iterations, "network": {"fidelity": "analytic", "collective_model": "closed-form"},
            "strategy": {"kind": "ring", "grouping": "per-tensor"}, **extra}


def times_ns(result):
    return [round(t * 1e9) for t in result.summary()["iteration_times_s"]]


@pytest.mark.parametrize("rank", [0, 3])
@pytest.mark.parametrize("factor", [1.5, 2.0, 4.0])
def test_a_persistent_straggler_adds_f_minus_1_times_its_compute_every_iteration(rank, factor):
    base = times_ns(ddlsim.simulate(scenario()))
    slow = times_ns(ddlsim.simulate(scenario(straggler=[{"rank": rank, "factor": factor}])))
    assert [s - b for s, b in zip(slow, base)] == [round((factor - 1) * C_NS)] * 3


def test_several_persistent_stragglers_cost_the_slowest_one():
    base = times_ns(ddlsim.simulate(scenario()))
    slow = times_ns(ddlsim.simulate(scenario(straggler=[{"rank": 1, "factor": 1.5}, {"rank": 2, "factor": 2.0}])))
    assert [s - b for s, b in zip(slow, base)] == [C_NS] * 3


def test_a_faster_rank_changes_nothing_with_a_barrier():
    assert times_ns(ddlsim.simulate(scenario(straggler={"rank": 0, "factor": 0.5}))) == times_ns(ddlsim.simulate(scenario()))


def test_a_transient_straggler_slows_an_iteration_with_probability_1_minus_1_minus_p_to_the_n():
    """Every iteration is T0 or T0 + (f - 1) C, the latter exactly when the log shows a rank whose compute was f C;
    over 300 iterations the share of slow ones is q = 1 - (1 - p)^n within 4 binomial standard deviations."""
    n, p, f, iterations = 8, 0.1, 2.0, 300
    t0 = times_ns(ddlsim.simulate(scenario(workers=n, iterations=1)))[0]
    r = ddlsim.simulate(scenario(workers=n, iterations=iterations, seed=11, straggler=[{"probability": p, "factor": f}]))
    ev = r.events.to_pandas()
    compute = ev[(ev["kind"] == "compute")].assign(d=lambda x: x["end_ns"] - x["start_ns"]).groupby(["iteration", "rank"])["d"].sum()
    assert set(compute.tolist()) == {C_NS, round(f * C_NS)}
    straggled = (compute == round(f * C_NS)).groupby(level="iteration").any()
    times = times_ns(r)
    assert times == [t0 + round((f - 1) * C_NS) if straggled[i] else t0 for i in range(iterations)]
    q = 1 - (1 - p) ** n
    share = sum(t > t0 for t in times) / iterations
    assert abs(share - q) <= 4 * math.sqrt(q * (1 - q) / iterations), (share, q)
    assert sum(times) / iterations == pytest.approx(t0 + (f - 1) * C_NS * q, abs=4 * math.sqrt(q * (1 - q) / iterations) * C_NS)
    # seeded: the same seed draws the same stragglers, another seed others
    again = ddlsim.simulate(scenario(workers=n, iterations=iterations, seed=11, straggler=[{"probability": p, "factor": f}]))
    other = ddlsim.simulate(scenario(workers=n, iterations=iterations, seed=12, straggler=[{"probability": p, "factor": f}]))
    assert times_ns(again) == times and times_ns(other) != times


def test_cli_reports_the_cost_of_the_stragglers(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('workers = 4\niterations = 2\n[model]\nname = "lenet5"\n[network]\nfidelity = "analytic"\n'
                    '[[straggler]]\nrank = 2\nfactor = 1.5\n', encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(app, ["simulate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    import json

    effect = json.loads(result.output)["stragglers"]
    assert effect["with_s"] > effect["without_s"] > 0 and effect["ratio"] == pytest.approx(effect["with_s"] / effect["without_s"])
    flags = runner.invoke(app, ["simulate", str(path), "--straggler", "1:2", "--transient-straggler", "0.5:3", "-q"])
    assert flags.exit_code == 0 and "stragglers:" in flags.output and "without them" in flags.output


@pytest.mark.parametrize("args, message", [
    (["--straggler", "x:2"], "--straggler 'x:2': write RANK:FACTOR"),
    (["--straggler", "9:2"], "straggler rank 9 is not a worker"),
    (["--transient-straggler", "1.5:2"], "probability"),
    (["--straggler", "1:0"], "factor"),
])
def test_bad_stragglers_are_one_line_errors(args, message):
    p = forked_cli.run(["simulate", "--model", "lenet5", "--workers", "4", "--network", "analytic", *args])
    assert p.returncode == 2, p.stderr
    assert message in p.stderr and "Traceback" not in p.stderr and p.stdout == ""


def test_a_straggler_names_a_rank_or_a_probability():
    with pytest.raises(DdlsimError, match="either rank"):
        ddlsim.simulate(scenario(straggler=[{"rank": 1, "probability": 0.1, "factor": 2}]))


def test_the_docs_examples_run(tmp_path):
    """docs/stragglers.md and docs/replay-at-scale.md: their scenario, every shell line, and the Python examples
    (~~~python blocks, which tests/test_doc_snippets.py leaves to this test)."""
    import re
    import shlex
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {**__import__("os").environ, "PYTHONPATH": str(root / "python")}
    for doc in ("stragglers.md", "replay-at-scale.md"):
        text = (root / "docs" / doc).read_text(encoding="utf-8")
        for toml in re.findall(r"```toml\n(.*?)```", text, flags=re.S):
            (tmp_path / "stragglers.toml").write_text(toml, encoding="utf-8")
        for line in re.search(r"```sh\n(.*?)```", text, flags=re.S).group(1).splitlines():
            if line.strip():
                p = forked_cli.run([*shlex.split(line)[1:]], cwd=tmp_path, env=env, timeout=600)
                assert p.returncode == 0, (line, p.stderr[-2000:])
        for block in re.findall(r"~~~python\n(.*?)~~~", text, flags=re.S):
            p = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
            assert p.returncode == 0, (doc, p.stderr[-2000:])


def test_a_straggler_in_several_jobs_slows_each_job_as_it_slows_that_job_alone():
    """[[job]] tables on disjoint hosts of a star: a top-level persistent straggler (ranks counted within each
    job) costs each job what it costs the job run on its own by the ordinary one-job simulator (the oracle),
    and the CLI prints one line per job instead of failing."""
    import ddlsim
    from ddlsim.api import straggler_effect
    from ddlsim.simulation.jobs import job_scenarios, run_jobs
    from ddlsim.simulation.scenario import scenario_from_dict

    one = {"name": "one", "layers": [{"name": "a", "params": 300_000, "fwd_ms": 0.5, "bwd_ms": 1.0},
                                     {"name": "b", "params": 700_000, "fwd_ms": 0.25, "bwd_ms": 0.5}]}
    data = {"iterations": 3, "model": one, "network": {"fidelity": "flow", "bandwidth": "10Gbps", "latency": "5us"},
            "straggler": [{"rank": 1, "factor": 2.0}],
            "job": [{"name": "a", "workers": 4}, {"name": "b", "workers": 3, "start": "2ms"}]}
    sc = scenario_from_dict(data)
    effect = straggler_effect(run_jobs(sc, alone=False))
    assert [row["name"] for row in effect["jobs"]] == ["a", "b"]
    for row, sub in zip(effect["jobs"], job_scenarios(sc)):
        alone = straggler_effect(ddlsim.simulate(sub))
        assert row["with_s"] == alone["with_s"] and row["without_s"] == alone["without_s"]
        assert row["with_s"] > row["without_s"]
