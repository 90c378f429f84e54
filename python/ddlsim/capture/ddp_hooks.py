"""Hooks that record a DistributedDataParallel model's training into a
:class:`~ddlsim.capture.recorder.RankRecorder`.

* Per layer, a ``forward`` and a ``backward`` compute row
  (:class:`~ddlsim.capture.layer_hooks.LayerHooks`).
* Per DDP bucket, one ``collective`` row (``allreduce``) from a comm hook that
  wraps the default all-reduce: launch to completion of its future.
  ``group`` is the bucket index; ``collective`` counts the rank's all-reduces,
  so one bucket of one iteration has the same id on every rank (DDP launches
  buckets strictly in index order on every rank).
* The bucket layout (tensor indices = positions in ``named_parameters()``,
  byte offsets in the bucket buffer) per iteration, for the groups table.

DDP runs its first iteration with provisional buckets (by default all
gradients in one bucket) and rebuilds them from the order gradients became
ready; the rebuilt buckets are the ones that last, so they keep ``group`` =
bucket index and the provisional ones are numbered from ``P`` (the number of
parameter tensors) up: ``group = P + index``.

With sampled layer rows (``layer_every=K > 1``, see :mod:`.layer_hooks`) an
un-sampled iteration has no per-layer rows; its forward and backward pass
are one ``forward`` and one ``backward`` compute row each with no layer
name (``name`` "", ``layer`` -1; the per-layer readers skip unnamed rows),
timed by a forward pre/post hook on the DDP module and, for the backward,
a hook on the autograd node of its output and a callback autograd runs at
the end of the backward pass: four calls per iteration, not per layer.
The optimizer and marker rows are the same on every iteration, the bucket rows too unless a plain wrapper runs
the un-sampled iterations (below).

**Un-sampled iterations without a Python comm hook** (``plain=``, a second DDP wrapper of the same module built
with the same arguments and no comm hook; the built-in job passes one with ``layer_every > 1``): DDP calls a
Python comm hook once per bucket on every iteration, and that alone costs about 3 % of a host-bound GPU
iteration. With a plain wrapper, a sampled iteration's forward goes through the recording wrapper (``ddp_model``,
with the comm hook: its ``allreduce`` rows as before) and an un-sampled one's through the plain wrapper, whose
buckets DDP all-reduces in C++ (no Python call per bucket, no ``allreduce`` row). DDP's reducer all-reduces only
for the wrapper whose forward ran with gradient sync (``prepare_for_backward``), so each iteration's gradients are
all-reduced once; the other wrapper's autograd hooks return at once. Use :attr:`DdpHooks.model` as the model of
the iteration. The plain wrapper holds its own bucket buffers (one more copy of the gradients' bytes) and rebuilds
its buckets after its own first iteration (the first un-sampled one). Not with ``static_graph=True``, whose reducer
does not wait for a forward to prepare its backward (two wrappers then leave iterations unreduced: refused);
``find_unused_parameters`` works. :attr:`DdpHooks.collective_iterations` lists
the iterations that carry ``allreduce`` rows (the sampled ones; every iteration without a plain wrapper).

On a GPU (``cuda=True``, NCCL) every row is timed by CUDA events (see
:mod:`.layer_hooks`): an all-reduce from an event on the compute stream when
DDP hands the bucket over to the completion of its future.
"""

from __future__ import annotations

import json

from .layer_hooks import COLLECTIVE_LINE, MARKER_LINE, LayerHooks, _first_grad_node
from .recorder import RankRecorder, now_ns


def reducer_facts(ddp_model) -> dict:
    """DDP's own account of its buckets (from its logging data; absent before it has logged them)."""
    data = ddp_model._get_ddp_logging_data()
    return {k: data[k] for k in ("bucket_sizes", "rebuilt_bucket_sizes", "rebuilt_per_bucket_param_indices", "bucket_cap_bytes")
            if k in data}


