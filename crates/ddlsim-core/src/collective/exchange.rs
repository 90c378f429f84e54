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
    /// True if `member` receives in `stage` (what [`Plan::stage`] says; a
    /// plan may answer faster).
    #[inline]
    fn receives(&self, member: u32, stage: u32) -> bool {
        self.stage(member, stage).recv.is_some()
    }
}

const NOT_JOINED: Time = Time::MAX;
/// No member.
const NONE: u32 = u32::MAX;

/// One member's state, kept together (one cache line pair per member on the hot path).
#[derive(Debug, Clone, Copy)]
struct Member {
    joined_at: Time,
    /// When the member's current stage became possible (its previous one ended, or it joined).
    ready_at: Time,
    /// Receipts of stages `recv_upto..recv_upto + 64`, bit i for stage `recv_upto + i`.
    recv_mask: u64,
    send_cause: Cause,
    prev_causes: [Cause; 2],
    /// The row of the current stage's reduction (NO_CAUSE when steps are not logged).
    reduce_cause: Cause,
    /// `plan.stage(m, stage)` (computed once per stage).
    current: Stage,
    stage: u32,
    /// Every stage below this one is received (or receives nothing).
    recv_upto: u32,
    sent: bool,
    send_done: bool,
    /// Reducing its current stage's receipt (a wake-up is due).
    reducing: bool,
    /// Its current stage's receipt is reduced.
    reduced: bool,
}

pub struct Exchange<P: Plan> {
    plan: P,
    stages: u32,
    members: Vec<Member>,
    /// Recv row of (member, stage), kept only when causes are tracked.
    recv_cause: Vec<Cause>,
    /// Members whose current send waits for this member to join.
    /// The first of them (NONE: none; a ring member has one sender), the others in `blocked_on`.
    blocked_first: Vec<u32>,
    blocked_on: Vec<Vec<u32>>,
    /// Spare list swapped with a `blocked_on` entry while it is woken (no allocation per wake-up).
    spare_blocked: Vec<u32>,
    joined: u32,
    finished: u32,
    /// Reduction cost per byte received in a `reduce` stage (MG-WFBP's gamma).
    gamma_ns_per_byte: f64,
}

impl<P: Plan> Exchange<P> {
    pub fn new(plan: P) -> Self {
        let n = plan.members();
        let stages = plan.stages();
        let members = (0..n)
            .map(|m| Member {
                joined_at: NOT_JOINED,
                ready_at: 0,
                recv_mask: 0,
                send_cause: NO_CAUSE,
                prev_causes: [NO_CAUSE; 2],
                reduce_cause: NO_CAUSE,
                current: if stages == 0 { Stage::default() } else { plan.stage(m, 0) },
                stage: 0,
                recv_upto: 0,
                sent: false,
                send_done: false,
                reducing: false,
                reduced: false,
            })
            .collect();
        Exchange {
            plan,
            stages,
            members,
            recv_cause: Vec::new(),
            blocked_first: vec![NONE; n as usize],
            blocked_on: vec![Vec::new(); n as usize],
            spare_blocked: Vec::new(),
            joined: 0,
            finished: 0,
            gamma_ns_per_byte: 0.0,
        }
    }

    /// Charges `gamma_ns_per_byte` for every byte a member reduces.
    pub fn with_gamma(mut self, gamma_ns_per_byte: f64) -> Self {
        self.gamma_ns_per_byte = gamma_ns_per_byte;
        self
    }

    /// The member that sent transfer `tag`.
    #[inline]
    pub fn sender_of(&self, tag: u64) -> u32 {
        (tag >> 32) as u32
    }

    pub fn plan(&self) -> &P {
        &self.plan
    }

    /// Advances `recv_upto` over stages already received or with nothing to receive.
    #[inline]
    fn normalize(&mut self, m: u32) {
        let me = &mut self.members[m as usize];
        while me.recv_upto < self.stages && (me.recv_mask & 1 != 0 || !self.plan.receives(m, me.recv_upto)) {
            me.recv_mask >>= 1;
            me.recv_upto += 1;
        }
    }

    fn mark_received(&mut self, m: u32, s: u32, cause: Cause) {
        let mu = m as usize;
        let me = &mut self.members[mu];
        let offset = s - me.recv_upto;
        assert!(offset < 64, "collective plan receives more than 63 stages out of order");
        me.recv_mask |= 1 << offset;
        if !self.recv_cause.is_empty() {
            self.recv_cause[mu * self.stages as usize + s as usize] = cause;
        }
        self.normalize(m);
    }

