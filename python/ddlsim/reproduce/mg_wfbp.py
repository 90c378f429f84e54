"""MG-WFBP (Shi, Chu, Li, ICDCS 2019) §III-V, regenerated with ddlsim.

- :func:`fig9`: the simulated K80 cluster of Fig. 9: WFBP, SyncEASGD and
  MG-WFBP on 4 to 64 nodes, GoogLeNet (batch 64) and ResNet-50 (batch 32),
  10GbE, one K80 GPU per node (ddlsim's FLOP model of a K80, not the
  paper's measured layer times), the ring's point-to-point startup alpha
  set to the paper's measured value (§V-A: 2(N-1) alpha = 90.52, 271.56 and
  633.64 us on 2, 4 and 8 nodes, i.e. alpha = 45.26 us).
- :func:`costmodel_fit`: the cost-model check (§V-A, Fig. 5(b) of this
  text; Eq. 9 and Table II): all-reduce "microbenchmarks" generated with
  ddlsim's simulated ring at the paper's message sizes and node counts,
  fitted with ``ddlsim fit``'s least squares, a and b beside the paper's
  startup times and Table II's closed form.

WFBP here communicates layer by layer, as the paper defines it (Eq. 7,
B-Caffe communicates per layer), i.e. all tensors of a layer in one
all-reduce; ``wfbp-per-tensor`` (ddlsim's default per-tensor grouping) is
reported beside it. MG-WFBP is ddlsim's ``mg-wfbp`` grouping (the exact
optimum of the paper's model) priced with the network's own a + bM.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Optional

from .training_common import Counter, PaperValue, Progress, Reproduction, paper_beside

if TYPE_CHECKING:
    import pandas as pd

MODELS = (("googlenet", 64, "GoogLeNet"), ("resnet50", 32, "ResNet-50"))  # §V: batch 64 and 32
NODES = (4, 8, 16, 32, 64)
QUICK_NODES = (4, 64)
STRATEGIES = ("wfbp", "wfbp-per-tensor", "synceasgd", "mg-wfbp")
DEVICE = "K80"
BANDWIDTH = "10Gbps"
ALPHA_NS = 45_260  # §V-A: 90.52 us / (2 (2 - 1)) = 271.56 us / 6 = 633.64 us / 14
ITERATIONS = 1  # barrier on, no jitter: every iteration is the same

# Cost-model fit: node counts the paper measured, and message sizes 4p bytes
# over the layer sizes it reports (p in [10^2, 5 x 10^6] parameters, §V-A).
FIT_NODES = (2, 4, 8)
FIT_PARAMETERS = tuple(int(m * 10**e) for e in range(2, 7) for m in (1, 2, 5))  # 100 ... 5,000,000
QUICK_FIT_PARAMETERS = (100, 10_000, 1_000_000, 5_000_000)

_VA = "§V-A (Statistic data)"
_VC = "§V-C (Simulation), Fig. 9, 64 nodes"
PAPER_VALUES: dict[str, PaperValue] = {
    "startup_us.2": PaperValue(90.52, "us", f"{_VA}: 'the startup overheads (i.e., 2(N-1) x alpha in the ring-based "
                               "all-reduce algorithm) are 90.52us, 271.56us and 633.64us in 2-, 4- and 8-node clusters'"),
    "startup_us.4": PaperValue(271.56, "us", f"{_VA}: 271.56us on 4 nodes"),
    "startup_us.8": PaperValue(633.64, "us", f"{_VA}: 633.64us on 8 nodes"),
    "bandwidth_gbps": PaperValue(10, "Gbit/s", f"{_VA}: 'all-reduce ... in a 10Gbps Ethernet (10GbE) using OpenMPI v3.1.1'"),
    "googlenet.batch": PaperValue(64, "samples", "§V: 'GoogleNet [20] with a batch size of 64'"),
    "resnet50.batch": PaperValue(32, "samples", "§V: 'ResNet-50 [13] with a batch size of 32'"),
    "googlenet.64.mg_vs_wfbp": PaperValue(1.78, "x", f"{_VC}: 'MG-WFBP outperforms WFBP and SyncEASGD by 1.78x and "
                                          "1.35x, respectively on GoogleNet'"),
    "googlenet.64.mg_vs_synceasgd": PaperValue(1.35, "x", f"{_VC}: 1.35x over SyncEASGD on GoogleNet"),
    "resnet50.64.mg_vs_wfbp": PaperValue(1.75, "x", f"{_VC}: 'on training ResNet-50, MG-WFBP achieves about 1.75x and "
                                         "1.45x speedups compared to WFBP and SyncEASGD'"),
    "resnet50.64.mg_vs_synceasgd": PaperValue(1.45, "x", f"{_VC}: 1.45x over SyncEASGD on ResNet-50"),
    "resnet50.64.efficiency.wfbp": PaperValue(0.55, "fraction", f"{_VC}: 'WFBP and SyncEASGD only have around 55% "
                                              "scaling efficiency in the 64-node cluster'"),
    "resnet50.64.efficiency.synceasgd": PaperValue(0.55, "fraction", f"{_VC}: around 55% for SyncEASGD"),
    "resnet50.64.efficiency.mg-wfbp": PaperValue(1.0, "fraction", f"{_VC}: 'MG-WFBP performs almost linear speedup'"),
    "8.mg_vs_wfbp": PaperValue(1.2, "x", "§V-B (real 8-node K80 cluster, 2 GPUs per node): 'MG-WFBP achieves about "
                               "1.2x and 1.36x speedups compared to WFBP and SyncEASGD respectively on the 8-node K80 "
                               "cluster on both GoogleNet and ResNet-50'"),
    "8.mg_vs_synceasgd": PaperValue(1.36, "x", "§V-B (real 8-node cluster): 1.36x over SyncEASGD"),
}


def alpha_from_paper() -> dict[int, float]:
    """alpha (us) that each of the paper's startup times gives: startup / (2 (N - 1))."""
    return {n: PAPER_VALUES[f"startup_us.{n}"].value / (2 * (n - 1)) for n in FIT_NODES}


