//! Closed-form collective mode: one event per member per collective.
//!
//! Instead of running an algorithm's steps through the network, the
//! collective waits for every member to join (as the step-by-step machine
//! does), then finishes each member at launch + its closed-form time,
//! computed from the algorithm's schedule with every transfer of `b` bytes
//! costing alpha + ceil(b * 8e9 / bandwidth) ns (the analytic network's
//! cost, same rounding), where alpha is the end-to-end latency. No step rows
//! are logged and no bytes cross the network model.
//!
//! Exact (equal to the step-by-step simulation at analytic fidelity) when
//! - no two transfers want the same link at once: the network is idle
//!   apart from this collective and every rank has a NIC of its own (the
//!   analytic model serialises a link's transfers, so the hierarchical
//!   ring's ranks sharing a host, which share its NIC, take longer than
//!   this closed form: it is then a lower bound);
//! - every transfer of a stage takes the same time: the chunk sizes divide
//!   evenly (otherwise each stage is charged its largest chunk, an upper
//!   bound within 1 ns per stage);
//! - one path cost applies: a star (on a leaf-spine, cross-rack latency and
//!   oversubscription are not modelled here); intra-host transfers are
//!   charged the intra-host link when `intra_host_bandwidth_bps` is given
//!   (hierarchical ring's intra phases only), the NIC otherwise;
//! - the double binary tree's two trees never want the same sender at
//!   once (the step machine queues the second send; this mode runs the
//!   trees fully in parallel as NCCL's separate channels do).
//! It is not exact under contention (flow fidelity, other traffic), which
//! is why it is offered only at analytic fidelity. A member that reduces
//! what it received (`gamma_ns_per_byte` > 0) spends ceil(gamma * bytes) ns
//! before its next stage, as in the step-by-step machine.

use super::binary_tree::{Shape, TreePlan};
use super::exchange::{reduce_ns, Plan};
use super::recursive_doubling::Fold;
use super::ring::chunk_bytes;
use super::{Action, Algorithm, Cause, Collective, Params};
use crate::engine::Time;
use crate::network::transmit_ns;

/// What one transfer costs: alpha + ceil(bytes / rate).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkCost {
    pub latency_ns: u64,
    pub bandwidth_bps: f64,
    /// Intra-host link, when it differs from the NIC.
    pub intra: Option<(u64, f64)>,
}

impl LinkCost {
    /// The cost of the analytic network `spec` describes; the mode is only
    /// offered at analytic fidelity (flow-level contention has no closed form).
    pub fn of_network(spec: &crate::network::NetworkSpec) -> Result<LinkCost, String> {
        if spec.fidelity != crate::network::Fidelity::Analytic {
            return Err("the closed-form collective model needs analytic network fidelity (flow-level contention has no closed form); \
                        set the network fidelity to analytic or use the step-by-step collective model"
                .into());
        }
        if !(spec.bandwidth_bps > 0.0) {
            return Err("the closed-form collective model needs a positive bandwidth".into());
        }
        Ok(LinkCost {
            latency_ns: spec.latency_ns,
            bandwidth_bps: spec.bandwidth_bps,
            intra: spec.intra_host_bandwidth_bps.map(|bps| (spec.intra_host_latency_ns, bps)),
        })
    }

    pub fn transfer(&self, bytes: u64) -> Time {
        // out of range: a time past the engine's limit, which the executor refuses
        self.latency_ns.saturating_add(transmit_ns(bytes, self.bandwidth_bps).unwrap_or(crate::executor::MAX_TIME))
    }

    fn intra_transfer(&self, bytes: u64) -> Time {
        match self.intra {
            Some((lat, bps)) => lat.saturating_add(transmit_ns(bytes, bps).unwrap_or(crate::executor::MAX_TIME)),
            None => self.transfer(bytes),
        }
    }
}

