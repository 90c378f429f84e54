#!/usr/bin/env python3
"""Fuzz every ddlsim reader and the scenario parser in long-lived worker processes.

    PYTHONPATH=python python tools/fuzz_readers.py --inputs 100000 --seed 1 --workers 2 --out fuzz-out

Samples: small valid files of every format that ddlsim reads, made by ddlsim
itself at the start (a tiny parameter-server and ring run, exported to every
readable format; a capture directory written with the capture recorder; a
network-operator trace; the scenario and cost-model examples of
``examples/``), kept in ``OUT/samples``.

Input ``i`` of seed ``S`` is a pure function of ``(S, i)``: a target (the
reader), one of its samples and 1-4 mutations, some structure-aware (a number
becomes 1e30 / NaN / inf / -1 / a huge integer, a value changes type, a value
is nested 5,000 deep, a key or line is removed or duplicated) and some blind
(bit flips, truncation, byte insertion), and now and then a file made a FIFO
with no writer (a reader must refuse it, not wait on it). Workers write the input to a scratch
directory and run the reader on it. An input passes when the reader returns or
raises one of ddlsim's own errors (:mod:`ddlsim.errors`) other than
``InternalError``; anything else - another exception, a MemoryError under the
worker's address-space limit (``RLIMIT_AS``), a time-out (an alarm in the
worker, a watchdog in the parent for hangs the alarm cannot break), a crash or
abort of the worker - is a failure: the worker is restarted when it died, and
the input is saved to ``OUT/findings/<kind>-<signature>/`` (the first few of
each signature) with ``info.json`` (seed, index, target, traceback).
``--replay DIR`` runs the reader on a saved input in this process and prints
the traceback.

The ``replay`` target is what ``ddlsim analyze``, ``replay`` and ``plan --profile`` do with a real capture (made with
``ddlsim capture ddp`` and ``capture ps`` at the start, where PyTorch is installed); most of its mutations change
one fact of the log's metadata (the job's and the host's), which those commands read. The other targets are the
files ddlsim reads back from itself, each driven as its command drives it: ``simulate`` (a scenario run under a
run budget, its ``--out`` read back), ``plan`` (``capture ddp --plan``), ``idlecurve`` (``replay --idle-curve``),
``sweep`` (a sweep file, a sweep's ``--out``), ``merge`` (``capture merge`` of a real capture, read back),
``validate`` (``validate --captures``), ``cache`` (the results cache), ``convert`` (every format written, the
readable ones read back) and ``thesisruns`` (``reproduce thesis-network --runs``: the runs it skips and reads, and
``reproduce.adaptive_priority`` on them); where a command's own output does not read back, that is a failure too (docs/interop.md).
``--targets`` drives some readers only; a reader without samples (``validate`` without PyTorch) is left out.

Progress lines go to stderr (inputs/s and failures by kind); the last line on
stdout is the summary, ``fuzz_readers: N inputs, F failures (...)``; the exit
status is 1 when there were failures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGETS = ("events", "sketchdlc", "sketchdlc_records", "chakra", "kineto", "netop", "capture", "scenario", "fit",
           "costmodel", "replay", "simulate", "plan", "idlecurve", "sweep", "merge", "validate", "cache", "convert",
           "thesisruns", "apply")
#: the run budget the ``simulate`` target's runs get (--max-memory): an input the budget admits must stay within the
#: worker's address-space limit and time limit, or the estimate did not bound the real cost
SIMULATE_BUDGET_BYTES = 192 << 20
INTERESTING_NUMBERS = ("1e30", "-1e30", "1e309", "nan", "NaN", "inf", "-inf", "Infinity", "-1", "0", "-0", "1.5",
                       "9" * 40, "-" + "9" * 40, "9223372036854775807", "9223372036854775808", "-9223372036854775809",
                       "18446744073709551616", "4294967296", "2147483648", "1e-30", "0x10", "1_000", "")
JSON_VALUES: tuple[Any, ...] = (float("nan"), float("inf"), float("-inf"), 1e30, -1e30, -1, 0, 10 ** 30, -(10 ** 30),
                                2 ** 63, 2 ** 64, -(2 ** 63) - 1, 2 ** 31, 1.5, True, False, None, "", "x", "nan",
                                [], {}, [1, 2], {"a": 1}, "0", "-1", "\u0000", "\u00e9")
DEEP = 5000
STARTUP_LIMIT_S = 600.0  # a worker's warm-up (imports, every reader's sample once), wall time
MAX_SAVED_PER_SIGNATURE = 3
_NUMBER_TOKEN = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


# ============================================================================ samples (made by ddlsim itself)


def make_samples(directory: Path) -> None:
    """Small valid inputs of every target, one sub-directory per sample: ``<target>/<name>/files...``."""
    from ddlsim.api import simulate
    from ddlsim.capture.recorder import RankRecorder
    from ddlsim.trace.formats import write_trace
    from ddlsim.trace.schema import COLUMN_NAMES, iter_rows

    tiny = {"name": "tiny", "layers": [{"name": "a", "params": 1000, "fwd_ms": 0.1, "bwd_ms": 0.2}]}
    runs = {
        "ps": simulate({"workers": 2, "iterations": 1, "strategy": {"kind": "ps", "servers": 1}, "model": tiny}).events,
        "ring": simulate({"workers": 2, "iterations": 1, "strategy": {"kind": "ring"}, "model": tiny}).events,
    }
    directory.mkdir(parents=True, exist_ok=True)

    def sample(target: str, name: str) -> Path:
        path = directory / target / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    for name, log in runs.items():
        write_trace(log, sample("events", name) / "run.events.parquet", "events")
        shutil.copytree(directory / "events" / name, sample("convert", name), dirs_exist_ok=True)  # with its side tables
        write_trace(log, sample("chakra", name) / "trace", "chakra")
        write_trace(log, sample("kineto", name), "kineto")
        if name == "ring":  # the profiler's compressed form too
            import gzip

            for path in sorted((directory / "kineto" / name).glob("*.json")):
                (sample("kineto", "ring_gz") / (path.name + ".gz")).write_bytes(gzip.compress(path.read_bytes(), mtime=0))
        capture = sample("capture", name)
        rows = list(iter_rows(log, COLUMN_NAMES))
        for rank in sorted({row.rank for row in rows}):
            role = next(row.role for row in rows if row.rank == rank)
            recorder = RankRecorder(capture, rank, role, host=f"host{rank}")
            for row in rows:
                if row.rank != rank:
                    continue
                fields = {k: getattr(row, k) for k in ("iteration", "layer", "tensor", "peer", "message", "bytes",
                                                        "stream", "name", "coll_type", "collective", "step")}
                recorder.row(row.kind, row.op, row.start_ns, row.end_ns, deps=row.deps, row_id=row.id, **fields)
            recorder.close()
    sketch = sample("sketchdlc", "ps")
    write_trace(runs["ps"], sketch, "sketchdlc")
    records = sample("sketchdlc_records", "ps")
    shutil.copy(sketch / "w0.txt", records / "w0.txt")
    (sample("netop", "two") / "trace.txt").write_text(
        "# time_s, parameter, bytes, source, destination\n"
        "0.000000, conv1/weights/read, 37632, worker0, ps0\n"
        "0.000125, conv1/biases/read, 256, worker1, ps0\n"
        "0.001000 fc/weights/read 4096 /job:ps/task:0/device:CPU:0 /job:worker/replica:0/task:1/device:GPU:0\n",
        encoding="utf-8")
    for toml in sorted((ROOT / "examples").glob("*.toml")):
        shutil.copy(toml, sample("scenario", toml.stem) / "scenario.toml")
    from ddlsim.workload.zoo import load_model

    profiled = sample("scenario", "lenet5_profile")  # the scenario names a CSV of measured layer times
    (profiled / "scenario.toml").write_text('workers = 2\n\n[model]\nname = "lenet5"\nprofile = "profile.csv"\n',
                                            encoding="utf-8")
    (profiled / "profile.csv").write_text("layer,fwd_ms,bwd_ms\n" + "".join(
        f"{layer.name},{0.01 * (i + 1):.2f},{0.02 * (i + 1):.2f}\n" for i, layer in enumerate(load_model("lenet5").layers)),
        encoding="utf-8")
    make_capture_samples(sample)
    shutil.copytree(directory / "capture" / "ring", sample("merge", "recorded"), dirs_exist_ok=True)  # no job.json
    make_simulate_samples(sample)
    make_plan_samples(sample)
    make_sweep_samples(sample)
    make_cache_samples(sample)
    make_thesis_runs_samples(sample)
    shutil.copy(ROOT / "examples" / "osu_allreduce_8nodes.txt", sample("fit", "osu") / "table.txt")
    shutil.copy(ROOT / "examples" / "allreduce_times.csv", sample("fit", "csv") / "table.txt")
    from ddlsim.plan.cost import fit_tables

    fit_tables([ROOT / "examples" / "allreduce_times.csv"]).save(sample("costmodel", "fitted") / "cost.json")


def make_capture_samples(sample) -> None:
    """The ``replay`` target's samples: real captures (a DDP and a PS job, LeNet-5, 2 workers, 3 iterations) made
    with ``ddlsim capture`` (PyTorch needed), and simulated runs' logs (a ring and a PS job: their metadata holds
    the scenario that replay reads). Their metadata (the job's and the host's facts) is what replay and the
    planner read."""
    import importlib.util

    from ddlsim.api import simulate

    for name, strategy in (("simulated_ring", "ring"), ("simulated_ps", "ps")):
        out = sample("replay", name)
        shutil.rmtree(out)
        simulate(model="lenet5", workers=2, iterations=2, strategy=strategy).save(out, timeline=False)
        _keep_parquet(out)
    if importlib.util.find_spec("torch") is None:
        return
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "OMP_NUM_THREADS": "1"}
    for job, extra in (("ddp", []), ("ps", ["--connections", "none"])):
        out = sample("replay", job)
        shutil.rmtree(out)
        subprocess.run([sys.executable, "-m", "ddlsim", "capture", job, "--model", "lenet5", "--workers", "2",
                        "--iterations", "3", "--out", str(out), *extra], check=True, env=env,
                       stdout=subprocess.DEVNULL, timeout=600)
        raw = sample("merge", job)  # the ranks' files and the job's description: what `capture merge` reads
        for path in sorted(out.iterdir()):
            if path.is_file() and not path.name.endswith(".parquet"):
                shutil.copy(path, raw / path.name)
        _keep_parquet(out)
        shutil.copytree(out, sample("validate", "grid") / "captures" / f"{job}-unshaped", dirs_exist_ok=True)
        shutil.copytree(out, sample("convert", f"capture_{job}"), dirs_exist_ok=True)  # a capture's ids: rank << 32
    # the DDP capture again as if made on a 1 Gbit/s link, so that `validate` also cross-predicts
    import io

    import pyarrow.parquet as pq

    from ddlsim.trace.parquet import METADATA_KEY

    shaped = sample("validate", "grid") / "captures" / "ddp-1g"
    shutil.copytree(sample("replay", "ddp"), shaped, dirs_exist_ok=True)
    table = pq.read_table(io.BytesIO((shaped / "events.parquet").read_bytes()))
    metadata = dict(table.schema.metadata)
    metadata[METADATA_KEY.encode()] = json.dumps({**json.loads(metadata[METADATA_KEY.encode()]),
                                                  "bandwidth": "1Gbps"}).encode()
    pq.write_table(table.replace_schema_metadata(metadata), shaped / "events.parquet")
    # `plan --apply DIR --before --after`'s pair: the DDP capture, and again as if it ran a plan (attach(plan=))
    shutil.copytree(sample("replay", "ddp"), sample("apply", "pair") / "before", dirs_exist_ok=True)
    after = sample("apply", "pair") / "after"
    shutil.copytree(sample("replay", "ddp"), after, dirs_exist_ok=True)
    table = pq.read_table(io.BytesIO((after / "events.parquet").read_bytes()))
    metadata = dict(table.schema.metadata)
    ran = {"entry": "mg_wfbp", "path": "ddp-buckets", "file": "/plan.json", "model": "lenet5", "groups": 2,
           "predicted_iteration_s": 0.02, "predicted_default_s": 0.03, "predicted_captured_s": 0.025}
    metadata[METADATA_KEY.encode()] = json.dumps({**json.loads(metadata[METADATA_KEY.encode()]), "plan": ran,
                                                  "bucket_cap_mb_list": [0.1, 0.2]}).encode()
    pq.write_table(table.replace_schema_metadata(metadata), after / "events.parquet")


_PS_SCENARIO = """workers = 3
iterations = 2
seed = {seed}
model = {{ name = "lenet5" }}

