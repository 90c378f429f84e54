"""Replay: the run an event log recorded, as a scenario to simulate again,
under its own conditions or other ones.

The replayed job is the data-parallel iteration the log shows: its model
(the recorded scenario's for a simulated log, a zoo model by name for an
imported or captured one, or one rebuilt from a DDP capture of a model the zoo
lacks, :mod:`ddlsim.workload.captured`), its worker count, and each layer's forward and
backward time as the log measured them (the median over workers and
iterations, see :func:`ddlsim.workload.profile.layer_times_from_log`).
Communication is not replayed: it is lowered again under the scenario's
strategy and network, which is the point — "what would this job have done
on another network, or with another synchronisation?".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

from ..errors import DdlsimError
from ..inputs import input_file
from ..workload.captured import rebuilt_model
from .scenario import Scenario, scenario_from_dict, with_overrides

# What the recorded layer times already contain, so a replay must not apply it again.
_TIME_FIELDS = ("device", "precision", "efficiency", "compute", "compute_speedup", "speedup_kinds", "profile", "profile_job")


def recorded_metadata(path: Path) -> dict[str, Any]:
    """The event log's metadata (no rows read)."""
    from ..trace.parquet import read_log_metadata

    return read_log_metadata(path)


def replay_scenario(log_path: str | Path, model: Optional[str] = None, jobs: Optional[list[str]] = None,
                    **overrides: Any) -> Scenario:
    """The scenario that replays the run in `log_path` (an events.parquet),
    with `overrides` (as :func:`ddlsim.simulate` takes them) applied; of a
    log of several jobs, a scenario with one [[job]] table per replayed job
    (`jobs`: only the jobs of these names; see :func:`replay_jobs_plan`)."""
    return replay_plan(log_path, model=model, jobs=jobs, **overrides)[0]


def replay_plan(log_path: str | Path, model: Optional[str] = None, jobs: Optional[list[str] | str] = None,
                **overrides: Any) -> tuple[Scenario, list[str]]:
    """:func:`replay_scenario`, with the notes that say what the replay took
    from the log and what it assumed (its gradient groups and link bandwidth):
    ``ddlsim replay`` prints them, :func:`ddlsim.replay` keeps them in the
    result's notes."""
    path = Path(log_path)
    wire = overrides.pop("wire", None)
    idle_curve = overrides.pop("idle_curve", None)
    message_times = check_message_times(overrides.pop("message_times", None))
    if isinstance(jobs, str):  # one job's name (not its characters)
        jobs = [jobs]
    input_file(path, "event log", "give the events.parquet of a run (ddlsim simulate --out, a capture, or ddlsim "
               "convert)")
    if path.suffix != ".parquet":
        raise DdlsimError(f"{path}: replay reads an event log in Parquet; convert other formats first: "
                          f"ddlsim convert {path} {path.with_suffix('.parquet').name}")
    meta = recorded_metadata(path)
    if meta.get("source") == "netop":
        raise DdlsimError(_netop_refusal(path))
    if message_times is not None and not (meta.get("source") == "capture" and meta.get("job") == "ps"):
        raise DdlsimError(f"{path}: --message-times (message_times=) chooses how a PS capture's messages are replayed, "
                          "but this log is not a PS capture; leave it out")
    if idle_curve is not None and not (meta.get("source") == "capture" and meta.get("job") == "ddp"):
        raise DdlsimError(f"{path}: --idle-curve (idle_curve=) scales a DDP capture's compute by the wait before it, "
                          "but this log is not a DDP capture; leave it out")
    if is_jobs_log(path, meta):
        if model is not None:
            raise DdlsimError(f"{path}: a log of several jobs records each job's model; --model (model=) replays a log "
                              "of one job: leave it out")
        return replay_jobs_plan(path, meta, jobs, wire, overrides)
    if jobs:
        raise DdlsimError(f"{path}: --job (jobs=) picks jobs of a log of several jobs, but this log holds one job; "
                          "leave it out")
    if overrides.get("job_stagger") is not None:
        raise DdlsimError(f"{path}: --job-stagger (job_stagger=) staggers the jobs of a log of several jobs, but this "
                          "log holds one job; leave it out")
    recorded = meta.get("scenario") if isinstance(meta.get("scenario"), dict) else None
    notes: list[str] = []
    rows = _read_once(path)  # the log's rows, read when a measurement first needs them
    if recorded is not None and (model is None or model == recorded.get("model", {}).get("name")):
        data = {k: v for k, v in recorded.items() if k != "base_dir"}
        data["model"] = {k: v for k, v in data.get("model", {}).items() if k not in _TIME_FIELDS}
        origin = "the recorded scenario's"
    else:
        name = model or meta.get("model")
        if not name:
            raise DdlsimError(f"{path}: the log does not say which model ran; give it with --model (a zoo model, see ddlsim models)")
        workers, iterations = _workers_and_iterations(path)
        settings = capture_settings(meta)
        rebuilt = rebuilt_model(meta, str(name), str(path))  # None: a zoo model
        if meta.get("source") == "capture" and meta.get("job") == "ddp":
            buckets, group_note = captured_buckets(meta, str(name), rebuilt)
            if buckets is not None:
                settings["strategy"]["grouping"] = {"kind": "groups", "groups": buckets}
            if "grouping" not in overrides:
                notes.append(group_note)
        data = {"model": {"name": str(name)}, "workers": workers, "iterations": iterations, **settings}
        if rebuilt is not None:
            notes.append(_rebuilt_model_note(rebuilt))
            data["model"]["layers_from"] = str(path.resolve())  # kept by a replay of the log this replay writes
        if meta.get("source") == "capture":
            data["model"]["overheads"] = True  # the capture's framework gaps and optimizer step, as measured
            gamma = (settings.get("strategy") or {}).get("gamma_ns_per_byte")
            if gamma and "gamma_ns_per_byte" not in overrides:
                notes.append(f"replay: reduction cost gamma = {gamma:.4g} ns/byte, measured on the capturing machine")
            if "latency" in (settings.get("network") or {}) and "latency" not in overrides:
                if meta.get("job") == "ddp":
                    notes.append(f"replay: latency {settings['network']['latency']} per ring step = the capture's 4-byte "
                                 f"all-reduce ({meta.get('allreduce_small_ns', 0) / 1e3:.4g} us) / (2 (N - 1)) steps, "
                                 "measured on the capturing machine")
                else:
                    notes.append(f"replay: latency {settings['network']['latency']} per message = half the capture's "
                                 "4-byte RPC round trip (median over workers), measured on the capturing machine")
            cost = (settings.get("strategy") or {}).pop("server_cost", None)
            if cost is not None and overrides.get("overheads") is not False and "server_cost" not in overrides:
                settings["strategy"]["server_cost"] = cost  # data holds the same strategy dict
                fit = meta["server_cost"]
                notes.append(f"replay: per-request server cost a + b C = {cost['a']} + {cost['b']} x C (fitted: "
                             f"{fit['a_ns'] / 1e3:.4g} us + {fit['b_ns'] / 1e3:.4g} us x C over {fit.get('connections')} "
                             "connections by the capture's connection-scaling run; a negative term is dropped, keeping "
                             "the cost at the capture's C); --no-overheads leaves it out")
            client, origin_of = (settings.get("strategy") or {}).pop("client_cost", None), "measured by the capture"
            if client is None and meta.get("job") == "ps" and "client_cost" not in meta:
                client, origin_of = _client_cost_from_rows(rows), "measured from the capture's rows (made before captures recorded it)"
            wakeup_of = origin_of
            if (client is not None and meta.get("job") == "ps" and isinstance(meta.get("client_cost"), dict)
                    and "wakeup_ns" not in meta["client_cost"]):
                woken = _wakeup_from_rows(rows)  # a capture made before the wake-up was recorded
                if woken is not None:
                    client = {**client, "wakeup": woken}
                wakeup_of = "measured from the capture's rows (made before captures recorded it)"
            if client is not None and overrides.get("overheads") is not False and "client_cost" not in overrides:
                settings["strategy"]["client_cost"] = client
                notes.append(f"replay: the workers' own per-request cost, {origin_of}: each request issued holds its "
                             f"worker {client['issue']} + {client['issue_ns_per_byte']:.4g} ns/byte, each response "
                             f"handled {client['receive']} + {client['receive_ns_per_byte']:.4g} ns/byte, one after "
                             "another on the worker; --no-overheads leaves it out")
                if client.get("wakeup"):
                    notes.append(f"replay: the workers' wake-up, {wakeup_of}: a response that reaches a worker whose "
                                 f"training thread is idle is taken {client['wakeup']} after it arrives (the mean wait "
                                 "of the counted responses that reached an idle loop); --no-overheads leaves it out")
            if meta.get("job") == "ddp" and overrides.get("overheads") is not False:
                wake, wake_note = _idle_wake(path, meta, idle_curve, rows)
                if wake is not None:
                    data["model"]["idle_wake"] = wake
                    notes.append(wake_note)
            update = _server_update_from_rows(rows) if meta.get("job") == "ps" else None
            if update is not None and overrides.get("overheads") is not False and "server_cost" not in overrides:
                settings["strategy"]["server_cost"] = {**(settings["strategy"].get("server_cost") or {}), **update}
                notes.append(f"replay: the server's update, measured from the capture's update rows, "
                             f"{update['update']} + {update['update_ns_per_byte']:.4g} ns/byte, runs on the server's "
                             "one thread with its requests, right after the push that completes it (a serial "
                             "update); --no-overheads leaves it out")
        origin = "the capture's shaped" if "bandwidth" in settings.get("network", {}) else None
    data["model"]["profile"] = str(path.resolve())
    scenario = with_overrides(scenario_from_dict(data, origin=f"{path} (recorded scenario)"), overrides)
    given = "bandwidth" in overrides or "bandwidth" in (overrides.get("network") or {})
    # the capture's own link: its own rate (a shaped capture's, named or not) and its own framing (named or not)
    own_link = (not given or _captured_rate_given(meta, overrides)) and (wire is None or wire == default_wire(meta))
    rate = meta.get("allreduce_rate_bps")
    measured = (own_link and meta.get("source") == "capture" and meta.get("job") == "ddp"
                and isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0)
    own_job = meta.get("source") == "capture" and meta.get("job") == "ddp"
    own = own_link and own_job and scenario.model.overheads
    training = _training_rate(scenario, rows) if own else None
    if not ((measured or training is not None) and origin is None):  # an unshaped capture's measured rate is no assumption
        notes.append(_bandwidth_note(scenario, overrides, origin))
    shared = shared_cores_note(meta)
    if shared:
        notes.append(shared)
    if scenario.model.overheads:
        notes.append(_overheads_note(rows, scenario))
    if meta.get("layer_every", 1) != 1:  # a capture with sampled layer rows (capture ddp --layer-every K)
        from .sampled import sampled_layers_note

        notes.extend(n for n in [sampled_layers_note(rows(), gaps=scenario.model.overheads)] if n)
    if training is not None:
        scenario, wire_note = training
    elif measured:
        scenario, wire_note = _measured_rate(scenario, meta, float(rate))
    else:
        scenario, wire_note = _on_the_wire(scenario, meta, wire)
    if wire_note:
        notes.append(wire_note)
    ps_messages = (meta.get("source") == "capture" and meta.get("job") == "ps"
                   and scenario.strategy.kind == "ps"  # the RPC messages' own latency: not a ring step's (--strategy ring)
                   and scenario.model.overheads and "latency" not in overrides
                   and not (isinstance(overrides.get("network"), dict) and "latency" in overrides["network"]))
    # elsewhere: on a tbf-shaped link (--wire tbf, a shaped capture's default) whose token bucket may hold a worker's
    # bytes, at the given rate or (no rate given) the recorded link's; or on a bare link (no token bucket)
    on_tbf = (wire or default_wire(meta)) == "tbf"
    target = None if own_link or not on_tbf else (_given_rate(overrides) if given else scenario.network.bandwidth_bps)
    bare = not own_link and not on_tbf  # another rate or framing on a link without a token bucket
    if ps_messages and (own_link or target is not None or bare):
        scenario, message_note, unbound = _ps_training_latency(scenario, rows, meta, message_times or "measured", target,
                                                               bare=bare)
        if message_note:  # in place of the round trip's note
            notes = [n for n in notes if not (n.startswith("replay: latency ") and "4-byte RPC round trip" in n)]
            if unbound:  # the shaped link does not bind: the shaped rate's notes no longer hold
                notes = [n for n in notes if not n.startswith(("replay: payload rate ", "replay: link bandwidth "))]
            notes.append(message_note)
            if not scenario.strategy.message_latency.is_empty() and shared:
                notes[notes.index(shared)] = shared_cores_note(meta, messages_measured=True)
    if training is None and own_job and scenario.model.overheads and "latency" not in overrides:
        scenario, call_note = _per_call_cost(scenario, rows)
        if call_note:
            notes.append(call_note)
    if scenario.model.rank_times == "sampled":
        # the sampled steps already hold the recorded run's jitter and stragglers: not applied a second time
        again = {k: v for k, v in (("jitter", 0.0), ("straggler", [])) if k not in overrides and getattr(scenario, k)}
        if again:
            scenario = scenario.model_copy(update=again)
            notes.append(f"replay: the recorded {' and '.join(again)} not applied again: the sampled steps already hold them")
    return scenario, notes


