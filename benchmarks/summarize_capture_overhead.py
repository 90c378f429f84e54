"""The markdown table of docs/capture.md "Sampled layer rows" from the JSON files of
``bench_capture_overhead.py --json`` (one or more runs; ``gpu_capture_sampled.sh`` writes them):
per run and copy, the median iteration, the overhead over all timed iterations (robust to the other jobs'
spikes, :func:`bench_capture_overhead.robust_overhead`, and the plain ratio of means against plain DDP), that of
the sampled iterations alone, and the ratio of medians.

    python benchmarks/summarize_capture_overhead.py gpu-out/r50-a.json gpu-out/r50-b.json gpu-out/r18.json
"""

from __future__ import annotations

import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_capture_overhead import robust_overhead  # noqa: E402


def rows(path: str) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    args, times = data["args"], data["times_s"]
    plain_mean = statistics.mean(times["plain"])
    blocks = "" if args.get("block", 1) == 1 else f", blocks of {args['block']}"
    what = f"{args['model']}, {args['batch_size']} ({path.rsplit('/', 1)[-1]}, {data['device']}{blocks})"
    out = [f"| {what} | plain DDP | {statistics.median(times['plain']) * 1e3:.2f} ms | - | - | - | - |"]
    if "comm hook" in times:
        ratio = statistics.mean(times["comm hook"]) / plain_mean
        medians = statistics.median(times["comm hook"]) / statistics.median(times["plain"])
        robust, _ = robust_overhead(times["comm hook"], times["plain"], set())
        out.append(f"| {what} | torch's `allreduce_hook` | {statistics.median(times['comm hook']) * 1e3:.2f} ms | "
                   f"{(robust - 1) * 100:+.1f} % | {(ratio - 1) * 100:+.1f} % | - | {(medians - 1) * 100:+.1f} % |")
    copies = data.get("copies") or {"recorded": {**data, "layer_every": args["layer_every"][0]
                                                 if isinstance(args["layer_every"], list) else args["layer_every"]}}
    warmup = args.get("warmup", 2)
    for mode, copy in copies.items():
        sampled = copy.get("overhead_sampled_iterations_ratio_of_means")
        block = args.get("block", 1)  # --block B: one time per block of B iterations
        on = {(i - warmup) // block for i in copy.get("layer_iterations", []) if i >= warmup}
        robust, _ = robust_overhead(times[mode], times["plain"], on)
        before = ", comm hook every iteration (before)" if copy.get("hook_every_iteration") and copy["layer_every"] > 1 else ""
        out.append(f"| {what} | capture, K = {copy['layer_every']}{before} | {statistics.median(times[mode]) * 1e3:.2f} ms | "
                   f"**{(robust - 1) * 100:+.1f} %** | {(copy['overhead_ratio_of_means'] - 1) * 100:+.1f} % | "
                   f"{'-' if sampled is None else f'{(sampled - 1) * 100:+.1f} %'} | "
                   f"{(copy['overhead_ratio_of_medians'] - 1) * 100:+.1f} % |")
    return out


def main(argv: list[str]) -> int:
    print("| model, batch (run, device) | copy | median | over all timed iterations, robust | ratio of means | "
          "sampled iterations alone (ratio of means) | ratio of medians |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for path in argv:
        try:
            print("\n".join(rows(path)))
        except (OSError, ValueError, KeyError) as exc:
            print(f"| {path}: not readable ({exc}) | | | | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
