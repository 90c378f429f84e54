"""Capture: real PyTorch jobs into the event log (the other half of the
architecture's central idea: a real run and a simulation write the same log).

* :mod:`.recorder` - per-rank JSON-lines files, streaming and crash-safe.
* :mod:`.merge` - per-rank files -> one validated event log (partial ranks flagged).
* :mod:`.launch` / :mod:`.rank_main` - one process per rank locally, or torchrun.
* :mod:`.shaping` - each rank in its own network namespace behind a rate-limited link.
* :mod:`.ddp` (built-in job), :mod:`.ddp_hooks` (the recording hooks), :mod:`.attach`
  (``ddlsim.capture.attach(ddp_model, out_dir)`` for your own script), :mod:`.ddp_merge`.

torch is imported only by the jobs themselves (``pip install ddlsim[capture]``);
nothing else in ddlsim imports this package.
"""

from .._lazy import lazy_exports

_HOME = {
    **dict.fromkeys(("RankRecorder", "now_ns", "rank_file"), "recorder"),
    **dict.fromkeys(("merge_capture", "read_rank_file", "rank_files"), "merge"),
    **dict.fromkeys(("CaptureError", "JOBS", "launch_local"), "launch"),
    **dict.fromkeys(("ShapedNetwork", "shaped_network"), "shaping"),
    **dict.fromkeys(("attach", "DdpCapture"), "attach"),
    **dict.fromkeys(("merge_ddp",), "ddp_merge"),
    **dict.fromkeys(("plan_for", "ScriptPlan"), "ddp_plan"),
}


_lazy_getattr, __dir__ = lazy_exports(__name__, _HOME, globals())


def __getattr__(name: str):
    value = _lazy_getattr(name)
    # kept: importing the submodule .attach just bound the package's `attach` to that module, which would shadow
    # the function of the same name from the second use on
    globals()[name] = value
    return value

__all__ = sorted(_HOME)
