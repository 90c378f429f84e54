//! Closed-form collective mode: one event per member per collective.
//!
//! Instead of running an algorithm's steps through the network, the
//! collective waits for every member to join (as the step-by-step machine
//! does), then finishes each member at launch + its closed-form time,
//! computed from the algorithm's schedule with every transfer of `b` bytes
//! costing alpha + ceil(b * 8e9 / bandwidth) ns (the analytic network's
//! cost, same rounding), where alpha is the end-to-end latency. No step rows
//! are logged and no bytes cross the network model, but each member counts
//! the bytes its schedule sends and receives ([`member_bytes`]), so a run's
//! per-rank byte totals equal the step-by-step run's.
//!
//! Times are summed and multiplied with saturating arithmetic: a schedule
//! whose time does not fit in 64 bits ends past the engine's clock limit,
//! which the executor reports as an error (never a wrapped, small time).
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

/// What one transfer costs: alpha + ceil(bytes / rate) (the description lives with the graph).
pub use crate::algorithm::LinkCost;

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
        self.latency_ns.saturating_add(transmit_ns(bytes, self.bandwidth_bps).unwrap_or(crate::engine::MAX_TIME))
    }

    fn intra_transfer(&self, bytes: u64) -> Time {
        match self.intra {
            Some((lat, bps)) => lat.saturating_add(transmit_ns(bytes, bps).unwrap_or(crate::engine::MAX_TIME)),
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
    let ring = |m: u64, parts: u32| {
        let steps = parts as u64 - 1;
        mul(2 * steps, u(max_chunk(m, parts))).saturating_add(mul(steps, g(max_chunk(m, parts))))
    };
    match algorithm {
        Algorithm::Ring => {
            let plan = super::ring::RingPlan::partitioned(n, bytes, params.chunk_bytes);
            // Messages are all-reduced in turn; messages of equal size cost the same.
            let s = plan.messages();
            let (big, small) = (plan.message_bytes(0), plan.message_bytes(s - 1));
            // The first M mod S messages are one byte larger.
            let big_count = if big == small { s as u64 } else { bytes % s as u64 };
            vec![mul(big_count, ring(big, n)).saturating_add(mul(s as u64 - big_count, ring(small, n))); nn]
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
                        mul(2, u(moved)).saturating_add(g(moved))
                    })
                    .fold(0, Time::saturating_add)
            } else {
                mul(f.k as u64, whole.saturating_add(g(bytes)))
            };
            // The fold's receivers reduce the whole vector before the core starts.
            let start = if f.r > 0 { whole.saturating_add(g(bytes)) } else { 0 };
            (0..n).map(|m| start.saturating_add(core).saturating_add(if m < 2 * f.r { whole } else { 0 })).collect()
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
                    let steps = l as u64 - 1;
                    let intra = mul(2 * steps, cost.intra_transfer(max_chunk(bytes, l))).saturating_add(mul(steps, g(max_chunk(bytes, l))));
                    let inter = (0..l).map(|li| ring(chunk_bytes(bytes, l, li), h)).max().unwrap_or(0);
                    vec![intra.saturating_add(inter); nn]
                }
            }
        }
    }
}

/// `a * b`, saturating: an overflowing time ends past the engine's limit (an error there).
fn mul(a: u64, b: u64) -> u64 {
    a.saturating_mul(b)
}

