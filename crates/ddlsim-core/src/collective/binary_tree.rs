//! Binary-tree and double-binary-tree all-reduce (NCCL-style trees).
//!
//! Tree construction (NCCL's in-order binary tree): rank 0 is the root and
//! has one child, the largest power of two below N. Any other rank r with
//! lowest set bit b has the left child r - b/2 (when b > 1) and the right
//! child r + h, h the largest power of two below b with r + h < N (none if
//! there is no such h). Odd ranks are leaves. Depth is about log2 N.
//!
//! Binary tree: reduce to the root, level by level from the deepest, then
//! broadcast back down, whole vector on every edge. A node takes its
//! children one after the other (left, then right), each transfer being
//! one stage, so a level costs 2 (alpha + M beta) for a node with two
//! children in either direction. With u = alpha + M beta, a node's reduce
//! is done at R(v) = fold over its children c in order of t -> max(t, R(c)) + u
//! (R(leaf) = 0), the root's at R(0); a node gets the result at B(v) = B(parent)
//! + (k+1) u for its parent's k-th child (B(0) = R(0)), and the all-reduce
//! ends at max over nodes of B(v) + (children of v) u. For a complete tree
//! below the root (N = 2^k) that is (4 log2 N - 2) u, e.g. 10u for N = 8;
//! MG-WFBP's Table II (2 log2 N (alpha + beta M)) charges one transfer per
//! level and ignores that the two children share their parent's link.
//!
//! Double binary tree (NCCL 2.4): two such trees run at once, each over
//! half of the data (the first one gets the odd byte). The second tree is
//! the first mirrored (rank r plays the part of N-1-r) for even N, or
//! shifted (rank r plays r-1) for odd N, so the leaves of one (odd ranks)
//! are interior in the other. A member keeps one transfer in flight (the
//! executor preempts and parks at transfer boundaries), so when both trees
//! want to send from the same member the later send queues behind the
//! earlier, as on a single NIC queue. On an idle network with no
//! contention between the trees it costs the binary tree's time for M/2.

use std::collections::VecDeque;

use super::exchange::{Exchange, Plan, Stage};
use super::{Action, Cause, Collective, NO_CAUSE};
use crate::engine::Time;

/// Which of the two trees of the double binary tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    InOrder,
    /// Mirrored (even N) or shifted (odd N).
    Second,
}

/// Children of rank `r` (left first) in the in-order tree over `n` ranks.
pub fn in_order_children(n: u32, r: u32) -> Vec<u32> {
    if n <= 1 {
        return Vec::new();
    }
    if r == 0 {
        return vec![1 << (31 - (n - 1).leading_zeros())];
    }
    let b = r & r.wrapping_neg();
    if b == 1 {
        return Vec::new();
    }
    let mut kids = vec![r - b / 2];
    let mut h = b / 2;
    while h > 0 && r + h >= n {
        h /= 2;
    }
    if h > 0 {
        kids.push(r + h);
    }
    kids
}

pub struct TreePlan {
    n: u32,
    bytes: u64,
    depth: u32,
    /// Per member: parent (u32::MAX at the root), slot among its parent's
    /// children, depth, children.
    parent: Vec<u32>,
    slot: Vec<u32>,
    level: Vec<u32>,
    children: Vec<Vec<u32>>,
}

impl TreePlan {
    pub fn new(n: u32, bytes: u64, shape: Shape) -> Self {
        // Rank r plays the part of role(r) in the in-order tree.
        let role = |r: u32| match shape {
            Shape::InOrder => r,
            Shape::Second if n % 2 == 0 => n - 1 - r,
            Shape::Second => (r + n - 1) % n,
        };
        let mut rank_of_role = vec![0; n as usize];
        for r in 0..n {
            rank_of_role[role(r) as usize] = r;
        }
        let children: Vec<Vec<u32>> = (0..n).map(|r| in_order_children(n, role(r)).into_iter().map(|c| rank_of_role[c as usize]).collect()).collect();
        let mut parent = vec![u32::MAX; n as usize];
        let mut slot = vec![0; n as usize];
        for (p, kids) in children.iter().enumerate() {
            for (k, &c) in kids.iter().enumerate() {
                parent[c as usize] = p as u32;
                slot[c as usize] = k as u32;
            }
        }
        let mut level = vec![0; n as usize];
        let mut order: Vec<u32> = if n > 0 { vec![rank_of_role[0]] } else { Vec::new() };
        let mut i = 0;
        while i < order.len() {
            let v = order[i] as usize;
            for &c in &children[v] {
                level[c as usize] = level[v] + 1;
                order.push(c);
            }
            i += 1;
        }
        assert_eq!(order.len(), n as usize, "the tree spans every member");
        let depth = level.iter().copied().max().unwrap_or(0);
        TreePlan { n, bytes, depth, parent, slot, level, children }
    }