def _network() -> dict:
    return {"bandwidth": BANDWIDTH, "latency": f"{ALPHA_NS}ns", "topology": "star"}


def layer_groups(model_name: str, batch_size: int) -> dict:
    """WFBP as the paper defines it: one all-reduce per layer (the layer's tensors together)."""
    from ..simulation.model_build import build_model
    from ..simulation.scenario import scenario_from_dict

    sc = scenario_from_dict({"model": {"name": model_name, "batch_size": batch_size, "device": DEVICE, "compute": "flops"}})
    model = build_model(sc.model, None)
    return {"kind": "groups", "groups": [[t.name for t in layer.tensors] for layer in model.layers if len(layer.tensors) > 1]}


def scenario(model_name: str, batch_size: int, nodes: int, grouping) -> dict:
    return {
        "workers": nodes, "iterations": ITERATIONS, "trace_detail": "collective",
        "model": {"name": model_name, "batch_size": batch_size, "device": DEVICE, "compute": "flops"},
        "strategy": {"kind": "ring", "algorithm": "ring", "grouping": grouping},
        "network": _network(),
    }


def _grouping(strategy: str, per_layer: dict):
    return {"wfbp": per_layer, "wfbp-per-tensor": "per-tensor", "synceasgd": "synceasgd", "mg-wfbp": "mg-wfbp"}[strategy]


# ----------------------------------------------------------------- Fig. 9


def fig9(nodes: tuple[int, ...] = NODES, models=MODELS, progress: Optional[Progress] = None,
         _counter: Optional[Counter] = None) -> "pd.DataFrame":
    """One row per (model, nodes, strategy): iteration time, the single-GPU
    time t_f + t_b, non-overlapped communication, speedup N (t_f + t_b) /
    t_iter (Eq. 4, weak scaling) and scaling efficiency."""
    import pandas as pd

    from ..api import simulate

    counter = _counter or Counter(len(models) * (1 + len(nodes) * len(STRATEGIES)), progress)
    rows = []
    for name, batch, label in models:
        per_layer = layer_groups(name, batch)
        counter.step(f"MG-WFBP Fig. 9: {label}, 1 GPU")
        single = simulate(scenario(name, batch, 1, "per-tensor")).iteration_time_s
        for n in nodes:
            for strategy in STRATEGIES:
                counter.step(f"MG-WFBP Fig. 9: {label}, {n} nodes, {strategy}")
                r = simulate(scenario(name, batch, n, _grouping(strategy, per_layer)))
                t = r.iteration_time_s
                rows.append({"model": name, "nodes": n, "strategy": strategy,
                             "allreduces": len(r.engine_document["training"]["groups"]),
                             "iteration_ms": t * 1e3, "single_gpu_ms": single * 1e3, "non_overlapped_ms": (t - single) * 1e3,
                             "speedup": n * single / t, "efficiency": single / t})
    if _counter is None:
        counter.finish()
    return pd.DataFrame(rows)


def _paper(key: str) -> float:
    value = PAPER_VALUES.get(key)
    return value.value if value is not None else float("nan")


