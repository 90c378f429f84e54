//! Ring all-reduce: N-1 reduce-scatter steps then N-1 all-gather steps;
//! in step s every member sends one chunk (about M/N bytes) to its
//! successor and receives one from its predecessor.
//! Idle-network cost: 2 (N-1) (alpha + M/N beta).
//!
//! Partitioning (the network-operator paper's "parameter messaging",
//! §8.2.1/§9.2): with `chunk_bytes` = c > 0 and M > c, the tensor is cut
//! evenly into S = ceil(M / c) messages (each at most c bytes, the first
//! M mod S one byte larger than the rest) and each message goes through its
//! own ring all-reduce, message after message; a member starts message q+1
//! as soon as it is done with message q (it does not wait for the others).
//! Every message boundary is a point where a preemptible stream may yield.
//! Idle-network cost: sum over messages 2 (N-1) (alpha + M_q/N beta)
//! = 2 (N-1) (S alpha + M/N beta) when every M_q/N is whole.

use super::exchange::{Plan, Stage};
use super::{Action, Cause, Collective, NO_CAUSE};
use crate::engine::Time;

/// Bytes of chunk `c` when `bytes` are split into `n` parts, the first
/// `bytes mod n` one byte larger.
pub fn chunk_bytes(bytes: u64, n: u32, c: u32) -> u64 {
    let n = n as u64;
    bytes / n + u64::from((c as u64) < bytes % n)
}

pub struct RingPlan {
    n: u32,
    bytes: u64,
    /// Number of messages S (1 without partitioning).
    messages: u32,
    /// Steps per message, 2 (N-1).
    per: u32,
    /// Unpartitioned: every chunk is `base` bytes, the first `extra` one more
    /// (`chunk_bytes(bytes, n, c)` without a division on the hot path).
    base: u64,
    extra: u64,
}

impl RingPlan {
    pub fn new(n: u32, bytes: u64) -> Self {
        Self::partitioned(n, bytes, 0)
    }

    /// A ring over messages of at most `chunk_bytes` (0: one message).
    pub fn partitioned(n: u32, bytes: u64, chunk_bytes: u64) -> Self {
        let messages = if chunk_bytes == 0 || bytes <= chunk_bytes { 1 } else { bytes.div_ceil(chunk_bytes) };
        let messages = u32::try_from(messages).expect("a collective is cut into fewer than 2^32 messages");
        let (base, extra) = if n == 0 { (0, 0) } else { (bytes / n as u64, bytes % n as u64) };
        RingPlan { n, bytes, messages, per: 2 * n.saturating_sub(1), base, extra }
    }

    pub fn messages(&self) -> u32 {
        self.messages
    }

    /// Bytes of message `q`.
    pub fn message_bytes(&self, q: u32) -> u64 {
        chunk_bytes(self.bytes, self.messages, q)
    }

    /// The chunk member `i` sends at `step`.
    #[inline(always)]
    pub fn chunk_of(&self, i: u32, step: u32) -> u32 {
        // (i + n - step) mod n, resp. (i + 1 + n - (step - (n - 1))) mod n, for
        // i < n and step < 2 (n - 1): the sum is below 2n + 1, so at most two
        // subtractions replace the division.
        let n = self.n;
        let mut x = if step < n - 1 { i + n - step } else { i + 1 + n - (step - (n - 1)) };
        if x >= n {
            x -= n;
        }
        if x >= n {
            x -= n;
        }
        x
    }

    /// (i + d) mod n for i < n and d <= n.
    #[inline(always)]
    fn wrap(&self, x: u32) -> u32 {
        if x >= self.n {
            x - self.n
        } else {
            x
        }
    }
}

impl Plan for RingPlan {
    fn members(&self) -> u32 {
        self.n
    }

    fn stages(&self) -> u32 {
        self.per * self.messages
    }

    fn starts_message(&self, stage: u32) -> bool {
        stage % self.per == 0
    }

    #[inline(always)]
    fn stage(&self, i: u32, stage: u32) -> Stage {
        let n = self.n;
        let (to, from) = (self.wrap(i + 1), self.wrap(i + n - 1));
        if self.messages == 1 {
            let c = self.chunk_of(i, stage) as u64;
            return Stage::exchange(to, self.base + u64::from(c < self.extra), from, stage < n - 1);
        }
        let (q, step) = (stage / self.per, stage % self.per);
        Stage::exchange(to, chunk_bytes(self.message_bytes(q), n, self.chunk_of(i, step)), from, step < n - 1)
    }