def _log_jobs(path: Path) -> list[int]:
    """The distinct values of the log's ``job`` column ([0] for a log without one)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        if "job" not in pq.read_schema(path).names:
            return [0]
        column = pq.read_table(path, columns=["job"]).column("job")
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise DdlsimError(f"{path}: not a readable Parquet event log ({exc})") from None
    return sorted(int(v) for v in pc.unique(column).to_pylist() if v is not None)


def is_jobs_log(path: Path, meta: dict[str, Any]) -> bool:
    """Whether the log at `path` records several jobs on one fabric (docs/jobs.md): its metadata lists jobs (a run
    of a [[job]] scenario, also one of a single job picked from one), or its rows carry more than one job id."""
    recorded = meta.get("scenario")
    if isinstance(meta.get("jobs"), list) and meta["jobs"]:
        return True
    if isinstance(recorded, dict) and isinstance(recorded.get("job"), list) and recorded["job"]:
        return True
    return len(_log_jobs(path)) > 1


# Scenario keys a [[job]] table holds (ddlsim.simulation.jobs.JOB_SCENARIO_KEYS), and the override keys that
# change one of them (a section of model or strategy), which a replay of several jobs applies to every job.
def _job_override(key: str) -> bool:
    from .jobs import JOB_SCENARIO_KEYS
    from .scenario import FLAT_KEYS

    return key in JOB_SCENARIO_KEYS or FLAT_KEYS.get(key, ("",))[0] in ("model", "strategy")


def replay_jobs_plan(path: Path, meta: dict[str, Any], picked: Optional[list[str]], wire: Optional[str],
                     overrides: dict[str, Any]) -> tuple[Scenario, list[str]]:
    """The scenario that replays a run of several jobs on one fabric: one [[job]] table per job the log records
    (`picked`: only the jobs of these names, alone on the same fabric), each with its own model and measured layer
    times (the median over the job's own worker rows: ``model.profile_job``), its strategy and grouping, its hosts
    (an explicit placement), start, band and iterations as the log's metadata records them; the fabric (network,
    its host count, background tenants) as recorded. `overrides` apply to every job (a model or strategy key, the
    workers, iterations, seed, ...) or to the fabric (the network, tenants, stragglers)."""
    from .jobs import JOB_SCENARIO_KEYS, hosts_needed, job_scenarios

    recorded = meta.get("scenario") if isinstance(meta.get("scenario"), dict) else None
    entries = meta.get("jobs") if isinstance(meta.get("jobs"), list) else None
    tables = recorded.get("job") if recorded is not None and isinstance(recorded.get("job"), list) else None
    ids = _log_jobs(path)
    need = ("job", "name", "hosts", "start_ns")
    if (recorded is None or not entries or not tables
            or not all(isinstance(e, dict) and all(k in e for k in need) for e in entries)
            or any(not isinstance(e["job"], int) or not 0 <= e["job"] < len(tables) for e in entries)
            or any(not isinstance(e["start_ns"], int) or not isinstance(e["hosts"], list) or not e["hosts"]
                   or not all(isinstance(h, int) and h >= 0 for h in e["hosts"]) for e in entries)):
        raise DdlsimError(f"{path}: its rows belong to {len(ids)} jobs, but its metadata does not record them (the "
                          "recorded scenario's [[job]] tables and each job's name, hosts and start: metadata "
                          "'scenario' and 'jobs'), so it cannot be replayed as jobs on one fabric; replay the events.parquet "
                          "that ddlsim simulate --out wrote for a [[job]] scenario, or simulate that scenario again")
    names = [str(e["name"]) for e in entries]
    if picked:
        unknown = [n for n in picked if n not in names]
        if unknown:
            raise DdlsimError(f"--job {unknown[0]}: no such job in {path}; its jobs are {', '.join(names)}")
        entries = [e for e in entries if e["name"] in picked]
    if len(entries) == 0:
        raise DdlsimError(f"{path}: no job to replay")
    data = {k: v for k, v in recorded.items() if k not in ("base_dir", "job")}
    # the starts recorded already hold the job stagger; the fabric keeps its recorded host count (job alone: the
    # same fabric, the same background tenants)
    data["job_stagger"] = "0s"
    all_hosts = [h for e in (meta.get("jobs") or []) for h in e["hosts"]]
    network = dict(data.get("network") or {})
    if network.get("hosts") is None:
        network["hosts"] = max(len(all_hosts), max(all_hosts, default=-1) + 1)
    data["network"] = network
    base = scenario_from_dict({**data, "job": [_clean_job(tables[e["job"]]) for e in entries]},
                              origin=f"{path} (recorded scenario)")
    job_keys = {k: v for k, v in overrides.items() if _job_override(k)}
    notes = []
    jobs_out = []
    needs = 0
    for e, sub in zip(entries, job_scenarios(base)):
        label = f"job {e['name']}"
        model_data = {k: v for k, v in sub.model.model_dump(mode="json").items() if k not in _TIME_FIELDS}
        model_data.update(profile=str(path.resolve()), profile_job=int(e["job"]))
        sub = sub.model_copy(update={"model": scenario_from_dict({"model": model_data}).model})
        if job_keys:
            sub = with_overrides(sub, job_keys, origin=label)
        if sub.model.rank_times == "sampled" and "jitter" not in overrides and sub.jitter:
            sub = sub.model_copy(update={"jitter": 0.0})
            notes.append(f"replay: {label}'s recorded jitter not applied again: the sampled steps already hold it")
        dumped = sub.model_dump(mode="json", exclude={"base_dir"})
        table = {k: dumped[k] for k in JOB_SCENARIO_KEYS}
        # what turns FLOPs into times is left out beside a profile (the scenario refuses both)
        table["model"] = {k: v for k, v in table["model"].items() if k not in ("device", "precision", "efficiency", "compute")}
        table.update(name=e["name"], start=f"{int(e['start_ns'])}ns", band=e.get("band"))
        hosts = [int(h) for h in e["hosts"]]
        if hosts_needed(sub) == len(hosts):
            table["placement"] = hosts
        else:  # other workers or servers: the job's recorded placement rule places it again
            rule = tables[e["job"]].get("placement") or "packed"
            if not isinstance(rule, str):  # an explicit host list of the recorded length: the free hosts, in order
                rule = "packed"
            table["placement"] = rule
            if tables[e["job"]].get("placement_seed") is not None:
                table["placement_seed"] = tables[e["job"]]["placement_seed"]
            notes.append(f"replay: {label} needs {hosts_needed(sub)} host(s) now, not its recorded {len(hosts)} "
                         f"({', '.join(map(str, hosts))}): placed again by its rule ({rule!r})")
        needs += hosts_needed(sub)
        jobs_out.append({k: v for k, v in table.items() if v is not None})
    if needs > network["hosts"] and (recorded.get("network") or {}).get("hosts") is None:
        data["network"] = {**network, "hosts": needs}  # the recorded fabric, grown to what the jobs need now
    fabric = {k: v for k, v in overrides.items() if not _job_override(k) or k in ("seed", "iterations", "workers")}
    scenario = scenario_from_dict({**data, "job": jobs_out}, origin=f"{path} (recorded scenario)")
    if fabric:
        scenario = with_overrides(scenario, fabric)
    notes.insert(0, f"replay: {len(jobs_out)} of the log's {len(meta['jobs'])} job(s) ("
                 + ", ".join(str(e["name"]) for e in entries) + "), each with its own measured layer times, grouping, "
                 "hosts, start, band and iterations as recorded" + ("" if len(entries) == len(meta["jobs"]) else
                                                                    ", on the same fabric without the others"))
    sampled = [j["name"] for j in jobs_out if (j.get("model") or {}).get("rank_times") == "sampled"]
    if sampled and scenario.straggler and "straggler" not in overrides:
        scenario = scenario.model_copy(update={"straggler": []})
        notes.append("replay: the recorded stragglers not applied again: the sampled steps already hold them")
    scenario, wire_note = _on_the_wire(scenario, meta, wire)
    if wire_note:
        notes.append(wire_note)
    return scenario, notes


def _clean_job(table: Any) -> dict[str, Any]:
    """A recorded [[job]] table without its unset (None) keys; {} when it is not a table."""
    return {k: v for k, v in table.items() if v is not None} if isinstance(table, dict) else {}


def recorded_job_times(path: str | Path) -> dict[str, float]:
    """Per job name: the mean iteration time (s) each job of a log of several jobs had in the recorded run."""
    import numpy as np

    from ..analyze.jobs import job_iterations
    from ..trace.parquet import read_event_log

    log = read_event_log(path)
    out = {}
    for e in log.metadata.get("jobs") or []:
        times = job_iterations(log, int(e["job"]))["time_s"]
        if len(times):
            out[str(e["name"])] = float(np.mean(times))
    return out


def attach_recorded(result: Any, path: str | Path) -> None:
    """A replay of several jobs (a JobsRun): each job's recorded mean iteration time beside its replayed one
    (``jobs()``'s ``recorded_iteration_time_s``); nothing for a replay of one job."""
    from .jobs import JobsRun

    if isinstance(result, JobsRun):
        result.recorded = recorded_job_times(path)


def _netop_refusal(path: Path) -> str:
    """Why a network-operator trace cannot be replayed, and the command that simulates its job instead."""
    import numpy as np
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["rank", "role", "peer"])
    ranks, peers = table.column("rank").to_numpy(), table.column("peer").to_numpy()
    worker = np.asarray(table.column("role").to_pylist(), dtype=object) == "worker"
    # a server that only receives has no rows of its own: it is a worker's peer
    workers = len(set(ranks[worker].tolist()) | set(peers[~worker & (peers >= 0)].tolist()))
    servers = len(set(ranks[~worker].tolist()) | set(peers[worker & (peers >= 0)].tolist()))
    return (f"{path}: a network-operator trace records only when each parameter was queued to send (no compute rows, "
            "no forward pass: the paper profiles that apart), so it has no layer times to replay; simulate its job "
            f"instead: ddlsim simulate --model MODEL --strategy ps --workers {max(workers, 1)} --servers {max(servers, 1)}")


