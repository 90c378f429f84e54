"""CASSINI-style start offsets (ddlsim.plan.offsets): the pure search on
hand-made communication profiles, against a brute-force oracle."""

import json
import math
import random
from fractions import Fraction
from itertools import product

import forked_cli
import pytest

from ddlsim.errors import PlanError
from ddlsim.plan.offsets import CommProfile, default_grid_ns, overlap_ns, search_offsets


# ------------------------------------------------------------------ an independent oracle


def busy_cells(profile, link, grid, period_cells):
    """Cells of one period that `profile` marks busy on `link` (outward rounding), with plain Python sets."""
    cells = set()
    for s, e in profile.phases.get(link, ()):
        if e <= s:
            continue
        for c in range(s // grid, -(-e // grid)):
            cells.add(c % period_cells)
    return cells


def oracle_excess(profiles, offsets_cells, grid):
    """Sum over links and cells of the unified circle of max(0, jobs busy - 1), loops only."""
    periods = [p.period_ns // grid for p in profiles]
    circle = 1
    for p in periods:
        circle = circle * p // math.gcd(circle, p)
    links = sorted({link for p in profiles for link in p.phases})
    total = 0
    for link in links:
        cells = [busy_cells(p, link, grid, q) for p, q in zip(profiles, periods)]
        for t in range(circle):
            n = sum(1 for c, q, o in zip(cells, periods, offsets_cells) if (t - o) % q in c)
            total += max(0, n - 1)
    return total


def brute_force(profiles, grid):
    """Least excess over every combination of offsets (the first job at 0)."""
    periods = [p.period_ns // grid for p in profiles]
    best = None
    for combo in product(*(range(q) for q in periods[1:])):
        value = oracle_excess(profiles, (0, *combo), grid)
        best = value if best is None else min(best, value)
    return best


def random_phases(rng, period, pieces, longest):
    out = []
    for _ in range(pieces):
        s = rng.randrange(period)
        out.append((s, s + rng.randint(1, longest)))
    return out


# ------------------------------------------------------------------ separable jobs: zero overlap


def test_two_jobs_equal_period_one_phase_each_fit_side_by_side():
    # 100 ms iterations, 35 ms and 50 ms all-reduces: 85 ms < 100 ms, so one can run while the other computes
    a = CommProfile("a", 100_000_000, {"leaf 0 -> spine 0": [(60_000_000, 95_000_000)]})
    b = CommProfile("b", 100_000_000, {"leaf 0 -> spine 0": [(40_000_000, 90_000_000)]})
    plan = search_offsets([a, b])
    assert plan.before.total_excess_cells > 0
    assert plan.after.total_excess_cells == 0 and plan.after.score == 1.0
    # and in continuous time: b's phase [40, 90) + o mod 100 misses a's [60, 95)
    o = plan.offset_of("b")
    assert plan.offset_of("a") == 0 and plan.grid_ns * 1 <= 100_000_000
    start = (40_000_000 + o) % 100_000_000
    for k in (-1, 0, 1):
        s, e = start + k * 100_000_000, start + k * 100_000_000 + 50_000_000
        assert e <= 60_000_000 or s >= 95_000_000
    # the middle of the feasible range: b's phase starts in [95, 110] mod 100 (15 ms of slack), so 102.5 ms
    assert start == 2_500_000
    # profiled from a later iteration (anchor: 30 ms after b's start), the same rotation needs a start 30 ms earlier
    late = CommProfile("b", 100_000_000, b.phases, anchor_ns=230_000_000)
    shifted = search_offsets([a, late], start_ns=[0, 70_000_000])
    assert shifted.offset_of("b") == (o - 30_000_000) % 100_000_000
    assert shifted.before.total_excess_cells == plan.before.total_excess_cells  # start 70 + anchor 30 = rotation 0


@pytest.mark.parametrize("k", [2, 3, 4])
def test_commensurate_periods_phases_filling_less_than_the_short_period(k):
    # job a: period k * Q with one phase of c_a; job b: period Q with one phase of c_b; c_a + c_b < Q
    Q = 60_000_000
    rng = random.Random(k)
    for _ in range(5):
        c_b = rng.randrange(1_000_000, Q // 2)
        c_a = rng.randrange(1_000_000, Q - c_b)
        a = CommProfile("a", k * Q, {"L": [(s := rng.randrange(k * Q), s + c_a)]})
        b = CommProfile("b", Q, {"L": [(t := rng.randrange(Q), t + c_b)]})
        plan = search_offsets([a, b], grid_ns=250_000)
        assert plan.exact_circle and plan.method == "exact"
        assert plan.after.total_excess_cells == 0, (c_a, c_b)


def test_separable_by_construction_always_found_and_zero_in_continuous_time():
    """b's phases are drawn inside a's idle time shifted by a secret offset: a
    zero-overlap offset exists; the search must find one, and its phases must
    not meet in continuous time (outward rounding)."""
    rng = random.Random(19)
    grid = 1_000
    for trial in range(25):
        period = grid * rng.choice([40, 60, 90])
        a_phases = random_phases(rng, period, rng.randint(1, 3), period // 5)
        # a's busy set in ns (wrapped), then b's phases inside the idle gaps, rotated by -secret
        busy = sorted(((s % period), (s % period) + (e - s)) for s, e in a_phases)
        marks = [False] * period
        for s, e in busy:
            for x in range(s, e):
                marks[x % period] = True
        idle = [x for x in range(period) if not marks[x]]
        secret = rng.randrange(period)
        b_phases = []
        for _ in range(rng.randint(1, 3)):
            x = rng.choice(idle)
            y = x
            while (y + 1) % period != x and not marks[(y + 1) % period] and y - x < period // 6:
                y += 1
            # [x, y] idle in a's time: b's pattern at offset `secret` puts it there
            b_phases.append(((x - secret) % period, (x - secret) % period + (y - x) + 1))
        a = CommProfile("a", period, {"L": a_phases, "a only": [(0, 5)]})
        b = CommProfile("b", period, {"L": b_phases})
        # a grid that divides the period but is coarser than the phases' ends: search the finest, 1 ns
        plan = search_offsets([a, b], grid_ns=1)
        assert plan.after.total_excess_cells == 0, trial
        o = plan.offset_of("b")
        for s, e in b_phases:
            for x in range(s + o, e + o):
                assert not marks[x % period], (trial, x)


def test_affinity_graph_tree_keeps_every_per_link_optimum():
    """Five jobs in a chain, j-1 and j sharing link Lj; each pair fits side by
    side, so on a tree CASSINI's traversal reaches zero excess everywhere."""
    P = 100_000
    jobs = []
    for j in range(5):
        phases = {}
        if j > 0:
            phases[f"L{j}"] = [(0, 40_000)]
        if j < 4:
            phases[f"L{j + 1}"] = [(10_000, 50_000)]
        jobs.append(CommProfile(f"j{j}", P, phases))
    plan = search_offsets(jobs, method="affinity", grid_ns=1_000, restarts=0)
    assert plan.method == "affinity" and plan.conflicts == 0
    assert plan.before.total_excess_cells > 0 and plan.after.total_excess_cells == 0
    assert plan.components == [[f"j{j}" for j in range(5)]]


# ------------------------------------------------------------------ the optimum: a brute-force oracle


@pytest.mark.parametrize("seed", range(12))
def test_search_optimum_equals_brute_force_over_every_offset(seed):
    rng = random.Random(1000 + seed)
    grid = 10
    jobs = rng.choice([2, 3])
    base = rng.choice([6, 8, 12])
    links = ["L0", "L1", "L2"][: rng.randint(1, 3)]
    profiles = []
    for j in range(jobs):
        period = grid * base * rng.choice([1, 2] if jobs == 2 else [1, 1, 2])
        phases = {}
        for link in links:
            if rng.random() < 0.8:
                phases[link] = [(s * 1, e) for s, e in random_phases(rng, period, rng.randint(1, 2), period // 2)]
        if not phases:
            phases[links[0]] = [(0, grid)]
        profiles.append(CommProfile(f"job{j}", period, phases))
    best = brute_force(profiles, grid)
    plan = search_offsets(profiles, grid_ns=grid, method="exact")
    offsets = [o // grid for o in plan.offsets_ns]
    assert plan.after.total_excess_cells == best
    # the plan's own evaluation agrees with the oracle, before and after
    assert oracle_excess(profiles, offsets, grid) == best
    assert plan.before.total_excess_cells == oracle_excess(profiles, [0] * jobs, grid)
    # the affinity method is never better than the optimum, and reports what its offsets give
    heuristic = search_offsets(profiles, grid_ns=grid, method="affinity", seed=seed)
    assert heuristic.after.total_excess_cells >= best
    assert heuristic.after.total_excess_cells == oracle_excess(profiles, [o // grid for o in heuristic.offsets_ns], grid)
    assert overlap_ns(profiles, plan.offsets_ns, grid) == best * grid


def test_deterministic_and_seeded():
    rng = random.Random(5)
    profiles = [CommProfile(f"j{j}", 120_000, {f"L{k}": random_phases(rng, 120_000, 2, 30_000) for k in range(2)})
                for j in range(5)]
    one = search_offsets(profiles, method="affinity", seed=3, grid_ns=1_000)
    two = search_offsets(profiles, method="affinity", seed=3, grid_ns=1_000)
    assert json.dumps(one.to_dict(), sort_keys=True) == json.dumps(two.to_dict(), sort_keys=True)


def test_default_grid_divides_commensurate_periods():
    g = default_grid_ns([100_000_000, 150_000_000])
    assert 100_000_000 % g == 0 and 150_000_000 % g == 0
    assert 150_000_000 // 4000 <= g <= 150_000_000 // 1000
    # incommensurate periods: the target step, periods rounded, with a note
    a = CommProfile("a", 217_770_001, {"L": [(0, 50_000_000)]})
    b = CommProfile("b", 180_300_007, {"L": [(0, 50_000_000)]})
    plan = search_offsets([a, b])
    assert plan.grid_ns == 217_770_001 // 1000
    assert any("rounded" in n for n in plan.notes)


def test_jobs_without_shared_links_keep_offset_zero():
    a = CommProfile("a", 100, {"host 0 -> star": [(0, 80)]})
    b = CommProfile("b", 100, {"host 1 -> star": [(0, 80)]})
    plan = search_offsets([a, b], grid_ns=1)
    assert plan.method == "none" and plan.offsets_ns == [0, 0] and plan.shared_links == {}
    assert plan.after.score == 1.0


@pytest.mark.parametrize("bad, message", [
    (dict(profiles=[]), "at least one"),
    (dict(profiles=[CommProfile("a", 10, {}), CommProfile("a", 10, {})]), "two jobs are named 'a'"),
    (dict(profiles=[CommProfile("a", 0, {})]), "period must be > 0"),
    (dict(profiles=[CommProfile("a", 10, {})], method="magic"), "choose auto, exact or affinity"),
    (dict(profiles=[CommProfile("a", 10, {})], grid_ns=0), "grid step must be > 0"),
])
def test_bad_requests_name_the_problem(bad, message):
    args = dict(bad)
    profiles = args.pop("profiles")
    with pytest.raises(PlanError, match=message):
        search_offsets(profiles, **args)


# ------------------------------------------------------------------ profiles from a simulated run


def test_profile_links_are_the_ports_the_packet_model_loads():
    """The routes the profile charges (ECMP's hash included) are the ports the
    packet-level engine counts the job's bytes on: every port carrying at
    least half the busiest port's bytes is in the profile, and the profile
    names no idle port (ACK-only ports carry a few percent)."""
    import ddlsim
    from ddlsim.plan.offsets import profile_from_log

    r = ddlsim.simulate(model="resnet18", workers=8, strategy="ring", bandwidth="10Gbps", iterations=2, record_flows=True,
                        trace_detail="collective", grouping={"kind": "synceasgd"}, topology="leaf-spine",
                        hosts_per_leaf=2, spines=3, network="packet", rack_placement="spread")
    profile = profile_from_log(r, "job")
    ports = {p["name"]: p["bytes"] for p in r.packet_stats()["ports"]}
    heavy = {n for n, b in ports.items() if b >= max(ports.values()) / 2}
    assert heavy <= set(profile.phases)
    assert all(ports[link] > 0 for link in profile.phases)
    assert any("spine 2" in link for link in profile.phases)  # the hash spreads over the spines
    # the period is the iteration time, and every phase lies within the run
    assert profile.period_ns == round(r.iterations["time_s"].iloc[1] * 1e9)
    assert 0 < profile.busy_ns("host 0 -> leaf 0") < profile.period_ns


# ------------------------------------------------------------------ several jobs end to end (ddlsim plan)

# 2.5 M fp32 parameters (10 MB) in one layer: a 2-worker ring all-reduce takes 2 steps of 5 MB, 4 ms each at 10 Gbit/s
def one_layer(fwd_ms, bwd_ms):
    return {"name": f"one{fwd_ms}", "layers": [{"name": "l0", "params": 2_500_000, "fwd_ms": fwd_ms, "bwd_ms": bwd_ms}]}


def shared_spine(jobs, **extra):
    """Leaf-spine, 2 hosts per leaf, 1 spine, oversubscription 2 (each leaf-spine link 10 Gbit/s), latency 0, flow
    level: a job on hosts 0 and 2 and one on 1 and 3 share the four leaf-spine links with every ring step."""
    return {"workers": 2, "network": {"bandwidth": "10Gbps", "latency": "0s", "topology": "leaf-spine",
                                      "hosts_per_leaf": 2, "spines": 1, "oversubscription": 2.0}, "job": jobs, **extra}


def test_offsets_that_separate_the_phases_give_back_the_alone_time_exactly():
    """Issue 19's third test. Job a: 14 + 14 ms of compute and an 8 ms all-reduce, period 36 ms; job b: 5 + 5 ms
    and 8 ms, period 18 ms: commensurate (36 = 2 x 18), and the phases fill 8 + 8 = 16 ms < 18 ms, so a's
    all-reduce fits between two of b's. Started together, a's all-reduce (28-36 ms) meets b's second (28-36 ms):
    max-min halves both, so a pays 8 ms more and b's iterations slow down too. With the offsets the search
    finds (zero overlap on a grid that divides both periods, so none in continuous time), the engine gives every
    iteration of both jobs exactly its time alone."""
    from ddlsim.plan.jobs_plan import make_jobs_plan

    data = shared_spine([{"name": "a", "placement": [0, 2], "model": one_layer(14.0, 14.0), "iterations": 3},
                         {"name": "b", "placement": [1, 3], "model": one_layer(5.0, 5.0), "iterations": 6}])
    plan = make_jobs_plan(data, groupings="keep")
    assert [p.period_ns for p in plan.profiles] == [36_000_000, 18_000_000]
    assert plan.offsets.exact_circle and all(p % plan.offsets.grid_ns == 0 for p in plan.offsets.periods_ns)
    assert plan.offsets.after.total_excess_cells == 0 < plan.offsets.before.total_excess_cells
    assert plan.alone_s == [[0.036] * 3, [0.018] * 6]
    assert plan.with_offsets == plan.alone_s  # exactly
    assert plan.without[0] != plan.alone_s[0] and max(plan.without[0]) >= 0.036 + 0.004
    rows = {r["name"]: r for r in plan.to_dict()["jobs"]}
    assert rows["a"]["measured"]["with"]["slowdown"] == 1.0 and rows["b"]["measured"]["with"]["slowdown"] == 1.0
    assert rows["a"]["measured"]["gain"] > 1.0


def test_identical_jobs_fully_overlapping_slowdown_and_prediction_on_paper():
    """Two identical jobs (6 + 6 ms compute, 8 ms all-reduce, 20 ms alone) started together: every ring step
    shares the leaf-spine links at B/2, so the all-reduce takes 16 ms: 28 ms, slowdown 1.4. The offset model
    predicts the same (8 ms of overlap per iteration: delay 8 ms). Half a period apart they run as alone."""
    from ddlsim.plan.jobs_plan import make_jobs_plan

    data = shared_spine([{"name": "a", "placement": [0, 2]}, {"name": "b", "placement": [1, 3]}],
                        model=one_layer(6.0, 6.0), iterations=3)
    plan = make_jobs_plan(data, groupings="keep")
    d = plan.to_dict()
    for row in d["jobs"]:
        assert row["alone_iteration_time_s"] == 0.020
        assert row["measured"]["without"]["iteration_times_s"] == [0.028] * 3
        assert row["measured"]["without"]["slowdown"] == pytest.approx(1.4, rel=1e-12)
        assert row["predicted"]["without"]["delay_ns"] == 8_000_000
        assert row["predicted"]["without"]["slowdown"] == pytest.approx(1.4, rel=1e-12)
        assert row["measured"]["with"]["iteration_times_s"] == [0.020] * 3
    # b's 8 ms phase sits mid-way in a's 12 ms of compute: 2 ms of slack either side, start 10 ms
    assert [r["start_ns"] for r in d["jobs"]] == [0, 10_000_000]
    assert d["offsets"]["before"]["score"] == pytest.approx(1 - 8 / 20)


def test_cli_plan_several_jobs_json_runs_as_a_scenario(tmp_path):
    """`ddlsim plan jobs.toml --json`: per-job groupings from the single-job planner and offsets; the JSON's
    scenario, simulated, gives the planned jobs' iteration times."""
    import tomllib

    import ddlsim

    toml = tmp_path / "jobs.toml"
    toml.write_text(
        'workers = 2\niterations = 2\n[model]\nname = "two"\n'
        'layers = [{name = "a", params = 1_250_000, fwd_ms = 3.0, bwd_ms = 3.0}, '
        '{name = "b", params = 1_250_000, fwd_ms = 3.0, bwd_ms = 3.0}]\n'
        '[network]\nbandwidth = "10Gbps"\nlatency = "0s"\ntopology = "leaf-spine"\nhosts_per_leaf = 2\n'
        'spines = 1\noversubscription = 2.0\n'
        '[[job]]\nname = "a"\nplacement = [0, 2]\n[[job]]\nname = "b"\nplacement = [1, 3]\n')
    proc = forked_cli.run(["plan", str(toml), "--json", "--bucket-caps", "5,25"], timeout=600)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [r["name"] for r in data["jobs"]] == ["a", "b"]
    for row in data["jobs"]:
        assert row["grouping"]["source"] == "plan" and row["grouping"]["grouping"]["kind"] in ("per-tensor", "synceasgd", "ddp", "groups")
        assert row["measured"]["with"]["iteration_time_s"] <= row["measured"]["without"]["iteration_time_s"]
    assert data["offsets"]["after"]["excess_ns"] <= data["offsets"]["before"]["excess_ns"]
    run = ddlsim.simulate_jobs(data["scenario"], alone=False)
    assert [j["iteration_times_s"] for j in run.jobs()] == [r["measured"]["with"]["iteration_times_s"] for r in data["jobs"]]
    # a bad grid is one line, exit 2
    bad = forked_cli.run(["plan", str(toml), "--offset-grid", "fast"], timeout=600)
    assert bad.returncode == 2 and "--offset-grid" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("args, message", [
    (["--offset-method", "fancy"], "method 'fancy'"),
    (["--job-groupings", "none"], "groupings 'none'"),
    (["--model", "resnet50"], "--model, --profile and --cost-model plan one job"),
])
def test_cli_plan_several_jobs_bad_options_one_line_exit_2(tmp_path, args, message):

    toml = tmp_path / "jobs.toml"
    toml.write_text('workers = 2\n[[job]]\nname = "a"\n[[job]]\nname = "b"\n')
    out = tmp_path / "plan.json"
    proc = forked_cli.run(["plan", str(toml), "--out", str(out), *args], timeout=600)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("method", ["exact", "affinity"])
def test_three_jobs_in_a_triangle_of_shared_links_run_as_alone(method):
    """Three identical jobs (10 + 10 ms compute, 8 ms all-reduce, 28 ms) on three leaves of one spine: a on
    leaves 0 and 1, b on 0 and 2, c on 1 and 2, so each pair shares one leaf's spine links (an affinity graph
    with a loop). 3 x 8 = 24 ms < 28 ms: the three all-reduces fit one after another. Both the exact search and
    the affinity graph (whose loop the best-response sweeps resolve) find offsets with no overlap, and the
    engine then gives every job its time alone, exactly."""
    from ddlsim.plan.jobs_plan import make_jobs_plan

    data = shared_spine([{"name": "a", "placement": [0, 2]}, {"name": "b", "placement": [1, 4]},
                         {"name": "c", "placement": [3, 5]}], model=one_layer(10.0, 10.0), iterations=3)
    plan = make_jobs_plan(data, groupings="keep", method=method)
    assert plan.offsets.method == method
    assert sorted(plan.offsets.shared_links) == sorted(
        f"{a} -> {b}" for leaf in range(3) for a, b in ((f"leaf {leaf}", "spine 0"), ("spine 0", f"leaf {leaf}")))
    assert plan.offsets.after.total_excess_cells == 0 < plan.offsets.before.total_excess_cells
    assert plan.alone_s == [[0.028] * 3] * 3 and plan.with_offsets == plan.alone_s
    assert min(max(w) for w in plan.without) > 0.028


def test_the_docs_example_scenario_plans_and_the_offsets_help_both_jobs():
    """examples/jobs/offsets.toml, the file docs/planning.md and docs/cli.md run: both jobs gain from the offsets,
    and the plan's scenario runs again as a scenario (what `ddlsim simulate` reads)."""
    from ddlsim.plan.jobs_plan import make_jobs_plan
    from ddlsim.simulation.scenario import scenario_from_dict

    root = __import__("pathlib").Path(__file__).resolve().parent.parent
    plan = make_jobs_plan(root / "examples" / "jobs" / "offsets.toml")
    data = plan.to_dict()
    for row in data["jobs"]:
        assert row["measured"]["with"]["slowdown"] < row["measured"]["without"]["slowdown"]
        assert row["measured"]["gain"] > 1.0
    scenario_from_dict(data["scenario"])


def test_a_jobs_plan_file_is_the_same_bytes_for_the_same_inputs(tmp_path):
    # before: the plan's JSON held the planning's wall time (wall_s), different in every run
    from ddlsim.plan.jobs_plan import make_jobs_plan

    data = shared_spine([{"name": "a", "placement": [0, 2]}, {"name": "b", "placement": [1, 3]}],
                        model=one_layer(10.0, 10.0), iterations=2)
    outs = [tmp_path / f"plan{k}.json" for k in range(2)]
    for out in outs:
        make_jobs_plan(data, groupings="keep").save(out)
    assert outs[0].read_bytes() == outs[1].read_bytes()
