//! A collective as a fixed schedule of exchanges: member `m` goes through
//! stages 0..S; in each it may send to one member and receive from one.
//! Stage s may start once stage s-1 is complete (its send delivered, its
//! receive arrived). Nothing moves before every member has joined (the
//! collective is launched on the whole group, as NCCL's are), and a send
//! also waits until its receiver has reached the same stage (rendezvous,
//! as MPI's protocol for large messages: data moves once the receive is
//! posted). Ring and halving-doubling are plans run by this machine.
//!
//! Plans must send stage s of member a to the member whose stage s
//! receives from a, and a member's receipts may run at most 63 stages
//! ahead of its oldest missing one (true for every plan here: a ring
//! receives from one predecessor in order; halving-doubling has at most
//! 64 stages).

use super::{Action, Cause, Collective, NO_CAUSE};
use crate::engine::Time;

/// One stage of one member: an optional send `(to, bytes)` and an optional
/// receive (from); `reduce`: the received bytes are combined into the
/// member's buffer, which costs gamma per byte before its next stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stage {
    pub send: Option<(u32, u64)>,
    pub recv: Option<u32>,
    pub reduce: bool,
}

impl Stage {
    pub fn send(to: u32, bytes: u64) -> Stage {
        Stage { send: Some((to, bytes)), ..Stage::default() }
    }
    pub fn recv(from: u32, reduce: bool) -> Stage {
        Stage { recv: Some(from), reduce, ..Stage::default() }
    }
    pub fn exchange(peer_to: u32, bytes: u64, peer_from: u32, reduce: bool) -> Stage {
        Stage { send: Some((peer_to, bytes)), recv: Some(peer_from), reduce }
    }
}

/// Nanoseconds to reduce `bytes` at `gamma_ns_per_byte`, rounded up.
pub fn reduce_ns(bytes: u64, gamma_ns_per_byte: f64) -> u64 {
    if gamma_ns_per_byte <= 0.0 || bytes == 0 {
        return 0;
    }
    (bytes as f64 * gamma_ns_per_byte).ceil() as u64
}

pub trait Plan {
    fn members(&self) -> u32;
    fn stages(&self) -> u32;
    fn stage(&self, member: u32, stage: u32) -> Stage;
    /// True if `stage` starts a message (the collective is one message unless the plan partitions it).
    fn starts_message(&self, stage: u32) -> bool {
        stage == 0
    }
}

const NOT_JOINED: Time = Time::MAX;

pub struct Exchange<P: Plan> {
    plan: P,
    stages: u32,
    joined_at: Vec<Time>,
    /// The op id behind each member's join cause.
    join_op: Vec<Cause>,
    stage: Vec<u32>,
    sent: Vec<bool>,
    send_done: Vec<bool>,
    send_cause: Vec<Cause>,
    recv_upto: Vec<u32>,
    recv_mask: Vec<u64>,
    ready_at: Vec<Time>,
    prev_causes: Vec<[Cause; 2]>,
    /// Recv row of (member, stage), kept only when causes are tracked.
    recv_cause: Vec<Cause>,
    /// Members whose current send waits for this member to join.
    blocked_on: Vec<Vec<u32>>,
    joined: u32,
    finished: u32,
    /// Reduction cost per byte received in a `reduce` stage (MG-WFBP's gamma).
    gamma_ns_per_byte: f64,
    /// The member is reducing its current stage's receipt (a wake-up is due).
    reducing: Vec<bool>,
    /// The member's current stage's receipt is reduced.
    reduced: Vec<bool>,
    /// The row of that reduction (NO_CAUSE when steps are not logged).
    reduce_cause: Vec<Cause>,
}

impl<P: Plan> Exchange<P> {
    pub fn new(plan: P) -> Self {
        let n = plan.members() as usize;
        let stages = plan.stages();
        Exchange {
            plan,
            stages,
            joined_at: vec![NOT_JOINED; n],
            join_op: vec![NO_CAUSE; n],
            stage: vec![0; n],
            sent: vec![false; n],
            send_done: vec![false; n],
            send_cause: vec![NO_CAUSE; n],
            recv_upto: vec![0; n],
            recv_mask: vec![0; n],
            ready_at: vec![0; n],
            prev_causes: vec![[NO_CAUSE; 2]; n],
            recv_cause: Vec::new(),
            blocked_on: vec![Vec::new(); n],
            joined: 0,
            finished: 0,
            gamma_ns_per_byte: 0.0,
            reducing: vec![false; n],
            reduced: vec![false; n],
            reduce_cause: vec![NO_CAUSE; n],
        }
    }