/// Finish time of each member after launch, per the algorithm's schedule.
pub fn finish_offsets(algorithm: Algorithm, n: u32, bytes: u64, params: &Params, cost: &LinkCost) -> Vec<Time> {
    let nn = n as usize;
    if n <= 1 {
        return vec![0; nn];
    }
    let u = |b: u64| cost.transfer(b);
    let g = |b: u64| reduce_ns(b, params.gamma_ns_per_byte);
    let max_chunk = |m: u64, parts: u32| chunk_bytes(m, parts, 0);
    // 2(p-1) transfers of a chunk, and p-1 reductions of one in the reduce-scatter half.
    let ring = |m: u64, parts: u32| 2 * (parts as u64 - 1) * u(max_chunk(m, parts)) + (parts as u64 - 1) * g(max_chunk(m, parts));
    match algorithm {
        Algorithm::Ring => {
            let plan = super::ring::RingPlan::partitioned(n, bytes, params.chunk_bytes);
            // Messages are all-reduced in turn; messages of equal size cost the same.
            let s = plan.messages();
            let (big, small) = (plan.message_bytes(0), plan.message_bytes(s - 1));
            // The first M mod S messages are one byte larger.
            let big_count = if big == small { s as u64 } else { bytes % s as u64 };
            vec![big_count * ring(big, n) + (s as u64 - big_count) * ring(small, n); nn]
        }
        Algorithm::Direct => vec![ring(bytes, n); nn],
        Algorithm::RecursiveDoubling | Algorithm::Butterfly | Algorithm::HalvingDoubling => {
            let f = Fold::new(n);
            let whole = u(bytes);
            let core: Time = if algorithm == Algorithm::HalvingDoubling {
                // Halving stage j moves half the segment held (and reduces it), doubling the same sizes back.
                let (p, q, rem) = (f.p as u64, bytes / f.p as u64, bytes % f.p as u64);
                (0..f.k)
                    .map(|j| {
                        let blocks = p >> (j + 1);
                        let moved = blocks * q + blocks.min(rem);
                        2 * u(moved) + g(moved)
                    })
                    .sum()
            } else {
                f.k as u64 * (whole + g(bytes))
            };
            // The fold's receivers reduce the whole vector before the core starts.
            let start = if f.r > 0 { whole + g(bytes) } else { 0 };
            (0..n).map(|m| start + core + if m < 2 * f.r { whole } else { 0 }).collect()
        }
        Algorithm::BinaryTree => tree_offsets(&TreePlan::new(n, bytes, Shape::InOrder), u(bytes), g(bytes)),
        Algorithm::DoubleBinaryTree => {
            let (h0, h1) = (chunk_bytes(bytes, 2, 0), chunk_bytes(bytes, 2, 1));
            let a = tree_offsets(&TreePlan::new(n, h0, Shape::InOrder), u(h0), g(h0));
            let b = tree_offsets(&TreePlan::new(n, h1, Shape::Second), u(h1), g(h1));
            a.iter().zip(&b).map(|(x, y)| *x.max(y)).collect()
        }
        Algorithm::HierarchicalRing => {
            let plan = super::hierarchical_ring::HierarchicalRingPlan::new(bytes, &params.hosts, n);
            match plan.shape() {
                None => vec![ring(bytes, n); nn],
                Some((h, l)) => {
                    let intra = 2 * (l as u64 - 1) * cost.intra_transfer(max_chunk(bytes, l)) + (l as u64 - 1) * g(max_chunk(bytes, l));
                    let inter = (0..l).map(|li| ring(chunk_bytes(bytes, l, li), h)).max().unwrap_or(0);
                    vec![intra + inter; nn]
                }
            }
        }
    }
}

/// Reduce to the root taking children one after the other (each receipt
/// then reduced for `reduce`), then broadcast the same way (see
/// [`super::binary_tree`]); every edge costs `u`.
fn tree_offsets(tree: &TreePlan, u: Time, reduce: Time) -> Vec<Time> {
    let n = tree.members() as usize;
    let root = tree.root();
    // Breadth-first order; reduce bottom-up, broadcast top-down.
    let mut order = vec![root];
    let mut i = 0;
    while i < order.len() {
        order.extend_from_slice(tree.children(order[i]));
        i += 1;
    }
    let mut reduced = vec![0; n];
    for &v in order.iter().rev() {
        reduced[v as usize] = tree.children(v).iter().fold(0, |t, &c| t.max(reduced[c as usize]) + u + reduce);
    }
    let mut got = vec![0; n];
    got[root as usize] = reduced[root as usize];
    let mut done = vec![0; n];
    for &v in &order {
        let kids = tree.children(v);
        for (k, &c) in kids.iter().enumerate() {
            got[c as usize] = got[v as usize] + (k as u64 + 1) * u;
        }
        done[v as usize] = got[v as usize] + kids.len() as u64 * u;
    }
    done
}

/// The collective of this mode: launches when every member joined, then
/// finishes member m at launch + offsets[m].
pub struct ClosedForm {
    offsets: Vec<Time>,
    joined_flags: Vec<bool>,
    joined: u32,
}

impl ClosedForm {
    pub fn new(offsets: Vec<Time>) -> Self {
        let n = offsets.len();
        ClosedForm { offsets, joined_flags: vec![false; n], joined: 0 }
    }
}

impl Collective for ClosedForm {
    fn join(&mut self, now: Time, member: u32, _cause: Cause, out: &mut Vec<Action>) {
        debug_assert!(!self.joined_flags[member as usize], "member joined twice");
        self.joined_flags[member as usize] = true;
        self.joined += 1;
        if self.joined as usize == self.offsets.len() {
            for (m, &d) in self.offsets.iter().enumerate() {
                out.push(Action::DoneAt { member: m as u32, at: now + d });
            }
        }
    }

    fn delivered(&mut self, _now: Time, _tag: u64, _cause: Cause, _out: &mut Vec<Action>) {
        unreachable!("a closed-form collective sends nothing")
    }

    fn complete(&self) -> bool {
        self.joined as usize == self.offsets.len()
    }

    fn waits_for_a_join(&self, member: u32) -> bool {
        (self.joined as usize) < self.offsets.len() && self.joined_flags[member as usize]
    }

    fn joined(&self) -> u32 {
        self.joined
    }
}