def _read_once(path: Path) -> Callable[[], Any]:
    """The event log at `path`, read on the first call and kept for the next ones (one replay's measurements)."""
    from functools import cache

    from ..trace.parquet import read_event_log

    return cache(lambda: read_event_log(path))


def _overheads_note(rows: Callable[[], Any], scenario: Scenario) -> str:
    from .overheads import framework_overheads

    if scenario.model.rank_times != "median":
        return "replay: the capture's framework gaps and optimizer step are not added to sampled rank times"
    log = rows()
    found = framework_overheads(log, log.metadata)
    skew = ""
    if found.get("buckets"):
        launch = "push" if log.metadata.get("job") == "ps" else "bucket"
        skew = (f", and the wait for the slower rank at each {launch}'s launch (the latest launch less the mean: "
                + ", ".join(f"{b['skew_s'] * 1e3:.3g}" for b in found["buckets"]) + " ms, after "
                + ", ".join(b["layer"] for b in found["buckets"]) + ")")
    return (f"replay: + the capture's framework gaps ({found['gap_s'] * 1e3:.3g} ms per iteration, before each layer's "
            f"rows) and optimizer step ({found['optimizer_s'] * 1e3:.3g} ms, before the first forward){skew}; "
            "--no-overheads (overheads=False) leaves them out")