/// Bytes each member sends and receives in the algorithm's schedule (what
/// the step-by-step machine hands to the network), as (sent, received).
pub fn member_bytes(algorithm: Algorithm, n: u32, bytes: u64, params: &Params) -> (Vec<u64>, Vec<u64>) {
    let nn = n as usize;
    let (mut sent, mut received) = (vec![0u64; nn], vec![0u64; nn]);
    if n <= 1 {
        return (sent, received);
    }
    use super::{butterfly, direct, halving_doubling, hierarchical_ring, recursive_doubling};
    if let Some(parts) = linear_parts(algorithm, n) {
        return member_bytes_of_parts(&parts, bytes);
    }
    match algorithm {
        Algorithm::Ring => {
            // Each message of M_q bytes: member i sends every chunk but (i+1) mod n in the
            // reduce-scatter and every chunk but (i+2) mod n in the all-gather, and receives
            // what its predecessor sends (O(n) per message size, not O(n^2) steps).
            let plan = super::ring::RingPlan::partitioned(n, bytes, params.chunk_bytes);
            let s = plan.messages() as u64;
            let (big, small) = (plan.message_bytes(0), plan.message_bytes(plan.messages() - 1));
            let big_count = if big == small { s } else { bytes % s };
            for (m_q, count) in [(big, big_count), (small, s - big_count)] {
                if count == 0 {
                    continue;
                }
                for i in 0..n {
                    let c = |k: u32| chunk_bytes(m_q, n, k % n);
                    let out = mul(2, m_q) - c(i + 1) - c(i + 2);
                    sent[i as usize] = sent[i as usize].saturating_add(mul(count, out));
                    received[((i + 1) % n) as usize] = received[((i + 1) % n) as usize].saturating_add(mul(count, out));
                }
            }
        }
        Algorithm::HalvingDoubling => {
            let p = halving_doubling::HalvingDoublingPlan::new(n, bytes);
            walk(&p, &mut sent, &mut received);
        }
        Algorithm::RecursiveDoubling => {
            let p = recursive_doubling::RecursiveDoublingPlan::new(n, bytes);
            walk(&p, &mut sent, &mut received);
        }
        Algorithm::Butterfly => {
            let p = butterfly::ButterflyPlan::new(n, bytes);
            walk(&p, &mut sent, &mut received);
        }
        Algorithm::Direct => {
            let p = direct::DirectPlan::new(n, bytes);
            walk(&p, &mut sent, &mut received);
        }
        Algorithm::BinaryTree => {
            let p = TreePlan::new(n, bytes, Shape::InOrder);
            walk(&p, &mut sent, &mut received);
        }
        Algorithm::DoubleBinaryTree => {
            let a = TreePlan::new(n, chunk_bytes(bytes, 2, 0), Shape::InOrder);
            let b = TreePlan::new(n, chunk_bytes(bytes, 2, 1), Shape::Second);
            walk(&a, &mut sent, &mut received);
            walk(&b, &mut sent, &mut received);
        }
        Algorithm::HierarchicalRing => {
            let p = hierarchical_ring::HierarchicalRingPlan::new(bytes, &params.hosts, n);
            walk(&p, &mut sent, &mut received);
        }
    }
    (sent, received)
}

/// One part of a schedule whose sends all carry the same share of the
/// all-reduce's bytes: the share (`None`: all of them, `Some(k)`: half k as
/// [`chunk_bytes`] cuts it) and the sends and receipts of each member.
pub struct LinearPart {
    pub half: Option<u32>,
    pub sends: Vec<u64>,
    pub receipts: Vec<u64>,
}

/// The trees' member bytes are linear in the all-reduce's bytes (their shape
/// does not depend on them): walked once, scaled for every size
/// ([`member_bytes_of_parts`]). None for the other algorithms.
pub fn linear_parts(algorithm: Algorithm, n: u32) -> Option<Vec<LinearPart>> {
    let part = |half: Option<u32>, shape: Shape| {
        let (mut sends, mut receipts) = (vec![0u64; n as usize], vec![0u64; n as usize]);
        walk(&TreePlan::new(n, 1, shape), &mut sends, &mut receipts);
        LinearPart { half, sends, receipts }
    };
    match algorithm {
        Algorithm::BinaryTree if n > 1 => Some(vec![part(None, Shape::InOrder)]),
        Algorithm::DoubleBinaryTree if n > 1 => Some(vec![part(Some(0), Shape::InOrder), part(Some(1), Shape::Second)]),
        _ => None,
    }
}

/// [`member_bytes`] from [`linear_parts`].
pub fn member_bytes_of_parts(parts: &[LinearPart], bytes: u64) -> (Vec<u64>, Vec<u64>) {
    let n = parts.first().map_or(0, |p| p.sends.len());
    let (mut sent, mut received) = (vec![0u64; n], vec![0u64; n]);
    for p in parts {
        let share = p.half.map_or(bytes, |k| chunk_bytes(bytes, 2, k));
        for i in 0..n {
            sent[i] = sent[i].saturating_add(mul(p.sends[i], share));
            received[i] = received[i].saturating_add(mul(p.receipts[i], share));
        }
    }
    (sent, received)
}

