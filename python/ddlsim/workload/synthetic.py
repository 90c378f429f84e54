"""Synthetic models after the thesis' event-driven simulator (§4.4,
Table 4.1): a number of layers, a model size and a total compute time per
iteration, forward:backward = 1:2, per-layer forward times an arithmetic
progression that falls with the layer index, backward times one that rises
with it ("computation time decreases during later stages in forward
propagation and increases in back-propagation as layer index increases",
§4.4), and per-layer sizes following a chosen distribution.

Two profiles:

- ``"default"`` (:func:`synthetic_model`): the forward progression falls
  from `first_to_last_forward` x the last layer's time; the backward
  progression is the forward one reversed and scaled to fwd:bwd, so it rises
  with the layer index; sizes from `size_distribution`.
- ``"thesis-simulator"`` (:func:`thesis_simulator_model`): the model as the
  thesis author's published simulator builds it, see there.

Size distributions:
- "uniform": every layer the same size;
- "thesis": the ResNet-50 profile of thesis §3 (Fig. 3.4): the first 80/180
  of the layers carry almost nothing, the middle 70/180 about a fifth of
  the weight of each of the last 30/180;
- a zoo model name (e.g. "resnet50"): that model's per-layer size profile,
  resampled to the requested number of layers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..arguments import real, whole
from ..errors import ModelError
from ..units import MAX_SIZE_BYTES
from .model import Layer, Model, Tensor

# Relative per-layer weight of the three parts of the thesis profile; the
# thesis says the first part bears "very little", 1% of the top is our reading.
_THESIS_PARTS = ((80 / 180, 0.01), (70 / 180, 0.2), (30 / 180, 1.0))


def _weights(layers: int, distribution: str) -> np.ndarray:
    if distribution == "uniform":
        return np.ones(layers)
    if distribution == "thesis":
        position = (np.arange(layers) + 0.5) / layers
        w = np.empty(layers)
        edge = 0.0
        for share, weight in _THESIS_PARTS:
            w[(position >= edge) & (position < edge + share + 1e-12)] = weight
            edge += share
        return w
    from .zoo import load_model  # a zoo profile

    try:
        profile = load_model(distribution)
    except ModelError as exc:
        raise ModelError(f"size distribution {distribution!r}: use 'uniform', 'thesis' or a zoo model name. {exc}") from None
    sizes = np.array([sum(t.bytes for t in layer.tensors) for layer in profile.layers], dtype=float)
    cumulative = np.concatenate([[0.0], np.cumsum(sizes)]) / sizes.sum()
    grid = np.linspace(0.0, 1.0, layers + 1)
    source_grid = np.linspace(0.0, 1.0, len(sizes) + 1)
    return np.diff(np.interp(grid, source_grid, cumulative))


def _checked(layers: Any, model_size_bytes: Any, compute_s: Any, forward_share: Any, dtype_bytes: Any) -> tuple:
    """The arguments both synthetic models share, checked (the bounds of a scenario's [model.synthetic])."""
    return (whole(layers, "synthetic model: layers", 1, 1_000_000, ModelError),
            whole(model_size_bytes, "synthetic model: model_size_bytes", 1, MAX_SIZE_BYTES, ModelError),
            real(compute_s, "synthetic model: compute_s", 0, 1e6, ModelError),
            real(forward_share, "synthetic model: forward_share", 0, 1, ModelError, open_lo=True, open_hi=True),
            whole(dtype_bytes, "synthetic model: dtype_bytes", 1, 64, ModelError))


def synthetic_model(
    layers: int = 100,
    model_size_bytes: int = 100_000_000,
    compute_s: float = 0.9,
    forward_share: float = 1 / 3,
    first_to_last_forward: float = 2.0,
    size_distribution: str = "thesis",
    dtype_bytes: int = 4,
) -> Model:
    """A synthetic model; defaults are the thesis' Table 4.1 values
    (100 layers, 100 MB, 900 ms of compute, fwd:bwd = 1:2).

    `first_to_last_forward` is the ratio of the first layer's forward time
    to the last one's (the progression's slope). The backward times are the
    forward progression reversed and scaled by (1 - forward_share) /
    forward_share: they rise with the layer index (thesis §4.4), the last
    layer's backward being `first_to_last_forward` x the first layer's.
    """
    layers, model_size_bytes, compute_s, forward_share, dtype_bytes = _checked(
        layers, model_size_bytes, compute_s, forward_share, dtype_bytes)
    first_to_last_forward = real(first_to_last_forward, "synthetic model: first_to_last_forward", 0, 1e6, ModelError,
                                 open_lo=True)
    if model_size_bytes < dtype_bytes * layers:
        raise ModelError("synthetic model: model_size must give every layer at least one parameter")
    # Arithmetic progression a, a+d, ..., with a/(a+(L-1)d) = r and sum = F.
    forward_total = compute_s * forward_share
    ratio = first_to_last_forward
    last = 2 * forward_total / (layers * (1 + ratio))
    first = ratio * last
    fwd = np.linspace(first, last, layers)
    bwd = fwd[::-1] * (1 - forward_share) / forward_share
    weights = _weights(layers, size_distribution)
    elements_total = model_size_bytes // dtype_bytes
    raw = weights / weights.sum() * elements_total
    elements = np.maximum(1, np.floor(raw).astype(np.int64))
    # Hand the rounding remainder to the largest layers so the total is exact.
    remainder = int(elements_total - elements.sum())
    order = np.argsort(-raw, kind="stable")
    elements[order[: abs(remainder)]] += 1 if remainder > 0 else -1
    model_layers = tuple(
        Layer(
            name=f"layer{i}",
            type="Synthetic",
            tensors=(Tensor(f"layer{i}.weight", int(elements[i]), dtype_bytes),),
            fwd_s=float(fwd[i]),
            bwd_s=float(bwd[i]),
        )
        for i in range(layers)
    )
    return Model(
        name="synthetic",
        display_name=f"synthetic ({layers} layers, {model_size_bytes / 1e6:g} MB, {compute_s * 1e3:g} ms)",
        layers=model_layers,
        source=f"ddlsim.workload.synthetic(size_distribution={size_distribution!r})",
    )


SYNTHETIC_PROFILES = ("default", "thesis-simulator")


def thesis_simulator_model(
    layers: int = 100,
    model_size_bytes: int = 100_000_000,
    compute_s: float = 0.9,
    forward_share: float = 1 / 3,
    dtype_bytes: int = 4,
) -> Model:
    """The thesis' default model as its event-driven simulator defines it
    (§4.4, Table 4.1: 100 layers, 100 MB, 900 ms, fwd:bwd = 1:2), constant
    by constant.

    With F = compute x forward_share and B = compute - F:

    - forward of layer l: (L - l) x 2F / (L (L + 1)), an arithmetic
      progression with a negative difference (§4.4) that sums to F exactly
      (5.94 ms at layer 0 falling to 0.0594 ms at layer 99 with the defaults);
    - backward of layer l: l x 2B / (L (L - 1)), a positive delta with the
      layer index (layer 0's backward is 0; a one-layer model gets F and B),
      summing to B exactly (l x 0.1212 ms with the defaults);
    - the slopes are not rounded: each layer's time is the difference of the
      progression's running sum rounded to the nanosecond, so the totals are
      F and B to the nanosecond (300 ms + 600 ms with the defaults);
    - sizes: the model size M divided over the layers in the proportions
      1 : 4 : 12 (the first L//2 layers, the next L//4, the rest: the author's
      layer file, whose largest layer Table 5.1's fusion buffer is "slightly
      more than"), in whole parameters, the rounding remainder to the layers
      with the largest fractions, so the layers add up to M exactly
      (55,555 or 55,556 / 222,222 / 666,667 parameters with the defaults).
    """
    from fractions import Fraction

    layers, model_size_bytes, compute_s, forward_share, dtype_bytes = _checked(
        layers, model_size_bytes, compute_s, forward_share, dtype_bytes)
    compute_ns = Fraction(round(compute_s * 1e9))
    forward_ns = compute_ns * Fraction(forward_share).limit_denominator(10**6)
    backward_ns = compute_ns - forward_ns
    if layers == 1:
        fwd_ns, bwd_ns = [round(forward_ns)], [round(backward_ns)]
    else:
        fwd_ns = _running_sum_ns([(layers - i) * 2 * forward_ns / (layers * (layers + 1)) for i in range(layers)])
        bwd_ns = _running_sum_ns([i * 2 * backward_ns / (layers * (layers - 1)) for i in range(layers)])
    half, quarter = layers // 2, layers // 4
    weights = [1 if i < half else 4 if i < half + quarter else 12 for i in range(layers)]
    total = model_size_bytes // dtype_bytes
    if total * min(weights) < sum(weights):
        raise ModelError(
            f"synthetic model: {model_size_bytes} bytes over {layers} layers leaves the smallest layers "
            "(M / (L/2 + 4 L/4 + 12 L/4) bytes) without a parameter; use a larger model_size or fewer layers"
        )
    shares = [Fraction(total * w, sum(weights)) for w in weights]
    elements = [int(share) for share in shares]  # floor: shares are positive
    by_fraction = sorted(range(layers), key=lambda i: (-(shares[i] - elements[i]), i))
    for i in by_fraction[: total - sum(elements)]:
        elements[i] += 1
    model_layers = tuple(
        Layer(
            name=f"layer{i}",
            type="Synthetic",
            tensors=(Tensor(f"layer{i}.weight", elements[i], dtype_bytes),),
            fwd_s=fwd_ns[i] / 1e9,
            bwd_s=bwd_ns[i] / 1e9,
        )
        for i in range(layers)
    )
    return Model(
        name="synthetic",
        display_name=f"synthetic, thesis simulator ({layers} layers, {model_size_bytes / 1e6:g} MB, {compute_s * 1e3:g} ms)",
        layers=model_layers,
        source="ddlsim.workload.synthetic.thesis_simulator_model",
    )


def _running_sum_ns(times: list) -> list[int]:
    """Whole nanoseconds per term whose running sums are the exact running sums rounded: no drift."""
    out, running, previous = [], 0, 0
    for t in times:
        running += t
        out.append(round(running) - previous)
        previous = round(running)
    return out