[strategy]
kind = "ps"
servers = 2
{strategy}

[network]
fidelity = "flow"
bandwidth = "10Gbps"
latency = "10us"
"""

#: the ``simulate`` target's scenarios: small runs of every kind of network, strategy and workload a scenario file
#: can ask for (a run of each takes well under a second), so that a mutation reaches the lowering, the budget's
#: estimate and the engine
SIMULATE_SCENARIOS = {
    "ring_analytic": """workers = 2
iterations = 2
seed = 1
model = { name = "lenet5" }

[strategy]
kind = "ring"
algorithm = "ring"
grouping = { kind = "mg-wfbp" }

[network]
fidelity = "analytic"
bandwidth = "10Gbps"
latency = "10us"
""",
    "butterfly_flow_stragglers": """workers = 4
iterations = 3
seed = 2
stagger = "100us"
stagger_mode = "random"
model = { name = "lenet5", compute_speedup = 2.0, speedup_kinds = ["Conv"] }

[strategy]
kind = "ring"
algorithm = "butterfly"
grouping = { kind = "fusion", threshold = "64KiB", cycle_time = "1ms" }

[network]
fidelity = "flow"
bandwidth = "1Gbps"
latency = "20us"
topology = "leaf-spine"
hosts_per_leaf = 2
spines = 1

[[straggler]]
rank = 1
factor = 1.5

[[straggler]]
probability = 0.2
factor = 2.0
""",
    "ps_multicast_flow": _PS_SCENARIO.format(seed=3, strategy='in_network = "multicast"'),
    "ps_split_server_cost": _PS_SCENARIO.format(seed=5, strategy='placement = "split"\ndistribution = "round-robin"\n'
                                                'chunk_bytes = 16384\ngamma_ns_per_byte = 0.01\n'
                                                'server_cost = { a = "20us", b = "5us" }'),
    "packet_tenants": """workers = 2
iterations = 2
seed = 4

[model]
name = "synthetic"
synthetic = { profile = "thesis-simulator", layers = 4, model_size = "200KB", compute = "2ms" }

[strategy]
kind = "ring"
algorithm = "ring"
grouping = { kind = "thesis-fusion", fusion_buffer_size = 65536 }

[network]
bandwidth = "1Gbps"
latency = "10us"
topology = "star"
hosts = 3
fidelity = "packet"
job_band = 1
record_flows = true
packet = { framing = "ppp", bands = 3, queue_limit = 100, queue_limit_unit = "packets", queue_scope = "band" }

[[tenant]]
name = "search"
sizes = "websearch"
flows_per_second_per_host = 20
band = 0

[[tenant]]
name = "mine"
sizes = "sizes.csv"
load = 0.05
band = 2
hosts = [0, 2]
start = "100us"
""",
    "two_jobs": """iterations = 2
workers = 2
model = { name = "lenet5" }

[network]
fidelity = "flow"
bandwidth = "1Gbps"
topology = "leaf-spine"
hosts_per_leaf = 2
spines = 1
oversubscription = 2.0

[[job]]
name = "a"
placement = "spread"

