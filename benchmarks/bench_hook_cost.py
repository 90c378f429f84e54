"""Host cost per layer of the mechanisms a per-layer capture can use (docs/capture.md "Overhead").

A chain of N tiny ``Linear`` layers (batch 1, so the host work, not the arithmetic, sets the time) runs forward and
backward under each variant, in rotating order, `--repeats` rounds of `--iterations` iterations; printed per
variant: the median iteration time and its excess over the plain model divided by N (us per layer). Variants:

* ``plain``: no hooks.
* ``capture``: ddlsim's :class:`~ddlsim.capture.layer_hooks.LayerHooks` as the DDP and PS captures use them
  (forward pre/post module hooks, two hooks registered on the autograd node of each layer's output per iteration,
  the rows, written at the end of the iteration).
* ``capture-each-row``: the same, each row written when it is made (``defer=False``; the PS worker's way before
  2026-11-27).
* ``module-hooks``: two no-op forward module hooks per layer (registered once): the floor of the forward part.
* ``node-hooks``: ``module-hooks`` plus registering two no-op hooks on each output's autograd node per iteration
  (what the capture's backward timing needs; a node lives one iteration, so they cannot be registered once).
* ``accumulate-hooks``: ``module-hooks`` plus one no-op ``register_post_accumulate_grad_hook`` per parameter,
  registered once (a registered-once backward end point; no start point: the previous layer's end would be shared).
* ``sampled-K``: the capture with layer rows on every K-th iteration only (``--layer-every K``).

    PYTHONPATH=python OMP_NUM_THREADS=1 python benchmarks/bench_hook_cost.py --layers 100 --iterations 50 --repeats 5

``--device cuda`` times the same on a GPU (CUDA events as the capture's time points).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time


def _chain(layers: int, width: int, device):
    import torch

    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods).to(device)


class _Variant:
    def __init__(self, name: str, model, out_dir: str, cuda: bool, every: int = 1):
        import torch

        self.name, self.model, self.hooks, self.cuda = name, model, None, cuda
        layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        if name in ("capture", "capture-each-row") or name.startswith("sampled"):
            from ddlsim.capture.layer_hooks import LayerHooks
            from ddlsim.capture.recorder import RankRecorder

            self.hooks = LayerHooks(model, RankRecorder(out_dir, len(os.listdir(out_dir)), "worker"), cuda=cuda,
                                    defer=name != "capture-each-row", layer_every=every, layer_warmup=0)
        if name in ("module-hooks", "node-hooks", "accumulate-hooks"):
            def pre(module, args):
                return None

            def post(module, args, output):
                if name == "node-hooks" and output.grad_fn is not None:
                    output.grad_fn.register_prehook(lambda grads: None)
                    output.grad_fn.register_hook(lambda grads_in, grads_out: None)

            for m in layers:
                m.register_forward_pre_hook(pre)
                m.register_forward_hook(post)
        if name == "accumulate-hooks":
            for p in model.parameters():
                p.register_post_accumulate_grad_hook(lambda param: None)

    def step(self, iteration: int, x) -> None:
        if self.cuda and self.hooks is None:  # the capture synchronises at each iteration's start: every variant does
            import torch

            torch.cuda.synchronize()
        if self.hooks is not None:
            self.hooks.begin_iteration(iteration)
        self.model(x).sum().backward()
        if self.hooks is not None:
            self.hooks.end_rows()  # the capture's end of an iteration: its rows written (none left with defer=False)
            self.hooks.rec.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=100)
    parser.add_argument("--width", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=50, help="timed iterations per variant and round")
    parser.add_argument("--repeats", type=int, default=5, help="rounds (variants in rotating order)")
    parser.add_argument("--every", type=int, action="append", default=None, help="sampled-K variants (default: 10)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    import torch

    cuda = args.device == "cuda"
    if not cuda:
        torch.set_num_threads(1)
    device = torch.device(args.device)
    names = ["plain", "capture", "capture-each-row", "module-hooks", "node-hooks", "accumulate-hooks"] + \
            [f"sampled-{k}" for k in (args.every or [10])]
    x = torch.randn(1, args.width, device=device)
    times: dict[str, list[float]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as out:
        variants = [_Variant(n, _chain(args.layers, args.width, device), out, cuda,
                             int(n.split("-")[1]) if n.startswith("sampled") else 1) for n in names]
        for v in variants:  # warm-up
            for i in range(3):
                v.step(i, x)
        iteration = 3
        for r in range(args.repeats):
            order = variants[r % len(variants):] + variants[:r % len(variants)]
            for v in order:
                if cuda:
                    torch.cuda.synchronize()
                start = time.perf_counter()
                for i in range(args.iterations):
                    v.step(iteration + i, x)
                if cuda:
                    torch.cuda.synchronize()
                times[v.name].append((time.perf_counter() - start) / args.iterations)
            iteration += args.iterations
        for v in variants:
            if v.hooks is not None:
                v.hooks.rec.close()
    base, floor = statistics.median(times["plain"]), min(times["plain"])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{args.layers} Linear({args.width},{args.width})+ReLU layers, batch 1, {args.device}, {args.repeats} rounds x "
          f"{args.iterations} iterations; load average {load:.2f}")
    result = {}
    for n in names:
        med = statistics.median(times[n])
        per_layer = (med - base) / args.layers * 1e6
        per_layer_min = (min(times[n]) - floor) / args.layers * 1e6  # the fastest rounds: least disturbed by other load
        result[n] = {"median_s": med, "per_layer_us": per_layer, "per_layer_us_min": per_layer_min, "rounds_s": times[n]}
        print(f"  {n:18s} {med * 1e3:8.3f} ms per iteration   {per_layer:+7.2f} us per layer (medians), "
              f"{per_layer_min:+7.2f} (fastest rounds)   (rounds {min(times[n]) * 1e3:.3f}-{max(times[n]) * 1e3:.3f} ms)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"args": vars(args), "load": load, "variants": result}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