    /// Sends member `m`'s stage-`s` transfer (`to`, `bytes`) if its receiver
    /// has reached stage `s`; else waits for it. Called only once every
    /// member has joined, for a current stage not sent yet. True if sent.
    #[inline(always)]
    fn try_send(&mut self, m: u32, s: u32, to: u32, bytes: u64, out: &mut Vec<Action>) -> bool {
        let tu = to as usize;
        let peer = &self.members[tu];
        if peer.stage < s {
            if self.blocked_first[tu] == NONE {
                self.blocked_first[tu] = m;
            } else {
                self.blocked_on[tu].push(m);
            }
            return false;
        }
        let peer_ready = peer.ready_at;
        let peer_causes = peer.prev_causes;
        let me = &mut self.members[m as usize];
        let ready = me.ready_at;
        let [a, b] = me.prev_causes;
        // Waited for the receiver to post this stage: what made it get there.
        let [c, d] = if peer_ready > ready { peer_causes } else { [NO_CAUSE; 2] };
        me.sent = true;
        // The tag: the sender in the high half, the stage in the low half.
        out.push(Action::Send { from: m, to, bytes, tag: (m as u64) << 32 | s as u64, step: s, ready, causes: [a, b, c, d] });
        true
    }

    /// Completes as many stages of `m` as are done, issuing sends on the way.
    /// Inlined check first: a member whose current stage still waits for its
    /// send's delivery or for its receipt has nothing to do.
    #[inline(always)]
    fn advance(&mut self, now: Time, m: u32, out: &mut Vec<Action>) {
        if self.joined < self.plan.members() {
            return;
        }
        let me = &self.members[m as usize];
        if me.stage >= self.stages {
            return;
        }
        let st = &me.current;
        let send_pending = st.send.is_some() && (!me.sent || !me.send_done);
        if (st.send.is_some() && me.sent && !me.send_done) || (!send_pending && st.recv.is_some() && me.stage >= me.recv_upto) {
            return;
        }
        self.advance_stages(now, m, out)
    }

    fn advance_stages(&mut self, now: Time, m: u32, out: &mut Vec<Action>) {
        let mu = m as usize;
        loop {
            let me = &self.members[mu];
            let s = me.stage;
            if s >= self.stages {
                return;
            }
            let st = me.current;
            if let Some((to, bytes)) = st.send {
                if !me.sent && !self.try_send(m, s, to, bytes, out) {
                    return;
                }
                if !self.members[mu].send_done {
                    return;
                }
            }
            // Stages below recv_upto are received (normalized at every receipt and stage change).
            if st.recv.is_some() && s >= self.members[mu].recv_upto {
                return;
            }
            // A reduction costs time only at a positive gamma (see `reduce_ns`).
            if st.reduce && !self.members[mu].reduced && self.gamma_ns_per_byte > 0.0 && self.reducing(now, m, s, st, out) {
                return;
            }
            if self.recv_cause.is_empty() {
                // Causes are not tracked (steps are not logged): no one reads them.
            } else {
                let me = &self.members[mu];
                let prev = if me.reduced && me.reduce_cause != NO_CAUSE {
                    [me.reduce_cause, NO_CAUSE] // the reduction waited for the stage's receipt and send
                } else {
                    self.stage_causes(m, s, st)
                };
                self.members[mu].prev_causes = prev;
            }
            let next = if s + 1 < self.stages { self.plan.stage(m, s + 1) } else { Stage::default() };
            let me = &mut self.members[mu];
            me.stage = s + 1;
            me.current = next;
            me.sent = false;
            me.send_done = false;
            me.reducing = false;
            me.reduced = false;
            me.ready_at = now;
            if s + 1 == self.stages {
                self.finished += 1;
                out.push(Action::Done { member: m });
            }
            if self.blocked_first[mu] != NONE {
                self.wake_blocked_on(now, m, out);
            }
            if s + 1 == self.stages {
                return;
            }
        }
    }

    /// Member `m` must reduce its stage-`s` receipt before the stage ends:
    /// true (and the wake-up asked for, once) while it costs time.
    #[cold]
    #[inline(never)]
    fn reducing(&mut self, now: Time, m: u32, s: u32, st: Stage, out: &mut Vec<Action>) -> bool {
        let mu = m as usize;
        let from = st.recv.expect("a reduce stage receives");
        let bytes = self.plan.stage(from, s).send.map_or(0, |(_, b)| b);
        let cost = reduce_ns(bytes, self.gamma_ns_per_byte);
        if cost == 0 {
            return false;
        }
        if !self.members[mu].reducing {
            self.members[mu].reducing = true;
            let causes = self.stage_causes(m, s, st);
            out.push(Action::Wake { member: m, at: now.saturating_add(cost), tag: 0, bytes, causes });
        }
        true
    }