[[job]]
name = "b"
strategy = { kind = "ps", servers = 1 }
placement = "spread"
start = "1ms"
""",
}


def make_simulate_samples(sample) -> None:
    """The ``simulate`` target's samples (:data:`SIMULATE_SCENARIOS`); the tenants' one names a flow-size CSV."""
    for name, text in SIMULATE_SCENARIOS.items():
        directory = sample("simulate", name)
        (directory / "scenario.toml").write_text(text, encoding="utf-8")
        if "sizes.csv" in text:
            (directory / "sizes.csv").write_text("bytes,cdf\n# a small data-mining-like CDF\n0,0\n100,0.5\n"
                                                 "10000,0.9\n200000,1\n", encoding="utf-8")


def make_plan_samples(sample) -> None:
    """The ``plan`` target's samples: what ``ddlsim plan --model lenet5 --out plan.json`` writes, for a link where
    MG-WFBP's merges win and one where DDP's bucket does; the ``idlecurve`` target's: a CSV of the trials
    ``benchmarks/idle_wake.py --out`` writes."""
    from ddlsim.plan.planner import make_plan

    for name, bandwidth in (("slow_link", "100Mbps"), ("fast_link", "100Gbps")):
        make_plan(model="lenet5", workers=2, bandwidth=bandwidth, bucket_caps_mb=(1, 25), slice_bytes=(),
                  credit_bytes=(), threads=1).save(sample("plan", name) / "plan.json")
    rows = ["mode,idle_ms,step_ms,forward_ms,backward_ms"]
    for i, idle in enumerate((0, 0.5, 2, 8, 32)):
        for repeat in range(3):
            slow = 1 + idle / 40 + repeat * 0.01
            rows.append(f"{'sleep' if repeat < 2 else 'spin'},{idle},{0.4 * slow:.4f},{1.1 * slow:.4f},{2.3 * slow:.4f}")
    curve = sample("idlecurve", "trials")
    (curve / "idle.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    capture = sample("replay", "ddp")  # made before (with PyTorch): the capture it scales, with its side tables
    if (capture / "events.parquet").is_file():
        shutil.copytree(capture, curve / FIXED)


def make_sweep_samples(sample) -> None:
    """The ``sweep`` target's samples: the sweep files of ``examples/sweep`` and the ``--out`` directory of a finished
    sweep (``small-grid.toml``: 4 analytic runs), whose manifest and result tables ``--status`` reads."""
    from ddlsim.sweep.grid import load_grid
    from ddlsim.sweep.runner import run_grid

    for toml in sorted((ROOT / "examples" / "sweep").glob("*.toml")):
        shutil.copy(toml, sample("sweep", toml.stem) / "sweep.toml")
    results = sample("sweep", "results")
    shutil.rmtree(results)
    run_grid(load_grid(ROOT / "examples" / "sweep" / "small-grid.toml"), results)
    for lock in results.glob(".*.lock"):
        lock.unlink()


def _thesis_plan():
    """The ``thesisruns`` target's plan: ``ddlsim reproduce thesis-network --quick --ratios 4 --rates 23`` (3 runs)."""
    from ddlsim.reproduce.thesis_network import parse_plan

    return parse_plan(True, None, [4], [23], None)


def make_thesis_runs_samples(sample) -> None:
    """The ``thesisruns`` target's sample: the ``--runs`` directory :func:`_thesis_plan` leaves (its sweep
    datasets R4 and R4-alone: manifests, summary, iteration and flow tables)."""
    from ddlsim.reproduce.thesis_network import run_all

    runs = sample("thesisruns", "quick") / "runs"
    run_all(_thesis_plan(), runs)
    for lock in runs.glob("*/.*.lock"):
        lock.unlink()


#: the ``cache`` target's scenarios (tiny: a damaged entry is simulated again in the target)
CACHE_SCENARIOS = ({"workers": 2, "iterations": 2, "model": {"name": "lenet5"}},
                   {"workers": 3, "iterations": 2, "model": {"name": "lenet5"}, "strategy": {"kind": "ps"}})


def make_cache_samples(sample) -> None:
    """The ``cache`` target's sample: the results cache (``reproduce --cache``) that :data:`CACHE_SCENARIOS` leave."""
    from ddlsim.simulation.scenario import scenario_from_dict
    from ddlsim.sweep import ResultStore, run_sweep

    run_sweep([scenario_from_dict(s) for s in CACHE_SCENARIOS], store=ResultStore(sample("cache", "two_runs")))


def _keep_parquet(directory: Path) -> None:
    """Leaves only the event log and its side tables (the Parquet files) in a run's or a capture's `directory`."""
    for path in sorted(directory.iterdir()):
        if not path.name.endswith(".parquet"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def mutate_log_metadata(rng: random.Random, data: bytes, name: str) -> bytes:
    """One structure-aware change of an event log's ``ddlsim.metadata`` (the job's and the host's facts), the top
    level's keys as likely as all the nested values together."""
    import io

    import pyarrow.parquet as pq

    from ddlsim.trace.parquet import METADATA_KEY

    table = pq.read_table(io.BytesIO(data))
    metadata = dict(table.schema.metadata or {})
    doc = json.loads(metadata[METADATA_KEY.encode()])
    if isinstance(doc, dict) and doc and rng.random() < 0.5:
        key = rng.choice(sorted(doc))
        action = rng.random()
        if action < 0.7:
            doc[key] = rng.choice(JSON_VALUES)
        elif action < 0.85:
            del doc[key]
        else:
            doc[key] = str(doc[key]) if not isinstance(doc[key], str) else [doc[key]]
    else:
        doc = mutate_json_value(rng, doc)
    metadata[METADATA_KEY.encode()] = _dump_json(doc).encode()
    buffer = io.BytesIO()
    pq.write_table(table.replace_schema_metadata(metadata), buffer)
    return buffer.getvalue()


def load_samples(directory: Path) -> dict[str, list[dict[str, bytes]]]:
    out: dict[str, list[dict[str, bytes]]] = {}
    for target in TARGETS:
        samples = []
        if not (directory / target).is_dir():  # validate's without PyTorch
            continue
        for sample_dir in sorted((directory / target).iterdir()):
            samples.append({str(p.relative_to(sample_dir)): p.read_bytes()
                            for p in sorted(sample_dir.rglob("*")) if p.is_file()})
        out[target] = samples
    return out


# ============================================================================ mutations


_DEEP_MARK = re.compile(r'"\\u0000deep(\d+)([ao])\\u0000"')


def _deep(rng: random.Random, value: Any) -> Any:
    """A mark that the dumpers below replace with arrays (or objects) nested that deep."""
    depth = DEEP if rng.random() < 0.4 else rng.randint(20, 1500)
    return f"\0deep{depth}{'a' if rng.random() < 0.7 else 'o'}\0"


def _expand_deep(text: str) -> str:
    def nested(match: re.Match) -> str:
        depth = int(match.group(1))
        if match.group(2) == "a":
            return "[" * depth + "1" + "]" * depth
        return '{"a": ' * depth + "1" + "}" * depth

    return _DEEP_MARK.sub(nested, text)


def _json_paths(value: Any, path: tuple = (), out: list | None = None, limit: int = 4000) -> list[tuple]:
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    out.append(path)
    if isinstance(value, dict):
        for key in value:
            _json_paths(value[key], path + (key,), out, limit)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _json_paths(item, path + (index,), out, limit)
    return out


def _get(value: Any, path: tuple) -> Any:
    for key in path:
        value = value[key]
    return value


def mutate_json_value(rng: random.Random, doc: Any) -> Any:
    """One structure-aware change of a parsed JSON document (returns the new document)."""
    paths = _json_paths(doc)
    # prefer leaves and the fields the readers look at
    path = rng.choice(paths)
    if not path:
        return _deep(rng, doc) if rng.random() < 0.2 else rng.choice(JSON_VALUES)
    parent, key = _get(doc, path[:-1]), path[-1]
    old = parent[key]
    action = rng.random()
    if action < 0.55:
        if isinstance(old, (int, float)) and not isinstance(old, bool) and rng.random() < 0.3:
            new = rng.choice((old * 10 ** rng.randint(3, 40), -old, old + 0.5, old * 2 ** 62, -1 - old))
        else:
            new = rng.choice(JSON_VALUES)
        parent[key] = new
    elif action < 0.65:
        parent[key] = _deep(rng, old)
    elif action < 0.8:
        if isinstance(parent, dict):
            del parent[key]
        else:
            parent.pop(key)
    elif action < 0.9:
        if isinstance(parent, list):
            parent.insert(key, json.loads(json.dumps(old)) if _depth(old) < 50 else old)
        else:
            parent[str(key) + "_"] = old
    else:
        parent[key] = str(old) if not isinstance(old, str) else ([old] if rng.random() < 0.5 else _number_text(rng))
    return doc


def _depth(value: Any) -> int:
    depth = 0
    while isinstance(value, (list, dict)) and value:
        value = value[0] if isinstance(value, list) else next(iter(value.values()))
        depth += 1
    return depth


def _number_text(rng: random.Random) -> str:
    return rng.choice(INTERESTING_NUMBERS)


def mutate_numbers(rng: random.Random, data: bytes) -> bytes:
    matches = list(_NUMBER_TOKEN.finditer(data[:200_000]))
    if not matches:
        return data
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        match = rng.choice(matches)
        replacement = _number_text(rng).encode()
        data = data[:match.start()] + replacement + data[match.end():]
        matches = list(_NUMBER_TOKEN.finditer(data[:200_000]))
        if not matches:
            break
    return data


def mutate_lines(rng: random.Random, data: bytes) -> bytes:
    lines = data.split(b"\n")
    if not lines:
        return data
    index = rng.randrange(len(lines))
    action = rng.random()
    if action < 0.3:
        del lines[index]
    elif action < 0.55:
        lines.insert(index, lines[rng.randrange(len(lines))])
    elif action < 0.7:
        other = rng.randrange(len(lines))
        lines[index], lines[other] = lines[other], lines[index]
    elif action < 0.8:
        lines = lines[:index]
    elif action < 0.9:
        separator = b"\t" if b"\t" in lines[index] else b","
        fields = lines[index].split(separator)
        position = rng.randrange(len(fields))
        if rng.random() < 0.5 and len(fields) > 1:
            del fields[position]
        else:
            fields.insert(position, fields[rng.randrange(len(fields))])
        lines[index] = separator.join(fields)
    else:
        lines = [b""] if rng.random() < 0.5 else [line for line in lines if line.startswith(b"#")]
    return b"\n".join(lines)


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return bytes([rng.randrange(256)])
    buffer = bytearray(data)
    action = rng.random()
    if action < 0.4:
        for _ in range(rng.randint(1, 8)):
            position = rng.randrange(len(buffer))
            buffer[position] ^= 1 << rng.randrange(8)
    elif action < 0.6:
        del buffer[rng.randrange(len(buffer)):]
    elif action < 0.75:
        position = rng.randrange(len(buffer))
        buffer[position:position] = rng.choice((b"\x00", b"\xff", b"\xff\xff\xff\xff\x0f", b"\x80" * 10, b"\n",
                                                b"\t", b",", b"\"", b"{", b"[", b"]", b"\xc3", b"\xe9"))
    elif action < 0.9:
        position = rng.randrange(len(buffer))
        width = rng.choice((1, 2, 4, 8))
        buffer[position:position + width] = rng.choice((b"\xff" * width, b"\x00" * width, b"\x7f" + b"\xff" * (width - 1)))
    elif action < 0.99:
        start = rng.randrange(len(buffer))
        end = min(len(buffer), start + rng.randint(1, 64))
        buffer[start:start] = buffer[start:end]
    else:  # one very long field or line (csv's field limit is 131072 characters)
        position = rng.randrange(len(buffer))
        buffer[position:position] = rng.choice((b"7", b"x", b" ", b"[")) * rng.choice((140_000, 1_000_000))
    return bytes(buffer)


def mutate_jsonl(rng: random.Random, data: bytes) -> bytes:
    lines = data.split(b"\n")
    candidates = [i for i, line in enumerate(lines) if line.strip()]
    if not candidates:
        return data
    index = rng.choice(candidates)
    try:
        doc = json.loads(lines[index])
    except (ValueError, RecursionError):
        return mutate_bytes(rng, data)
    lines[index] = _dump_json(mutate_json_value(rng, doc)).encode()
    return b"\n".join(lines)


def _dump_json(doc: Any) -> str:
    return _expand_deep(json.dumps(doc))


def mutate_json(rng: random.Random, data: bytes) -> bytes:
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return mutate_bytes(rng, data)
    # aim at the events most of the time (the readers' fields)
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if isinstance(events, list) and events and rng.random() < 0.8:
        position = rng.randrange(len(events))
        if rng.random() < 0.1:
            holder = mutate_json_value(rng, {"e": events[position]})
            events[position] = holder.get("e") if isinstance(holder, dict) else holder
        else:
            events[position] = _mutate_inside(rng, events[position])
    else:
        doc = mutate_json_value(rng, doc)
    return _dump_json(doc).encode()


def _mutate_inside(rng: random.Random, value: Any) -> Any:
    if isinstance(value, (dict, list)) and value:
        return mutate_json_value(rng, value)
    return rng.choice(JSON_VALUES)


def _toml_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        match = _DEEP_MARK.fullmatch(json.dumps(value))
        if match:
            return "[" * int(match.group(1)) + "1" + "]" * int(match.group(1))
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_text(v)}" for k, v in value.items()) + "}"
    return '""'


