"""Per-layer compute rows of any ``torch.nn.Module``, recorded from hooks.

A *layer* is a module that owns parameters directly, in ``named_modules()``
order (its ``layer`` index; the names match the zoo's layer names for the
zoo's models). Each forward call gives a ``forward`` compute row (forward
pre/post hooks); its backward is timed by hooks on the autograd node that
produced the module's output, taken in the forward hook before an in-place
op such as ResNet's ``out += identity`` can rebase the tensor (full module
backward hooks would break those in-place adds). Each row depends on the
rank's previous compute row. Used by the DDP hooks and the PS worker.

On a GPU (``cuda=True``) the host clock would time the kernels' launch, not
their run: every time point is then a CUDA event on the current stream, the
rows get their ids at once (so other rows can depend on them) and are written
by :meth:`LayerHooks.resolve_gpu_rows` at the end of the iteration, after a
device synchronisation, on the host clock through an anchor (an event recorded
at :meth:`LayerHooks.begin_iteration` right after a synchronisation, when the
idle GPU runs it at once).
"""

from __future__ import annotations

import threading
from typing import Any, Iterable, Optional

from .recorder import RankRecorder, now_ns


def parameterised_layers(module) -> list[tuple[str, Any]]:
    """(name, module) of the modules that own parameters directly, in registration order."""
    return [(name, m) for name, m in module.named_modules() if next(m.parameters(recurse=False), None) is not None]


def _first_grad_node(output):
    import torch

    if isinstance(output, torch.Tensor):
        return output.grad_fn
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (list, tuple)):
        for item in output:
            node = _first_grad_node(item)
            if node is not None:
                return node
    return None


class LayerHooks:
    """Records `module`'s per-layer forward and backward rows into `recorder`; :meth:`remove` takes the hooks off."""

    def __init__(self, module, recorder: RankRecorder, *, cuda: bool = False):
        self.rec = recorder
        self.cuda = bool(cuda)
        self._pending: list[tuple[int, str, Any, Any, list[int], dict]] = []  # GPU rows waiting for their times
        self._anchor: Optional[tuple[int, Any]] = None  # (host ns, event) of this iteration
        self._events_free: list = []
        self._events_used: list = []
        self.params = list(module.named_parameters())
        self.param_index = {p.data_ptr(): i for i, (_, p) in enumerate(self.params)}
        self.layers = parameterised_layers(module)
        self.layer_of_param: dict[int, int] = {}
        for index, (_, m) in enumerate(self.layers):
            for p in m.parameters(recurse=False):
                self.layer_of_param[self.param_index[p.data_ptr()]] = index
        self.iteration = -1
        self._lock = threading.Lock()
        self._last_compute: Optional[tuple[int, int]] = None  # (row id, end ns)
        self._backward_ids: dict[int, int] = {}  # layer -> this iteration's backward row
        self._waits: list[int] = []  # deps of the next compute row (e.g. parameters it must have received)
        self._handles = []
        for index, (name, m) in enumerate(self.layers):
            self._handles.append(m.register_forward_pre_hook(self._pre_forward(index)))
            self._handles.append(m.register_forward_hook(self._post_forward(index, name)))

    def mark(self):
        """A time point: host ns, or (on a GPU) a CUDA event recorded on the current stream."""
        if not self.cuda:
            return now_ns()
        with self._lock:  # events are reused once their iteration is resolved (creating one costs a driver call)
            event = self._events_free.pop() if self._events_free else None
        if event is None:
            import torch

            event = torch.cuda.Event(enable_timing=True)
        event.record()
        with self._lock:
            self._events_used.append(event)
        return event

    def begin_iteration(self, iteration: int, waits: Iterable[int] = ()) -> None:
        """Starts an iteration; the first compute row of it also depends on `waits`."""
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            host = now_ns()
            self._anchor = (host, self.mark())
        with self._lock:
            self.iteration = int(iteration)
            self._backward_ids = {}
            self._waits = list(waits)

    def backward_row(self, layer: int) -> Optional[int]:
        """This iteration's backward row of `layer`, once it ran."""
        with self._lock:
            return self._backward_ids.get(layer)

    def compute_row(self, op: str, start_ns, end_ns, *, extra_deps=(), **fields: Any) -> int:
        """A compute row on this rank, depending on the previous one (and `extra_deps`); on a GPU start and end are
        events and the row is written by :meth:`resolve_gpu_rows`."""
        if self.cuda:
            with self._lock:
                deps = [self._last_compute[0]] if self._last_compute else []  # one stream: in issue order
                deps += self._waits
                self._waits = []
                rid = self.rec.new_id()
                self._last_compute = (rid, 0)
                self._pending.append((rid, op, start_ns, end_ns, deps + list(extra_deps),
                                      {"iteration": self.iteration, "stream": "compute", **fields}))
            return rid
        with self._lock:
            deps = [self._last_compute[0]] if self._last_compute and self._last_compute[1] <= start_ns else []
            deps += self._waits
            self._waits = []
        deps += list(extra_deps)
        rid = self.rec.row("compute", op, start_ns, end_ns, deps=deps, iteration=self.iteration, stream="compute",
                           **fields)
        with self._lock:
            self._last_compute = (rid, end_ns)
        return rid

    def gpu_row(self, kind: str, op: str, start, end, *, deps=(), row_id: Optional[int] = None, **fields: Any) -> int:
        """A row timed by two CUDA events, written by :meth:`resolve_gpu_rows`."""
        rid = self.rec.new_id() if row_id is None else row_id
        with self._lock:
            self._pending.append((rid, op, start, end, list(deps), {"kind": kind, **fields}))
        return rid

    def resolve_gpu_rows(self) -> None:
        """Synchronises the device and writes the iteration's GPU-timed rows on the host clock."""
        if not self.cuda:
            return
        import torch

        torch.cuda.synchronize()
        with self._lock:
            pending, self._pending = self._pending, []
        host, anchor = self._anchor if self._anchor is not None else (now_ns(), None)
        for rid, op, start, end, deps, fields in pending:
            kind = fields.pop("kind", "compute")
            t0 = host + round(anchor.elapsed_time(start) * 1e6) if anchor is not None else host
            t1 = host + round(anchor.elapsed_time(end) * 1e6) if anchor is not None else host
            self.rec.row(kind, op, t0, max(t0, t1), deps=deps, row_id=rid, **fields)
        with self._lock:  # every event of the iteration has completed (synchronised above): reuse them
            self._events_free.extend(self._events_used)
            self._events_used = []

    def _pre_forward(self, index: int):
        def hook(module, args):
            module._ddlsim_forward_start = self.mark()
        return hook

    def _post_forward(self, index: int, name: str):
        def hook(module, args, output):
            end = self.mark()
            start = getattr(module, "_ddlsim_forward_start", end)
            self.compute_row("forward", start, end, name=name, layer=index)
            node = _first_grad_node(output)
            if node is not None:
                self._watch_backward(node, index, name)
        return hook

    def _watch_backward(self, node, index: int, name: str) -> None:
        started: list[int] = []

        def pre(grad_outputs):
            started.append(self.mark())

        def post(grad_inputs, grad_outputs):
            end = self.mark()
            rid = self.compute_row("backward", started[-1] if started else end, end, name=name, layer=index)
            with self._lock:
                self._backward_ids[index] = rid

        node.register_prehook(pre)
        node.register_hook(post)

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