def fig9_comparison(frame: "pd.DataFrame") -> "pd.DataFrame":
    """Per (model, nodes): efficiencies, MG-WFBP's speed-up over WFBP and
    SyncEASGD with the paper's beside them, and the orderings it states."""
    import pandas as pd

    rows = []
    for (model, n), cell in frame.groupby(["model", "nodes"], sort=False):
        t = dict(zip(cell["strategy"], cell["iteration_ms"]))
        eff = dict(zip(cell["strategy"], cell["efficiency"]))
        rows.append({
            "model": model, "nodes": n,
            "efficiency_wfbp": eff["wfbp"], "efficiency_wfbp_per_tensor": eff["wfbp-per-tensor"],
            "efficiency_synceasgd": eff["synceasgd"], "efficiency_mg_wfbp": eff["mg-wfbp"],
            "paper_efficiency_wfbp": _paper(f"{model}.{n}.efficiency.wfbp"),
            "paper_efficiency_synceasgd": _paper(f"{model}.{n}.efficiency.synceasgd"),
            "paper_efficiency_mg_wfbp": _paper(f"{model}.{n}.efficiency.mg-wfbp"),
            "mg_vs_wfbp": t["wfbp"] / t["mg-wfbp"], "paper_mg_vs_wfbp": _paper(f"{model}.{n}.mg_vs_wfbp") if n != 8 else _paper("8.mg_vs_wfbp"),
            "mg_vs_synceasgd": t["synceasgd"] / t["mg-wfbp"],
            "paper_mg_vs_synceasgd": _paper(f"{model}.{n}.mg_vs_synceasgd") if n != 8 else _paper("8.mg_vs_synceasgd"),
            "mg_vs_wfbp_per_tensor": t["wfbp-per-tensor"] / t["mg-wfbp"],
            "mg_wfbp_fastest": t["mg-wfbp"] <= min(t["wfbp"], t["synceasgd"]),
            "faster_of_wfbp_and_synceasgd": "wfbp" if t["wfbp"] < t["synceasgd"] else "synceasgd",
        })
    return paper_beside(pd.DataFrame(rows))