class DdpHooks(LayerHooks):
    """Installs the recording hooks on `ddp_model` (see the module docstring); :meth:`remove` takes them off."""

    def __init__(self, ddp_model, recorder: RankRecorder, *, process_group=None, merger=None, cuda: bool = False,
                 layer_every: int = 1, layer_warmup: int = 1, plain=None):
        """`plain`: a DDP wrapper of the same module without a comm hook, for the un-sampled iterations (see the
        module docstring; only with `layer_every` > 1 and no `merger`). `merger`: a :class:`~ddlsim.capture.ddp_plan.PlanMerger` to all-reduce plan groups instead of DDP's buckets
        (one ``collective`` row per group; ``group`` is the plan group's index). `layer_every`, `layer_warmup`:
        layer rows on the first `layer_warmup` iterations and every `layer_every`-th after them only (see
        :mod:`.layer_hooks`)."""
        import torch.distributed as dist

        super().__init__(ddp_model.module, recorder, cuda=cuda, defer=True, layer_every=layer_every,
                         layer_warmup=layer_warmup)
        if plain is not None:
            if self.layer_every == 1 or merger is not None:
                raise ValueError("a plain DDP wrapper runs the un-sampled iterations: it needs layer_every > 1 and no "
                                 "plan merger (whose un-sampled iterations must all-reduce the plan's groups too)")
            if plain is ddp_model or plain.module is not ddp_model.module:
                raise ValueError("plain must be a second DDP wrapper of the recorded wrapper's module")
            if getattr(ddp_model, "static_graph", False) or getattr(plain, "static_graph", False):
                # static_graph's reducer does not wait for a forward's prepare_for_backward: two wrappers would leave
                # iterations unreduced (checked on 2 gloo ranks)
                raise ValueError("a plain twin wrapper does not work with DDP's static_graph=True; record with one "
                                 "wrapper (no plain=)")
            for key in ("find_unused_parameters", "broadcast_buffers", "gradient_as_bucket_view", "bucket_bytes_cap"):
                if getattr(plain, key, None) != getattr(ddp_model, key, None):
                    raise ValueError(f"the plain twin wrapper must be built with the recorded wrapper's arguments; "
                                     f"{key} differs")
        self._pass_handles = []
        self._pass_start = None
        self._queue_callback = None  # autograd's queue_callback, looked up once
        if self.layer_every > 1:  # the passes of un-sampled iterations: two module hooks on the wrapper they run through
            passes = ddp_model if plain is None else plain
            self._pass_handles = [passes.register_forward_pre_hook(self._pass_pre_forward),
                                  passes.register_forward_hook(self._pass_post_forward)]
        self.ddp = ddp_model
        self.plain = plain
        self.collective_iterations: list[int] = []  # the iterations begun with the comm hook's wrapper
        self.world_size = dist.get_world_size(process_group)
        self._collective_ids: list[int] = []
        self._collective_seq = 0
        self.layouts: list[dict] = []  # {"from_iteration", "buckets"}, one per change of DDP's buckets
        self._layout: list[dict] = []  # this iteration's buckets so far
        self._iteration_start = 0
        self._groups: dict[tuple[int, ...], int] = {}
        self._bucket_facts: dict[tuple[int, ...], tuple] = {}  # tensors -> (tensor bytes, offsets, layers)
        self._static_buckets: dict[tuple[int, int, int], tuple] = {}  # (index, buffer address, size) -> _bucket_static
        self._allreduce_opts = None
        self._group = None  # the process group the comm hook all-reduces on
        self._provisional = not (ddp_model.find_unused_parameters and not ddp_model.static_graph) \
            and getattr(ddp_model, "num_iterations", 0) == 0
        self.merger = merger
        self.process_group = process_group
        ddp_model.register_comm_hook(process_group, self._comm_hook if merger is None else self._merge_hook)

    # -- iterations ------------------------------------------------------------------------------------------------
    def begin_iteration(self, iteration: int) -> None:
        super().begin_iteration(iteration)
        if self.plain is None or self.sampled:
            self.collective_iterations.append(int(iteration))
        with self._lock:
            self._collective_ids = []
            self._layout = []
            self._iteration_start = now_ns()

    @property
    def model(self):
        """The DDP wrapper to run the current iteration's forward through: the recording one, or on an un-sampled
        iteration the plain one where there is one (see the module docstring)."""
        return self.ddp if self.plain is None or self.sampled else self.plain

    def end_iteration(self) -> bool:
        """Writes the iteration's rows and its marker row (on a GPU: the previous iteration's, with no synchronisation;
        see :mod:`.layer_hooks`), notes a changed bucket layout and flushes; True if the layout changed."""
        if self.cuda:  # from the anchor to the end of the iteration's work on its stream
            start, end = self._anchor[1] if self._anchor is not None else self.mark(), self.mark()
        else:
            start, end = self._iteration_start, now_ns()
        self.end_rows((self.rec.new_id(), "iteration", start, end, [], None,
                       (MARKER_LINE, (self.iteration, self.iteration))))
        with self._lock:
            layout = sorted(self._layout, key=lambda b: b["bucket"])
            changed = bool(layout) and (not self.layouts or [b["group"] for b in self.layouts[-1]["buckets"]] != [b["group"] for b in layout])
            if changed:
                self.layouts.append({"from_iteration": self.iteration, "buckets": layout})
        self.rec.flush()
        return changed

    def facts(self) -> dict:
        """Parameter names and sizes, layer names and bucket layouts (the DDP sidecar's content); with sampled layer
        rows also ``layer_every`` and ``layer_iterations`` (the iterations that carry layer rows); with a plain wrapper
        also ``collective_iterations`` (the iterations that carry ``allreduce`` rows)."""
        with self._lock:
            layouts = list(self.layouts)
        facts = {"parameters": [{"name": n, "elements": p.numel(), "bytes": p.numel() * p.element_size()} for n, p in self.params],
                 "layers": [n for n, _ in self.layers], "layer_types": [type(m).__name__ for _, m in self.layers],
                 "layouts": layouts}
        if self.layer_every > 1:
            facts.update(layer_every=self.layer_every, layer_iterations=list(self.layer_iterations))
        if self.plain is not None:  # all-reduce rows on the sampled iterations only
            facts.update(collective_iterations=list(self.collective_iterations))
        return facts

    # -- the passes of un-sampled iterations -----------------------------------------------------------------------
    def _pass_pre_forward(self, module, args):
        if not self.sampled:
            self._pass_start = self.mark()

    def _pass_post_forward(self, module, args, output):
        if self.sampled:
            return
        end = self.mark()
        start, self._pass_start = self._pass_start, None
        self.compute_row("forward", end if start is None else start, end)
        node = _first_grad_node(output)
        if node is not None:
            node.register_prehook(self._pass_pre_backward)

    def _pass_pre_backward(self, grad_outputs):
        queue = self._queue_callback
        if queue is None:
            from torch.autograd import Variable

            queue = self._queue_callback = Variable._execution_engine.queue_callback
        start = self.mark()
        # runs once the whole backward pass (every layer's gradient) is done
        queue(lambda: self.compute_row("backward", start, self.mark()))

    def remove(self) -> None:
        super().remove()
        for h in self._pass_handles:
            h.remove()
        self._pass_handles = []

    def optimizer_step_row(self, start_ns: int, end_ns: int) -> int:
        with self._lock:
            waits = [c for c in self._collective_ids]
        return self.compute_row("optimizer_step", start_ns, end_ns, extra_deps=waits, name="optimizer")

    # -- buckets ---------------------------------------------------------------------------------------------------
    def _group_of(self, bucket_index: int, tensors: tuple[int, ...]) -> int:
        with self._lock:
            if tensors in self._groups:
                return self._groups[tensors]
            base = len(self.params) if self._provisional else 0
            wanted = base + bucket_index
            group = wanted if wanted not in self._groups.values() else max(max(self._groups.values()) + 1,
                                                                           2 * len(self.params))
            self._groups[tensors] = group
            return group

    def _facts_of(self, tensors: tuple[int, ...]) -> tuple:
        """(tensor bytes, byte offsets in the bucket, layers) of a bucket's tensors, computed once per bucket."""
        facts = self._bucket_facts.get(tensors)
        if facts is None:
            sizes = [self.params[t][1].numel() * self.params[t][1].element_size() for t in tensors]
            offsets = [sum(sizes[:k]) for k in range(len(sizes))]
            layers = sorted({self.layer_of_param[t] for t in tensors if t in self.layer_of_param})
            facts = self._bucket_facts[tensors] = (sizes, offsets, layers)
        return facts

    def _bucket_static(self, index: int, bucket, buffer) -> tuple:
        """What a bucket's rows repeat every iteration: (tensors, bytes, group, layers, layout entry, name); kept per
        bucket once DDP has rebuilt its buckets (it does so once), keyed by the bucket buffer's address and size."""
        key = (index, buffer.data_ptr(), buffer.numel())
        static = self._static_buckets.get(key)
        if static is not None:
            return static
        param_index = self.param_index
        tensors = tuple([param_index[p.data_ptr()] for p in bucket.parameters()])
        nbytes = buffer.numel() * buffer.element_size()
        group = self._group_of(index, tensors)
        sizes, offsets, layers = self._facts_of(tensors)
        layout = {"bucket": index, "group": group, "tensors": list(tensors), "offsets": offsets, "tensor_bytes": sizes,
                  "bytes": nbytes}
        static = (tensors, nbytes, group, layers, layout, json.dumps(f"bucket{index}"))
        if getattr(self.ddp, "_has_rebuilt_buckets", False):  # DDP's lasting buckets: the same every iteration
            self._static_buckets[key] = static
        return static

    def _all_reduce(self, buffer):
        """``dist.all_reduce(buffer, group, async_op=True)``'s future, through the process group itself (what
        ``all_reduce`` calls, without its per-call checks; it falls back to ``all_reduce`` where that fails)."""
        import torch.distributed as dist

        group = self._group
        if group is None:
            group = self._group = self.process_group if self.process_group is not None else dist.group.WORLD
        if self._allreduce_opts is None:
            opts = dist.AllreduceOptions()
            opts.reduceOp = dist.ReduceOp.SUM
            if hasattr(opts, "asyncOp"):
                opts.asyncOp = True
            self._allreduce_opts = opts
        try:
            return group.allreduce([buffer], self._allreduce_opts).get_future()
        except (AttributeError, TypeError, RuntimeError):
            self._allreduce_opts = None
            return dist.all_reduce(buffer, group=group, async_op=True).get_future()

    def _comm_hook(self, state, bucket):
        """torch's ``allreduce_hook`` (divide the bucket by the world size, all-reduce it), recorded; on one rank without
        the division (by 1: the same bytes, one pass over the gradients less)."""
        start = self.mark()
        iteration, index, buffer = self.iteration, bucket.index(), bucket.buffer()
        tensors, nbytes, group, layers, layout, name = self._bucket_static(index, bucket, buffer)
        rid = self.rec.new_id()
        with self._lock:
            self._collective_seq += 1
            collective = self._collective_seq
            self._collective_ids.append(rid)
            backward = self._backward_ids
            deps = sorted({backward[layer] for layer in layers if layer in backward}) if backward else []
            self._layout.append(layout)
            if self._provisional and bucket.is_last():
                self._provisional = False
        line = (COLLECTIVE_LINE, (iteration, group, nbytes, collective, name))

        def done(fut):
            # on a GPU this callback runs on a stream that waits for the NCCL work: the event marks its completion
            end = self.mark_current()
            with self._lock:
                self._rows.append((rid, "allreduce", start, end, deps, None, line))
            return fut.value()[0]

        if self.world_size > 1:
            buffer.div_(self.world_size)
        return self._all_reduce(buffer).then(done)

    def _merge_hook(self, state, bucket):
        """Plan groups: holds buckets until their group is complete, then records and launches the group's all-reduce."""
        from .ddp_plan import PlanMerger

        tensors = tuple(self.param_index[p.data_ptr()] for p in bucket.parameters())
        future, ready = self.merger.bucket(tensors, bucket.buffer())
        if future is None:
            return self._comm_hook(state, bucket)
        if ready is None:
            return future
        group, parts = ready
        start = self.mark()  # on a GPU an event, like every other row of the iteration (one clock per log)
        iteration = self.iteration
        members = [t for _, _, ts in parts for t in ts]
        sizes = [self.params[t][1].numel() * self.params[t][1].element_size() for t in members]
        nbytes = sum(buffer.numel() * buffer.element_size() for buffer, _, _ in parts)
        with self._lock:
            self._collective_seq += 1
            collective = self._collective_seq
            rid = self.rec.new_id()
            self._collective_ids.append(rid)
            deps = sorted({self._backward_ids[self.layer_of_param[t]] for t in members
                           if self.layer_of_param.get(t) in self._backward_ids})
            position = len(self._layout)
            self._layout.append({"bucket": position, "group": group, "tensors": members,
                                 "offsets": [sum(sizes[:k]) for k in range(len(sizes))], "tensor_bytes": sizes,
                                 "bytes": nbytes})

        fields = {"kind": "collective", "iteration": iteration, "stream": "comm", "group": group, "bytes": nbytes,
                  "collective": collective, "coll_type": "allreduce", "algorithm": "", "name": f"plan group {group}"}

        def record() -> None:
            # in the all-reduce's callback: on a GPU its stream waits for the NCCL work, as in _comm_hook's `done`
            end = self.mark_current()
            with self._lock:
                self._rows.append((rid, "allreduce", start, end, deps, None, fields))

        PlanMerger.launch(parts, self.world_size, self.process_group, before_results=record)
        return future
