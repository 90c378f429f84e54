"""A DDP capture directory -> its event log, with the bucket groups table.

Every rank writes ``<rank>.ddp.json`` beside its rows (:func:`write_sidecar`,
atomically, whenever its bucket layout changed): the job's facts (model,
batch size, torch version...), the parameter names and sizes and the bucket
layouts with the iteration each started at. The merge reads the lowest
rank's sidecar (any rank's will do: DDP gives all ranks the same buckets),
builds the ``groups`` table (one row per tensor of a bucket: ``kind``
"bucket", byte ``offset`` in the bucket buffer, ``bytes``) and calls
:func:`~ddlsim.capture.merge.merge_capture`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from ..errors import TraceError
from ..inputs import input_file

SIDECAR_SUFFIX = ".ddp.json"
EVENTS_FILE = "events.parquet"


def sidecar_path(out_dir: str | Path, rank: int) -> Path:
    return Path(out_dir) / f"{rank}{SIDECAR_SUFFIX}"


def write_sidecar(out_dir: str | Path, rank: int, facts: dict) -> None:
    path = sidecar_path(out_dir, rank)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(facts, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_sidecars(out_dir: str | Path) -> list[dict]:
    """Every rank's sidecar that is a JSON object, by rank (each file read once). An unreadable one before the first
    readable one is an error (the lowest rank's facts make the bucket table); after it, it is left out."""
    found = sorted(Path(out_dir).glob(f"*{SIDECAR_SUFFIX}"),
                   key=lambda p: int(p.name.split(".")[0]) if p.name.split(".")[0].isdigit() else 1 << 30)
    facts: list[dict] = []
    for path in found:
        try:
            input_file(path, "DDP capture facts file", "delete it to merge without the bucket table", error=TraceError)
        except TraceError:  # a FIFO or a directory there: unreadable, as below (never opened: a FIFO would block)
            if facts:
                continue
            raise
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            if facts:
                continue
            raise TraceError(f"{path}: unreadable DDP capture facts ({exc}); delete it to merge without the bucket table") from None
        if not isinstance(data, dict):
            continue
        from ..trace.log_facts import check_sidecar_facts

        try:
            facts.append(check_sidecar_facts(data, path))
        except TraceError:  # a fact of the wrong type or range: as unreadable (found by tools/fuzz_readers.py)
            if facts:
                continue
            raise
    return facts


def groups_table(layouts: list[dict]) -> dict[str, list]:
    """The groups side table (columns) of every distinct bucket in `layouts`."""
    seen: dict[int, dict] = {}
    for change in layouts:
        for bucket in change["buckets"]:
            seen.setdefault(int(bucket["group"]), bucket)
    columns: dict[str, list] = {"group": [], "tensor": [], "kind": [], "offset": [], "bytes": []}
    for group, bucket in sorted(seen.items()):
        for tensor, offset, nbytes in zip(bucket["tensors"], bucket["offsets"], bucket["tensor_bytes"]):
            columns["group"].append(group)
            columns["tensor"].append(int(tensor))
            columns["kind"].append("bucket")
            columns["offset"].append(int(offset))
            columns["bytes"].append(int(nbytes))
    return columns


def layer_row_iterations(log) -> list[int]:
    """The iterations with layer rows (forward or backward compute rows that name a layer), ascending."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = log.table
    layer = pc.and_(pc.and_(pc.equal(table.column("kind"), "compute"), pc.not_equal(table.column("name"), "")),
                    pc.is_in(table.column("op"), value_set=pa.array(["forward", "backward"])))
    iterations = pc.unique(pc.filter(table.column("iteration"), layer)).to_pylist()
    return sorted(int(i) for i in iterations if i is not None and i >= 0)


def collective_row_iterations(log) -> list[int]:
    """The iterations with collective rows, ascending."""
    import pyarrow.compute as pc

    table = log.table
    iterations = pc.unique(pc.filter(table.column("iteration"), pc.equal(table.column("kind"), "collective"))).to_pylist()
    return sorted(int(i) for i in iterations if i is not None and i >= 0)


def merge_ddp(out_dir: str | Path, *, write: bool = True, metadata: Optional[dict] = None):
    """Merges a DDP capture directory; writes ``OUT/events.parquet`` unless `write` is false. Returns the EventLog."""
    from ..trace import write_event_log
    from .merge import merge_capture

    sidecars = read_sidecars(out_dir)
    facts = sidecars[0] if sidecars else None
    meta: dict = {"job": "ddp"}
    groups = None
    if facts is not None:
        layouts = facts.get("layouts", [])
        meta.update(facts.get("job", {}))
        meta["parameters"] = facts.get("parameters", [])
        meta["layers"] = facts.get("layers", [])
        if facts.get("layer_types"):
            meta["layer_types"] = facts["layer_types"]
        meta["bucket_layouts"] = [{"from_iteration": c["from_iteration"],
                                   "buckets": [{k: b[k] for k in ("bucket", "group", "tensors", "bytes")} for b in c["buckets"]]}
                                  for c in layouts]
        if "layer_every" in facts:  # sampled layer rows: which iterations carry them
            meta["layer_every"] = facts["layer_every"]
            meta["layer_iterations"] = facts.get("layer_iterations", [])
        if "collective_iterations" in facts:  # all-reduce rows on the sampled iterations only
            meta["collective_iterations"] = facts["collective_iterations"]
        if "reducer" in facts:
            meta["ddp_reducer"] = facts["reducer"]
        meta["buckets"] = meta["bucket_layouts"][-1]["buckets"] if layouts else []
        if layouts:
            groups = groups_table(layouts)
    from .idle_curve import pooled_curve

    curve = pooled_curve(sidecars)  # every rank's idle trials (capture/idle_curve.py)
    if curve is not None:
        meta["idle_curve"] = curve
    meta.update(metadata or {})
    log = merge_capture(out_dir, metadata=meta, groups=groups)
    if "layer_every" in meta:  # from the rows: a rank that failed wrote its facts before its last sampled iterations
        log.metadata["layer_iterations"] = layer_row_iterations(log)
    if "collective_iterations" in meta:
        log.metadata["collective_iterations"] = collective_row_iterations(log)
    if write:
        write_event_log(log, Path(out_dir) / EVENTS_FILE)
    return log