    #[inline]
    fn receives(&self, _member: u32, _stage: u32) -> bool {
        true
    }
}

impl RingPlan {
    /// Bytes member `i` sends in `stage` (what [`Plan::stage`] says).
    #[inline(always)]
    fn send_bytes(&self, i: u32, stage: u32) -> u64 {
        if self.messages == 1 {
            // Evenly split (extra 0): every chunk is `base` bytes.
            return if self.extra == 0 { self.base } else { self.base + u64::from((self.chunk_of(i, stage) as u64) < self.extra) };
        }
        let (q, step) = (stage / self.per, stage % self.per);
        chunk_bytes(self.message_bytes(q), self.n, self.chunk_of(i, step))
    }
}

/// Where a [`RingMachine`] puts its actions: a list of [`Action`]s (the
/// [`Collective`] interface), or the executor's own handling of each in
/// turn ([`RingMachine::delivered_into`]).
pub trait RingSink {
    /// [`Action::Send`] of stage `step` (tag `from << 32 | step`); `meta`
    /// gives its `ready` and `causes` (asked only by a sink that needs them).
    fn send(&mut self, from: u32, to: u32, bytes: u64, step: u32, meta: impl FnOnce() -> (Time, [Cause; 4]));
    /// [`Action::Done`].
    fn done(&mut self, member: u32);
}

impl RingSink for Vec<Action> {
    #[inline(always)]
    fn send(&mut self, from: u32, to: u32, bytes: u64, step: u32, meta: impl FnOnce() -> (Time, [Cause; 4])) {
        let (ready, causes) = meta();
        self.push(Action::Send { from, to, bytes, tag: (from as u64) << 32 | step as u64, step, ready, causes });
    }
    #[inline(always)]
    fn done(&mut self, member: u32) {
        self.push(Action::Done { member });
    }
}

/// One member of a [`RingMachine`].
#[derive(Debug, Clone, Copy)]
struct RingMember {
    ready_at: Time,
    prev_causes: [Cause; 2],
    stage: u32,
    /// Stages received so far (a ring member receives from its predecessor in stage order).
    received: u32,
    sent: bool,
    send_done: bool,
    joined: bool,
    /// Its predecessor waits to send it the current stage (rendezvous).
    blocked: bool,
}

/// The ring all-reduce as a machine of its own: the same actions, in the
/// same order, as the generic exchange machine running [`RingPlan`] when
/// neither causes are tracked (steps are not logged) nor reductions cost
/// time. A ring member sends only to its successor and receives only from
/// its predecessor, stage after stage, so its state is a stage, a count of
/// receipts and two flags; no per-stage plan lookup, no receipt mask, no
/// list of blocked senders (one predecessor at most). The test
/// `ring_machine_acts_as_the_exchange_machine` drives both with random
/// joins and delivery orders and compares every action.
pub struct RingMachine {
    plan: RingPlan,
    n: u32,
    stages: u32,
    members: Vec<RingMember>,
    joined: u32,
    finished: u32,
}

impl RingMachine {
    pub fn new(plan: RingPlan) -> Self {
        let n = plan.n;
        let stages = plan.stages();
        let members = vec![
            RingMember { ready_at: 0, prev_causes: [NO_CAUSE; 2], stage: 0, received: 0, sent: false, send_done: false, joined: false, blocked: false };
            n as usize
        ];
        RingMachine { plan, n, stages, members, joined: 0, finished: 0 }
    }

    #[inline(always)]
    fn next(&self, m: u32) -> u32 {
        if m + 1 == self.n {
            0
        } else {
            m + 1
        }
    }

    /// Sends `m`'s current stage if its successor has reached it; else waits for it.
    #[inline(always)]
    fn try_send<O: RingSink>(&mut self, m: u32, out: &mut O) -> bool {
        let to = self.next(m);
        let s = self.members[m as usize].stage;
        let peer = &mut self.members[to as usize];
        if peer.stage < s {
            peer.blocked = true;
            return false;
        }
        self.members[m as usize].sent = true;
        let bytes = self.plan.send_bytes(m, s);
        let members = &self.members;
        out.send(m, to, bytes, s, || {
            let (me, peer) = (&members[m as usize], &members[to as usize]);
            let [a, b] = me.prev_causes;
            let [c, d] = if peer.ready_at > me.ready_at { peer.prev_causes } else { [NO_CAUSE; 2] };
            (me.ready_at, [a, b, c, d])
        });
        true
    }