    pub fn parent(&self, m: u32) -> Option<u32> {
        (self.parent[m as usize] != u32::MAX).then(|| self.parent[m as usize])
    }

    pub fn children(&self, m: u32) -> &[u32] {
        &self.children[m as usize]
    }

    pub fn root(&self) -> u32 {
        (0..self.n).find(|&m| self.parent(m).is_none()).unwrap_or(0)
    }
}

impl Plan for TreePlan {
    fn members(&self) -> u32 {
        self.n
    }

    fn stages(&self) -> u32 {
        4 * self.depth
    }

    fn stage(&self, m: u32, s: u32) -> Stage {
        let (dd, mu) = (self.depth, m as usize);
        let reduce = s < 2 * dd;
        // The edge level d (child depth) and slot k of this stage.
        let (d, k) = if reduce { (dd - s / 2, s % 2) } else { ((s - 2 * dd) / 2 + 1, s % 2) };
        let me = self.level[mu];
        if me == d && self.slot[mu] == k && self.parent[mu] != u32::MAX {
            let p = self.parent[mu];
            return if reduce { Stage::send(p, self.bytes) } else { Stage::recv(p, false) };
        }
        if me + 1 == d {
            if let Some(&c) = self.children[mu].get(k as usize) {
                return if reduce { Stage::recv(c, true) } else { Stage::send(c, self.bytes) };
            }
        }
        Stage::default()
    }
}

/// Two exchanges run together; a member finishes when it finished both,
/// and keeps at most one transfer in flight (later ones queue).
pub struct Both<A: Plan, B: Plan> {
    a: Exchange<A>,
    b: Exchange<B>,
    done: Vec<u8>,
    in_flight: Vec<bool>,
    queued: Vec<VecDeque<Action>>,
    finished: u32,
    scratch: Vec<Action>,
}

impl<A: Plan, B: Plan> Both<A, B> {
    pub fn new(a: Exchange<A>, b: Exchange<B>, members: u32) -> Self {
        let n = members as usize;
        Both { a, b, done: vec![0; n], in_flight: vec![false; n], queued: vec![VecDeque::new(); n], finished: 0, scratch: Vec::new() }
    }

    /// Maps the part's actions to ours: tags interleaved, Done once both parts are done.
    fn absorb(&mut self, part: u64, out: &mut Vec<Action>) {
        let mut actions = std::mem::take(&mut self.scratch);
        for action in actions.drain(..) {
            match action {
                Action::Send { from, to, bytes, tag, step, ready, causes } => {
                    let send = Action::Send { from, to, bytes, tag: tag * 2 + part, step, ready, causes };
                    if self.in_flight[from as usize] {
                        self.queued[from as usize].push_back(send);
                    } else {
                        self.in_flight[from as usize] = true;
                        out.push(send);
                    }
                }
                Action::Wake { member, at, tag, bytes, causes } => out.push(Action::Wake { member, at, tag: tag * 2 + part, bytes, causes }),
                Action::Done { member } | Action::DoneAt { member, .. } => {
                    self.done[member as usize] += 1;
                    if self.done[member as usize] == 2 {
                        self.finished += 1;
                        out.push(Action::Done { member });
                    }
                }
            }
        }
        self.scratch = actions;
    }
}

impl<A: Plan + 'static, B: Plan + 'static> Collective for Both<A, B> {
    fn join(&mut self, now: Time, member: u32, cause: Cause, out: &mut Vec<Action>) {
        let mut scratch = std::mem::take(&mut self.scratch);
        self.a.join(now, member, cause, &mut scratch);
        self.scratch = scratch;
        self.absorb(0, out);
        let mut scratch = std::mem::take(&mut self.scratch);
        self.b.join(now, member, cause, &mut scratch);
        self.scratch = scratch;
        self.absorb(1, out);
    }