def dump_toml(doc: dict) -> str:
    """Everything as inline values under the top-level keys (valid TOML for any nesting but None)."""
    return "".join(f"{json.dumps(str(key))} = {_toml_text(value)}\n" for key, value in doc.items())


def mutate_toml(rng: random.Random, data: bytes) -> bytes:
    import tomllib

    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return mutate_lines(rng, data)
    if not doc:
        return mutate_lines(rng, data)
    doc = mutate_json_value(rng, doc)
    if not isinstance(doc, dict):
        doc = {"workers": doc}
    try:
        return dump_toml(_no_none(doc)).encode()
    except RecursionError:  # an earlier mutation nested it deeply: change its lines instead
        return mutate_lines(rng, data)


def _no_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _no_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_no_none(v) for v in value if v is not None]
    return value


def mutate_parquet(rng: random.Random, data: bytes, name: str) -> bytes:
    """A structure-aware change of a parquet table: a value, a column's type, a column or the metadata."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(io.BytesIO(data))
    except Exception:
        return mutate_bytes(rng, data)
    action = rng.random()
    metadata = dict(table.schema.metadata or {})
    if action < 0.3 and metadata:
        key = rng.choice(list(metadata))
        text = metadata[key]
        try:
            doc = json.loads(text)
            metadata[key] = _dump_json(mutate_json_value(rng, doc)).encode()
        except (ValueError, RecursionError):
            metadata[key] = mutate_bytes(rng, text)
        table = table.replace_schema_metadata(metadata)
    elif table.num_columns:
        column = rng.randrange(table.num_columns)
        field = table.schema.field(column)
        values = table.column(column).to_pylist()
        if action < 0.75 and values:
            row = rng.randrange(len(values))
            if pa.types.is_integer(field.type):
                values[row] = rng.choice((None, -1, 0, 2 ** 62, -(2 ** 62), 2 ** 63 - 1, -(2 ** 63), 2 ** 31,
                                          values[rng.randrange(len(values))]))
            elif pa.types.is_floating(field.type):
                values[row] = rng.choice((None, float("nan"), float("inf"), -1.0, 1e30))
            elif pa.types.is_list(field.type):
                values[row] = rng.choice((None, [], [-1], [2 ** 62], [row], [row + 1, row + 1], list(range(50))))
            else:
                values[row] = rng.choice((None, "", "x", "send", "recv", "worker", "server", "\u00e9", "a" * 1000))
            try:
                array = pa.array(values, type=field.type)
            except (pa.ArrowInvalid, OverflowError, TypeError):
                return data
            table = table.set_column(column, field.with_nullable(True), array)
        elif action < 0.85:
            table = table.remove_column(column)
        elif action < 0.95:
            new_type = rng.choice((pa.string(), pa.int32(), pa.float64(), pa.int64()))
            try:
                array = table.column(column).cast(new_type, safe=False)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                array = pa.array([str(v) for v in values], type=pa.string())
            table = table.set_column(column, pa.field(field.name, array.type), array)
        else:
            table = table.slice(0, rng.randrange(table.num_rows + 1))
    sink = io.BytesIO()
    try:
        pq.write_table(table, sink)
    except (pa.ArrowException, ValueError, TypeError):
        return data
    return sink.getvalue()


def _split_records(data: bytes) -> list[bytes] | None:
    """The payloads of a Chakra file's length-delimited records (the reader's own split); None if damaged."""
    from ddlsim.errors import TraceError
    from ddlsim.trace.chakra import _split_delimited

    try:
        return [payload for _, payload in _split_delimited(data, Path("sample.et"))]
    except TraceError:
        return None


def mutate_chakra(rng: random.Random, data: bytes) -> bytes:
    """A structure-aware change of a Chakra file: one record's protobuf fields, or whole records."""
    records = _split_records(data)
    if not records:
        return mutate_bytes(rng, data)
    from ddlsim.trace.chakra import _message_classes

    classes = _message_classes()
    index = rng.randrange(len(records))
    action = rng.random()
    if action < 0.15:
        records.insert(index, records[rng.randrange(len(records))])
    elif action < 0.25:
        del records[index]
    else:
        message = (classes["GlobalMetadata"] if index == 0 else classes["Node"])()
        try:
            message.ParseFromString(records[index])
        except Exception:
            return mutate_bytes(rng, data)
        _mutate_message(rng, message)
        records[index] = message.SerializeToString()
    from ddlsim.trace.chakra import _varint

    return b"".join(_varint(len(r)) + r for r in records)