def _captured_rate_given(meta: dict[str, Any], overrides: dict[str, Any]) -> bool:
    """Whether the rate given is the one a shaped capture was made at (``--bandwidth 1Gbps`` of a 1 Gbit/s
    capture: its own link; an unshaped capture's link has no rate to name)."""
    import math

    from ..units import parse_bandwidth

    given = _given_rate(overrides)
    if given is None or meta.get("source") != "capture" or not meta.get("bandwidth"):
        return False
    try:
        captured = parse_bandwidth(str(meta["bandwidth"]))
    except (DdlsimError, ValueError):
        return False
    return math.isclose(given, captured, rel_tol=1e-12)


def default_wire(meta: dict[str, Any]) -> str:
    """The framing a log is replayed with when ``--wire`` is not given: a shaped capture's tbf (what its shaping
    counts), anything else none."""
    return "tbf" if meta.get("source") == "capture" and meta.get("bandwidth") else "none"


def _on_the_wire(scenario: Scenario, meta: dict[str, Any], wire: Optional[str]) -> tuple[Scenario, Optional[str]]:
    """The link rate the payload gets (:func:`ddlsim.simulation.overheads.payload_fraction`): `wire` names the
    framing (ethernet | tbf | none); a shaped capture defaults to tbf (what its shaping counts), anything else to none."""
    from .overheads import WIRE, wire_fraction

    if wire is None:
        wire = default_wire(meta)
    if wire not in WIRE:
        raise DdlsimError(f"wire {wire!r}: give one of {', '.join(WIRE)} (the framing whose headers the link's rate pays)")
    fraction = wire_fraction(wire)
    if fraction == 1.0:
        return scenario, None
    rate = scenario.network.bandwidth_bps
    burst = tbf_burst_factor(meta, rate, fraction, scenario.workers) if wire == "tbf" else None
    note = (f"replay: payload rate {rate * fraction / 1e6:.6g} Mbit/s = link rate x {fraction:.5f} "
            f"(TCP/IP headers and {wire} framing per MSS-sized segment; --wire none leaves it out)")
    if burst is not None:
        factor, text = burst
        fraction *= factor
        note += text
    scenario = with_overrides(scenario, {"bandwidth": f"{rate * fraction:.17g}bps"})
    return scenario, note


def _training_rate(scenario: Scenario, rows: Callable[[], Any]) -> Optional[tuple[Scenario, str]]:
    """A DDP capture replayed at its own links with its overheads: the payload rate its ring all-reduces got while
    training, from its own bucket rows (:func:`ddlsim.simulation.overheads.training_ring_rate`); None when the
    capture does not determine it (the rate measured after training, or the closed form, is used then)."""
    from .overheads import training_ring_rate

    log = rows()
    found = training_ring_rate(log, log.metadata)
    if found is None:
        return None
    note = (f"replay: payload rate {found['rate_bps'] / 1e6:.6g} Mbit/s, the rate the capture's ring all-reduces got "
            f"while training (its {found['iterations']} counted iterations' all-reduce time, {found['bytes'] / 2**20:.4g} "
            f"MiB each, and the 4-byte all-reduce: {found['b_ns_per_byte']:.4g} ns per byte less the reduction); "
            "--bandwidth replays another rate, --no-overheads the rate measured after training")
    return with_overrides(scenario, {"bandwidth": f"{found['rate_bps']:.17g}bps"}), note


MESSAGE_TIMES = ("measured", "mean")


def check_message_times(value: Optional[str]) -> Optional[str]:
    """`value` where it is one of :data:`MESSAGE_TIMES` or None; a one-line error otherwise."""
    if value is not None and value not in MESSAGE_TIMES:
        raise DdlsimError(f"message times {value!r}: give {' or '.join(MESSAGE_TIMES)} (--message-times)")
    return value


def _given_rate(overrides: dict[str, Any]) -> Optional[float]:
    """The link rate `overrides` give (``bandwidth``, or ``network.bandwidth``), bit/s; None where they give none."""
    from ..units import parse_bandwidth

    given = overrides.get("bandwidth")
    if given is None and isinstance(overrides.get("network"), dict):
        given = overrides["network"].get("bandwidth")
    return None if given is None else parse_bandwidth(str(given))


