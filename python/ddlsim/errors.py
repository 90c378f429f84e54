"""User-facing errors of ddlsim.

Every error a user can cause (a bad file, a bad scenario, an unknown model)
is a :class:`DdlsimError`. Its message is complete on its own: it names the
file / field / row at fault and says how to fix it, so the CLI prints it
without a traceback. Anything else escaping ddlsim is a bug.
"""


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


class PlanError(DdlsimError):
    """A cost-model table, cost model or plan request is malformed."""
