"""The adaptive band policy: each gradient group's network band from its slack (docs/adaptive-priority.md).

P3 and ByteScheduler rank a tensor by its layer; this policy asks instead how long the tensor can wait. It
plans one iteration of one worker without contention, as the critical-path method does for a chain of jobs:

- compute: forward of layers 0..L-1 (f_l), then backward of layers L-1..0 (b_l); time 0 is the end of the
  forward pass, so layer l's gradient is ready at R_l = b_{L-1} + ... + b_l (the end of its backward);
- group g (the layers S_g, ready layer r_g = min S_g, as the engine's lowering) is issued at R_{r_g} into the
  worker's communication stream, which is FIFO in issue order (latest ready layer first, then group index);
  it takes c_g = a + b * bytes_g there (the scenario's idle-network all-reduce cost, `lowering.allreduce_cost`);
  (times `contention`, 1 by default: the slowdown the tenants cause the job's all-reduces in its own band);
- early finish: EF_g = max(R_{r_g}, EF_{g-1}) + c_g (g-1 the group issued before g);
- deadline D_g: when the next iteration's forward pass needs the group in this no-contention plan. With the
  barrier (the default) the next forward waits for every group: D_g = max(R_0, EF_last) for all g. Without it
  (a pipelined forward), forward of layer m starts at F_m = max(F_{m-1} + f_{m-1}, EF of m's groups), F_0 =
  max(R_0, EF of layer 0's groups), and D_g = F_{r_g};
- latest finish, backwards along the stream: LF_last = D_last, LF_g = min(D_g, LF_{g+1} - c_{g+1}) (g+1 cannot
  start before g ends);
- slack_g = LF_g - EF_g >= 0: how much later g may finish without delaying any forward of the next iteration
  (it is shared with the groups behind g in the stream, which LF accounts for).

Bands: in issue order, a group whose slack is at least `stretch` x c_g + `reserve` goes to `low_band` (it may
take (1 + stretch) times its idle-network time there, yielding to the tenants' bursts, and still be in time, with
`reserve` left for one rare stall: at packet level the minimum retransmission timeout); its cost in the plan
becomes (1 + stretch) x c_g, so the groups after it see the slack it used (the reserve is not used up). The
deadlines stay those of the plan without demotions. Every other group, the
critical ones (slack 0) among them, stays in `high_band` (the scenario's `job_band`, the tenants' band in the
thesis' setting). The bands are static: decided once from the compute profile, the same every iteration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence


@dataclass(frozen=True)
class GroupPlan:
    """One group's row of the plan (nanoseconds from the end of the forward pass)."""

    group: int
    ready_layer: int
    ready_ns: float
    cost_ns: float
    early_finish_ns: float
    deadline_ns: float
    latest_finish_ns: float

    @property
    def slack_ns(self) -> float:
        return self.latest_finish_ns - self.early_finish_ns


def issue_order(groups: Sequence[Sequence[int]]) -> list[int]:
    """Group indices in the order the lowering issues them: latest ready layer (min of the group's layers) first."""
    return sorted(range(len(groups)), key=lambda g: (-min(groups[g]), g))