def _ps_training_latency(scenario: Scenario, rows: Callable[[], Any], meta: dict[str, Any],
                         message_times: str = "measured", target_bps: Optional[float] = None,
                         bare: bool = False) -> tuple[Scenario, Optional[str], bool]:
    """A PS capture replayed at its own link with its overheads: the message latency its own RPC messages got
    while training (:func:`ddlsim.simulation.overheads.training_message_latency`: the intercept of latency +
    per-byte over their transport times), instead of half the 4-byte round trip measured before training; the
    per-byte term bounds the payload rate where it is slower than the link model's. Unchanged, with no note, where
    the rows do not give it, or where the shaped link bound (a worker's wire bytes per iteration exceed tbf's
    bucket: the transport times then hold the link's own queueing, which the engine simulates itself). The flag
    is true where the capture's shaped link does not bind (the link replayed is then the unshaped one).

    `message_times` "measured" (default): the messages do not all take the latency; each replayed iteration takes
    the times of one counted iteration of the capture (iteration k the capture's k, in turn), message for message
    (:func:`ddlsim.simulation.overheads.message_latency_table`, ``strategy.message_latency``): the latency is then
    their smallest, and each message adds its own time beyond it. "mean": every message takes the fitted latency.

    `target_bps`: a replay at another rate on a tbf-shaped link (``--bandwidth R --wire tbf``). Where neither the
    capture's link nor the target's binds (each one's token bucket, ``default_burst_bytes``, holds the wire bytes
    a worker sends per iteration; an unshaped capture's link does not bind), no message waits for either link's
    rate: the link is the unshaped one, and the messages' transport, which the machine set, is carried from the
    capture as at its own link. Unchanged, with no note, where either binds.

    `bare`: a replay at another rate or framing on a bare link (no token bucket: ``--wire none`` or ``ethernet``, or
    an unshaped capture's ``--bandwidth R``), the scenario's link. From a capture whose link did not bind, each message
    takes its own time beyond its bytes at the replayed link's rate (at least its bytes there: a message alone takes
    the longer of the two), carried; from one whose shaped link bound, what the machine took (its time less what the
    shaped links took it), fitted, as to a tbf link. The link stays the scenario's, which the engine simulates."""
    from ..capture.shaping import default_burst_bytes
    from ..units import parse_bandwidth, parse_duration_ns
    from .overheads import (beyond_shaped_links, message_latency_table, on_the_loopback, training_message_latency,
                            wire_fraction)

    log = rows()
    found = training_message_latency(log, log.metadata)
    if found is None:
        return scenario, None, False
    target_bucket = None if target_bps is None else default_burst_bytes(target_bps)
    if target_bucket is not None and found["worker_bytes"] / wire_fraction("tbf") > target_bucket:
        return scenario, None, False  # the target's shaping binds: its link's queueing is the engine's to simulate
    bucket, bound = None, None
    if meta.get("bandwidth"):
        captured_bps = parse_bandwidth(str(meta["bandwidth"]))
        bucket = default_burst_bytes(captured_bps)
        if found["worker_bytes"] / wire_fraction("tbf") > bucket:  # the shaping binds
            if target_bucket is None and not bare:
                return scenario, None, False  # at its own link: its queueing is the engine's to simulate
            bound = captured_bps, found["mean_ns"]  # to a link that does not bind: the machine's part is carried
            found = beyond_shaped_links(found, captured_bps)
    latency = round(found["latency_ns"])
    update = {"latency": f"{latency}ns"}
    if (bucket is not None or target_bucket is not None) and not bare:
        # tbf's token bucket holds every byte a worker sends per iteration (and refills in far less than an
        # iteration): the shaped rate never held a message back, so the link is the unshaped one, as tbf_burst_factor
        # has it for DDP; what the messages took is the latency and per-byte term measured here
        from .scenario import Scenario

        unshaped = Scenario().network.bandwidth_bps
        scenario = with_overrides(scenario, {"bandwidth": f"{unshaped:.17g}bps"})
        update["bandwidth"] = f"{unshaped:.17g}bps"
    note = (f"replay: latency {latency}ns per message = what the capture's own RPC messages took while training, "
            f"beyond their bytes (the intercept of latency + {found['ns_per_byte']:.4g} ns/byte by least squares over "
            f"{found['messages']} messages of its {len(found['iterations'])} counted iterations: a request from its "
            "rpc_async call's return to the server's receipt, a response from the server's send to the worker's "
            "receive queue), not half the 4-byte round trip measured before training")
    if bound is not None and bare:
        note += (f"; the capture's {bound[0] / 1e6:g} Mbit/s link bound (tbf's {bucket}-byte token bucket holds less "
                 f"than the {found['worker_bytes'] / wire_fraction('tbf'):.0f} wire bytes a worker sends per "
                 f"iteration), so each message's time is taken less what its two shaped links took it (the captured "
                 f"sends re-run through them at their captured times: {found['link_mean_ns'] / 1e6:.4g} ms of its "
                 f"{bound[1] / 1e6:.4g} ms per message on average; {found['below_link']} of {found['messages']} took "
                 f"less than that, counted 0): what the machine took, carried to the bare "
                 f"{scenario.network.bandwidth_bps / 1e6:g} Mbit/s link, whose bytes and queueing the engine simulates; "
                 "every message takes the fitted latency, not its own time")
    elif bare:
        note += (f"; carried to the bare {scenario.network.bandwidth_bps / 1e6:g} Mbit/s link (no token bucket: every "
                 "byte at its rate, which the engine simulates) from a capture whose own link did not bind: on the "
                 "2-core validation machine PS LeNet-5 captured unshaped and replayed so at 1 Gbit/s was 1.6 and 6.5 % "
                 "short of the captures made on a 1 Gbit/s tbf link in two grids, at 100 Mbit/s 2.6 % short (half "
                 "the round trip per message, as before 2026-11-28: 32, 34 and 6.0 % short; docs/validation.md)")
    elif bound is not None:
        note += (f"; the capture's {bound[0] / 1e6:g} Mbit/s link bound (tbf's {bucket}-byte token bucket holds less "
                 f"than the {found['worker_bytes'] / wire_fraction('tbf'):.0f} wire bytes a worker sends per "
                 f"iteration), so each message's time is taken less what its two shaped links took it (the captured "
                 f"sends re-run through them at their captured times: {found['link_mean_ns'] / 1e6:.4g} ms of its "
                 f"{bound[1] / 1e6:.4g} ms per message on average; {found['below_link']} of {found['messages']} took "
                 f"less than that, counted 0): what the machine took, carried; at the given {target_bps / 1e6:g} "
                 f"Mbit/s tbf's {target_bucket}-byte token bucket holds a worker's bytes, so no message waits for "
                 f"the link's rate and the link is the unshaped {scenario.network.bandwidth_bps / 1e9:g} Gbit/s; "
                 "every message takes the fitted latency, not its own time (one message's time less the links' "
                 "holds the link model's error, which the latest of the messages in flight together would pick up)")
    elif target_bucket is not None:
        note += (f"; at the given {target_bps / 1e6:g} Mbit/s, tbf's {target_bucket}-byte token bucket holds the "
                 f"{found['worker_bytes'] / wire_fraction('tbf'):.0f} wire bytes a worker sends per iteration, and the "
                 f"capture's own link did not bind either, so no message waits for a link's rate: the messages' "
                 f"transport is the capture's, carried, and the link is the unshaped "
                 f"{scenario.network.bandwidth_bps / 1e9:g} Gbit/s")
        if on_the_loopback(meta):
            note += ("; but the capture's messages went over the loopback, and a shaped link's go over a veth pair "
                     "between network namespaces (a real job's over a NIC), which costs each message more than the "
                     "loopback, and which a capture on the loopback cannot measure: on the 2-core validation machine "
                     "PS LeNet-5 captured unshaped and replayed at 1 Gbit/s this way was predicted 11 to 24 % short in "
                     "5 of 9 grids (12 % long in one; docs/validation.md); to predict a link, capture on that kind of "
                     "link")
    elif bucket is not None:
        note += (f"; the shaped link does not bind (tbf's {bucket}-byte token bucket holds the "
                 f"{found['worker_bytes'] / wire_fraction('tbf'):.0f} wire bytes a worker sends per iteration), so the "
                 f"link is the unshaped {scenario.network.bandwidth_bps / 1e9:g} Gbit/s")
    link = scenario.network.bandwidth_bps
    if found["ns_per_byte"] > 0 and 8e9 / found["ns_per_byte"] < link:
        rate = 8e9 / found["ns_per_byte"]
        update["bandwidth"] = f"{rate:.17g}bps"
        note += (f"; payload rate {rate / 1e6:.6g} Mbit/s, the per-byte term, below the link model's "
                 f"{link / 1e6:.6g} Mbit/s")
    replayed_rate = parse_bandwidth(update["bandwidth"]) if "bandwidth" in update else link
    base, table = message_latency_table(found, 8e9 / replayed_rate)  # each message's time beyond its bytes there
    if message_times == "measured" and table is not None and bound is None:
        update["latency"], update["message_latency"] = f"{base}ns", table
        longest = base + max(parse_duration_ns(v) for row in table["iterations"] for v in row if v is not None)
        note += (f"; the messages are not alike (beyond their bytes on the replayed link they took {base / 1e3:.4g} us "
                 f"to {longest / 1e3:.4g} us), so each replayed iteration takes the times of one of the capture's "
                 f"{len(table['iterations'])} counted iterations (iteration k the capture's k, in turn after the last), "
                 "message for message, on a latency of their smallest; --message-times mean gives every message the "
                 "fitted latency")
    note += "; --latency replays another latency, --no-overheads the round trip"
    return with_overrides(scenario, update), note, (bucket is not None or target_bucket is not None) and not bare