    /// Charges `gamma_ns_per_byte` for every byte a member reduces.
    pub fn with_gamma(mut self, gamma_ns_per_byte: f64) -> Self {
        self.gamma_ns_per_byte = gamma_ns_per_byte;
        self
    }

    fn tag(&self, from: u32, stage: u32) -> u64 {
        from as u64 * self.stages as u64 + stage as u64
    }

    /// The member that sent transfer `tag`.
    pub fn sender_of(&self, tag: u64) -> u32 {
        (tag / self.stages as u64) as u32
    }

    pub fn plan(&self) -> &P {
        &self.plan
    }

    fn received(&mut self, m: u32, s: u32) -> bool {
        self.normalize(m);
        s < self.recv_upto[m as usize]
    }

    /// Advances `recv_upto` over stages already received or with nothing to receive.
    fn normalize(&mut self, m: u32) {
        let mu = m as usize;
        while self.recv_upto[mu] < self.stages
            && (self.recv_mask[mu] & 1 != 0 || self.plan.stage(m, self.recv_upto[mu]).recv.is_none())
        {
            self.recv_mask[mu] >>= 1;
            self.recv_upto[mu] += 1;
        }
    }

    fn mark_received(&mut self, m: u32, s: u32, cause: Cause) {
        let mu = m as usize;
        let offset = s - self.recv_upto[mu];
        assert!(offset < 64, "collective plan receives more than 63 stages out of order");
        self.recv_mask[mu] |= 1 << offset;
        if !self.recv_cause.is_empty() {
            self.recv_cause[mu * self.stages as usize + s as usize] = cause;
        }
        self.normalize(m);
    }

    fn try_send(&mut self, m: u32, out: &mut Vec<Action>) {
        let mu = m as usize;
        let s = self.stage[mu];
        if self.joined < self.plan.members() || s >= self.stages || self.sent[mu] {
            return;
        }
        let Some((to, bytes)) = self.plan.stage(m, s).send else { return };
        let tu = to as usize;
        if self.stage[tu] < s {
            self.blocked_on[tu].push(m);
            return;
        }
        self.sent[mu] = true;
        let ready = self.ready_at[mu];
        let [a, b] = self.prev_causes[mu];
        // Waited for the receiver to post this stage: what made it get there.
        let [c, d] = if self.ready_at[tu] > ready {
            self.prev_causes[tu]
        } else {
            [NO_CAUSE; 2]
        };
        out.push(Action::Send { from: m, to, bytes, tag: self.tag(m, s), step: s, ready, causes: [a, b, c, d] });
    }

    /// Completes as many stages of `m` as are done, issuing sends on the way.
    fn advance(&mut self, now: Time, m: u32, out: &mut Vec<Action>) {
        let mu = m as usize;
        loop {
            let s = self.stage[mu];
            if self.joined < self.plan.members() || s >= self.stages {
                return;
            }
            let st = self.plan.stage(m, s);
            if st.send.is_some() && !self.sent[mu] {
                self.try_send(m, out);
                if !self.sent[mu] {
                    return;
                }
            }
            if st.send.is_some() && !self.send_done[mu] {
                return;
            }
            if st.recv.is_some() && !self.received(m, s) {
                return;
            }
            if st.reduce && !self.reduced[mu] {
                let from = st.recv.expect("a reduce stage receives");
                let bytes = self.plan.stage(from, s).send.map_or(0, |(_, b)| b);
                let cost = reduce_ns(bytes, self.gamma_ns_per_byte);
                if cost > 0 {
                    if !self.reducing[mu] {
                        self.reducing[mu] = true;
                        let causes = self.stage_causes(m, s, st);
                        out.push(Action::Wake { member: m, at: now.saturating_add(cost), tag: 0, bytes, causes });
                    }
                    return;
                }
            }
            self.prev_causes[mu] = if self.reduced[mu] && self.reduce_cause[mu] != NO_CAUSE {
                [self.reduce_cause[mu], NO_CAUSE] // the reduction waited for the stage's receipt and send
            } else {
                self.stage_causes(m, s, st)
            };
            self.stage[mu] = s + 1;
            self.sent[mu] = false;
            self.send_done[mu] = false;
            self.reducing[mu] = false;
            self.reduced[mu] = false;
            self.ready_at[mu] = now;
            if s + 1 == self.stages {
                self.finished += 1;
                out.push(Action::Done { member: m });
            }
            self.wake_blocked_on(now, m, out);
            if s + 1 == self.stages {
                return;
            }
        }
    }

