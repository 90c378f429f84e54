"""The markdown table of docs/capture.md "Sampled layer rows" from the JSON files of
``bench_capture_overhead.py --json`` (one or more runs; ``gpu_capture_sampled.sh`` writes them):
per run and copy, the median iteration, the overhead over all timed iterations (ratio of means against
plain DDP), that of the sampled iterations alone, and the ratio of medians.

    python benchmarks/summarize_capture_overhead.py gpu-out/r50-a.json gpu-out/r50-b.json gpu-out/r18.json
"""

from __future__ import annotations

import json
import statistics
import sys


def rows(path: str) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    args, times = data["args"], data["times_s"]
    plain_mean = statistics.mean(times["plain"])
    what = f"{args['model']}, {args['batch_size']} ({path.rsplit('/', 1)[-1]}, {data['device']})"
    out = [f"| {what} | plain DDP | {statistics.median(times['plain']) * 1e3:.2f} ms | - | - | - |"]
    if "comm hook" in times:
        ratio = statistics.mean(times["comm hook"]) / plain_mean
        medians = statistics.median(times["comm hook"]) / statistics.median(times["plain"])
        out.append(f"| {what} | torch's `allreduce_hook` | {statistics.median(times['comm hook']) * 1e3:.2f} ms | "
                   f"{(ratio - 1) * 100:+.1f} % | - | {(medians - 1) * 100:+.1f} % |")
    copies = data.get("copies") or {"recorded": {**data, "layer_every": args["layer_every"][0]
                                                 if isinstance(args["layer_every"], list) else args["layer_every"]}}
    for mode, copy in copies.items():
        sampled = copy.get("overhead_sampled_iterations_ratio_of_means")
        out.append(f"| {what} | capture, K = {copy['layer_every']} | {statistics.median(times[mode]) * 1e3:.2f} ms | "
                   f"**{(copy['overhead_ratio_of_means'] - 1) * 100:+.1f} %** | "
                   f"{'-' if sampled is None else f'{(sampled - 1) * 100:+.1f} %'} | "
                   f"{(copy['overhead_ratio_of_medians'] - 1) * 100:+.1f} % |")
    return out


def main(argv: list[str]) -> int:
    print("| model, batch (run, device) | copy | median | over all timed iterations (ratio of means) | "
          "sampled iterations alone | ratio of medians |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for path in argv:
        try:
            print("\n".join(rows(path)))
        except (OSError, ValueError, KeyError) as exc:
            print(f"| {path}: not readable ({exc}) | | | | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
