"""Per-layer compute rows of any ``torch.nn.Module``, recorded from hooks.

A *layer* is a module that owns parameters directly, in ``named_modules()``
order (its ``layer`` index; the names match the zoo's layer names for the
zoo's models). Each forward call gives a ``forward`` compute row (forward
pre/post hooks); its backward is timed by hooks on the autograd node that
produced the module's output, taken in the forward hook before an in-place
op such as ResNet's ``out += identity`` can rebase the tensor (full module
backward hooks would break those in-place adds). Each row depends on the
rank's previous compute row. Used by the DDP hooks and the PS worker.

The hooks do as little as they can while the iteration runs (the capture
overhead is this host work; on a GPU the kernel launches wait for it): a
time point, an id, and a tuple appended to a list. With ``defer=True`` (the
DDP hooks and the PS worker) the rows are formatted and written in one go by
:meth:`LayerHooks.write_rows` at the end of the iteration; otherwise each row
is written when it is made.

On a GPU (``cuda=True``) the host clock would time the kernels' launch, not
their run: every time point is then a CUDA event, recorded on the stream
that was current at :meth:`LayerHooks.begin_iteration` (the training
stream; a comm hook's completion callback records on its own current
stream, see :meth:`LayerHooks.mark_current`); the rows get their ids at
once (so other rows can depend on them) and are written on the host clock
through the iteration's *anchor*: an event recorded at
:meth:`LayerHooks.begin_iteration` (the marker row's start). Its host time
is known when the training stream was idle as it was recorded (the GPU runs
it at once): always on a sampled iteration (it begins with a device
synchronisation), and on an un-sampled one when ``stream.query()`` says the
stream's work is done (a host-bound run); otherwise (the GPU still busy,
no synchronisation on an un-sampled iteration) its host time is relayed
from the previous iteration's anchor: that one's host time plus the GPU
time between the two anchors. Given the same event timings the rows are
the same either way. Events are converted lazily, without a
synchronisation: at the end of each iteration the rows whose events
``event.query()`` reports complete are written, oldest first, at most
:attr:`LayerHooks.convert_rows` rows (or the ending iteration's row count,
if larger) per iteration, so a sampled iteration's hundreds of events are
converted over the following iterations; :meth:`LayerHooks.resolve_gpu_rows`
(which synchronises) writes what is left when the recorder closes.

**Sampled layer rows** (``layer_every=K``, the way ``torch.profiler``'s schedule samples): only the *sampled*
iterations get layer rows: the first ``layer_warmup`` iterations (the warm-up that analyze and replay leave
out) and from then on every K-th one (``layer_warmup``, ``layer_warmup + K``, ...; :func:`layer_sampled`). On the
other iterations no per-layer hook is installed at all (the module hooks are removed before such an iteration and
put back before the next sampled one), so they pay no per-layer cost; :attr:`LayerHooks.layer_iterations` lists
the iterations that carry layer rows. ``K = 1`` (the default) is every iteration, the hooks installed once.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from typing import Any, Iterable, Optional

from .recorder import RankRecorder, now_ns


def parameterised_layers(module) -> list[tuple[str, Any]]:
    """(name, module) of the modules that own parameters directly, in registration order."""
    return [(name, m) for name, m in module.named_modules() if next(m.parameters(recurse=False), None) is not None]


def layer_sampled(iteration: int, every: int, warmup: int) -> bool:
    """Whether `iteration` carries layer rows when they are sampled every `every` iterations after `warmup`
    warm-up iterations (which are all sampled): ``iteration < warmup or (iteration - warmup) % every == 0``."""
    return iteration < warmup or (iteration - warmup) % every == 0


def check_layer_every(value) -> int:
    """`value` as a sampling period (a positive integer); raises ValueError naming it otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"layer_every must be a positive integer (1: layer rows on every iteration; K: on every K-th), "
                         f"got {value!r}")
    return value


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


# A layer row as a JSON line, the same bytes as ``json.dumps(row, separators=(",", ":"))`` of the row
# {id, kind, op, start_ns, end_ns, deps, iteration, stream, name, layer} (checked by the tests).
_LAYER_LINE = '{"id":%d,"kind":"compute","op":"%s","start_ns":%d,"end_ns":%d,"deps":[%s],"iteration":%d,"stream":"compute"%s'
# Other rows made every iteration, formatted the same way (a row's extra is (template, values): the template takes
# id, start_ns, end_ns, deps, then the values), so that nothing but these templates formats an iteration's rows.
COLLECTIVE_LINE = ('{"id":%d,"kind":"collective","op":"allreduce","start_ns":%d,"end_ns":%d,"deps":[%s],"iteration":%d,'
                   '"stream":"comm","group":%d,"bytes":%d,"collective":%d,"coll_type":"allreduce","algorithm":"","name":%s}')
