"""Per-layer compute rows of any ``torch.nn.Module``, recorded from hooks.

A *layer* is a module that owns parameters directly, in ``named_modules()``
order (its ``layer`` index; the names match the zoo's layer names for the
zoo's models). Each forward call gives a ``forward`` compute row (forward
pre/post hooks); its backward is timed by hooks on the autograd node that
produced the module's output, taken in the forward hook before an in-place
op such as ResNet's ``out += identity`` can rebase the tensor (full module
backward hooks would break those in-place adds). Each row depends on the
rank's previous compute row. Used by the DDP hooks and the PS worker.
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

    def __init__(self, module, recorder: RankRecorder):
        self.rec = recorder
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

    def begin_iteration(self, iteration: int, waits: Iterable[int] = ()) -> None:
        """Starts an iteration; the first compute row of it also depends on `waits`."""
        with self._lock:
            self.iteration = int(iteration)
            self._backward_ids = {}
            self._waits = list(waits)

    def backward_row(self, layer: int) -> Optional[int]:
        """This iteration's backward row of `layer`, once it ran."""
        with self._lock:
            return self._backward_ids.get(layer)

    def compute_row(self, op: str, start_ns: int, end_ns: int, *, extra_deps=(), **fields: Any) -> int:
        """A compute row on this rank, depending on the previous one (and `extra_deps`)."""
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

    def _pre_forward(self, index: int):
        def hook(module, args):
            module._ddlsim_forward_start = now_ns()
        return hook

    def _post_forward(self, index: int, name: str):
        def hook(module, args, output):
            end = now_ns()
            start = getattr(module, "_ddlsim_forward_start", end)
            self.compute_row("forward", start, end, name=name, layer=index)
            node = _first_grad_node(output)
            if node is not None:
                self._watch_backward(node, index, name)
        return hook

    def _watch_backward(self, node, index: int, name: str) -> None:
        started: list[int] = []

        def pre(grad_outputs):
            started.append(now_ns())

        def post(grad_inputs, grad_outputs):
            end = now_ns()
            rid = self.compute_row("backward", started[-1] if started else end, end, name=name, layer=index)
            with self._lock:
                self._backward_ids[index] = rid

        node.register_prehook(pre)
        node.register_hook(post)

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