    /// Completes as many stages of `m` as are done, sending on the way.
    #[inline(always)]
    fn advance<O: RingSink>(&mut self, now: Time, m: u32, out: &mut O) {
        // Called once every member joined (nothing is sent before).
        debug_assert_eq!(self.joined, self.n);
        let mu = m as usize;
        loop {
            let me = &self.members[mu];
            let s = me.stage;
            if s >= self.stages {
                return;
            }
            if !me.sent && !self.try_send(m, out) {
                return;
            }
            let me = &mut self.members[mu];
            if !me.send_done || s >= me.received {
                return;
            }
            me.stage = s + 1;
            me.sent = false;
            me.send_done = false;
            me.ready_at = now;
            let blocked = std::mem::replace(&mut me.blocked, false);
            if s + 1 == self.stages {
                self.finished += 1;
                out.done(m);
            }
            if blocked {
                // The predecessor waited for this stage: it can only make its send now.
                let w = if m == 0 { self.n - 1 } else { m - 1 };
                // (It blocked trying to send and cannot have moved since: a
                // member leaves a stage only after its send.)
                debug_assert!(self.members[w as usize].stage < self.stages && !self.members[w as usize].sent);
                self.try_send(w, out);
            }
            if s + 1 == self.stages {
                return;
            }
        }
    }
}

impl RingMachine {
    /// [`Collective::delivered`] with the actions handed to `out` as they come.
    #[inline(always)]
    pub fn delivered_into<O: RingSink>(&mut self, now: Time, tag: u64, out: &mut O) {
        let from = (tag >> 32) as u32;
        let s = tag as u32;
        let to = self.next(from);
        let sender = &mut self.members[from as usize];
        debug_assert_eq!(sender.stage, s, "a member sends only in its current stage");
        sender.send_done = true;
        let receiver = &mut self.members[to as usize];
        debug_assert_eq!(receiver.received, s, "a ring member receives its stages in order");
        receiver.received = s + 1;
        self.advance(now, from, out);
        if to != from {
            self.advance(now, to, out);
        }
    }
}

impl Collective for RingMachine {
    fn join(&mut self, now: Time, member: u32, cause: Cause, out: &mut Vec<Action>) {
        let me = &mut self.members[member as usize];
        debug_assert!(!me.joined, "member joined twice");
        me.joined = true;
        me.ready_at = now;
        me.prev_causes = [cause, NO_CAUSE];
        if self.stages == 0 {
            self.finished += 1;
            out.push(Action::Done { member });
            return;
        }
        self.joined += 1;
        if self.joined == self.n {
            for me in self.members.iter_mut() {
                me.prev_causes[1] = cause;
                me.ready_at = now;
            }
            for m in 0..self.n {
                self.advance(now, m, out);
            }
        }
    }

    #[inline]
    fn delivered(&mut self, now: Time, tag: u64, _cause: Cause, out: &mut Vec<Action>) {
        self.delivered_into(now, tag, out);
    }

    fn as_ring(&mut self) -> Option<&mut RingMachine> {
        Some(self)
    }

    fn into_ring(self: Box<Self>) -> Result<Box<RingMachine>, Box<dyn Collective>> {
        Ok(self)
    }

    fn complete(&self) -> bool {
        self.finished == self.n
    }

    fn joined(&self) -> u32 {
        self.joined
    }

    fn waits_for_a_join(&self, member: u32) -> bool {
        self.joined < self.n && self.members[member as usize].joined
    }

    fn at_message_boundary(&self, member: u32) -> bool {
        let me = &self.members[member as usize];
        me.stage < self.stages && !me.sent && self.plan.starts_message(me.stage)
    }