MARKER_LINE = ('{"id":%d,"kind":"marker","op":"iteration","start_ns":%d,"end_ns":%d,"deps":[%s],"iteration":%d,'
               '"name":"iteration %d"}')


class LayerHooks:
    """Records `module`'s per-layer forward and backward rows into `recorder`; :meth:`remove` takes the hooks off."""

    #: GPU: the least number of rows converted (and written) at the end of an iteration when that many are complete
    convert_rows = 64

    def __init__(self, module, recorder: RankRecorder, *, cuda: bool = False, defer: bool = False,
                 layer_every: int = 1, layer_warmup: int = 1):
        """`layer_every`, `layer_warmup`: sampled layer rows (see the module docstring)."""
        import torch

        self.rec = recorder
        self.cuda = bool(cuda)
        self.defer = bool(defer) or self.cuda
        # rows made and not written yet, in the order they were made: (row id, op, start, end, deps, iteration,
        # layer line tail) for layer rows, (row id, op, start, end, deps, None, fields) for the others
        self._rows: list[tuple] = []
        # GPU: the iterations' rows not written yet, oldest first: [host ns of the anchor or None (relayed), anchor event,
        # rows, events (the anchor not among them), rows written so far]
        self._pending: deque = deque()
        self._anchor: Optional[tuple[Optional[int], Any]] = None  # (host ns or None, event) of this iteration
        self._relay: Optional[tuple[int, Any]] = None  # GPU: (host ns, event) of the last anchor converted
        self._synced = False  # GPU: whether a device synchronisation gave an anchor yet
        self._stream = None  # GPU: the stream the events are recorded on
        self._events_free: list = []
        self._events_used: list = []
        self._events_side: list = []  # this iteration's events recorded off the training stream (mark_current)
        self._last_mark = None  # the last event recorded on the training stream
        self.params = list(module.named_parameters())
        self.param_index = {p.data_ptr(): i for i, (_, p) in enumerate(self.params)}
        self.layers = parameterised_layers(module)
        self.layer_of_param: dict[int, int] = {}
        for index, (_, m) in enumerate(self.layers):
            for p in m.parameters(recurse=False):
                self.layer_of_param[self.param_index[p.data_ptr()]] = index
        self.iteration = -1
        self._lock = threading.Lock()
        self._last_compute: Optional[tuple[int, Any]] = None  # (row id, end) of the rank's last compute row
        self._backward_ids: dict[int, int] = {}  # layer -> this iteration's backward row
        self._waits: list[int] = []  # deps of the next compute row (e.g. parameters it must have received)
        self._tails = [',"name":%s,"layer":%d}' % (json.dumps(name), index) for index, (name, _) in enumerate(self.layers)]
        self._field_tails: dict[tuple, str] = {}  # compute_row's fields -> their JSON tail
        self._forward_start: list = [None] * len(self.layers)
        self._backward_start: list = [None] * len(self.layers)
        self._tensor = torch.Tensor
        self._backward_hooks = [(self._pre_backward(index), self._post_backward(index)) for index in range(len(self.layers))]
        self.layer_every = check_layer_every(layer_every)
        self.layer_warmup = max(0, int(layer_warmup))
        self.layer_iterations: list[int] = []  # the iterations begun with layer rows
        self.sampled = True  # whether the current iteration records layer rows
        self._module_hooks = [(m, self._pre_forward(index), self._post_forward(index))
                              for index, (_, m) in enumerate(self.layers)]
        self._handles = []
        self._install()
        recorder.before_close(self._finish)

    def _install(self) -> None:
        """Puts the per-layer module hooks on (once; taken off again for un-sampled iterations)."""
        if self._handles:
            return
        for m, pre, post in self._module_hooks:
            self._handles.append(m.register_forward_pre_hook(pre))
            self._handles.append(m.register_forward_hook(post))

    # -- time points -----------------------------------------------------------------------------------------------
    def mark(self):
        """A time point: host ns, or (on a GPU) a CUDA event recorded on the iteration's stream."""
        if not self.cuda:
            return now_ns()
        # events are reused once their iteration is written (creating one costs a driver call); list.pop and
        # list.append are atomic, so no lock
        free = self._events_free
        event = free.pop() if free else self._new_event()
        stream = self._stream
        if stream is None:
            event.record()
        else:
            event.record(stream)
        self._events_used.append(event)
        self._last_mark = event
        return event

    @staticmethod
    def _new_event():
        import torch

        return torch.cuda.Event(enable_timing=True)

    def mark_current(self):
        """A time point on the current stream (on a GPU; e.g. in a future's callback, whose stream waits for it)."""
        if not self.cuda:
            return now_ns()
        free = self._events_free
        event = free.pop() if free else self._new_event()
        event.record()
        self._events_used.append(event)
        self._events_side.append(event)
        return event

    # -- iterations ------------------------------------------------------------------------------------------------
    def begin_iteration(self, iteration: int, waits: Iterable[int] = ()) -> None:
        """Starts an iteration; the first compute row of it also depends on `waits`. On a GPU a sampled iteration (and
        the first) begins with a device synchronisation; an un-sampled one never synchronises (see the module
        docstring)."""
        sampled = layer_sampled(int(iteration), self.layer_every, self.layer_warmup)
        if self.cuda:
            import torch

            if sampled or not self._synced:
                torch.cuda.synchronize()
                self._synced = True
                stream = self._stream = torch.cuda.current_stream()
                host = now_ns()
            else:
                stream = self._stream = torch.cuda.current_stream()
                # the stream's work done: the anchor runs at once, at this host time; else it is relayed
                host = now_ns() if stream is not None and stream.query() else None
            event = self.mark()
            used = self._events_used
            if used and used[-1] is event:
                used.pop()  # the anchor lives on past its iteration's rows: see _convert
            self._last_mark = None
            self._anchor = (host, event)
        if sampled:
            self._install()
            self.layer_iterations.append(int(iteration))
        elif self._handles:
            self._uninstall()  # no per-layer hook runs in this iteration
        with self._lock:
            self.iteration = int(iteration)
            self.sampled = sampled
            self._backward_ids = {}
            self._waits = list(waits)

    def backward_row(self, layer: int) -> Optional[int]:
        """This iteration's backward row of `layer`, once it ran."""
        with self._lock:
            return self._backward_ids.get(layer)

    def _compute_deps(self, start) -> list[int]:
        """The deps of a compute row starting at `start`: the previous compute row (on the CPU if it ended by then;
        on a GPU always, one stream runs in issue order) and the pending waits."""
        last = self._last_compute
        deps = [last[0]] if last is not None and (self.cuda or last[1] <= start) else []
        if self._waits:
            deps += self._waits
            self._waits = []
        return deps

    def compute_row(self, op: str, start_ns, end_ns, *, extra_deps=(), **fields: Any) -> int:
        """A compute row on this rank, depending on the previous one (and `extra_deps`); on a GPU start and end are
        events and the row is written at the end of the next iteration (see the module docstring)."""
        rid = self.rec.new_id()
        key = tuple(fields.items())
        tail = self._field_tails.get(key)
        if tail is None:  # the fields' JSON after "stream", as json.dumps writes them
            tail = self._field_tails[key] = "".join(",%s:%s" % (json.dumps(k), json.dumps(v, separators=(",", ":")))
                                                    for k, v in key) + "}"
        with self._lock:
            deps = self._compute_deps(start_ns)
            deps += extra_deps
            self._last_compute = (rid, end_ns)
            self._rows.append((rid, op, start_ns, end_ns, deps, self.iteration, tail))
        if not self.defer:
            self.write_rows()
        return rid

    def gpu_row(self, kind: str, op: str, start, end, *, deps=(), row_id: Optional[int] = None, **fields: Any) -> int:
        """A row of `kind` timed by two time points (CUDA events on a GPU), written with the iteration's rows."""
        rid = self.rec.new_id() if row_id is None else row_id
        self._rows.append((rid, op, start, end, list(deps), None, {"kind": kind, **fields}))
        if not self.defer:
            self.write_rows()
        return rid

    def _lines(self, rows, time_of=None) -> list[str]:
        encode = self.rec.format_row
        lines = []
        for rid, op, start, end, deps, iteration, extra in rows:
            if time_of is not None:
                start, end = time_of(start), time_of(end)
                end = max(start, end)
            if type(extra) is tuple:  # (template, values)
                lines.append(extra[0] % ((rid, start, end, ",".join(map(str, deps))) + extra[1]))
            elif iteration is None:
                fields = dict(extra)
                lines.append(encode(fields.pop("kind"), op, start, end, deps=deps, row_id=rid, **fields))
            else:
                lines.append(_LAYER_LINE % (rid, op, start, end, ",".join(map(str, deps)), iteration, extra))
        return lines

    def write_rows(self) -> None:
        """Writes the rows made so far on the host clock (on a GPU: those of ended iterations whose events completed,
        see the module docstring)."""
        if self.cuda:
            self._convert(self.convert_rows)
            return
        with self._lock:
            rows, self._rows = self._rows, []
        if rows:
            self.rec.write_lines(self._lines(rows))

    def _take_batch(self) -> None:
        """GPU: queues this iteration's rows and events so far, with their anchor, for conversion."""
        with self._lock:
            rows, self._rows = self._rows, []
            events, self._events_used = self._events_used, []
            side, self._events_side = self._events_side, []
        if not rows and not events:
            return
        host, anchor = self._anchor if self._anchor is not None else (now_ns(), None)
        # the batch has completed when the last event on the training stream (they complete in order: the anchor
        # before it) and each event off it have
        checks = side if self._last_mark is None else side + [self._last_mark]
        self._last_mark = None
        self._pending.append([host, anchor, rows, events, 0, checks])

    def _convert(self, budget: float) -> None:
        """GPU: writes up to `budget` rows of the queued iterations, oldest first, as far as their events completed
        (``event.query()``; no synchronisation), and returns the events of the iterations written to the pool."""
        pending, lines = self._pending, []
        while pending and budget > 0:
            batch = pending[0]
            host, anchor, rows, events, done, checks = batch
            if done == 0 and anchor is not None:
                relay = self._relay
                if relay is not None and relay[1] is anchor:
                    host = relay[0]
                elif not anchor.query():
                    break
                elif host is None:  # relayed: the previous anchor's host time plus the GPU time between the two
                    host = relay[0] + round(relay[1].elapsed_time(anchor) * 1e6)
                batch[0] = host
                if relay is None or relay[1] is not anchor:
                    if relay is not None:
                        self._events_free.append(relay[1])
                    self._relay = (host, anchor)
            if checks:  # once: have all its events completed? (event.query(): no synchronisation)
                for event in checks:
                    if not event.query():
                        break
                else:
                    batch[5] = checks = None
                if checks:
                    break
            end = min(len(rows), done + int(min(budget, len(rows))))
            if end > done:
                if anchor is None:
                    lines += self._lines(rows[done:end], lambda event: host)
                else:
                    elapsed = anchor.elapsed_time
                    lines += self._lines(rows[done:end], lambda event: host + round(elapsed(event) * 1e6))
                budget -= end - done
                batch[4] = done = end
            if done < len(rows):
                break
            pending.popleft()
            self._events_free.extend(events)
        if lines:
            self.rec.write_lines(lines)

    def end_rows(self, extra_row: Optional[tuple] = None) -> None:
        """Ends the iteration's rows: writes them (on the CPU), or (on a GPU, with no synchronisation) queues them and
        writes the queued rows whose events completed (see the module docstring). `extra_row` is appended to the
        iteration's rows."""
        if extra_row is not None:
            self._rows.append(extra_row)
        if not self.cuda:
            self.write_rows()
            return
        count = len(self._rows)
        self._take_batch()
        self._convert(max(self.convert_rows, count))

    def resolve_gpu_rows(self) -> None:
        """Synchronises the device and writes every GPU-timed row made so far on the host clock."""
        if not self.cuda:
            return
        import torch

        torch.cuda.synchronize()
        self._take_batch()
        self._convert(float("inf"))

    def _finish(self) -> None:
        """Before the recorder closes: writes the rows not written yet."""
        if self.cuda:
            self.resolve_gpu_rows()
        else:
            self.write_rows()

    # -- hooks -----------------------------------------------------------------------------------------------------
    # The hooks below run for every layer twice per iteration: they only take a time point and an id, append a tuple,
    # and (forward) put the backward hooks on the autograd node. No lock: compute rows are made by one thread at a
    # time (the forward on the caller's, the backward on autograd's while the caller waits) and list.append is
    # atomic against the comm hook's callbacks.
    def _pre_forward(self, index: int):
        starts, mark = self._forward_start, self.mark

        def hook(module, args):
            starts[index] = mark()
        return hook

    def _post_forward(self, index: int):
        starts, tail, tensor, backward = self._forward_start, self._tails[index], self._tensor, self._backward_hooks
        mark, new_id = self.mark, self.rec.new_id

        def hook(module, args, output):
            end = mark()
            start = starts[index]
            starts[index] = None
            if start is None:
                start = end
            rid = new_id()
            deps = self._compute_deps(start)
            self._last_compute = (rid, end)
            self._rows.append((rid, "forward", start, end, deps, self.iteration, tail))
            if not self.defer:
                self.write_rows()
            node = output.grad_fn if type(output) is tensor else _first_grad_node(output)
            if node is not None:
                pre, post = backward[index]
                node.register_prehook(pre)
                node.register_hook(post)
        return hook

    def _pre_backward(self, index: int):
        starts, mark = self._backward_start, self.mark

        def pre(grad_outputs):
            starts[index] = mark()
        return pre

    def _post_backward(self, index: int):
        starts, tail = self._backward_start, self._tails[index]
        mark, new_id = self.mark, self.rec.new_id

        def post(grad_inputs, grad_outputs):
            end = mark()
            start = starts[index]
            starts[index] = None
            if start is None:
                start = end
            rid = new_id()
            deps = self._compute_deps(start)
            self._last_compute = (rid, end)
            self._rows.append((rid, "backward", start, end, deps, self.iteration, tail))
            self._backward_ids[index] = rid
            if not self.defer:
                self.write_rows()
        return post

    def _uninstall(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def remove(self) -> None:
        self._uninstall()
