"""The facts of a ``ddlsim plan`` result that ``ddlsim capture ddp --plan`` reads, checked when the plan is loaded.

The capture reads each entry's predicted ``iteration_time_s`` (to choose ``best`` and to record the prediction),
the DDP entry's ``bucket_cap_mb``, the MG-WFBP entry's groups of tensor names, the model's name and the default
DDP baseline's time. A hand-edited or damaged value (a string for a time, a list for a tensor name, an infinite
bucket) is refused here with its field named, not somewhere in the capture's arithmetic (found by
tools/fuzz_readers.py's ``plan`` target). Every other key passes as it is.

pydantic is the checker (the scenario's and the event log's own), in strict mode: a time is a JSON number, a name a
string, and a boolean is no number.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

from pydantic import Field, ValidationError

from ..errors import DdlsimError
from ..trace.log_facts import Amount, Facts, Positive, Text, first_error


class _Model(Facts):
    name: Optional[Text] = None


class _DDPEntry(Facts):
    iteration_time_s: Amount
    bucket_cap_mb: Positive


class _Group(Facts):
    tensors: Annotated[list[Text], Field(min_length=1)]


class _MGWFBPEntry(Facts):
    iteration_time_s: Amount
    plan: list[_Group]


class _Baseline(Facts):
    iteration_time_s: Optional[Amount] = None


class _Baselines(Facts):
    ddp_default: _Baseline = None


class PlanFacts(Facts):
    model: _Model
    ddp: _DDPEntry
    mg_wfbp: _MGWFBPEntry
    baselines: _Baselines = None


def check_plan_facts(plan: dict[str, Any], label: str) -> dict[str, Any]:
    """`plan` unchanged where the facts the capture reads have their types and ranges (:class:`PlanFacts`); a
    :class:`~ddlsim.errors.DdlsimError` naming `label` (``--plan PATH``), the first wrong field and the fix
    otherwise."""
    try:
        PlanFacts.model_validate(plan)
    except ValidationError as err:
        where, what = first_error(err)
        raise DdlsimError(f"{label}: field {where!r}: {what}; write the plan again with ddlsim plan --out") from None
    return plan
