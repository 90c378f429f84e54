"""The host costs benchmarks/host_dispatch.py measures beyond the per-call chains (docs/compute-model.md, "Host
extras"): a Conv2d with a bias and a Linear without one, and the start of ``loss.backward()``; how the roofline uses
each only where the device's run has it (on paper), the benchmark's own arithmetic (the intercept, the median of
runs) and its command line."""

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddlsim.workload import roofline
from ddlsim.workload.devices import MICROBENCH, host_dispatch_from_benchmark
from ddlsim.workload.zoo import load_model
from roofline_helpers import zoo_digest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "host_dispatch.py"


def _load_bench():
    spec = importlib.util.spec_from_file_location("host_dispatch_bench_extras", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load_bench()

CHAINS = {"conv2d": (30.0, 40.0), "batchnorm2d": (35.0, 30.0), "relu_module": (8.0, 12.0), "maxpool2d": (10.0, 14.0),
          "adaptive_avgpool2d": (11.0, 13.0), "dropout": (12.0, 9.0), "linear": (25.0, 30.0),
          "identity_module": (2.0, 0.5), "relu_fn": (6.0, 12.0), "add_inplace": (7.0, 4.0), "cat4_split": (20.0, 16.0),
          "view": (6.0, 3.0), "mul": (7.0, 12.0)}
EXTRAS = {"conv2d_bias": (41.0, 57.0), "linear_nobias": (19.0, 23.0)}


def bench_doc(extras=False, start=None):
    chains = dict(CHAINS, **(EXTRAS if extras else {}))
    doc = {"host_us": {m: {k: {"fwd_us": f, "bwd_us": b} for k, (f, b) in chains.items()}
                       for m in ("fp32", "fp16_autocast")},
           "zero_grad_us_per_param": 1.25, "tiny_kernel_gpu_us": 2.5, "device": "test", "cpu": "test", "torch": "t"}
    if start is not None:
        doc["backward_start_us"] = start
    return doc


def with_host(monkeypatch, hd, device="H100"):
    monkeypatch.setitem(MICROBENCH, device, dataclasses.replace(MICROBENCH[device], host_dispatch=hd))


def host_of(model, layer_name, device="H100", precision="fp32", batch=32):
    """(forward host s, backward host s) of one layer in the pipeline's steps."""
    steps, _ = roofline.layer_steps(model, device, precision, batch)
    i = next(n for n, layer in enumerate(model.layers) if layer.name == layer_name)
    return tuple(sum(h for (j, phase), st in steps if j == i and phase == p for h, _ in st) for p in (0, 1))


# --- the stored presets: the model unchanged ---------------------------------------------------------------------

def test_without_the_new_constants_every_zoo_cnn_has_the_layer_times_of_before(monkeypatch):
    """A host run without the new kinds and the backward start (every stored run so far): every zoo CNN's per-layer
    times on the H100, H200, B200 and A100, four precisions, batch 32 and 128, are byte for byte those of the tree
    before them (digest taken on main at 6e676a1 with the same monkeypatching; with the stored runs and tables
    instead of these fixed constants both trees give 2a15e671...). Fixed host constants and no tables, so that a
    new stored run (the next device session's) does not move it."""
    for name in ("conv_table", "norm_table", "linear_table", "pointwise_table"):
        monkeypatch.setattr(roofline, name, lambda device, data_dir=None: None)
    hd = host_dispatch_from_benchmark(bench_doc())
    for device in ("H100", "H200"):
        monkeypatch.setitem(MICROBENCH, device, dataclasses.replace(MICROBENCH[device], host_dispatch=hd,
                                                                    norm_share=None, conv_3x3_share=None))
    assert zoo_digest() == "cb6275cabebdb049474f52ac574c9a6a6806850cf8fcfb5c49d2435d0decbe2d"


# --- reading the run ---------------------------------------------------------------------------------------------

def test_the_new_kinds_and_the_backward_start_are_read_only_where_the_run_has_them():
    old = host_dispatch_from_benchmark(bench_doc())
    assert old.backward_start_us is None and not old.has("fp32", "conv2d_bias") and "linear_nobias" not in old.fwd_us[
        "autocast"]
    new = host_dispatch_from_benchmark(bench_doc(extras=True, start=55.5))
    assert new.backward_start_us == 55.5 and new.has("autocast", "conv2d_bias") and new.has("fp32", "linear_nobias")
    assert new.fwd_us["fp32"]["conv2d_bias"] == 41.0 and new.bwd_us["fp32"]["linear_nobias"] == 23.0
    # a chain that failed in the run counts as not measured (the model keeps the conv2d chain)
    doc = bench_doc(extras=True)
    doc["host_us"]["fp32"]["conv2d_bias"] = {"error": "RuntimeError: boom"}
    hd = host_dispatch_from_benchmark(doc)
    assert not hd.has("fp32", "conv2d_bias") and hd.has("autocast", "conv2d_bias")


# --- the model: on paper -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("model_name,layer_name", [("alexnet", "features.3"), ("vgg16", "features.2")])
def test_a_convolution_with_a_bias_costs_the_biased_call(monkeypatch, model_name, layer_name):
    model = load_model(model_name)
    counts = roofline.host_calls(model_name)[layer_name]["fp32"]
    assert counts.get("conv2d") == 1
    with_host(monkeypatch, host_dispatch_from_benchmark(bench_doc()))
    f0, b0 = host_of(model, layer_name)
    with_host(monkeypatch, host_dispatch_from_benchmark(bench_doc(extras=True)))
    f1, b1 = host_of(model, layer_name)
    # one conv2d call becomes one conv2d_bias call: +11 us forward, +17 us backward, nothing else
    assert f1 - f0 == pytest.approx(11e-6, abs=1e-15) and b1 - b0 == pytest.approx(17e-6, abs=1e-15)


def test_a_convolution_without_a_bias_and_a_linear_with_one_keep_their_calls(monkeypatch):
    model = load_model("resnet50")
    with_host(monkeypatch, host_dispatch_from_benchmark(bench_doc()))
    before = [host_of(model, n) for n in ("layer1.0.conv2", "fc")]
    with_host(monkeypatch, host_dispatch_from_benchmark(bench_doc(extras=True)))
    assert [host_of(model, n) for n in ("layer1.0.conv2", "fc")] == before


def test_a_linear_without_a_bias_costs_the_unbiased_call(monkeypatch):
    # a table of one Linear layer, 256 -> 512 without a bias (mm: reads K x N weights and K inputs per sample)
    k, n = 256, 512
    table = {"fc": ((roofline.Kernel("mm", (0, 2 * k * n), (k * n, k), (0, n)),), ())}
    monkeypatch.setattr(roofline, "kernel_table", lambda name: table)
    layer = type("L", (), {"name": "fc"})()
    model = type("M", (), {"name": "custom"})()
    hd = host_dispatch_from_benchmark(bench_doc(extras=True))
    assert roofline.call_counts(hd, "fp32", {"linear": 1, "view": 1}, model, layer) == {"view": 1, "linear_nobias": 1}
    assert roofline.call_counts(host_dispatch_from_benchmark(bench_doc()), "fp32", {"linear": 1}, model, layer) == {
        "linear": 1}
    biased = {"fc": ((roofline.Kernel("addmm", (0, 2 * k * n), (k * n + n, k), (0, n)),), ())}
    monkeypatch.setattr(roofline, "kernel_table", lambda name: biased)
    assert roofline.call_counts(hd, "fp32", {"linear": 1}, model, layer) == {"linear": 1}


@pytest.mark.parametrize("precision", ["tf32", "fp16"])
def test_the_backward_start_on_paper(monkeypatch, precision):
    """ResNet-50's layer1.0.conv2 alone, host-bound (host costs x 1000): the step is zero_grad + every host cost +
    the backward start + the last kernel; without the start the same less exactly the start."""
    model = load_model("resnet50")
    layer = next(x for x in model.layers if x.name == "layer1.0.conv2")
    model = dataclasses.replace(model, layers=(layer,))
    scaled = {k: (f * 1000, b * 1000) for k, (f, b) in CHAINS.items()}
    doc = bench_doc(start=400.0)
    for m in doc["host_us"]:
        doc["host_us"][m] = {k: {"fwd_us": f, "bwd_us": b} for k, (f, b) in scaled.items()}
    with_host(monkeypatch, host_dispatch_from_benchmark(doc))
    fwd_k, bwd_k = roofline.layer_costs(model, layer, "H100", precision, 32)
    g_last = max(bwd_k[-1].gpu_s, 2.5e-6)
    (f, b), = roofline.layer_times_s(model, "H100", precision, 32)
    h_f, h_b = 30e-3, 40e-3  # conv2d x 1000, us -> s
    assert f + b == pytest.approx(1.25e-6 + h_f + h_b + 400e-6 + g_last, rel=1e-12)
    host, _, step = roofline.step_totals_s(model, "H100", precision, 32)
    assert host == pytest.approx(1.25e-6 + h_f + h_b + 400e-6, rel=1e-12) and step == pytest.approx(f + b, rel=1e-12)
    del doc["backward_start_us"]
    with_host(monkeypatch, host_dispatch_from_benchmark(doc))
    (f0, b0), = roofline.layer_times_s(model, "H100", precision, 32)
    assert f0 == f and (f + b) - (f0 + b0) == pytest.approx(400e-6, rel=1e-9)


def test_a_negative_measured_start_counts_as_none(monkeypatch):
    model = load_model("alexnet")
    with_host(monkeypatch, host_dispatch_from_benchmark(bench_doc()))
    none = roofline.layer_times_s(model, "H100", "fp16", 32)
    with_host(monkeypatch, host_dispatch_from_benchmark(bench_doc(start=-3.0)))
    assert roofline.layer_times_s(model, "H100", "fp16", 32) == none
    host0, gpu0, step0 = roofline.step_totals_s(model, "H100", "fp16", 32)
    with_host(monkeypatch, host_dispatch_from_benchmark(bench_doc(start=250.0)))
    times = roofline.layer_times_s(model, "H100", "fp16", 32)
    # the start enters the host once, before the first backward kernel; the forward is as before; with these
    # small host costs the GPU is still busy with the forward, so the step grows by less than the start
    assert [f for f, _ in times] == [f for f, _ in none]
    host1, gpu1, step1 = roofline.step_totals_s(model, "H100", "fp16", 32)
    assert host1 - host0 == pytest.approx(250e-6, rel=1e-9) and gpu1 == gpu0 and step0 <= step1 < step0 + 250e-6


# --- the benchmark's arithmetic and command line -----------------------------------------------------------------

def test_the_intercept_on_paper():
    # T(L) = 30 + 5 L: T(1) = 35, T(100) = 530
    assert bench.intercept(35.0, 530.0, 100) == pytest.approx(30.0, abs=1e-12)
    assert bench.intercept(12.0, 12.0, 20) == 12.0


def test_the_backward_start_measurement_on_the_cpu():
    torch = pytest.importorskip("torch")
    out = bench.backward_start(torch, torch.device("cpu"), lambda: None, 2, 4, 4, 5, 2)
    assert out["n"] == 5 and out["repeats"] == 2
    assert out["start_us"] == bench.intercept(out["t1_us"], out["tn_us"], 5)
    assert out["scalar_start_us"] == bench.intercept(out["scalar_t1_us"], out["scalar_tn_us"], 5)
    assert out["t1_us"] > 0 and out["tn_us"] > 0


def test_the_median_of_runs_on_paper():
    docs = [{"host_us": {"fp32": {"conv2d": {"fwd_us": v, "bwd_us": 10 * v}}}, "device": d, "flag": True,
             "only_first": 7.0 if i == 0 else "x", "backward_start_us": v + 1}
            for i, (v, d) in enumerate(((3.0, "A"), (1.0, "B"), (2.0, "C")))]
    docs[2]["host_us"]["fp32"]["conv2d_bias"] = {"fwd_us": 9.0}  # in one run only: that run's value
    docs[1]["host_us"]["fp32"]["conv2d"]["error"] = "RuntimeError"  # text: the first found
    out = bench.median_doc(docs)
    assert out["host_us"]["fp32"]["conv2d"] == {"fwd_us": 2.0, "bwd_us": 20.0, "error": "RuntimeError"}
    assert out["backward_start_us"] == 3.0 and out["device"] == "A" and out["flag"] is True
    assert out["only_first"] == 7.0 and out["median_of"] == 3
    assert out["host_us"]["fp32"]["conv2d_bias"] == {"fwd_us": 9.0}
    # two runs: the mean of the two middle ones (statistics.median)
    assert bench.median_doc(docs[:2])["host_us"]["fp32"]["conv2d"]["fwd_us"] == 2.0


def test_an_older_run_counts_where_it_has_a_number():
    """Runs of an older benchmark (no backward_start, no conv2d_bias) pooled with newer ones: each number is the
    median of the runs that have it, checked against a brute-force median of every run's value at each place."""
    import random

    rng = random.Random(7)
    for trial in range(200):
        n = rng.randint(1, 6)
        docs = []
        for i in range(n):
            newer = i == 0 or rng.random() < 0.5  # the first run is always a newer one
            host = {"conv2d": {"fwd_us": rng.uniform(1, 100), "bwd_us": rng.uniform(1, 100)}}
            if newer:
                host["conv2d_bias"] = {"fwd_us": rng.uniform(1, 100), "bwd_us": rng.uniform(1, 100)}
            doc = {"host_us": {"fp32": host}, "zero_grad_us_per_param": rng.uniform(1, 5), "device": f"D{i}"}
            if newer:
                doc["backward_start_us"] = rng.uniform(-10, 300)
            docs.append(doc)
        out = bench.median_doc(docs)

        def brute(path):
            vals = []
            for d in docs:
                for k in path:
                    d = d.get(k) if isinstance(d, dict) else None
                if d is not None:
                    vals.append(d)
            vals.sort()
            m = len(vals)
            return vals[m // 2] if m % 2 else (vals[m // 2 - 1] + vals[m // 2]) / 2

        for kind in ("conv2d", "conv2d_bias"):
            for side in ("fwd_us", "bwd_us"):
                assert out["host_us"]["fp32"][kind][side] == pytest.approx(brute(("host_us", "fp32", kind, side)),
                                                                         rel=1e-12), trial
        assert out["backward_start_us"] == pytest.approx(brute(("backward_start_us",)), rel=1e-12)
        assert out["zero_grad_us_per_param"] == pytest.approx(brute(("zero_grad_us_per_param",)), rel=1e-12)
        assert out["device"] == "D0" and out["median_of"] == n


def _cli(*args, timeout=240):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=timeout)


def test_median_cli_writes_the_median_and_refuses_a_non_run(tmp_path):
    runs = []
    for i, v in enumerate((5.0, 9.0, 7.0)):
        doc = bench_doc(start=v)
        runs.append(tmp_path / f"r{i}.json")
        runs[-1].write_text(json.dumps(doc))
    out = tmp_path / "host_dispatch_h200.json"
    (tmp_path / "host_dispatch_h200.tmp").write_text("a user's file")
    run = _cli("--median", *map(str, runs), "--out", str(out))
    assert run.returncode == 0, run.stderr
    assert json.loads(out.read_text())["backward_start_us"] == 7.0
    assert (tmp_path / "host_dispatch_h200.tmp").read_text() == "a user's file"
    assert host_dispatch_from_benchmark(json.loads(out.read_text())).backward_start_us == 7.0
    bad = tmp_path / "bad.json"
    bad.write_text("[1]")
    out2 = tmp_path / "x.json"
    run = _cli("--median", str(runs[0]), str(bad), "--out", str(out2))
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1 and "bad.json" in run.stderr
    assert "Traceback" not in run.stderr and not out2.exists()


@pytest.mark.parametrize("card", ["h100", "h200"])
def test_the_stored_host_table_is_the_median_of_the_stored_runs(tmp_path, card):
    """data/kernels/host_dispatch_<card>.json is `--median` of the card's stored runs (docs/compute-model.md, "Run
    4": the three of run 4 first, then the earlier session's), byte for byte: a table edited by hand, or a run
    added without the table rebuilt, fails here."""
    data = ROOT / "docs" / "data"
    runs = [data / f"host-dispatch-{card}-run4-{i}.json" for i in (1, 2, 3)] + [data / f"host-dispatch-{card}-run1.json"]
    out = tmp_path / f"host_dispatch_{card}.json"
    run = _cli("--median", *map(str, runs), "--out", str(out))
    assert run.returncode == 0, run.stderr
    stored = ROOT / "python" / "ddlsim" / "data" / "kernels" / f"host_dispatch_{card}.json"
    assert out.read_bytes() == stored.read_bytes()


def test_without_a_gpu_it_exits_2_in_one_line(tmp_path, monkeypatch, capsys):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "h.json"
    assert bench.main(["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and "no GPU" in err
    assert not out.exists()


def test_a_quick_cpu_run_has_the_new_kinds_and_keeps_a_neighbouring_tmp_file(tmp_path):
    """--only the two new chains, --quick on the CPU: the JSON has them in both modes and the backward start, and the
    write goes through ddlsim's atomic write (before: OUT.tmp beside --out was overwritten and renamed away)."""
    pytest.importorskip("torch")
    out = tmp_path / "h.json"
    (tmp_path / "h.tmp").write_text("a user's file")
    run = _cli("--device", "cpu", "--quick", "--only", "conv2d_bias", "linear_nobias", "--out", str(out))
    assert run.returncode == 0, run.stderr
    doc = json.loads(out.read_text())
    for mode in ("fp32", "fp16_autocast"):
        assert set(doc["host_us"][mode]) == {"conv2d_bias", "linear_nobias"}
        assert all(doc["host_us"][mode][k]["fwd_us"] > 0 for k in ("conv2d_bias", "linear_nobias"))
    assert doc["backward_start_us"] == doc["backward_start"]["start_us"]
    assert (tmp_path / "h.tmp").read_text() == "a user's file"
    run = _cli("--device", "cpu", "--only", "conv3d", "--out", str(tmp_path / "y.json"))
    assert run.returncode == 2 and "conv3d" in run.stderr and len(run.stderr.strip().splitlines()) == 1
