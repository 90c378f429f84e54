"""User-facing errors of ddlsim.

Every error a user can cause (a bad file, a bad scenario, an unknown model)
is a :class:`DdlsimError`. Its message is complete on its own: it names the
file / field / row at fault and says how to fix it, so the CLI prints it
without a traceback. Anything else escaping ddlsim is a bug.
"""

from typing import Callable


class DdlsimError(Exception):
    """Base class of errors whose message is meant for the user."""


class TraceError(DdlsimError):
    """An event log or trace file is missing, malformed or inconsistent."""


class ScenarioError(DdlsimError):
    """A scenario (workload + strategy + network) is invalid."""


class ModelError(DdlsimError):
    """A model (layer table) is unknown or malformed."""


class InternalError(DdlsimError):
    """The engine failed on a valid scenario: a bug in ddlsim.

    `scenario_path` is where the offending scenario was saved (or None when
    it could not be saved), so that the user can attach it to a report.
    """

    def __init__(self, detail: str, scenario_path: "str | None" = None):
        self.detail = detail
        self.scenario_path = scenario_path
        where = f"; the scenario was saved to {scenario_path}" if scenario_path else ""
        super().__init__(f"internal error, please report it{where} ({detail})")


class ArgumentTypeError(DdlsimError, TypeError):
    """A Python API argument of the wrong type (an int where a path is meant): ddlsim's own error, one line naming
    the argument, and a TypeError as Python's own would be."""


class PlanError(DdlsimError):
    """A cost-model table, cost model or plan request is malformed."""


class ResourceError(DdlsimError):
    """The machine cannot give a run what it needs (an allocation failed)."""


def from_engine_error(exc: BaseException, save_scenario: "Callable[[], str | None]" = lambda: None) -> BaseException:
    """The ddlsim exception for an exception the engine (`ddlsim._core`) raised.

    The engine raises one class per error kind (see `_core.ERROR_KINDS`):
    input it refuses (bad input, times or sizes past its clock, a graph that
    cannot finish) is the scenario's fault (ScenarioError); a failed
    allocation is a ResourceError; a run its progress hook stopped is a
    KeyboardInterrupt; anything else (its internal errors, a Rust panic) is a
    bug: an InternalError naming the scenario `save_scenario()` saved.
    """
    from . import _core

    if isinstance(exc, _core.BadInputError):
        return ScenarioError(f"the engine rejected the scenario: {exc}")
    if isinstance(exc, _core.EngineMemoryError):
        return ResourceError(f"the engine could not allocate the memory the run needs ({exc}); "
                             "simulate fewer workers or iterations, or log collectives only (--trace-detail collective)")
    if isinstance(exc, _core.InterruptedRunError):
        return KeyboardInterrupt()
    return InternalError(f"engine: {exc}", save_scenario())