    fn delivered(&mut self, now: Time, tag: u64, cause: Cause, out: &mut Vec<Action>) {
        let (part, inner) = (tag % 2, tag / 2);
        let from = if part == 0 { self.a.sender_of(inner) } else { self.b.sender_of(inner) };
        self.in_flight[from as usize] = false;
        let mut scratch = std::mem::take(&mut self.scratch);
        if part == 0 {
            self.a.delivered(now, inner, cause, &mut scratch);
        } else {
            self.b.delivered(now, inner, cause, &mut scratch);
        }
        self.scratch = scratch;
        // The freed sender first takes a send that queued behind this one.
        if !self.in_flight[from as usize] {
            if let Some(Action::Send { from, to, bytes, tag, step, ready, mut causes }) = self.queued[from as usize].pop_front() {
                // It waited for this delivery: name it among its causes.
                let free = causes.iter().position(|&c| c == NO_CAUSE).unwrap_or(3);
                causes[free] = cause;
                self.in_flight[from as usize] = true;
                out.push(Action::Send { from, to, bytes, tag, step, ready, causes });
            }
        }
        self.absorb(part, out);
    }

    fn woke(&mut self, now: Time, member: u32, tag: u64, cause: Cause, out: &mut Vec<Action>) {
        let (part, inner) = (tag % 2, tag / 2);
        let mut scratch = std::mem::take(&mut self.scratch);
        if part == 0 {
            self.a.woke(now, member, inner, cause, &mut scratch);
        } else {
            self.b.woke(now, member, inner, cause, &mut scratch);
        }
        self.scratch = scratch;
        self.absorb(part, out);
    }

    fn complete(&self) -> bool {
        self.finished as usize == self.done.len()
    }

    fn waits_for_a_join(&self, member: u32) -> bool {
        self.a.waits_for_a_join(member)
    }

    fn joined(&self) -> u32 {
        self.a.joined()
    }
}

/// The double binary tree over `n` members: each tree carries half of `bytes`.
pub fn double_binary_tree(n: u32, bytes: u64, track_causes: bool, gamma_ns_per_byte: f64) -> Both<TreePlan, TreePlan> {
    let half = |t: u32| super::ring::chunk_bytes(bytes, 2, t);
    let mut a = Exchange::new(TreePlan::new(n, half(0), Shape::InOrder)).with_gamma(gamma_ns_per_byte);
    let mut b = Exchange::new(TreePlan::new(n, half(1), Shape::Second)).with_gamma(gamma_ns_per_byte);
    if track_causes {
        a = a.tracking_causes();
        b = b.tracking_causes();
    }
    Both::new(a, b, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::recursive_doubling::assert_pairs_up;

    #[test]
    fn in_order_tree_of_eight() {
        let t = TreePlan::new(8, 1, Shape::InOrder);
        assert_eq!(t.children(0), &[4]);
        assert_eq!(t.children(4), &[2, 6]);
        assert_eq!(t.children(2), &[1, 3]);
        assert_eq!(t.children(6), &[5, 7]);
        assert!([1, 3, 5, 7].iter().all(|&r| t.children(r).is_empty()));
        assert_eq!(t.stages(), 12);
    }

    #[test]
    fn trees_span_pair_up_and_leaves_of_one_are_interior_of_the_other() {
        for n in 1u32..=40 {
            for shape in [Shape::InOrder, Shape::Second] {
                let t = TreePlan::new(n, 7, shape);
                assert_pairs_up(&t, &format!("tree n={n} {shape:?}"));
                assert!(t.depth <= 32 - n.leading_zeros(), "n={n} depth {}", t.depth);
                for m in 0..n {
                    assert!(t.children(m).len() <= 2);
                    let sent: u64 = (0..t.stages()).filter_map(|s| t.stage(m, s).send).map(|x| x.1).sum();
                    let edges = t.children(m).len() as u64 + u64::from(t.parent(m).is_some());
                    assert_eq!(sent, 7 * edges, "n={n} m={m}");
                }
            }
            if n >= 3 {
                let (a, b) = (TreePlan::new(n, 1, Shape::InOrder), TreePlan::new(n, 1, Shape::Second));
                let both_leaves = (0..n).filter(|&m| a.children(m).is_empty() && b.children(m).is_empty()).count();
                assert!(both_leaves <= 1, "n={n}: {both_leaves} ranks are leaves of both trees");
            }
        }
    }
}