def _mutate_message(rng: random.Random, message: Any) -> None:
    attributes = list(getattr(message, "attr", []))
    if attributes and rng.random() < 0.7:
        attribute = rng.choice(attributes)
        which = attribute.WhichOneof("value")
        if which == "string_val" and attribute.name == "ddlsim_metadata":
            try:
                doc = json.loads(attribute.string_val)
                attribute.string_val = _dump_json(mutate_json_value(rng, doc))
            except (ValueError, RecursionError):
                attribute.string_val = "{"
            if rng.random() < 0.3:
                attribute.string_val = rng.choice(("{", "[]", "null", "1", "NaN", '{"a": [', "\"x\"", ""))
            return
        choice = rng.random()
        if choice < 0.3:
            attribute.int64_val = rng.choice((-1, 0, 2 ** 62, -(2 ** 63), 2 ** 63 - 1, 2 ** 31))
        elif choice < 0.45:
            attribute.string_val = rng.choice(("", "x", "send", "-1", "9" * 30))
        elif choice < 0.6:
            attribute.bool_val = rng.random() < 0.5
        elif choice < 0.7:
            attribute.double_val = rng.choice((float("nan"), float("inf"), 1e30, -1.0))
        elif choice < 0.8:
            attribute.int64_list.values.extend([rng.choice((-1, 0, 1, 2 ** 62))])
        elif choice < 0.9:
            attribute.uint64_val = rng.choice((2 ** 64 - 1, 2 ** 63, 0))
        else:
            message.attr.remove(attribute)
        return
    fields = [f for f in message.DESCRIPTOR.fields if f.type in (f.TYPE_UINT64, f.TYPE_INT64, f.TYPE_INT32, f.TYPE_UINT32)]
    if not fields:
        return
    field = rng.choice(fields)
    if field.is_repeated:
        container = getattr(message, field.name)
        container.append(rng.choice((0, 1, 2 ** 31 - 1, message.id if hasattr(message, "id") else 0)))
        return
    signed = field.type in (field.TYPE_INT64, field.TYPE_INT32)
    bits = 64 if field.type in (field.TYPE_UINT64, field.TYPE_INT64) else 32
    values = [0, 1, 2 ** (bits - 1) - 1] + ([-1, -(2 ** (bits - 1))] if signed else [2 ** bits - 1, 2 ** (bits - 1)])
    setattr(message, field.name, rng.choice(values))


TEXT_MUTATORS = {
    "sketchdlc": (mutate_numbers, mutate_lines, mutate_bytes),
    "sketchdlc_records": (mutate_numbers, mutate_lines, mutate_bytes),
    "netop": (mutate_numbers, mutate_lines, mutate_bytes),
    "fit": (mutate_numbers, mutate_lines, mutate_bytes),
    "costmodel": (mutate_json, mutate_json, mutate_numbers, mutate_bytes),
    "capture": (mutate_jsonl, mutate_jsonl, mutate_numbers, mutate_lines, mutate_bytes),
    "kineto": (mutate_json, mutate_json, mutate_json, mutate_numbers, mutate_bytes),
    "scenario": (mutate_toml, mutate_toml, mutate_numbers, mutate_lines, mutate_bytes),
    "simulate": (mutate_toml, mutate_toml, mutate_toml, mutate_numbers, mutate_lines, mutate_bytes),
    "plan": (mutate_json, mutate_json, mutate_json, mutate_numbers, mutate_bytes),
    "idlecurve": (mutate_numbers, mutate_numbers, mutate_lines, mutate_bytes),
    "sweep": (mutate_toml, mutate_json, mutate_json, mutate_numbers, mutate_lines, mutate_bytes),
    "merge": (mutate_jsonl, mutate_jsonl, mutate_json, mutate_numbers, mutate_lines, mutate_bytes),
    "cache": (mutate_json, mutate_json, mutate_json, mutate_numbers, mutate_bytes),
    "convert": (mutate_bytes,),
    "thesisruns": (mutate_json, mutate_json, mutate_numbers, mutate_bytes),
}


_PARQUET_VARIANTS: dict[tuple, bytes] = {}


def _parquet_variant(seed: int, sample_number: int, name: str, variant: int, data: bytes, mutator=None) -> bytes:
    mutator = mutator or mutate_parquet
    key = (seed, sample_number, name, variant, mutator.__name__)
    if key not in _PARQUET_VARIANTS:
        salt = "" if mutator is mutate_parquet else f":{mutator.__name__}"  # mutate_parquet's inputs as before
        _PARQUET_VARIANTS[key] = mutator(random.Random(f"{seed}:{sample_number}:{name}:{variant}{salt}"), data, name)
    return _PARQUET_VARIANTS[key]


#: a sample's folder of files that are never mutated (what a reader needs beside its input, e.g. the capture that
#: ``--idle-curve`` scales)
FIXED = "fixed"

#: a file of an input that is written as a FIFO (named pipe) with nothing on its other end, not as a regular file
FIFO = None


def make_input(samples: dict[str, list[dict[str, bytes]]], seed: int, index: int) -> tuple[str, dict[str, bytes], list[str]]:
    """(target, files, mutations applied) of input ``index``: a pure function of (seed, index). A file whose data is
    :data:`FIFO` is made a FIFO."""
    rng = random.Random(f"{seed}:{index}")
    target = TARGETS[index % len(TARGETS)]
    sample_number = rng.randrange(len(samples[target]))
    sample = samples[target][sample_number]
    files = dict(sample)
    applied = []
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
        mutable = sorted(n for n in files if not n.startswith(FIXED + "/"))
        if not mutable:  # the one file the reader reads was removed
            break
        name = rng.choice(mutable)
        data = files[name]
        if data is FIFO:
            continue
        if rng.random() < 0.02:  # the file a FIFO: a reader that opens it without a check blocks for ever
            files[name] = FIFO
            applied.append(f"fifo {name}")
            continue
        if target in ("replay", "validate") and name.endswith("events.parquet") and data is sample[name] \
                and rng.random() < 0.8:
            mutator = mutate_log_metadata  # the facts replay and the planner read
            files[name] = _parquet_variant(seed, sample_number, name, rng.randrange(4096), data, mutator)
        elif name.endswith(".parquet"):
            if rng.random() < 0.7 and data is sample[name]:
                # structure-aware changes of a sample's table, from a pool of 4096 per seed (made once each:
                # reading and writing Parquet costs more than reading the input)
                mutator = mutate_parquet
                files[name] = _parquet_variant(seed, sample_number, name, rng.randrange(4096), data)
            else:
                mutator = mutate_bytes
                files[name] = mutator(rng, data)
        elif name.endswith(".et"):
            mutator = mutate_chakra if rng.random() < 0.7 else mutate_bytes
            files[name] = mutator(rng, data)
        else:
            if rng.random() < 0.05 and len(mutable) > 1:
                del files[name]
                applied.append(f"remove {name}")
                continue
            mutator = rng.choice(TEXT_MUTATORS[target])
            packed = name.endswith(".gz") and rng.random() < 0.7  # change the text inside, compress again
            if packed:
                import gzip
                import zlib

                try:
                    data = gzip.decompress(data)
                except (OSError, EOFError, zlib.error):
                    packed = False
            try:
                data = mutator(rng, data)
            except RecursionError:  # a document an earlier mutation nested too deeply to walk
                mutator = mutate_bytes
                data = mutator(rng, data)
            files[name] = gzip.compress(data, mtime=0) if packed else data
        applied.append(f"{mutator.__name__} {name}")
    return target, files, applied


# ============================================================================ readers