def plan(times_ns: Sequence[tuple[float, float]], groups: Sequence[Sequence[int]], costs_ns: Sequence[float],
         barrier: bool = True, deadlines_ns: "Optional[dict[int, float]]" = None) -> list[GroupPlan]:
    """The slack plan of one iteration (module docstring), one row per group in issue order.
    `times_ns`: (forward, backward) per layer; `groups`: each group's layers; `costs_ns`: each group's time in
    the communication stream; `deadlines_ns`: the deadlines to keep (group -> ns), default this plan's own."""
    num_layers = len(times_ns)
    ready_at = [0.0] * num_layers  # end of layer l's backward, from the end of the forward pass
    t = 0.0
    for layer in range(num_layers - 1, -1, -1):
        t += float(times_ns[layer][1])
        ready_at[layer] = t
    backward_end = t
    order = issue_order(groups)
    early: dict[int, float] = {}
    free = 0.0
    for g in order:
        free = max(ready_at[min(groups[g])], free) + float(costs_ns[g])
        early[g] = free
    if deadlines_ns is not None:
        deadline = dict(deadlines_ns)
    elif barrier:
        start = max([backward_end, *early.values()])
        deadline = {g: start for g in order}
    else:
        need = [backward_end] * num_layers  # when forward of layer m may start as far as its groups go
        for g in order:
            for layer in groups[g]:
                need[layer] = max(need[layer], early[g])
        forward_at, clock = [0.0] * num_layers, 0.0
        for m in range(num_layers):
            clock = max(clock, need[m])
            forward_at[m] = clock
            clock += float(times_ns[m][0])
        deadline = {g: forward_at[min(groups[g])] for g in order}
    latest: dict[int, float] = {}
    after = float("inf")  # latest start of the group issued next
    for g in reversed(order):
        latest[g] = min(deadline[g], after)
        after = latest[g] - float(costs_ns[g])
    return [GroupPlan(g, min(groups[g]), ready_at[min(groups[g])], float(costs_ns[g]), early[g], deadline[g], latest[g])
            for g in order]


def adaptive_bands(times_ns: Sequence[tuple[float, float]], groups: Sequence[Sequence[int]],
                   cost: Callable[[int], float], group_bytes: Sequence[int], high_band: int, low_band: int,
                   stretch: float, barrier: bool = True, reserve_ns: float = 0.0, contention: float = 1.0) -> list[int]:
    """Each group's band (indexed by group): `low_band` where the group's slack, given the demotions already made
    in issue order, is at least `stretch` x its cost + `reserve_ns`; else `high_band`. The reserve is kept for
    one rare delay (a retransmission timeout) and is not used up by the demotion: the plan stretches the cost by
    `stretch` x cost only. `contention` multiplies every group's idle-network cost first (the slowdown the job's
    all-reduces see in its own band from the tenants)."""
    costs = [float(cost(b)) * contention for b in group_bytes]
    rows = plan(times_ns, groups, costs, barrier)  # the plan without demotions: deadlines and latest finishes
    # Going in issue order, only the groups before g have been stretched, and LF_g depends on the groups after g
    # only: one forward pass recomputing the early finishes is the whole greedy (O(groups)).
    bands = [high_band] * len(groups)
    free = 0.0
    for r in rows:
        early = max(r.ready_ns, free) + costs[r.group]
        if r.latest_finish_ns - early >= stretch * costs[r.group] + reserve_ns - 1e-6:
            bands[r.group] = low_band
            early += stretch * costs[r.group]
        free = early
    return bands


def scenario_bands(scenario, times_ns: Sequence[tuple[int, int]], groups: Sequence[dict], cost) -> list[int]:
    """The engine's `group_bands` for a scenario with network.band_policy = "adaptive" (`cost`: the scenario's
    `lowering.allreduce_cost`, with `a` and `b`)."""
    net = scenario.network
    return adaptive_bands(times_ns, [g["layers"] for g in groups], cost,
                          [int(g["bytes"]) for g in groups], net.job_band, net.adaptive_low_band, net.adaptive_stretch,
                          barrier=scenario.barrier, reserve_ns=reserve_ns(scenario), contention=net.adaptive_contention)


def reserve_ns(scenario) -> float:
    """network.adaptive_reserve: given, that duration; else at packet level the transport's minimum retransmission
    timeout (one lost segment in the low band stalls its transfer that long), 0 at flow and analytic level."""
    from ..units import parse_duration_ns

    net = scenario.network
    if net.adaptive_reserve is not None:
        return float(parse_duration_ns(net.adaptive_reserve))
    return float(net.packet_options.rto_min_ns) if net.fidelity == "packet" else 0.0