def fig9_figure(frame: "pd.DataFrame"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..analyze.figures import mark_coincident
    from ..analyze.plot_text import plain_text

    labels = {name: label for name, _, label in MODELS}
    styles = {"wfbp": ("WFBP (per layer)", "#4C72B0", "o"), "wfbp-per-tensor": ("WFBP (per tensor)", "#8C8C8C", "x"),
              "synceasgd": ("SyncEASGD", "#DD8452", "s"), "mg-wfbp": ("MG-WFBP", "#C44E52", "^")}
    models = list(dict.fromkeys(frame["model"]))
    fig, axes = plt.subplots(1, len(models), figsize=(5.2 * len(models), 4), squeeze=False)
    for ax, model in zip(axes[0], models):
        cell = frame[frame["model"] == model]
        nodes = sorted(cell["nodes"].unique())
        ax.plot(nodes, nodes, color="black", lw=0.8, ls=":", label="linear")
        for strategy, (label, color, marker) in styles.items():
            line = cell[cell["strategy"] == strategy].sort_values("nodes")
            ax.plot(line["nodes"], line["speedup"], color=color, marker=marker, ms=4, label=label)
        if model == "resnet50" and 64 in nodes:
            ax.scatter([64], [64 * _paper("resnet50.64.efficiency.wfbp")], marker="*", s=90, color="black", zorder=5,
                       label="paper: WFBP, SyncEASGD ~55%")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("nodes (one K80 each)")
        ax.set_ylabel("speedup over one K80")
        ax.set_title(f"{plain_text(labels.get(model, model))}, 10GbE, alpha = {ALPHA_NS / 1e3:g} us", fontsize=9)
        ax.grid(alpha=0.3)
        mark_coincident(ax)
        ax.legend(fontsize=7)
    fig.suptitle("MG-WFBP Fig. 9 with ddlsim (simulated K80 cluster)", fontsize=10)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------- cost-model fit


def allreduce_time_ns(nodes: int, size_bytes: int, dtype_bytes: int = 4) -> int:
    """One ring all-reduce of `size_bytes` among `nodes`, simulated on the idle 10GbE star (flow level)."""
    from ..api import simulate

    params, rest = divmod(size_bytes, dtype_bytes)
    if rest:
        raise ValueError(f"size {size_bytes} is not a whole number of {dtype_bytes}-byte parameters")
    r = simulate({"workers": nodes, "iterations": 1, "trace_detail": "collective",
                  "model": {"name": "allreduce-microbenchmark", "layers": [{"name": "message", "params": params,
                                                                            "fwd_ms": 0, "bwd_ms": 0}]},
                  "strategy": {"kind": "ring", "algorithm": "ring"}, "network": _network()})
    coll = r.events.to_pandas()
    coll = coll[coll["kind"] == "collective"]
    return int(coll["end_ns"].max() - coll["start_ns"].min())


def costmodel_fit(nodes: tuple[int, ...] = FIT_NODES, parameters: tuple[int, ...] = FIT_PARAMETERS,
                  progress: Optional[Progress] = None, _counter: Optional[Counter] = None) -> tuple["pd.DataFrame", "pd.DataFrame"]:
    """(samples, fits): the simulated all-reduce times (size_bytes, time_ns,
    workers: the CSV `ddlsim fit` reads) and, per node count, the fitted a and
    b, alpha and beta, Table II's closed form and the paper's startup time."""
    import pandas as pd

    from ..plan.cost import Sample, fit

    counter = _counter or Counter(len(nodes) * len(parameters), progress)
    samples = []
    for n in nodes:
        for p in parameters:
            counter.step(f"MG-WFBP all-reduce microbenchmark: {n} nodes, {4 * p:,} bytes")
            samples.append({"size": 4 * p, "time_ns": allreduce_time_ns(n, 4 * p), "workers": n})
    if _counter is None:
        counter.finish()
    model = fit([Sample(Fraction(s["size"]), Fraction(s["time_ns"]), s["workers"], "simulated") for s in samples], "ring")
    beta = Fraction(8, 10)  # ns per byte at 10 Gbit/s
    rows = []
    for f in model.fits:
        n = f.workers
        rows.append({
            "workers": n, "points": f.points, "a_us": f.a_ns / 1e3, "b_ns_per_byte": f.b_ns_per_byte,
            "alpha_us": f.alpha_ns / 1e3, "beta_ns_per_byte": f.beta_ns_per_byte, "r2": f.r2,
            "max_relative_error": f.max_relative_error,
            "table2_a_us": 2 * (n - 1) * ALPHA_NS / 1e3, "table2_b_ns_per_byte": float(Fraction(2 * (n - 1), n) * beta),
            "paper_a_us": _paper(f"startup_us.{n}"), "paper_alpha_us": alpha_from_paper().get(n, float("nan")),
            "joint_alpha_us": model.alpha_ns / 1e3, "joint_beta_ns_per_byte": model.beta_ns_per_byte,
        })
    return pd.DataFrame(samples), paper_beside(pd.DataFrame(rows))


def costmodel_figure(samples: "pd.DataFrame", fits: "pd.DataFrame"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    colors = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3"]
    for color, f in zip(colors, fits.to_dict("records")):
        pts = samples[samples["workers"] == f["workers"]]
        ax.scatter(pts["size"], pts["time_ns"] / 1e3, color=color, s=14, label=f"{f['workers']} nodes: simulated ring")
        x = np.geomspace(pts["size"].min(), pts["size"].max(), 50)
        ax.plot(x, f["a_us"] + f["b_ns_per_byte"] * x / 1e3, color=color, lw=1,
                label=f"fit a = {f['a_us']:.2f} us (paper {f['paper_a_us']:.2f}), b = {f['b_ns_per_byte']:.3g} ns/B")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes, 4p)")
    ax.set_ylabel("all-reduce time (us)")
    ax.set_title("MG-WFBP cost model T_ar(M) = a + bM: ddlsim's ring on 10GbE, fitted", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=6.5)
    fig.tight_layout()
    return fig


def paper_values_table() -> "pd.DataFrame":
    import pandas as pd

    return pd.DataFrame([{"key": k, "value": v.value, "unit": v.unit, "source": v.source} for k, v in PAPER_VALUES.items()])


def reproduce(quick: bool = False, progress: Optional[Progress] = None) -> Reproduction:
    """Fig. 9 and the cost-model fit, ours beside the paper's."""
    nodes = QUICK_NODES if quick else NODES
    parameters = QUICK_FIT_PARAMETERS if quick else FIT_PARAMETERS
    counter = Counter(len(MODELS) * (1 + len(nodes) * len(STRATEGIES)) + len(FIT_NODES) * len(parameters), progress)
    runs = fig9(nodes, _counter=counter)
    samples, fits = costmodel_fit(FIT_NODES, parameters, _counter=counter)
    counter.finish()
    rep = Reproduction("MG-WFBP §V (Fig. 9, cost-model fit)")
    rep.tables["fig9_runs"] = runs
    rep.tables["fig9"] = fig9_comparison(runs)
    rep.tables["allreduce_microbenchmark"] = samples
    rep.tables["costmodel_fit"] = fits
    rep.tables["paper_values"] = paper_values_table()
    rep.figures["fig9"] = lambda: fig9_figure(runs)
    rep.figures["costmodel_fit"] = lambda: costmodel_figure(samples, fits)
    return rep