def run_target(target: str, directory: Path) -> Any:
    """Run the reader of ``target`` on the input written in ``directory``."""
    if target == "events":
        from ddlsim.trace.formats import read_trace

        return read_trace(directory / "run.events.parquet", "events")
    if target == "sketchdlc":
        from ddlsim.trace.formats import read_trace

        return read_trace(directory, "sketchdlc")
    if target == "sketchdlc_records":
        from ddlsim.trace.sketchdlc import read_sketchdlc_records

        return read_sketchdlc_records(directory / "w0.txt")
    if target == "chakra":
        from ddlsim.trace.formats import read_trace

        return read_trace(directory / "trace", "chakra")
    if target == "kineto":
        from ddlsim.trace.formats import read_trace

        return read_trace(directory, "kineto")
    if target == "netop":
        from ddlsim.trace.formats import read_trace

        return read_trace(directory / "trace.txt", "netop")
    if target == "capture":
        from ddlsim.capture.merge import merge_capture

        return merge_capture(directory)
    if target == "scenario":
        from ddlsim.simulation.model_build import build_model
        from ddlsim.simulation.scenario import load_scenario

        scenario = load_scenario(directory / "scenario.toml")
        return build_model(scenario.model, scenario.base_dir)
    if target == "fit":  # what `ddlsim fit TABLE --workers 8` does with it: read, then fit
        from ddlsim.plan.cost import fit_tables

        return fit_tables([directory / "table.txt"], workers=[8])
    if target == "costmodel":
        from ddlsim.plan.cost import CostModel

        return CostModel.load(directory / "cost.json")
    if target == "replay":  # what `ddlsim analyze`, `replay` and `plan --profile` do with a capture
        import ddlsim
        from ddlsim.analyze.streaming import open_analysis
        from ddlsim.plan.planner import make_plan
        from ddlsim.trace.parquet import read_log_metadata

        path = directory / "events.parquet"
        open_analysis(path).headline()
        result = ddlsim.replay(path)
        if read_log_metadata(path).get("job") == "ddp":  # a DDP capture: the planner's path from a capture
            make_plan(profile=str(path), model="lenet5", workers=2, bucket_caps_mb=(1, 25), slice_bytes=(),
                      credit_bytes=(), threads=1)
        return result
    if target == "simulate":  # what `ddlsim simulate SCENARIO --max-memory 192MiB` does with a scenario file
        from ddlsim.api import simulate, simulate_jobs
        from ddlsim.simulation.budget import run_control
        from ddlsim.simulation.scenario import load_scenario

        from ddlsim.analyze.streaming import open_analysis
        from ddlsim.errors import DdlsimError

        path = directory / "scenario.toml"
        with run_control(max_memory=SIMULATE_BUDGET_BYTES):
            result = simulate_jobs(path) if load_scenario(path).job else simulate(path)
        summary = result.summary()
        result.save(directory / "out", timeline=False)  # what `--out` writes (the log, its side tables, the trace)
        try:  # ... ddlsim reads: a run's own output refused is a failure
            open_analysis(directory / "out" / "events.parquet").headline()
        except DdlsimError as exc:
            raise AssertionError(f"ddlsim simulate --out wrote a log that ddlsim refuses: {exc}") from None
        return summary
    if target == "plan":  # what `ddlsim capture ddp --plan plan.json` does with the plan before it starts a rank
        from ddlsim.capture.ddp_plan import load_plan
        from ddlsim.cli.capture_ddp_command import apply_plan

        plan = load_plan(directory / "plan.json")
        config = {"model": "lenet5", "image_size": 32}
        applied = [apply_plan(config, plan, entry, directory / "plan.json") for entry in ("best", "ddp", "mg_wfbp")]
        # ... and what your own script's plan_for does with it (the file read again, every entry, for LeNet-5)
        from ddlsim.capture.ddp_models import build_model
        from ddlsim.capture.ddp_plan import plan_for

        model = build_model("lenet5")
        return applied + [plan_for(model, directory / "plan.json", entry=entry).ddp_kwargs
                          for entry in ("best", "ddp", "mg_wfbp")]
    if target == "idlecurve":  # what `ddlsim replay --idle-curve idle.csv` does with it: read, then each ratio
        from ddlsim.simulation.idle_wake import CLASSES, check_curve, ratio, read_curve

        import ddlsim

        curve = check_curve(read_curve(directory / "idle.csv"), "idle_curve")
        ratios = [ratio(curve[cls], t) for cls in CLASSES for t in (0.0, 0.25, 1.0, 1e3, 1e30)]
        capture = directory / FIXED / "events.parquet"
        if not capture.is_file():  # no DDP capture among the samples (no PyTorch)
            return ratios
        return ratios, ddlsim.replay(capture, idle_curve=str(directory / "idle.csv"), bandwidth="100Mbps").summary()
    if target == "sweep":  # `ddlsim sweep FILE` makes its grid; `ddlsim sweep --status DIR` reads a sweep's --out
        from ddlsim.sweep.grid import grid_from_manifest, load_grid
        from ddlsim.sweep.store import MANIFEST, RunDataset, read_sweep

        if (directory / "sweep.toml").exists():
            return [point.key for point in load_grid(directory / "sweep.toml").points]
        dataset = RunDataset(directory)
        grid = grid_from_manifest(dataset.read_manifest(), origin=str(directory / MANIFEST))
        done = dataset.done()
        return read_sweep(directory), [point.key in done for point in grid.points]
    if target == "merge":  # `ddlsim capture merge DIR`: a real capture's rank files, sidecars and job.json
        from ddlsim.cli.capture_command import merge_directory
        from ddlsim.trace import write_event_log

        from ddlsim.analyze.streaming import open_analysis

        from ddlsim.errors import DdlsimError

        write_event_log(merge_directory(directory), directory / "merged.parquet")
        try:  # what merge wrote, ddlsim reads: merge must refuse a fact the readers refuse, not write it
            return open_analysis(directory / "merged.parquet").headline()
        except DdlsimError as exc:
            raise AssertionError(f"capture merge wrote a log that ddlsim refuses: {exc}") from None
    if target == "apply":  # `ddlsim plan --apply OUT --before B --after A`: your script's plan measured, the report
        from ddlsim.plan.apply import measure_plan

        return measure_plan(directory / "report", before=[directory / "before"], after=[directory / "after"])
    if target == "validate":  # `ddlsim validate --captures DIR --out OUT`: measure, replay, compare, write the report
        from ddlsim.validation import validate

        return validate(directory / "report", captures=directory / "captures")
    if target == "convert":  # `ddlsim convert LOG OUT` to every format; what it wrote, ddlsim reads back
        from ddlsim.errors import DdlsimError
        from ddlsim.interop import convert
        from ddlsim.trace.formats import read_trace

        written = {}
        source = directory / "run.events.parquet"  # a simulated run's; a capture's is events.parquet
        source = source if source.exists() or not (directory / "events.parquet").exists() else directory / "events.parquet"
        for fmt, name in (("events", "copy.events.parquet"), ("chakra", "chakra/trace.et"), ("kineto", "kineto"),
                          ("sketchdlc", "sketchdlc"), ("chrome", "trace.json"), ("csv", "events.csv")):
            try:
                written[fmt] = convert(source, directory / "out" / name, to_format=fmt, notes=[])
            except DdlsimError:
                if fmt == "events":
                    raise  # the log itself was refused: an input like any other
                # another format may refuse what it cannot hold (e.g. SketchDLC a ring's rows), in one line
        for fmt, name in (("events", "copy.events.parquet"), ("chakra", "chakra/trace"), ("kineto", "kineto"),
                          ("sketchdlc", "sketchdlc")):
            if fmt in written:
                try:
                    read_trace(directory / "out" / name, fmt)
                except DdlsimError as exc:
                    raise AssertionError(f"ddlsim convert wrote {fmt} that ddlsim refuses: {exc}") from None
        return sorted(written)
    if target == "cache":  # `ddlsim reproduce --cache DIR`: runs served from the cache, a damaged entry run again
        from ddlsim.reproduce.network_operator import steady_time
        from ddlsim.simulation.scenario import scenario_from_dict
        from ddlsim.sweep import ResultStore, run_sweep, scenario_key

        scenarios = [scenario_from_dict(s) for s in CACHE_SCENARIOS]
        store = ResultStore(directory)
        summaries, _ = run_sweep(scenarios, store=store)
        times = [steady_time(summary) for summary in summaries]
        if any(store.get(scenario_key(sc)) is None for sc in scenarios):  # a damaged entry is replaced
            raise AssertionError("a results-cache entry was neither served nor written again")
        return times
    if target == "thesisruns":  # `ddlsim reproduce thesis-network --runs DIR`: skips the runs done there, reads them
        from ddlsim.reproduce.adaptive_priority import cells, collect
        from ddlsim.reproduce.thesis_network import build, run_all, small_flow_cdf
        import matplotlib.pyplot as plt

        plan = _thesis_plan()
        rep = build(plan, run_all(plan, directory / "runs"), small_flow_cdf(plan, directory / "runs"))
        for name, frame in rep.tables.items():
            frame.to_csv(directory / f"{name}.csv", index=False)
        for figure in rep.figures.values():  # made as the command makes them (not rendered: time per input)
            plt.close(figure())
        # the same runs read as `python -m ddlsim.reproduce.adaptive_priority OUT RUN_DIR...` reads them
        return sorted(rep.tables), cells(collect([directory / "runs" / "R4", directory / "runs" / "R4-alone"])).shape
    raise ValueError(target)