    fn starts_message(&self, step: u32) -> bool {
        self.plan.starts_message(step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both machines, driven by the same seeded script: members join in a
    /// random order at random times, then any send in flight (not only the
    /// oldest) is delivered next, at a time that never goes back. Every call
    /// must give the same actions, and the queries the executor makes the
    /// same answers.
    #[test]
    fn ring_machine_acts_as_the_exchange_machine() {
        use crate::collective::exchange::Exchange;
        let mut state: u64 = 0x51_7cc1_b727_220a;
        let mut next = move |k: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % k
        };
        let mut sends = 0u64;
        for case in 0..300 {
            let n = 1 + next(9) as u32;
            let bytes = [0, 1, 7, 1000, 4097][next(5) as usize] + next(50);
            let chunk = [0, 0, 100, 333][next(4) as usize];
            let mut generic = Exchange::new(RingPlan::partitioned(n, bytes, chunk));
            let mut own = RingMachine::new(RingPlan::partitioned(n, bytes, chunk));
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let mut now: Time = 0;
            let mut order: Vec<u32> = (0..n).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, next(i as u64 + 1) as usize);
            }
            let mut in_flight: Vec<u64> = Vec::new();
            let check = |g: &Exchange<RingPlan>, o: &RingMachine, a: &Vec<Action>, b: &Vec<Action>| {
                assert_eq!(a, b, "case {case}: n {n}, bytes {bytes}, chunk {chunk}");
                assert_eq!(g.complete(), o.complete());
                assert_eq!(g.joined(), o.joined());
                for m in 0..n {
                    assert_eq!(g.waits_for_a_join(m), o.waits_for_a_join(m), "case {case} member {m}");
                    assert_eq!(g.at_message_boundary(m), o.at_message_boundary(m), "case {case} member {m}");
                }
            };
            for (k, &m) in order.iter().enumerate() {
                now += next(3);
                let cause = 100 + k as Cause;
                generic.join(now, m, cause, &mut a);
                own.join(now, m, cause, &mut b);
                check(&generic, &own, &a, &b);
                in_flight.extend(a.iter().filter_map(|x| if let Action::Send { tag, .. } = x { Some(*tag) } else { None }));
                a.clear();
                b.clear();
            }
            while !in_flight.is_empty() {
                let tag = in_flight.swap_remove(next(in_flight.len() as u64) as usize);
                now += next(2);
                generic.delivered(now, tag, NO_CAUSE, &mut a);
                own.delivered(now, tag, NO_CAUSE, &mut b);
                check(&generic, &own, &a, &b);
                sends += 1;
                in_flight.extend(a.iter().filter_map(|x| if let Action::Send { tag, .. } = x { Some(*tag) } else { None }));
                a.clear();
                b.clear();
            }
            assert!(own.complete(), "case {case}: every member finished");
        }
        assert!(sends > 10_000, "the cases must move data ({sends} sends)");
    }

    #[test]
    fn uneven_chunks_cover_the_tensor_exactly() {
        let total: u64 = (0..3).map(|c| chunk_bytes(10, 3, c)).sum();
        assert_eq!(total, 10);
        assert_eq!([chunk_bytes(10, 3, 0), chunk_bytes(10, 3, 1), chunk_bytes(10, 3, 2)], [4, 3, 3]);
        let ring = RingPlan::new(3, 10);
        for i in 0..3 {
            let mut chunks: Vec<u32> = (0..2).map(|s| ring.chunk_of(i, s)).collect();
            chunks.sort();
            chunks.dedup();
            assert_eq!(chunks.len(), 2, "reduce-scatter sends every chunk but one, once");
        }
    }

    #[test]
    fn partitioning_cuts_evenly_and_keeps_the_unpartitioned_plan() {
        let whole = RingPlan::new(4, 1000);
        for c in [0, 1000, 5000] {
            let p = RingPlan::partitioned(4, 1000, c);
            assert_eq!(p.stages(), whole.stages());
            for s in 0..p.stages() {
                assert_eq!(p.stage(1, s), whole.stage(1, s));
            }
        }
        let p = RingPlan::partitioned(4, 1200, 350);
        assert_eq!(p.messages(), 4);
        assert_eq!((0..4).map(|q| p.message_bytes(q)).collect::<Vec<_>>(), vec![300; 4]);
        assert_eq!(p.stages(), 4 * 6);
        for i in 0..4 {
            let sent: u64 = (0..p.stages()).map(|s| p.stage(i, s).send.unwrap().1).sum();
            assert_eq!(sent, 2 * 3 * 1200 / 4);
        }
        let uneven = RingPlan::partitioned(3, 1001, 100);
        assert_eq!(uneven.messages(), 11);
        assert_eq!((0..11).map(|q| uneven.message_bytes(q)).sum::<u64>(), 1001);
        assert!((0..11).all(|q| uneven.message_bytes(q) <= 100));
    }
}
