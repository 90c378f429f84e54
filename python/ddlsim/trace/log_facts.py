"""The facts an event log's metadata holds that ddlsim computes with, checked when the log is read.

Every log: its ``scenario`` (a simulated run's, which replay and analyze read) must be an object, and so must its
``model``, ``network`` and ``strategy`` (the values in them are the scenario parser's to check, when a replay
builds the scenario again). A capture's (``source = "capture"``) are below.

``ddlsim capture`` writes them: the job (``job``, ``workers``, ``servers``, its buckets and parameters), the host
(``processes``, ``host_cores``, ``threads``, ``device``), the link (``bandwidth``) and what capture measured after
the job (the 4-byte all-reduce, gamma, the server's and the clients' per-request costs, the idle curve). Replay and
the planner compute with them, so a hand-edited or damaged value (a string for a count, a list for a rate, an
infinite size) must be refused where the log is read, with the field named, and not fail somewhere in their
arithmetic. Only the fields ddlsim reads are checked, by type and range; every other key passes as it is. A
checked field may be absent (captures of older versions lack some) but not null, which no capture writes (but
``bandwidth``, null for an unshaped link), and which the readers would take for a value.

pydantic is the checker (the scenario's own), in strict mode: a count must be a JSON integer, not "2" or 2.0, and a
boolean is no number.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import TraceError

Count = Annotated[int, Field(ge=1, le=2**31 - 1, strict=True)]
Index = Annotated[int, Field(ge=0, le=2**63 - 1, strict=True)]
Amount = Annotated[float, Field(ge=0, allow_inf_nan=False, strict=True)]  # ns, bytes/s, ns per byte: finite, >= 0
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False, strict=True)]
Text = Annotated[str, Field(strict=True)]


class Facts(BaseModel):
    """A default of None stands for an absent field (not validated); a null given is validated, and refused where
    the type is not Optional."""

    model_config = ConfigDict(extra="allow")


class _Rank(Facts):
    host: Optional[Text] = None  # null: the host is not known (the readers take it so)
    role: Text = None
    rpc_round_trip_ns: Amount = None
    started_unix_ns: Index = None  # the wall clock when the rank started (absent in captures before 2026-11-29)


class _Bucket(Facts):
    bytes: Index = 0
    tensors: list[Index] = []


class _Layout(Facts):
    buckets: list[_Bucket] = []
    from_iteration: Index = None


class _Parameter(Facts):
    name: Text
    bytes: Index = 0
    elements: Index = 0


class _PlanRan(Facts):  # a plan the capture ran (capture ddp --plan, attach(..., plan=)): read by plan --apply
    entry: Text = None
    file: Text = None
    path: Text = None
    predicted_iteration_s: Positive = None
    predicted_default_s: Optional[Positive] = None  # null: the plan had no DDP default baseline
    predicted_captured_s: Positive = None


class CaptureFacts(Facts):
    """The checked part of a capture's metadata (every field may be absent: captures of older versions lack some)."""

    job: Text = None
    model: Text = None
    device: Text = None
    backend: Text = None
    bandwidth: Optional[Text] = None  # the one fact that may be null: no shaped link
    workers: Count = None
    servers: Count = None
    iterations: Count = None
    batch_size: Count = None
    image_size: Count = None
    processes: Count = None
    host_cores: Count = None
    threads: Count = None
    layer_every: Count = None
    layer_iterations: list[Index] = []
    bucket_cap_mb: Positive = None
    bucket_cap_mb_list: list[Positive] = None
    plan: _PlanRan = None
    ranks: dict[str, _Rank] = {}
    buckets: list[_Bucket] = []
    bucket_layouts: list[_Layout] = []
    parameters: list[_Parameter] = []
    layers: list[Text] = []
    layer_types: list[Text] = []
    gamma_ns_per_byte: Amount = None
    allreduce_small_ns: Amount = None
    allreduce_small_mean_ns: Amount = None
    allreduce_small_repeats: Index = None
    allreduce_step_ns: Amount = None
    allreduce_rate_bps: Amount = None
    allreduce_rate_ns: list[Amount] = []
    allreduce_rate_sizes: list[Index] = []
    server_cost: dict[str, Any] = None
    client_cost: dict[str, Any] = None
    idle_curve: dict[str, Any] = None
    clocks: dict[str, Any] = {}


class _Scenario(Facts):
    model: dict[str, Any] = None
    network: dict[str, Any] = None
    strategy: dict[str, Any] = None


class LogFacts(Facts):
    """The checked part of any log's metadata."""

    scenario: _Scenario = None


class _SidecarBucket(Facts):  # every field is read by the merge
    bucket: Index
    group: Index
    tensors: list[Index]
    offsets: list[Index]
    tensor_bytes: list[Index]
    bytes: Index


class _SidecarLayout(Facts):
    from_iteration: Index
    buckets: list[_SidecarBucket]


class _IdleTrials(Facts):
    trials: list[Annotated[list[Amount], Field(min_length=4, max_length=4)]] = []  # idle, step, forward, backward ms


class SidecarFacts(Facts):
    """The checked part of a DDP rank's facts file (``<rank>.ddp.json``, which ``capture merge`` makes the log's
    metadata and bucket table of): the job's facts are a capture's (:class:`CaptureFacts`)."""

    job: CaptureFacts = None
    parameters: list[_Parameter] = []
    layers: list[Text] = []
    layer_types: list[Text] = []
    layouts: list[_SidecarLayout] = []
    layer_every: Count = None
    layer_iterations: list[Index] = []
    collective_iterations: list[Index] = []
    reducer: dict[str, Any] = None
    idle_trials: _IdleTrials = None


def first_error(err: ValidationError) -> tuple[str, str]:
    """(the first wrong field's dotted name, what is wrong with it and what it got) of a pydantic error, without
    the checker's own class names."""
    first = err.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    got = repr(first.get("input"))
    if len(got) > 60:
        got = got[:57] + "..."
    msg = re.sub(r" or instance of \w+", "", first["msg"]).lower()
    return where, f"{msg} (got {got})"


def check_sidecar_facts(facts: dict[str, Any], path: Path | str) -> dict[str, Any]:
    """`facts` (a DDP rank's facts file) unchanged where :class:`SidecarFacts` holds; a
    :class:`~ddlsim.errors.TraceError` naming the file, the first wrong field and the fix otherwise."""
    try:
        SidecarFacts.model_validate(facts)
    except ValidationError as err:
        where, what = first_error(err)
        raise TraceError(f"{path}: the DDP capture facts' field {where!r}: {what}; the capture's ranks write this "
                         "file: capture again, or delete it to merge without the bucket table") from None
    return facts


def check_log_facts(metadata: dict[str, Any], path: Path | str) -> dict[str, Any]:
    """`metadata` unchanged where its facts have the types and ranges ddlsim reads (:class:`LogFacts`, and
    :class:`CaptureFacts` for a capture's); a :class:`~ddlsim.errors.TraceError` naming the file, the first wrong
    field and the fix otherwise."""
    capture = metadata.get("source") == "capture"
    try:
        LogFacts.model_validate(metadata)
        if capture:
            CaptureFacts.model_validate(metadata)
    except ValidationError as err:
        where, what = first_error(err)
        fix = ("ddlsim capture writes these facts: capture again, or correct the field" if capture else
               "the run that wrote the log writes these facts: run it again, or correct the field")
        raise TraceError(f"{path}: the {'capture' if capture else 'log'}'s metadata field {where!r}: {what}; {fix}") from None
    return metadata