class _TimeOut(BaseException):
    """Raised by the alarm in a worker: the input ran over its time limit."""


def _signature(exc: BaseException) -> str:
    """Exception type and the innermost ddlsim frame: inputs with one cause share it."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/ddlsim/" in f.filename.replace(os.sep, "/")] or frames
    where = f"{Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else "?"
    return f"{type(exc).__name__}@{where}"


def _injected(kind: str) -> None:
    """Misbehaviour on purpose (--inject, to test this harness): what a broken reader could do."""
    if kind == "crash":
        os.abort()
    if kind == "hang":  # a loop the alarm cannot break (as in C code that never returns to Python)
        signal.signal(signal.SIGPROF, signal.SIG_IGN)
        while True:
            pass
    if kind == "slow":  # a Python loop: the alarm breaks it
        while True:
            pass
    if kind == "memory":
        blocks = []
        while True:
            blocks.append(bytearray(64 << 20))
    if kind == "exception":
        raise KeyError("injected")


def classify(target: str, directory: Path, time_limit: float, inject: str = "") -> tuple[str, str, str]:
    """(outcome, signature, detail): outcome ok / error (one of ddlsim's) / a failure kind."""
    from ddlsim.errors import DdlsimError, InternalError

    signal.setitimer(signal.ITIMER_PROF, time_limit)  # CPU time: a busy shared machine does not count
    try:
        if inject:
            _injected(inject)
        run_target(target, directory)
        return "ok", "", ""
    except _TimeOut:
        return "timeout", f"timeout@{target}", f"over {time_limit} s"
    except InternalError as exc:
        return "internal", _signature(exc), traceback.format_exc(limit=30)
    except DdlsimError:
        return "error", "", ""
    except MemoryError as exc:
        traceback.clear_frames(exc.__traceback__)  # free what the failed reader held before formatting
        return "memory", _signature(exc), traceback.format_exc(limit=30)
    except RecursionError as exc:
        return "exception", _signature(exc), traceback.format_exc(limit=8)
    except Exception as exc:  # noqa: BLE001 - every other exception is what the fuzzer looks for
        return "exception", _signature(exc), traceback.format_exc(limit=30)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)


def _write_files(directory: Path, files: dict[str, bytes]) -> None:
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    for name, data in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if data is FIFO:
            os.mkfifo(path)
        else:
            path.write_bytes(data)


def _vm_bytes() -> int:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def worker_main(args: argparse.Namespace) -> None:
    """Read 'first count' lines from stdin; answer one line per input: index, outcome, signature, detail (JSON)."""
    import warnings

    warnings.simplefilter("ignore")
    sys.setrecursionlimit(3000)
    samples = load_samples(Path(args.samples))
    scratch = Path(args.scratch)
    # import everything the readers use before the memory limit, and once
    for target in TARGETS:
        _write_files(scratch, samples[target][0])
        try:
            run_target(target, scratch)
        except Exception:  # noqa: BLE001 - a failing sample shows up again as a finding
            pass

    def alarm(signum: int, frame: Any) -> None:
        raise _TimeOut()

    signal.signal(signal.SIGPROF, alarm)
    if args.memory_mb > 0:
        limit = _vm_bytes() + args.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    injections = {int(index): kind for kind, index in (item.split(":") for item in args.inject)}
    out = sys.stdout
    out.write("ready\n")  # the warm-up above (imports, every reader once) is not an input's time
    out.flush()
    for line in sys.stdin:
        first, count = (int(x) for x in line.split())
        for index in range(first, first + count):
            try:
                target, files, applied = make_input(samples, args.seed, index)
            except Exception as exc:  # noqa: BLE001 - a bug of this harness, reported as such
                target, applied = TARGETS[index % len(TARGETS)], []
                outcome, signature, detail = "harness", _signature(exc), traceback.format_exc(limit=30)
            else:
                _write_files(scratch, files)
                outcome, signature, detail = classify(target, scratch, args.time_limit, injections.get(index, ""))
            if outcome in ("ok", "error"):
                out.write(f"{index} {outcome}\n")
            else:
                out.write(json.dumps([index, outcome, signature, detail, target, applied]) + "\n")
        out.write("done\n")
        out.flush()
    # leave the scratch directory for the parent


# ============================================================================ parent


class Worker:
    def __init__(self, number: int, args: argparse.Namespace, samples_dir: Path, scratch_root: Path):
        self.number = number
        self.scratch = scratch_root / f"worker{number}"
        command = [sys.executable, "-u", str(Path(__file__).resolve()), "--worker", "--seed", str(args.seed),
                   "--samples", str(samples_dir), "--scratch", str(self.scratch), "--time-limit", str(args.time_limit),
                   "--memory-mb", str(args.memory_mb), "--targets", ",".join(TARGETS)] + [f"--inject={item}" for item in args.inject]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(ROOT / "python")] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
        self.stderr_path = Path(args.out) / f"worker{number}.stderr"
        with open(self.stderr_path, "wb") as stderr:  # a file: a chatty worker never blocks on a full pipe
            self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                            env=env, start_new_session=True)
        os.set_blocking(self.process.stdout.fileno(), False)
        self.buffer = b""
        self.pending: list[int] = []  # indices sent, not answered, in order
        self.busy = False  # a request was sent and its "done" not yet read
        self.last_progress = time.monotonic()
        self.cpu_at_progress = 0.0
        self.started = True
        self.ready = False  # the worker said it finished its warm-up (imports, every reader once)
        self.started_at = time.monotonic()

    def send(self, first: int, count: int) -> None:
        self.pending = list(range(first, first + count))
        self.busy = True
        self.process.stdin.write(f"{first} {count}\n".encode())
        self.process.stdin.flush()
        self.last_progress, self.cpu_at_progress = time.monotonic(), self.cpu_seconds()

    def read_lines(self) -> tuple[list[bytes], bool]:
        """Complete lines available now, and whether the worker's output ended."""
        try:
            chunk = os.read(self.process.stdout.fileno(), 1 << 16)
        except BlockingIOError:
            return [], False
        if not chunk:
            return [], True
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        if lines:
            self.last_progress, self.cpu_at_progress = time.monotonic(), self.cpu_seconds()
        return lines, False

    def cpu_seconds(self) -> float:
        """CPU time the worker has used (user + system), from /proc; 0 where there is none."""
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return 0.0

    def stalled(self, now: float, limit: float) -> str:
        """Why the worker counts as hung: over ``limit`` s of CPU on one input (a loop the alarm cannot
        break), or 10 times that of wall time (blocked: a deadlock, a wait); '' when it is not."""
        if not self.ready:  # its warm-up runs every reader's sample once: no input's limit applies yet
            return f"not ready within {STARTUP_LIMIT_S:.0f} s" if now - self.started_at > STARTUP_LIMIT_S else ""
        if self.cpu_seconds() - self.cpu_at_progress > limit:
            return f"over {limit:.0f} s of CPU time without an answer"
        if now - self.last_progress > 10 * limit:
            return f"no answer within {10 * limit:.0f} s"
        return ""

    def kill(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()

    def stderr_tail(self) -> str:
        try:
            return self.stderr_path.read_bytes()[-4000:].decode("utf-8", "replace")
        except OSError:
            return ""


class Campaign:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.out = Path(args.out)
        self.findings = self.out / "findings"
        self.counts: dict[str, int] = {"ok": 0, "error": 0}
        self.failures: dict[str, int] = {}
        self.signatures: dict[str, int] = {}
        self.done = 0
        self.samples: dict[str, list[dict[str, bytes]]] | None = None
        self.by_target: dict[str, dict[str, int]] = {}

    def record(self, index: int, outcome: str, signature: str = "", detail: str = "", target: str = "",
               applied: Any = None) -> None:
        self.done += 1
        per_target = self.by_target.setdefault(TARGETS[index % len(TARGETS)], {"ok": 0, "error": 0, "failed": 0})
        if outcome in ("ok", "error"):
            self.counts[outcome] += 1
            per_target[outcome] += 1
            return
        per_target["failed"] += 1
        self.failures[outcome] = self.failures.get(outcome, 0) + 1
        key = f"{outcome}-{signature}"
        seen = self.signatures.get(key, 0)
        self.signatures[key] = seen + 1
        if seen < MAX_SAVED_PER_SIGNATURE:
            name = re.sub(r"[^A-Za-z0-9_.@-]+", "_", key)[:120]
            folder = self.findings / name / str(index)
            folder.mkdir(parents=True, exist_ok=True)
            if self.samples is None:
                self.samples = load_samples(self.out / "samples")
            try:
                _, files, applied = make_input(self.samples, self.args.seed, index)  # the same input again
                _write_files(folder / "input", files)
            except Exception:  # noqa: BLE001 - a harness bug, already counted
                pass
            (folder / "info.json").write_text(json.dumps(
                {"seed": self.args.seed, "index": index, "target": target, "outcome": outcome, "signature": signature,
                 "mutations": applied, "detail": detail}, indent=1) + "\n", encoding="utf-8")
            if seen == 0:
                print(f"fuzz_readers: new failure {key} (input {index}, {target}): {folder}", file=sys.stderr, flush=True)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=10000, help="number of inputs (default 10000)")
    parser.add_argument("--seed", type=int, default=1, help="campaign seed (default 1)")
    parser.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--out", default="fuzz-out", help="samples, findings and scratch files (default fuzz-out)")
    parser.add_argument("--start", type=int, default=0, help="first input index (default 0)")
    parser.add_argument("--batch", type=int, default=200, help="inputs per request to a worker (default 200)")
    parser.add_argument("--time-limit", type=float, default=10.0, help="CPU seconds per input (default 10)")
    parser.add_argument("--hang-limit", type=float, default=0.0,
                        help="CPU seconds on one input (or 10 times that of wall time) before the parent kills a "
                             "worker (default: twice the time limit, at least the time limit + 20)")
    parser.add_argument("--memory-mb", type=int, default=1024,
                        help="address space a worker may add per input, MiB (default 1024; 0: no limit)")
    parser.add_argument("--progress", type=float, default=30.0, help="seconds between progress lines (default 30)")
    parser.add_argument("--replay", metavar="DIR", help="run the reader on a saved finding (DIR holds info.json)")
    parser.add_argument("--inject", action="append", default=[], metavar="KIND:INDEX",
                        help="test the harness: input INDEX crashes / hangs / slow / memory / exception")
    parser.add_argument("--targets", help=f"comma-separated readers to drive (default all: {','.join(TARGETS)})")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--samples", help=argparse.SUPPRESS)
    parser.add_argument("--scratch", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _summary(campaign: Campaign, elapsed: float) -> str:
    failed = sum(campaign.failures.values())
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(campaign.failures.items())) or "none"
    rate = campaign.done / elapsed if elapsed > 0 else 0.0
    return (f"fuzz_readers: {campaign.done} inputs (seed {campaign.args.seed}), {failed} failures ({kinds}); "
            f"{campaign.counts['ok']} read, {campaign.counts['error']} refused with ddlsim's own errors; "
            f"{len(campaign.signatures)} distinct failure signatures; {elapsed:.0f} s, {rate:.0f} inputs/s")