/// Adds every send of `plan` to its sender's and its receiver's byte counts.
fn walk<P: Plan>(plan: &P, sent: &mut [u64], received: &mut [u64]) {
    for m in 0..plan.members() {
        for s in 0..plan.stages() {
            if let Some((to, b)) = plan.stage(m, s).send {
                sent[m as usize] = sent[m as usize].saturating_add(b);
                received[to as usize] = received[to as usize].saturating_add(b);
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
        reduced[v as usize] = tree.children(v).iter().fold(0, |t: Time, &c| t.max(reduced[c as usize]).saturating_add(u).saturating_add(reduce));
    }
    let mut got = vec![0; n];
    got[root as usize] = reduced[root as usize];
    let mut done = vec![0; n];
    for &v in &order {
        let kids = tree.children(v);
        for (k, &c) in kids.iter().enumerate() {
            got[c as usize] = got[v as usize].saturating_add(mul(k as u64 + 1, u));
        }
        done[v as usize] = got[v as usize].saturating_add(mul(kids.len() as u64, u));
    }
    done
}

/// The collective of this mode: launches when every member joined, then
/// finishes member m at launch + offsets[m].
pub struct ClosedForm {
    offsets: Vec<Time>,
    /// Per member: bytes its schedule sends and receives ([`member_bytes`]); empty: none counted.
    sent: Vec<u64>,
    received: Vec<u64>,
    joined_flags: Vec<bool>,
    joined: u32,
}

impl ClosedForm {
    pub fn new(offsets: Vec<Time>) -> Self {
        let n = offsets.len();
        ClosedForm { offsets, sent: Vec::new(), received: Vec::new(), joined_flags: vec![false; n], joined: 0 }
    }

    /// Counts these bytes per member (reported with each member's end).
    pub fn with_bytes(mut self, (sent, received): (Vec<u64>, Vec<u64>)) -> Self {
        self.sent = sent;
        self.received = received;
        self
    }
}

impl Collective for ClosedForm {
    fn join(&mut self, now: Time, member: u32, _cause: Cause, out: &mut Vec<Action>) {
        debug_assert!(!self.joined_flags[member as usize], "member joined twice");
        self.joined_flags[member as usize] = true;
        self.joined += 1;
        if self.joined as usize == self.offsets.len() {
            for (m, &d) in self.offsets.iter().enumerate() {
                let (sent, received) = (self.sent.get(m).copied().unwrap_or(0), self.received.get(m).copied().unwrap_or(0));
                out.push(Action::DoneAt { member: m as u32, at: now.saturating_add(d), sent, received });
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

#[cfg(test)]
mod linear_tests {
    use super::*;

    #[test]
    fn tree_bytes_from_linear_parts_equal_the_walk() {
        for algorithm in [Algorithm::BinaryTree, Algorithm::DoubleBinaryTree] {
            for n in [2u32, 3, 7, 16, 33] {
                let parts = linear_parts(algorithm, n).expect("trees are linear");
                for bytes in [0u64, 1, 2, 3, 1000, 4097] {
                    let mut walked = (vec![0u64; n as usize], vec![0u64; n as usize]);
                    if algorithm == Algorithm::BinaryTree {
                        walk(&TreePlan::new(n, bytes, Shape::InOrder), &mut walked.0, &mut walked.1);
                    } else {
                        walk(&TreePlan::new(n, chunk_bytes(bytes, 2, 0), Shape::InOrder), &mut walked.0, &mut walked.1);
                        walk(&TreePlan::new(n, chunk_bytes(bytes, 2, 1), Shape::Second), &mut walked.0, &mut walked.1);
                    }
                    assert_eq!(member_bytes_of_parts(&parts, bytes), walked, "{algorithm:?} n={n} bytes={bytes}");
                }
            }
        }
    }
}
