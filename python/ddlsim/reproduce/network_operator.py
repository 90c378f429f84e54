"""The network-operator paper (Chang et al., "How to Train your DNN: The Network
Operator Edition") reproduced with ddlsim: Tables 1-4, 6-10 and Figures 3-12,
each cell beside the paper's value.

The paper's setup as ddlsim scenarios (docs/reproduction/network-operator.md
says why each choice was made):

- zoo models Inception-v3, VGG-16, ResNet-101, ResNet-200 with compute
  calibrated once per model to Table 3 (:mod:`.calibration`), batch 32;
- a flow-level star (non-blocking), 1 us latency (the paper models none),
  32 workers at 25 Gbit/s unless a table says otherwise;
- the baseline is the paper's simulator: one parameter server, TensorFlow's
  round-robin placement, round-robin distribution, global barrier; the
  server's aggregation cost is negligible (the paper's traces have none);
- in-network mechanisms on one server with immediate distribution (ddlsim
  models them for the plain synchronous PS only);
- ring-reduce is ddlsim's ring (each tensor cut into N equal chunks: the
  paper's "messaging"), butterfly mixing is `algorithm = "butterfly"`.

Times are the mean over the iterations after the first (steady state).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..errors import DdlsimError
from ..safe_io import scratch_directory
from ..simulation.scenario import Scenario, scenario_from_dict
from ..sweep import ResultStore, SweepStats, run_sweep
from . import paper_values as paper
from .calibration import BATCH, calibrate, layer_times_s, write_profile

LATENCY = "1us"
SERVER_UPDATE_BANDWIDTH = "100TB/s"  # aggregation at the server costs next to nothing, as in the paper's traces
PS = {"kind": "ps", "update_bandwidth": SERVER_UPDATE_BANDWIDTH}

# name -> (label, strategy table, scenario fields)
MECHANISMS: dict[str, tuple[str, dict, dict]] = {
    "baseline": ("PS (baseline)", {**PS, "servers": 1, "placement": "round-robin", "distribution": "round-robin"}, {}),
    "ps_immediate": ("PS, immediate distribution", {**PS, "servers": 1}, {}),
    "aggregation": ("in-network aggregation", {**PS, "servers": 1, "in_network": "aggregation"}, {}),
    "multicast": ("multicast", {**PS, "servers": 1, "in_network": "multicast"}, {}),
    "multiagg": ("multicast + aggregation", {**PS, "servers": 1, "in_network": "multiagg"}, {}),
    "multiagg_8ps": ("multicast + aggregation, 8 PS", {**PS, "servers": 8, "placement": "size-balanced", "in_network": "multiagg"}, {}),
    "multiagg_no_barrier": ("multicast + aggregation, no barrier", {**PS, "servers": 1, "in_network": "multiagg"}, {"barrier": False}),
    "block": ("PS, block distribution", {**PS, "servers": 1, "distribution": "block"}, {}),
    "ring": ("ring-reduce", {"kind": "ring"}, {}),
    "ring_multicast": ("ring-reduce + multicast", {"kind": "ring", "in_network": "multicast"}, {}),
    "butterfly": ("butterfly mixing", {"kind": "ring", "algorithm": "butterfly"}, {}),
}
SWEEP_MECHANISMS = ("baseline", "aggregation", "multicast", "multiagg", "ring", "ring_multicast", "butterfly")
WHATIF_MECHANISMS = ("baseline", "aggregation", "multicast", "multiagg", "ring", "butterfly")

# figure -> (what varies, model, caption)
FIGURES: dict[str, tuple[str, str, str]] = {
    "fig3": ("bandwidth", "inception_v3", "Varying bandwidth: Inception-v3, {workers} workers"),
    "fig4": ("bandwidth", "resnet200", "Varying bandwidth: ResNet-200, {workers} workers"),
    "fig5": ("bandwidth", "vgg16", "Varying bandwidth: VGG-16, {workers} workers"),
    "fig6": ("workers", "inception_v3", "Varying worker count: Inception-v3, {bandwidth:g} Gbit/s"),
    "fig7": ("workers", "resnet200", "Varying worker count: ResNet-200, {bandwidth:g} Gbit/s"),
    "fig8": ("workers", "vgg16", "Varying worker count: VGG-16, {bandwidth:g} Gbit/s"),
    "fig9": ("growth-network", "inception_v3", "Synthetic growth, network-heavy (17x17x768) modules: Inception-v3, {workers} workers, {bandwidth:g} Gbit/s"),
    "fig10": ("growth-compute", "inception_v3", "Synthetic growth, compute-heavy (35x35x288) modules: Inception-v3, {workers} workers, {bandwidth:g} Gbit/s"),
    "fig11": ("speedup", "inception_v3", "Faster convolutions: Inception-v3, {workers} workers, {bandwidth:g} Gbit/s"),
    "fig12": ("speedup", "resnet200", "Faster convolutions: ResNet-200, {workers} workers, {bandwidth:g} Gbit/s"),
}
TITLES = {
    "table1": "Table 1: iteration time (s) by number of parameter servers, {table1_workers} workers, {table1_bandwidth:g} Gbit/s",
    "table2": "Table 2: model characteristics (paper's TensorFlow models vs the zoo's)",
    "table3": "Table 3: compute (s) after calibration, and backprop network time at 25 Gbit/s",
    "table4": "Table 4: speedup of in-network mechanisms over the baseline PS, {workers} workers, {bandwidth:g} Gbit/s",
    "table6": "Table 6: speedup of end-host all-reduce over the baseline PS, {workers} workers, {bandwidth:g} Gbit/s",
    "table7": "Table 7: share of model bytes on the least / most loaded server, round-robin placement",
    "table8": "Table 8: iteration time (s), multicast + aggregation with 1 and 8 servers vs ring-reduce, {workers} workers, {bandwidth:g} Gbit/s",
    "table9": "Table 9: time over two iterations (s), removing the global barrier, {workers} workers, {bandwidth:g} Gbit/s",
    "table10": "Table 10: iteration time (s), in-network aggregation vs block distribution, {workers} workers",
}
TABLES = ("table1", "table2", "table3", "table4", "table6", "table7", "table8", "table9", "table10")
ARTIFACTS = TABLES + tuple(FIGURES)


@dataclass(frozen=True)
class Plan:
    """Which models and sweep points to run."""

    models: tuple[str, ...] = paper.MODELS
    workers: int = 32
    bandwidth_gbps: float = 25
    iterations: int = 3
    table1_workers: int = 8
    table1_bandwidth_gbps: float = 10
    table1_servers: tuple[int, ...] = paper.TABLE1_SERVERS
    bandwidths_gbps: tuple[float, ...] = (10, 25, 40, 100)
    worker_counts: tuple[int, ...] = (4, 8, 16, 32)
    growth_counts: tuple[int, ...] = (0, 1, 5, 25, 125)
    compute_speedups: tuple[float, ...] = (1.0, 1.5, 2.0, 2.5, 3.0)
    quick: bool = False

    def artifacts(self, only: Optional[Sequence[str]] = None) -> list[str]:
        """The tables and figures this plan makes: figures need their model in `models`."""
        chosen = list(only) if only else list(ARTIFACTS)
        return [a for a in chosen if a not in FIGURES or FIGURES[a][1] in self.models]


FULL = Plan()
# A smoke-sized subset (well under a minute): two models, 8 workers, two points per sweep.
QUICK = Plan(models=("inception_v3", "vgg16"), workers=8, iterations=2, table1_servers=(1, 8), bandwidths_gbps=(10, 100),
             worker_counts=(4, 8), growth_counts=(0, 2), compute_speedups=(1.0, 3.0), quick=True)


def parse_only(text: Optional[str]) -> Optional[list[str]]:
    if text is None:
        return None
    from ..option_lists import comma_list

    names = comma_list(text, "--only", str.lower, example="table1,fig8", what="tables and figures")
    unknown = [n for n in names if n not in ARTIFACTS]
    if unknown:
        raise DdlsimError(f"--only: unknown table or figure {unknown[0]!r}; choose from {', '.join(ARTIFACTS)}")
    return names


# ---------------------------------------------------------------- scenarios


@dataclass
class _Scenarios:
    """Scenarios by a readable key, built once each."""

    profile_dir: Path
    by_key: dict[tuple, Scenario] = field(default_factory=dict)

    def get(self, key: tuple, make: Callable[[], dict]) -> tuple:
        if key not in self.by_key:
            self.by_key[key] = scenario_from_dict(make(), origin=f"network-operator scenario {key}")
            self.by_key[key].base_dir = str(self.profile_dir)
        return key


def _scenario(model: dict, mechanism: str, workers: int, bandwidth_gbps: float, iterations: int, **extra: Any) -> dict:
    _, strategy, fields = MECHANISMS[mechanism]
    return {
        "model": model,
        "workers": workers,
        "iterations": iterations,
        "trace_detail": "collective",
        "strategy": dict(strategy),
        "network": {"fidelity": "flow", "bandwidth": f"{bandwidth_gbps:g}Gbps", "latency": LATENCY},
        **fields,
        **extra,
    }


def _grown_model(name: str, module: str, count: int) -> dict:
    """A zoo model with `count` extra Inception modules, timed with the model's calibration, as inline layers
    (a profile cannot name the added layers; one tensor per layer)."""
    from ..workload.growth import grow
    from ..workload.zoo import load_model

    cal = calibrate(name)
    model = grow(load_model(name), module, count)
    layers = []
    for layer in model.layers:
        fwd, bwd = layer_times_s(layer, cal)
        layers.append({"name": layer.name, "params": sum(t.elements for t in layer.tensors), "fwd_ms": fwd * 1e3, "bwd_ms": bwd * 1e3})
    return {"name": f"{name}_grown_{module}_{count}", "batch_size": BATCH, "layers": layers}


class _Builder:
    def __init__(self, plan: Plan, profile_dir: Path):
        self.plan = plan
        self.scenarios = _Scenarios(profile_dir)
        self.profiles: dict[str, str] = {}

    def model(self, name: str, **what_if: Any) -> dict:
        if name not in self.profiles:
            self.profiles[name] = write_profile(name, self.scenarios.profile_dir)
        return {"name": name, "batch_size": BATCH, "profile": self.profiles[name], **what_if}

    def run(self, name: str, mechanism: str, workers: Optional[int] = None, bandwidth: Optional[float] = None, **what_if: Any) -> tuple:
        workers = workers or self.plan.workers
        bandwidth = bandwidth or self.plan.bandwidth_gbps
        key = ("run", name, mechanism, workers, bandwidth, tuple(sorted(what_if.items())))
        return self.scenarios.get(key, lambda: _scenario(self.model(name, **what_if), mechanism, workers, bandwidth, self.plan.iterations))

    def table1_run(self, name: str, servers: int) -> tuple:
        p = self.plan
        key = ("table1", name, servers)
        strategy = {**PS, "servers": servers, "placement": "round-robin", "distribution": "round-robin"}
        return self.scenarios.get(key, lambda: {**_scenario(self.model(name), "baseline", p.table1_workers, p.table1_bandwidth_gbps,
                                                             p.iterations), "strategy": strategy})

    def grown_run(self, name: str, module: str, count: int, mechanism: str) -> tuple:
        p = self.plan
        key = ("grow", name, module, count, mechanism)
        return self.scenarios.get(key, lambda: _scenario(_grown_model(name, module, count), mechanism, p.workers, p.bandwidth_gbps,
                                                         p.iterations))


# ---------------------------------------------------------------- results


def steady_time(summary: dict) -> float:
    """Mean iteration time after the first iteration (all of them when there is one)."""
    times = summary["iteration_times_s"]
    tail = times[1:] if len(times) > 1 else times
    return sum(tail) / len(tail)


@dataclass
class Reproduction:
    """The reproduced tables and figure data (pandas DataFrames, by name: table1 ... fig12)."""

    plan: Plan
    tables: dict[str, Any]
    stats: SweepStats
    notes: list[str]
    cache_dir: Optional[Path]

    @property
    def titles(self) -> dict[str, str]:
        """Each table's and figure's title with the workers and bandwidth this plan ran (not the paper's when they differ)."""
        return {name: self._fill(TITLES[name]) if name in TITLES else f"Figure {name[3:]}: {self.caption(name)}"
                for name in self.tables}

    def caption(self, figure: str) -> str:
        return self._fill(FIGURES[figure][2])

    def _fill(self, template: str) -> str:
        p = self.plan
        return template.format(workers=p.workers, bandwidth=p.bandwidth_gbps, table1_workers=p.table1_workers,
                               table1_bandwidth=p.table1_bandwidth_gbps)

    def save(self, out_dir: str | Path) -> list[Path]:
        """CSV of every table and figure, PNG and SVG of every figure, and the comparison as text; all or nothing."""
        from ..analyze.figures import save_deterministic
        from ..output import staged_directory
        from .compare import comparison_text
        from .figures import figure_for

        out_dir = Path(out_dir)
        written = []
        with staged_directory(out_dir) as stage:
            for name, frame in self.tables.items():
                frame.to_csv(stage / f"{name}.csv", index=False)
                written.append(out_dir / f"{name}.csv")
                if name in FIGURES:
                    fig = figure_for(name, frame, self.caption(name), quick=self.plan.quick)
                    for ext in ("png", "svg"):
                        save_deterministic(fig, stage / f"{name}.{ext}")
                        written.append(out_dir / f"{name}.{ext}")
                    import matplotlib.pyplot as plt

                    plt.close(fig)
            (stage / "comparison.txt").write_text(comparison_text(self), encoding="utf-8")
            written.append(out_dir / "comparison.txt")
        return written


def reproduce_network_operator(only: Optional[Sequence[str]] = None, quick: bool = False, cache_dir: str | Path | None = None,
                               jobs: int = 1, on_progress: Optional[Callable[[int, int, str], None]] = None,
                               plan: Optional[Plan] = None, use_cache: bool = True) -> Reproduction:
    """Runs the reproduction (through the results cache) and returns its tables as DataFrames.

    `only`: table/figure names (table1, ..., fig12); `quick`: the smoke subset (QUICK);
    `cache_dir`: the results store (default $XDG_CACHE_HOME/ddlsim); `jobs`: simulation processes.
    """
    plan = plan or (QUICK if quick else FULL)
    artifacts = plan.artifacts(only)
    notes = []
    skipped = [a for a in (only or ARTIFACTS) if a not in artifacts]
    if skipped:
        notes.append(f"not in this plan (its model is not among {', '.join(plan.models)}): {', '.join(skipped)}")
    store = ResultStore(cache_dir) if use_cache else None
    with contextlib.ExitStack() as stack:
        scratch = store.directory if store is not None else stack.enter_context(scratch_directory("ddlsim-reproduce-"))
        builder = _Builder(plan, scratch / "profiles")
        requests = {a: _REQUESTS[a](builder) for a in artifacts}
        keys = list(builder.scenarios.by_key)
        scenarios = [builder.scenarios.by_key[k] for k in keys]
        labels = [" ".join(str(x) for x in k[1:] if x != ()) for k in keys]
        summaries, stats = run_sweep(scenarios, store=store, jobs=jobs, on_progress=on_progress, labels=labels)
        results = dict(zip(keys, summaries))
        tables = {a: _ASSEMBLE[a](plan, requests[a], results) for a in artifacts}
    return Reproduction(plan=plan, tables=tables, stats=stats, notes=notes, cache_dir=store.directory if store else None)


# ---------------------------------------------------------------- the tables
# Each artifact: a request function (registers its scenarios, returns what the assembler needs)
# and an assembler (summaries -> DataFrame with the paper's value beside ddlsim's).


def _df(rows: list[dict]):
    import pandas as pd

    return pd.DataFrame(rows)


def _req_table1(b: _Builder):
    return {(m, k): b.table1_run(m, k) for m in b.plan.models for k in b.plan.table1_servers}


def _asm_table1(plan: Plan, req, res):
    rows = []
    for (m, k), key in req.items():
        i = paper.TABLE1_SERVERS.index(k)
        rows.append({"model": m, "servers": k, "paper_real_s": paper.TABLE1[(m, "real")][i], "paper_sim_s": paper.TABLE1[(m, "sim")][i],
                     "ddlsim_s": steady_time(res[key])})
    return _df(rows)


def _req_none(b: _Builder):
    return None


def _asm_table2(plan: Plan, req, res):
    from ..workload.zoo import load_model

    rows = []
    for m in plan.models:
        model = load_model(m)
        t2 = paper.TABLE2[m]
        rows.append({"model": m, "paper_model_size_gbit": t2["model_size_gbit"], "ddlsim_model_size_gbit": model.size_bytes * 8 / 1e9,
                     "paper_flops": t2["flops"], "ddlsim_fwd_flops_per_sample": model.fwd_flops,
                     "ddlsim_largest_tensor_gbit": max(t.bytes for t in model.tensors) * 8 / 1e9,
                     "ddlsim_tensors": len(model.tensors), "ddlsim_layers": len(model.layers)})
    return _df(rows)


def _req_table3(b: _Builder):
    return {m: (b.model(m), str(b.scenarios.profile_dir)) for m in b.plan.models}


def _asm_table3(plan: Plan, req, res):
    """Table 3 as ddlsim actually times the calibrated models (layer_times_ns of the profiled scenario)."""
    from ..simulation.model_build import build_model, layer_times_ns

    rows = []
    for m, (model_table, profile_dir) in req.items():
        sc = scenario_from_dict(_scenario(model_table, "ring", plan.workers, 25, 1))
        model = build_model(sc.model, profile_dir)
        times = layer_times_ns(model, sc.model)
        t3 = paper.TABLE3[m]
        net = model.size_bytes * 8 / 25e9
        bwd_rest = sum(bwd for _, bwd in times[:-1]) / 1e9
        cal = calibrate(m)
        rows.append({"model": m, "paper_fwd_s": t3["fwd_s"], "ddlsim_fwd_s": sum(f for f, _ in times) / 1e9,
                     "paper_bwd_s": t3["bwd_s"], "ddlsim_bwd_s": bwd_rest,
                     "ddlsim_first_bwd_layer_s": times[-1][1] / 1e9,
                     "paper_net_25g_s": t3["net_25g_s"], "ddlsim_net_25g_s": net,
                     "paper_ratio": t3["ratio"], "ddlsim_ratio": bwd_rest / net,
                     "fwd_effective_tflops": cal.fwd_tflops, "bwd_effective_tflops": cal.bwd_tflops})
    return _df(rows)


def _req_mechanisms(names: Sequence[str]):
    def request(b: _Builder):
        return {(m, n): b.run(m, n) for m in b.plan.models for n in ("baseline",) + tuple(names)}

    return request


def _asm_speedups(table: dict, names: Sequence[str]):
    def assemble(plan: Plan, req, res):
        rows = []
        for m in plan.models:
            base = steady_time(res[req[(m, "baseline")]])
            for n in names:
                t = steady_time(res[req[(m, n)]])
                rows.append({"model": m, "mechanism": n, "paper_speedup": table[m][n], "ddlsim_speedup": base / t,
                             "ddlsim_s": t, "ddlsim_baseline_s": base})
        return _df(rows)

    return assemble


def _asm_times(table: dict, names: Sequence[str], factor: float = 1.0, column: str = "s"):
    def assemble(plan: Plan, req, res):
        rows = []
        for m in plan.models:
            for n in names:
                rows.append({"model": m, "mechanism": n, f"paper_{column}": table[m][n],
                             f"ddlsim_{column}": factor * steady_time(res[req[(m, n)]])})
        return _df(rows)

    return assemble


def _asm_table7(plan: Plan, req, res):
    from ..simulation.lowering import place_tensors
    from ..workload.zoo import load_model

    rows = []
    for (k, m), (lo, hi, ideal) in paper.TABLE7.items():
        if m not in plan.models:
            continue
        sizes = [t.bytes for t in load_model(m).tensors]
        owner = place_tensors(sizes, k, "round-robin")
        loads = [sum(s for s, o in zip(sizes, owner) if o == server) for server in range(k)]
        total = sum(sizes)
        rows.append({"servers": k, "model": m, "paper_min": lo, "ddlsim_min": min(loads) / total, "paper_max": hi,
                     "ddlsim_max": max(loads) / total, "ideal": ideal})
    return _df(rows)


def _req_table10(b: _Builder):
    return {(m, bw, n): b.run(m, n, bandwidth=bw) for m in b.plan.models for bw in (10, 100) for n in ("aggregation", "block")}


def _asm_table10(plan: Plan, req, res):
    rows = []
    for (m, bw, n), key in req.items():
        rows.append({"model": m, "bandwidth_gbps": bw, "mechanism": n, "paper_s": paper.TABLE10[(m, bw)][n], "ddlsim_s": steady_time(res[key])})
    return _df(rows)


def _req_figure(name: str):
    kind, model, _ = FIGURES[name]

    def request(b: _Builder):
        p = b.plan
        if kind == "bandwidth":
            return {(x, n): b.run(model, n, bandwidth=x) for x in p.bandwidths_gbps for n in SWEEP_MECHANISMS}
        if kind == "workers":
            return {(x, n): b.run(model, n, workers=x) for x in p.worker_counts for n in SWEEP_MECHANISMS}
        if kind.startswith("growth"):
            module = kind.split("-", 1)[1]
            return {(x, n): b.grown_run(model, module, x, n) for x in p.growth_counts for n in WHATIF_MECHANISMS}
        return {(x, n): b.run(model, n, compute_speedup=x) for x in p.compute_speedups for n in WHATIF_MECHANISMS}

    return request


_X = {"bandwidth": "bandwidth_gbps", "workers": "workers", "growth-network": "modules_added", "growth-compute": "modules_added",
      "speedup": "conv_speedup"}


def _asm_figure(name: str):
    kind, model, _ = FIGURES[name]

    def assemble(plan: Plan, req, res):
        rows = []
        for (x, n), key in req.items():
            t = steady_time(res[key])
            base = steady_time(res[req[(x, "baseline")]])
            rows.append({"model": model, _X[kind]: x, "mechanism": n, "ddlsim_s": t, "ddlsim_speedup": base / t})
        return _df(rows)

    return assemble


_REQUESTS: dict[str, Callable] = {
    "table1": _req_table1,
    "table2": _req_none,
    "table3": _req_table3,
    "table4": _req_mechanisms(("aggregation", "multicast", "multiagg", "ps_immediate")),
    "table6": _req_mechanisms(("ring", "ring_multicast", "butterfly")),
    "table7": _req_none,
    "table8": _req_mechanisms(("multiagg", "multiagg_8ps", "ring")),
    "table9": _req_mechanisms(("multiagg", "ring", "multiagg_no_barrier")),
    "table10": _req_table10,
    **{f: _req_figure(f) for f in FIGURES},
}


def _asm_table4(plan: Plan, req, res):
    frame = _asm_speedups(paper.TABLE4, ("aggregation", "multicast", "multiagg"))(plan, req, res)
    frame["ddlsim_speedup_vs_immediate_ps"] = [steady_time(res[req[(m, "ps_immediate")]]) / t
                                              for m, t in zip(frame["model"], frame["ddlsim_s"])]
    return frame


_ASSEMBLE: dict[str, Callable] = {
    "table1": _asm_table1,
    "table2": _asm_table2,
    "table3": _asm_table3,
    "table4": _asm_table4,
    "table6": _asm_speedups(paper.TABLE6, ("ring", "ring_multicast", "butterfly")),
    "table7": _asm_table7,
    "table8": _asm_times(paper.TABLE8, ("multiagg", "multiagg_8ps", "ring")),
    "table9": _asm_times(paper.TABLE9, ("multiagg", "ring", "multiagg_no_barrier"), factor=2.0, column="two_iterations_s"),
    "table10": _asm_table10,
    **{f: _asm_figure(f) for f in FIGURES},
}