def run_campaign(args: argparse.Namespace) -> Campaign:
    global TARGETS
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    samples_dir = out / "samples"
    if not samples_dir.is_dir():
        staging = out / "samples.partial"
        if staging.exists():
            shutil.rmtree(staging)
        sys.path.insert(0, str(ROOT / "python"))
        make_samples(staging)
        staging.rename(samples_dir)
    scratch_root = Path("/dev/shm") if Path("/dev/shm").is_dir() and os.access("/dev/shm", os.W_OK) else out
    scratch_root = Path(scratch_root) / f"ddlsim-fuzz-{os.getpid()}"
    # a reader without samples is left out: validate's are real captures, made only where PyTorch is installed
    TARGETS = tuple(t for t in TARGETS if (samples_dir / t).is_dir() and any((samples_dir / t).iterdir()))
    campaign = Campaign(args)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # end the workers too (finally)
    next_index, end = args.start, args.start + args.inputs
    workers: list[Worker] = []
    started = time.monotonic()
    last_report = started
    hang_limit = args.hang_limit or max(2 * args.time_limit, args.time_limit + 20)

    def hand_out(worker: Worker) -> None:
        nonlocal next_index
        if next_index < end:
            count = min(args.batch, end - next_index)
            worker.send(next_index, count)
            next_index += count

    def failed_worker(worker: Worker, kind: str, detail: str) -> Worker | None:
        """The worker died or hung on its first pending input: count it, restart, resend the rest."""
        worker.kill()
        if worker.pending:
            index = worker.pending[0]
            target = TARGETS[index % len(TARGETS)]
            campaign.record(index, kind, f"{kind}@{target}", detail + "\n" + worker.stderr_tail(), target)
        rest = worker.pending[1:]
        replacement = Worker(worker.number, args, samples_dir, scratch_root)
        if not worker.pending:  # it died after its last answer: nothing to blame
            hand_out(replacement)
            return replacement
        if rest:
            replacement.send(rest[0], len(rest))
        else:
            hand_out(replacement)
        return replacement

    try:
        for number in range(max(1, args.workers)):
            worker = Worker(number, args, samples_dir, scratch_root)
            hand_out(worker)
            workers.append(worker)
        while any(w.busy for w in workers):
            readable = [w.process.stdout for w in workers if w.busy]
            select.select(readable, [], [], 1.0)
            now = time.monotonic()
            for position, worker in enumerate(workers):
                if not worker.busy:
                    continue
                lines, ended = worker.read_lines()
                for line in lines:
                    if line == b"ready":  # read_lines took its time and CPU as the new baseline
                        worker.ready = True
                        continue
                    if line == b"done":
                        worker.pending, worker.busy = [], False
                        hand_out(worker)
                        continue
                    if line.startswith(b"["):
                        index, outcome, signature, detail, target, applied = json.loads(line)
                        campaign.record(index, outcome, signature, detail, target, applied)
                    else:
                        index_text, outcome = line.split()
                        index = int(index_text)
                        campaign.record(index, outcome.decode())
                    if worker.pending and worker.pending[0] == index:
                        worker.pending.pop(0)
                if ended and worker.busy:
                    code = worker.process.wait()
                    how = f"signal {-code}" if code < 0 else f"exit status {code}"
                    workers[position] = failed_worker(worker, "crash", f"worker ended with {how}")
                elif worker.busy and now - worker.last_progress > hang_limit and worker.stalled(now, hang_limit):
                    workers[position] = failed_worker(worker, "hang", worker.stalled(now, hang_limit))
            if now - last_report >= args.progress:
                last_report = now
                print(f"progress: {_summary(campaign, now - started)}", file=sys.stderr, flush=True)
    finally:
        for worker in workers:
            try:
                worker.process.stdin.close()
            except OSError:
                pass
            worker.kill()
        shutil.rmtree(scratch_root, ignore_errors=True)
    campaign.elapsed = time.monotonic() - started
    return campaign


def replay(directory: Path) -> int:
    info = json.loads((directory / "info.json").read_text(encoding="utf-8"))
    sys.path.insert(0, str(ROOT / "python"))
    from ddlsim.errors import DdlsimError, InternalError

    try:
        result = run_target(info["target"], directory / "input")
    except InternalError:
        traceback.print_exc()
        return 1
    except DdlsimError as exc:
        print(f"{info['target']}: refused with {type(exc).__name__}: {exc}")
        return 0
    except Exception:  # noqa: BLE001 - shown to the user
        traceback.print_exc()
        return 1
    print(f"{info['target']}: read without error ({type(result).__name__})")
    return 0


def main(argv: list[str] | None = None) -> int:
    global TARGETS
    args = _parse_args(argv)
    if args.targets:
        chosen = tuple(dict.fromkeys(t.strip() for t in args.targets.split(",") if t.strip()))
        unknown = [t for t in chosen if t not in TARGETS]
        if unknown or not chosen:
            print(f"fuzz_readers: --targets {args.targets!r}: choose from {','.join(TARGETS)}", file=sys.stderr)
            return 2
        TARGETS = chosen
    if args.worker:
        worker_main(args)
        return 0
    if args.replay:
        return replay(Path(args.replay))
    campaign = run_campaign(args)
    print("per reader (read/refused/failed): " + ", ".join(
        f"{target} {c['ok']}/{c['error']}/{c['failed']}" for target, c in sorted(campaign.by_target.items())),
        file=sys.stderr)
    print(_summary(campaign, campaign.elapsed), flush=True)
    return 1 if campaign.failures else 0


if __name__ == "__main__":
    sys.exit(main())
