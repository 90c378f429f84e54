//! In-network mechanisms on the flow and analytic models: IP multicast and
//! in-network aggregation as *tree flows*.
//!
//! Model (both models, both mechanisms):
//! - a multicast from one rank to several is **one flow over the union of
//!   the unicast routes' links** (the multicast tree): the sender's uplink
//!   once, each receiver's downlink once, and on leaf-spine each
//!   leaf->spine / spine->leaf link on the tree once, whatever number of
//!   receivers lie behind it (the switches replicate). In max-min a link
//!   counts the tree once (by its usual units: a sprayed tree link is
//!   `1/spines` of a flow), so the tree moves at one rate: the rate of its
//!   slowest branch. Alone, that is the least capacity on the tree; a
//!   receiver gets its copy its own route's latency after the tree's
//!   transmission ends.
//! - in-network aggregation from several ranks to one is the mirror tree:
//!   one flow over the union of the contributors' routes to the receiver
//!   (each contributor's uplink once, the receiver's downlink once). The
//!   switch streams the running sum on (cut-through, SwitchML-like slots),
//!   so the aggregate moves at the pace of the slowest contributor: the
//!   tree starts when the first bytes of every contribution reached the
//!   switch (each contributor's start plus its latency to the switch, the
//!   latest of them) and ends when the aggregate's last byte left the
//!   switch; the receiver has it after the switch-to-receiver latency
//!   ([`split_latency`]). On an idle network that is exactly the time of
//!   the slowest unicast push. The switch that holds the sum is
//!   the last switch on the routes to the receiver (the star switch, or the
//!   receiver's leaf on leaf-spine), see [`aggregation_switch`].
//!
//! Not modelled: packet loss and retransmission of multicast copies,
//! aggregator slot pools smaller than a tensor (a tensor's whole sum is
//! held; see `lower::in_network` for the memory budget), switch processing
//! delay, PFC/queues (the flow model has none).

use super::topology::{Path, Topology};
use crate::engine::{later, Time};
use crate::error::Error;
use crate::graph::FanKind;

/// One transfer of a fan: its sender, its receiver and when it started
/// (a fan's tree flow starts once all of them did).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FanEnd {
    pub src: u32,
    pub dst: u32,
    pub start: Time,
}

/// When a fan's tree flow may start, all its transfers having started by
/// `now`: at once for a multicast; for an aggregation, once the first bytes
/// of every contribution reached the aggregating switch (each start plus
/// its latency to the switch, the latest of them).
pub fn fan_ready(topo: &Topology, kind: FanKind, ends: &[FanEnd], now: Time) -> Result<Time, Error> {
    let mut at = now;
    if kind == FanKind::Aggregate {
        for e in ends {
            let (to_switch, _) = split_latency(topo, e.src, e.dst);
            at = at.max(later(e.start, to_switch)?);
        }
    }
    Ok(at)
}

/// A fan's tree flow: the multicast tree from the sender to every receiver,
/// delivered after the latency to the nearest receiver (the others get
/// their copies later, see [`fan_arrivals`]); or the aggregation tree from
/// every contributor, delivered after the longest switch-to-receiver latency.
pub fn fan_path(topo: &Topology, kind: FanKind, ends: &[FanEnd]) -> Path {
    let (mut path, latency) = match kind {
        FanKind::Multicast => {
            let src = ends[0].src;
            let dsts: Vec<u32> = ends.iter().map(|e| e.dst).collect();
            let nearest = dsts.iter().map(|&d| route_latency(topo, src, d)).min().unwrap_or(0);
            (multicast_tree(topo, src, &dsts), nearest)
        }
        FanKind::Aggregate => {
            let dst = ends[0].dst;
            let srcs: Vec<u32> = ends.iter().map(|e| e.src).collect();
            let from_switch = srcs.iter().map(|&s| split_latency(topo, s, dst).1).max().unwrap_or(0);
            (aggregation_tree(topo, &srcs, dst), from_switch)
        }
    };
    path.latency = latency;
    path
}

/// When each receiver of a fan has its copy, the tree's transmission having
/// ended at `tx_end` and its flow delivered at `delivered`: a multicast
/// copy its own route's latency after `tx_end`; the aggregate at `delivered`.
pub fn fan_arrivals(topo: &Topology, kind: FanKind, ends: &[FanEnd], tx_end: Time, delivered: Time, out: &mut Vec<Time>) -> Result<(), Error> {
    out.clear();
    for e in ends {
        out.push(match kind {
            FanKind::Multicast => later(tx_end, route_latency(topo, e.src, e.dst))?,
            FanKind::Aggregate => delivered,
        });
    }
    Ok(())
}

/// The union of the routes from `src` to each of `dsts` as one path
/// (latency 0: the caller sets the tree's latency and times each copy).
pub fn multicast_tree(topo: &Topology, src: u32, dsts: &[u32]) -> Path {
    union_of(topo, dsts.iter().map(|&d| (src, d)))
}

/// The union of the routes from each of `srcs` to `dst` as one path (latency 0: the caller sets it).
pub fn aggregation_tree(topo: &Topology, srcs: &[u32], dst: u32) -> Path {
    union_of(topo, srcs.iter().map(|&s| (s, dst)))
}

fn union_of(topo: &Topology, pairs: impl Iterator<Item = (u32, u32)>) -> Path {
    let mut links: Vec<u32> = Vec::new();
    let mut units: Vec<u32> = Vec::new();
    let mut switches: Vec<u32> = Vec::new();
    let mut route = Path::default();
    for (s, d) in pairs {
        topo.route_into(s, d, &mut route);
        for (&l, &u) in route.links().iter().zip(route.units()) {
            if !links.contains(&l) {
                links.push(l);
                units.push(u);
            }
        }
        for &sw in route.switches() {
            if !switches.contains(&sw) {
                switches.push(sw);
            }
        }
    }
    // One order for one link set, so equal trees share a flow class.
    let mut order: Vec<usize> = (0..links.len()).collect();
    order.sort_by_key(|&i| links[i]);
    let links = order.iter().map(|&i| links[i]).collect();
    let units = order.iter().map(|&i| units[i]).collect();
    topo.path_over(links, units, switches, 0)
}

/// Latency of the unicast route from `src` to `dst`.
pub fn route_latency(topo: &Topology, src: u32, dst: u32) -> Time {
    topo.route(src, dst).latency
}

/// The route from `src` to `dst` split at its last switch (the
/// aggregation switch): latency up to it, and from it to `dst` (its last
/// link's delay; 0 when the route crosses no switch).
pub fn split_latency(topo: &Topology, src: u32, dst: u32) -> (Time, Time) {
    let route = topo.route(src, dst);
    let after = match (route.switches().last(), route.links().last()) {
        (Some(_), Some(&l)) => topo.links[l as usize].delay,
        _ => 0,
    };
    (route.latency - after, after)
}

/// The switch that aggregates traffic towards `dst`: the last switch on
/// the routes to it (the star switch, or `dst`'s leaf); None when `dst`'s
/// routes cross no switch (everything on one host's intra-host fabric).
pub fn aggregation_switch(topo: &Topology, srcs: &[u32], dst: u32) -> Option<u32> {
    srcs.iter().find_map(|&s| topo.route(s, dst).switches().last().copied())
}