def _idle_wake(path: Path, meta: dict[str, Any], given: Any,
               rows: Callable[[], Any]) -> tuple[Optional[dict[str, Any]], str]:
    """A DDP capture's idle curves (:mod:`ddlsim.simulation.idle_wake`) as ``model.idle_wake``, with the note that
    says so: `given` (``--idle-curve``: a benchmarks/idle_wake.py CSV's path, or a curve dict; False: none), else the
    capture's own (``idle_curve`` in its metadata, measured on each rank after training); (None, "") where there is
    none (a capture made without --idle-curve: replayed as before).

    The idle the replay sees is not the capture's: the replay puts part of what the rows show as a wait elsewhere
    (the wait for the slower rank is charged to a backward, the wake-up to the optimizer step). So the capture is
    first replayed at its own settings without the curve, and the curve is read at the replay's idle plus the
    difference between the capture's idle (its rows) and that replay's: at the capture's own settings every op
    keeps its time, and another link moves each op by the change in the replay's idle."""
    from .idle_wake import CLASSES, check_curve, ratio, read_curve, replayed_idle_ns
    from .overheads import captured_idle_ns
    from .run import run_scenario

    if given is False:
        return None, ""
    if given is not None:
        try:
            curve = check_curve(given, "idle_curve") if isinstance(given, dict) else read_curve(given)
        except ValueError as exc:
            raise DdlsimError(str(exc)) from None
        origin = f"the idle curve of {curve.get('source', 'idle_curve=')}"
    else:
        found = meta.get("idle_curve")
        if not (isinstance(found, dict) and all(k in found for k in CLASSES)):
            return None, ""
        try:
            curve = check_curve({k: found[k] for k in (*CLASSES, "source") if k in found}, "metadata idle_curve")
        except ValueError as exc:
            raise DdlsimError(f"the capture's {exc}; replay with --no-overheads, or give --idle-curve") from None
        origin = f"the idle curve the capture measured on its {found.get('ranks', 'worker')} ranks after training"
    log = rows()
    captured = captured_idle_ns(log, log.metadata)
    if captured is None:
        return None, ""
    own, _ = replay_plan(path, idle_curve=False)  # the capture at its own settings, without the curve
    replayed = replayed_idle_ns(run_scenario(own).columns)
    if replayed is None:
        return None, ""
    tc, ts = captured / 1e6, replayed / 1e6
    curve = {**curve, "captured_ms": tc, "replayed_ms": ts}
    at = ", ".join(f"{cls} {ratio(curve[cls], tc):.3g}" for cls in CLASSES)
    note = (f"replay: compute after a wait, {origin}: each iteration's forward and backward take "
            f"r(t {'-' if tc < ts else '+'} {abs(tc - ts):.4g} ms) / r(t_c) of their captured time, t the idle the replayed rank's compute had "
            f"before the iteration, t_c = {tc:.4g} ms the capture's (its rows' median wait for the last all-reduce; "
            f"r(t_c): {at}), {ts:.4g} ms the replay's at the capture's own settings; --no-overheads leaves it out")
    return curve, note


def _per_call_cost(scenario: Scenario, rows: Callable[[], Any]) -> tuple[Scenario, Optional[str]]:
    """The per-call cost of a DDP capture replayed at another rate. One whose link did not bind (unshaped, or shaped
    with a token bucket that held its bytes): each all-reduce call also costs what it cost the capturing machine while training
    (:func:`ddlsim.simulation.overheads.unbound_call_cost`), spread over the ring's 2 (N - 1) steps as latency. One
    whose link bound: the mean of its 4-byte all-reduces after training less their median
    (:func:`ddlsim.simulation.overheads.small_call_stall`), the same way. Unchanged, with no note, for any other
    capture."""
    from .overheads import small_call_stall, unbound_call_cost

    log = rows()
    found = unbound_call_cost(log, log.metadata)
    if found is not None:
        why = (f"what each call cost the capturing machine while training, beyond the link model, where its link did "
               f"not bind (the mean of {found['iterations']} counted iterations)")
    else:  # the link bound (or no points): the capture's small all-reduces' stalls, where it has them
        found = small_call_stall(log.metadata)
        why = found and (f"the capture's {found['repeats'] or ''} 4-byte all-reduces after training took "
                         f"{found['mean_ns'] / 1e3:.4g} us on average against a median of {found['median_ns'] / 1e3:.4g} "
                         f"us (the calls that stalled for a core), which its training time holds inside the link's "
                         f"where the link bound")
    if found is None or found["call_ns"] <= 0 or scenario.workers < 2:
        return scenario, None
    steps = 2 * (scenario.workers - 1)
    latency = round(scenario.network.latency_ns + found["call_ns"] / steps)
    note = (f"replay: + {found['call_ns'] / 1e3:.4g} us per all-reduce call ({found['call_ns'] / steps / 1e3:.4g} us "
            f"per ring step, latency {latency / 1e3:.6g} us): {why}; --no-overheads leaves it out")
    return with_overrides(scenario, {"latency": f"{latency}ns"}), note


def _measured_rate(scenario: Scenario, meta: dict[str, Any], rate: float) -> tuple[Scenario, str]:
    """A DDP capture replayed at its own links: the payload rate its ring all-reduces got there, measured after
    training (:mod:`ddlsim.capture.allreduce_rate`: headers, ACKs and the two directions included), times tbf's
    token bucket factor on a shaped link (:func:`tbf_burst_factor`)."""
    note = (f"replay: payload rate {rate / 1e6:.6g} Mbit/s, the rate the capture's ring all-reduces got on its own "
            f"links (measured after training: all-reduces of {' and '.join(str(b >> 20) + ' MiB' for b in meta.get('allreduce_rate_sizes') or [])}, "
            "the slope between them); --bandwidth replays another rate")
    if meta.get("bandwidth"):
        from .overheads import wire_fraction

        link = scenario.network.bandwidth_bps
        bound = link * wire_fraction("tbf")
        if rate > bound:  # a noisy slope (a short one at a high rate): no steady rate beats the headers' bound
            note += f"; above the link's payload bound {bound / 1e6:.6g} Mbit/s (headers), so that bound"
            rate = bound
        burst = tbf_burst_factor(meta, link, rate / link, scenario.workers)
        if burst is not None:
            rate *= burst[0]
            note += burst[1]
    return with_overrides(scenario, {"bandwidth": f"{rate:.17g}bps"}), note