    /// What member `m`'s stage `s` waited for: its receipt and its send (else what came before).
    fn stage_causes(&self, m: u32, s: u32, st: Stage) -> [Cause; 2] {
        let mu = m as usize;
        let [mut a, mut b] = self.prev_causes[mu];
        if st.recv.is_some() && !self.recv_cause.is_empty() {
            a = self.recv_cause[mu * self.stages as usize + s as usize];
        }
        if st.send.is_some() {
            b = self.send_cause[mu];
        }
        [a, b]
    }

    /// `m` reached a new stage or joined: senders waiting for it may go.
    fn wake_blocked_on(&mut self, now: Time, m: u32, out: &mut Vec<Action>) {
        if self.blocked_on[m as usize].is_empty() {
            return;
        }
        for waiting in std::mem::take(&mut self.blocked_on[m as usize]) {
            self.advance(now, waiting, out);
        }
    }
}

impl<P: Plan> Collective for Exchange<P> {
    fn join(&mut self, now: Time, member: u32, cause: Cause, out: &mut Vec<Action>) {
        let mu = member as usize;
        debug_assert_eq!(self.joined_at[mu], NOT_JOINED, "member joined twice");
        self.joined_at[mu] = now;
        self.join_op[mu] = cause;
        self.ready_at[mu] = now;
        self.prev_causes[mu] = [cause, NO_CAUSE];
        if self.stages == 0 {
            self.finished += 1;
            out.push(Action::Done { member });
            return;
        }
        self.joined += 1;
        if self.joined == self.plan.members() {
            // Launched: every member waited for this join (no send has happened, so slot 1 is free).
            for m in 0..self.plan.members() as usize {
                self.prev_causes[m][1] = cause;
                self.ready_at[m] = now;
            }
            for m in 0..self.plan.members() {
                self.advance(now, m, out);
            }
        }
    }

    fn delivered(&mut self, now: Time, tag: u64, cause: Cause, out: &mut Vec<Action>) {
        let from = (tag / self.stages as u64) as u32;
        let s = (tag % self.stages as u64) as u32;
        let (to, _) = self.plan.stage(from, s).send.expect("a delivered stage has a send");
        debug_assert_eq!(self.stage[from as usize], s, "a member sends only in its current stage");
        self.send_done[from as usize] = true;
        self.send_cause[from as usize] = cause;
        self.mark_received(to, s, cause);
        self.advance(now, from, out);
        if to != from {
            self.advance(now, to, out);
        }
    }

    fn woke(&mut self, now: Time, member: u32, _tag: u64, cause: Cause, out: &mut Vec<Action>) {
        let mu = member as usize;
        debug_assert!(self.reducing[mu], "a wake-up without a reduction");
        self.reducing[mu] = false;
        self.reduced[mu] = true;
        self.reduce_cause[mu] = cause;
        self.advance(now, member, out);
    }

    fn complete(&self) -> bool {
        self.finished == self.plan.members()
    }

    fn joined(&self) -> u32 {
        self.joined
    }

    fn waits_for_a_join(&self, member: u32) -> bool {
        self.joined < self.plan.members() && self.joined_at[member as usize] != NOT_JOINED
    }

    fn at_message_boundary(&self, member: u32) -> bool {
        let mu = member as usize;
        let s = self.stage[mu];
        s < self.stages && !self.sent[mu] && !self.reducing[mu] && self.plan.starts_message(s)
    }

    fn starts_message(&self, step: u32) -> bool {
        self.plan.starts_message(step)
    }
}

impl<P: Plan> Exchange<P> {
    /// Keeps the recv row of every (member, stage) so sends can name them as causes.
    pub fn tracking_causes(mut self) -> Self {
        self.recv_cause = vec![NO_CAUSE; self.plan.members() as usize * self.stages as usize];
        self
    }
}