    /// What member `m`'s stage `s` waited for: its receipt and its send (else what came before).
    #[inline]
    fn stage_causes(&self, m: u32, s: u32, st: Stage) -> [Cause; 2] {
        let mu = m as usize;
        let me = &self.members[mu];
        let [mut a, mut b] = me.prev_causes;
        if st.recv.is_some() && !self.recv_cause.is_empty() {
            a = self.recv_cause[mu * self.stages as usize + s as usize];
        }
        if st.send.is_some() {
            b = me.send_cause;
        }
        [a, b]
    }

    /// [`Exchange::advance`] of a member that was waiting for its receiver
    /// (called while every member has joined). A member whose current stage
    /// has a send not made yet can only make it (or wait again): after a send
    /// its stage waits for the delivery, so the stage loop would stop there.
    #[inline(always)]
    fn wake(&mut self, now: Time, w: u32, out: &mut Vec<Action>) {
        let me = &self.members[w as usize];
        let s = me.stage;
        if s < self.stages && !me.sent {
            if let Some((to, bytes)) = me.current.send {
                self.try_send(w, s, to, bytes, out);
                return;
            }
        }
        self.advance(now, w, out);
    }

    /// `m` reached a new stage or joined: senders waiting for it may go.
    #[inline]
    fn wake_blocked_on(&mut self, now: Time, m: u32, out: &mut Vec<Action>) {
        let first = std::mem::replace(&mut self.blocked_first[m as usize], NONE);
        if first == NONE {
            return;
        }
        // Those blocked from now on wait for the next wake-up (in the order they blocked).
        let mut waiting = if self.blocked_on[m as usize].is_empty() {
            Vec::new()
        } else {
            std::mem::replace(&mut self.blocked_on[m as usize], std::mem::take(&mut self.spare_blocked))
        };
        self.wake(now, first, out);
        for &w in &waiting {
            self.wake(now, w, out);
        }
        if waiting.capacity() > 0 {
            waiting.clear();
            self.spare_blocked = waiting;
        }
    }
}

impl<P: Plan + 'static> Collective for Exchange<P> {
    fn join(&mut self, now: Time, member: u32, cause: Cause, out: &mut Vec<Action>) {
        let me = &mut self.members[member as usize];
        debug_assert_eq!(me.joined_at, NOT_JOINED, "member joined twice");
        me.joined_at = now;
        me.ready_at = now;
        me.prev_causes = [cause, NO_CAUSE];
        if self.stages == 0 {
            self.finished += 1;
            out.push(Action::Done { member });
            return;
        }
        self.joined += 1;
        if self.joined == self.plan.members() {
            // Launched: every member waited for this join (no send has happened, so slot 1 is free).
            for me in self.members.iter_mut() {
                me.prev_causes[1] = cause;
                me.ready_at = now;
            }
            // From here on `recv_upto` is kept normalized (at every receipt).
            for m in 0..self.plan.members() {
                self.normalize(m);
            }
            for m in 0..self.plan.members() {
                self.advance(now, m, out);
            }
        }
    }

    fn delivered(&mut self, now: Time, tag: u64, cause: Cause, out: &mut Vec<Action>) {
        let from = self.sender_of(tag);
        let s = tag as u32;
        let sender = &mut self.members[from as usize];
        debug_assert_eq!(sender.stage, s, "a member sends only in its current stage");
        let (to, _) = sender.current.send.expect("a delivered stage has a send");
        sender.send_done = true;
        sender.send_cause = cause;
        self.mark_received(to, s, cause);
        self.advance(now, from, out);
        if to != from {
            self.advance(now, to, out);
        }
    }

    fn woke(&mut self, now: Time, member: u32, _tag: u64, cause: Cause, out: &mut Vec<Action>) {
        let me = &mut self.members[member as usize];
        debug_assert!(me.reducing, "a wake-up without a reduction");
        me.reducing = false;
        me.reduced = true;
        me.reduce_cause = cause;
        self.advance(now, member, out);
    }

    fn complete(&self) -> bool {
        self.finished == self.plan.members()
    }

    fn joined(&self) -> u32 {
        self.joined
    }

    fn waits_for_a_join(&self, member: u32) -> bool {
        self.joined < self.plan.members() && self.members[member as usize].joined_at != NOT_JOINED
    }

    fn at_message_boundary(&self, member: u32) -> bool {
        let me = &self.members[member as usize];
        let s = me.stage;
        s < self.stages && !me.sent && !me.reducing && self.plan.starts_message(s)
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