def tbf_burst_factor(meta: dict[str, Any], rate_bps: float, fraction: float, workers: int) -> Optional[tuple[float, str]]:
    """A DDP capture's all-reduces on tbf-shaped links: each iteration's first all-reduce starts on a link that was
    idle through the forward pass, so tbf's full token bucket (``default_burst_bytes(rate)``, what capture shapes
    with) lets its first B bytes through at once. Per rank and iteration the link then carries W - B bytes at the
    rate instead of W = 2 (N - 1) / N x the buckets' bytes / `fraction` (the header factor): the payload rate is
    scaled by W / (W - B), at most to the unshaped default rate (where B >= W the shaping does not bind). (factor,
    note), or None for anything else."""
    from ..capture.shaping import default_burst_bytes
    from .scenario import Scenario

    if meta.get("source") != "capture" or meta.get("job") != "ddp" or workers < 2:
        return None
    total = sum(int(b.get("bytes", 0)) for b in meta.get("buckets") or [] if isinstance(b, dict))
    if total <= 0:
        return None
    wire = 2 * (workers - 1) / workers * total / fraction
    burst = default_burst_bytes(rate_bps)
    unshaped = Scenario().network.bandwidth_bps
    cap = max(1.0, unshaped / (rate_bps * fraction))
    factor = min(cap, wire / (wire - burst)) if wire > burst else cap
    return factor, (f"; x {factor:.5g} for tbf's {burst}-byte token bucket, full after the forward pass: of the "
                    f"{wire:.0f} wire bytes a rank sends per iteration the first {burst} pass at once"
                    + (" (all of them: the shaping does not bind, the unshaped default rate is used)" if factor == cap else ""))


def shared_cores_note(meta: dict[str, Any], messages_measured: bool = False) -> Optional[str]:
    """A capture that ran more processes than its host had cores (``processes`` and ``host_cores`` in its metadata,
    :func:`ddlsim.capture.launch.host_facts`): a note that its processes took turns on the cores, which the replay
    does not simulate; None otherwise (or for a log that does not record them). `messages_measured`: the replay
    takes the capture's own messages' times (a PS capture at its own link), which hold their waits for a core."""
    processes, cores = meta.get("processes"), meta.get("host_cores")
    if not (isinstance(processes, int) and isinstance(cores, int)) or isinstance(processes, bool) or cores <= 0 \
            or processes <= cores:
        return None
    return (f"replay: the capture ran {processes} processes on {cores} cores of one host, so they took turns on the "
            "cores; the replay does not simulate that (its ranks compute side by side, each as fast as measured), so "
            "where a capture's process waited for a core (an idle worker, a stalled message) it predicts too little "
            "(docs/validation.md)" + ("; its messages' own measured times, which the replay takes, hold their waits "
                                      "for a core" if messages_measured else ""))


def _bandwidth_note(scenario: Scenario, overrides: dict[str, Any], origin: Optional[str]) -> str:
    rate = f"{scenario.network.bandwidth} ({scenario.network.bandwidth_bps / 1e9:g} Gbit/s)"
    if "bandwidth" in overrides or "bandwidth" in (overrides.get("network") or {}):
        return f"replay: link bandwidth {rate}, as given"
    if origin is not None:
        return f"replay: link bandwidth {rate}, {origin} link rate"
    return (f"replay: link bandwidth {rate} ASSUMED (the scenario default): the log does not record its link rate "
            "(an unshaped capture); give --bandwidth to replay the rate it ran at")


def _rebuilt_model_note(model: Any) -> str:
    """The note for a replayed model that is not in the zoo but rebuilt from the capture's layers and parameters."""
    from ..workload.captured import UNKNOWN_TYPE

    types = sorted({layer.type for layer in model.layers} - {UNKNOWN_TYPE})
    return (f"replay: model {model.name} rebuilt from the capture (not a zoo model): {len(model.layers)} layers"
            f"{' (' + ', '.join(types) + ')' if types else ''}, {len(model.tensors)} parameter tensors, "
            f"{model.size_bytes / 2**20:.3g} MiB, in the capture's registration order")


def captured_buckets(meta: dict[str, Any], model: str,
                     rebuilt: Any = None) -> tuple[Optional[list[list[str]]], str]:
    """A DDP capture's own buckets (its last layout), as lists of tensor names
    of the zoo `model` (or of `rebuilt`, the model rebuilt from the capture),
    and a note saying so; (None, note) when the capture does not record them or
    they name tensors the model lacks (the replay then derives them with DDP's
    rule from the capture's bucket cap)."""
    buckets, parameters = meta.get("buckets") or [], meta.get("parameters") or []
    cap = meta.get("bucket_cap_mb") or 25
    fallback = f"re-derived by DDP's rule from the capture's bucket cap ({cap:g} MiB)"
    if not buckets or not parameters:
        return None, f"replay: gradient buckets {fallback}: the capture does not record its buckets"
    try:
        names = [[str(parameters[int(t)]["name"]) for t in b["tensors"]] for b in buckets]
    except (KeyError, IndexError, TypeError, ValueError):
        return None, f"replay: gradient buckets {fallback}: the capture's bucket table does not match its parameter list"
    from ..errors import ModelError
    from ..workload import load_model

    if rebuilt is not None:
        known, kind = {t.name for t in rebuilt.tensors}, f"the model {model} rebuilt from the capture"
    else:
        try:
            known, kind = {t.name for t in load_model(model).tensors}, f"zoo model {model}"
        except (ModelError, OSError):
            return None, f"replay: gradient buckets {fallback}"
    missing = [n for group in names for n in group if n not in known]
    if missing:
        return None, (f"replay: gradient buckets {fallback}: the captured buckets name tensors that {kind} "
                      f"does not have (e.g. {missing[0]!r})")
    sizes = ", ".join(f"{int(b.get('bytes', 0)) / 2**20:.2f}" for b in buckets)
    return names, f"replay: gradient buckets = the capture's {len(names)} DDP buckets ({sizes} MiB), not re-derived"


def capture_settings(meta: dict[str, Any]) -> dict[str, Any]:
    """What a capture's metadata says about how it synchronised and on which
    links: the strategy (DDP buckets with their cap, or the parameter servers,
    their placement and sync mode) and a shaped link's bandwidth. Anything the capture does not say keeps the scenario default."""
    if meta.get("source") != "capture":
        return {}
    data: dict[str, Any] = {}
    job = meta.get("job")
    if job == "ddp":
        cap = meta.get("bucket_cap_mb")
        data["strategy"] = {"kind": "ring", "grouping": {"kind": "ddp", **({"bucket_cap_mb": cap} if cap else {})}}
        if isinstance(meta.get("gamma_ns_per_byte"), (int, float)) and meta["gamma_ns_per_byte"] > 0:
            data["strategy"]["gamma_ns_per_byte"] = float(meta["gamma_ns_per_byte"])
        if isinstance(meta.get("allreduce_step_ns"), (int, float)) and meta["allreduce_step_ns"] > 0:
            data["network"] = {"latency": f"{round(meta['allreduce_step_ns'])}ns"}
    elif job == "ps":
        strategy: dict[str, Any] = {"kind": "ps", "servers": int(meta.get("servers", 1))}
        if meta.get("placement") in ("round-robin", "size-balanced"):
            strategy["placement"] = meta["placement"]
        if meta.get("sync") is False:
            strategy["asynchronous"] = True
        data["strategy"] = strategy
        trips = [float(r["rpc_round_trip_ns"]) for r in (meta.get("ranks") or {}).values()
                 if isinstance(r, dict) and isinstance(r.get("rpc_round_trip_ns"), (int, float))]
        if trips:
            import statistics

            data["network"] = {"latency": f"{round(statistics.median(trips) / 2)}ns"}
        cost = captured_server_cost(meta)
        if cost is not None:
            strategy["server_cost"] = {"a": f"{cost[0]}ns", "b": f"{cost[1]}ns"}
        client = captured_client_cost(meta.get("client_cost"))
        if client is not None:
            strategy["client_cost"] = client
    if meta.get("bandwidth"):
        data["network"] = {**data.get("network", {}), "bandwidth": str(meta["bandwidth"])}
    return data


def captured_server_cost(meta: dict[str, Any]) -> Optional[tuple[int, int]]:
    """A PS capture's per-request server cost (a_ns, b_ns) from its connection-scaling fit (``server_cost`` in
    the metadata), as the engine takes it: whole ns, neither below 0. A negative coefficient (a noisy fit, or a
    cost that falls with C, as a server thread that sleeps between lone requests does) is dropped and the other
    one keeps the fitted cost at the capture's C (its workers). None when the capture has no fit."""
    fit = meta.get("server_cost")
    if not isinstance(fit, dict) or not all(isinstance(fit.get(k), (int, float)) for k in ("a_ns", "b_ns")):
        return None
    a, b = float(fit["a_ns"]), float(fit["b_ns"])
    if not (abs(a) < 1e15 and abs(b) < 1e15):  # nan, inf or absurd: no usable fit
        return None
    c = max(1, int(meta.get("workers") or 1))
    at_c = max(0.0, a + b * c)
    if b < 0:
        a, b = at_c, 0.0
    elif a < 0:
        a, b = 0.0, at_c / c
    return round(a), round(b)


def captured_client_cost(fit: Any) -> Optional[dict[str, Any]]:
    """A PS capture's worker-side per-request cost (``client_cost`` in its metadata, see
    :mod:`ddlsim.capture.ps_client_cost`) as ``strategy.client_cost`` takes it: whole ns, per-byte terms as
    recorded; None when there is no usable fit (missing, negative, nan, absurd)."""
    keys = ("issue_ns", "issue_ns_per_byte", "receive_ns", "receive_ns_per_byte")
    if not isinstance(fit, dict) or not all(isinstance(fit.get(k), (int, float)) and not isinstance(fit.get(k), bool)
                                            for k in keys):
        return None
    if not all(0 <= float(fit[k]) < 1e9 for k in keys):
        return None
    out = {"issue": f"{round(fit['issue_ns'])}ns", "issue_ns_per_byte": float(fit["issue_ns_per_byte"]),
           "receive": f"{round(fit['receive_ns'])}ns", "receive_ns_per_byte": float(fit["receive_ns_per_byte"])}
    wakeup = fit.get("wakeup_ns")  # absent in a capture made before it was measured (replay fits it from the rows)
    if isinstance(wakeup, (int, float)) and not isinstance(wakeup, bool) and 0 < float(wakeup) < 1e9:
        out["wakeup"] = f"{round(wakeup)}ns"
    return out


def _server_update_from_rows(rows: Callable[[], Any]) -> Optional[dict[str, Any]]:
    """A PS capture's serial update (``strategy.server_cost``'s ``update`` and ``update_ns_per_byte``) fitted from
    its server's update rows (:func:`ddlsim.capture.ps_server_queue.server_update_fit`); None without such rows."""
    from ..capture.ps_server_queue import server_update_fit

    fit = server_update_fit(rows())
    if fit is None or not (fit["update_ns"] > 0 or fit["update_ns_per_byte"] > 0):
        return None
    return {"update": f"{round(fit['update_ns'])}ns", "update_ns_per_byte": float(fit["update_ns_per_byte"])}


def _wakeup_from_rows(rows: Callable[[], Any]) -> Optional[str]:
    """A PS capture's workers' wake-up (``strategy.client_cost.wakeup``) fitted from its rows
    (:func:`ddlsim.capture.ps_client_cost.wakeup_fit`); None where no counted response reached an idle loop."""
    from ..capture.ps_client_cost import wakeup_fit

    fit = wakeup_fit(rows())
    if fit is None or not 0 < fit["wakeup_ns"] < 1e9:
        return None
    return f"{round(fit['wakeup_ns'])}ns"


def _client_cost_from_rows(rows: Callable[[], Any]) -> Optional[dict[str, Any]]:
    """:func:`captured_client_cost` of the fit made from a PS capture's own rows (a capture without the metadata)."""
    from ..capture.ps_client_cost import client_cost_metadata

    return captured_client_cost(client_cost_metadata(rows()))


def _workers_and_iterations(path: Path) -> tuple[int, int]:
    """How many worker ranks and iterations the log shows."""
    import numpy as np
    import pyarrow.parquet as pq

    from ..trace.parquet import PARQUET_ERRORS

    try:
        table = pq.read_table(path, columns=["rank", "role", "iteration"])
        table.validate(full=True)
    except PARQUET_ERRORS as err:  # read in full later; here a damaged file
        raise DdlsimError(f"{path}: not a readable Parquet event log ({str(err).splitlines()[0][:200]})") from None
    ranks, iterations = table.column("rank").to_numpy(), table.column("iteration").to_numpy()
    workers = np.asarray(table.column("role").to_pylist(), dtype=object) == "worker"
    if not workers.any():
        raise DdlsimError(f"{path}: no worker rows, so no workers to replay")
    return int(len(np.unique(ranks[workers]))), max(1, int(len(np.unique(iterations[workers & (iterations >= 0)]))))



def replay_scaling(log_path: str | Path, workers: list[int], model: Optional[str] = None, **overrides: Any) -> list[dict[str, Any]]:
    """The replay of `log_path` at each worker count in `workers` (with
    `overrides`, e.g. ``rank_times="sampled"``): one row per count with the
    predicted iteration time's mean, standard deviation, minimum and maximum
    over the simulated iterations, the compute part (first forward to last
    backward over the ranks: the slowest rank's compute under a barrier), one
    step at the median layer times (what every rank computes with
    ``rank_times="median"``) and,
    where the ranks draw independently (sampled rank times away from the
    captured count, or median times), the expected compute part: E[max] of
    that many draws from the pooled steps (:func:`ddlsim.simulation.variation.expected_max`)."""
    import numpy as np

    from ..analyze.breakdown import iteration_arrays
    from ..arguments import whole
    from .run import run_scenario
    from .variation import compute_part_ns, expected_max

    if isinstance(workers, (str, bytes)) or not hasattr(workers, "__iter__"):
        raise DdlsimError(f"workers = {workers!r}: give a list of worker counts, e.g. [8, 64]")
    counts = [whole(n, "worker count in the scaling list", 1, 65536) for n in workers]  # the scenario's bounds
    if not counts:
        raise DdlsimError("workers = []: give at least one worker count, e.g. [8, 64]")
    rows = []
    for n in counts:
        scenario, _notes = replay_plan(log_path, model=model, **{**overrides, "workers": n})
        if scenario.job:
            raise DdlsimError(f"{log_path}: a log of several jobs; replay at scale (--scaling) takes a log of one job: "
                              "replay the jobs at other worker counts with --workers N")
        run = run_scenario(scenario)
        times = np.asarray(iteration_arrays(run.columns)["time_s"], dtype=float)
        parts = compute_part_ns(run.columns) / 1e9
        training = run.engine_document["training"]
        pool = training.get("compute_pool")
        totals = ([sum(v["fwd_ns"]) + sum(v["bwd_ns"]) for v in pool] if pool
                  else [sum(x["fwd_ns"] + x["bwd_ns"] for x in training["layers"])])
        independent = not training.get("compute_assign") and not scenario.straggler and scenario.jitter == 0
        rows.append({
            "workers": n,
            "iterations": int(len(times)),
            "iteration_mean_s": float(times.mean()),
            "iteration_std_s": float(times.std()),
            "iteration_min_s": float(times.min()),
            "iteration_max_s": float(times.max()),
            "compute_mean_s": float(parts.mean()),
            "median_step_s": sum(x["fwd_ns"] + x["bwd_ns"] for x in training["layers"]) / 1e9,
            "expected_compute_max_s": expected_max(totals, n)[0] / 1e9 if independent else None,
            "rank_times": scenario.model.rank_times,
        })
    return rows
