//! Ring all-reduce, lowered at run time into its 2(N-1) point-to-point
//! steps: N-1 reduce-scatter steps then N-1 all-gather steps, each member
//! sending one chunk (about M/N bytes) to its successor per step.
//!
//! A member sends step s when it has joined, its own step s-1 send was
//! delivered (one communication stream), it has received step s-1 from its
//! predecessor, and its successor has joined (rendezvous: a receiver must
//! have posted the collective). Steps are not materialised in the graph, so
//! memory grows with live collectives, not with N^2 steps.

use crate::engine::Time;

const NOT_JOINED: Time = Time::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingAction {
    /// Member `from` starts sending `step` (`bytes`) to member `from+1`;
    /// `ready` is when its own prerequisites were met.
    Send { from: u32, step: u32, bytes: u64, ready: Time },
    /// Member has sent and received everything: its part is over.
    Done { member: u32 },
}

#[derive(Debug, Clone)]
pub struct Ring {
    n: u32,
    bytes: u64,
    joined_at: Vec<Time>,
    next_send: Vec<u32>,
    sending: Vec<bool>,
    received: Vec<u32>,
    last_recv_at: Vec<Time>,
    last_send_done_at: Vec<Time>,
    /// Event-log row of the last step each member received / sent (-1 none).
    pub recv_row: Vec<i64>,
    pub send_row: Vec<i64>,
    finished: u32,
}

impl Ring {
    pub fn new(n: u32, bytes: u64) -> Self {
        let n_us = n as usize;
        Ring {
            n,
            bytes,
            joined_at: vec![NOT_JOINED; n_us],
            next_send: vec![0; n_us],
            sending: vec![false; n_us],
            received: vec![0; n_us],
            last_recv_at: vec![0; n_us],
            last_send_done_at: vec![0; n_us],
            recv_row: vec![-1; n_us],
            send_row: vec![-1; n_us],
            finished: 0,
        }
    }

    pub fn steps(&self) -> u32 {
        2 * (self.n - 1)
    }

    pub fn members(&self) -> u32 {
        self.n
    }

    /// True once every member is done.
    pub fn complete(&self) -> bool {
        self.finished == self.n
    }

    fn successor(&self, i: u32) -> u32 {
        (i + 1) % self.n
    }

    fn predecessor(&self, i: u32) -> u32 {
        (i + self.n - 1) % self.n
    }

    /// Bytes of chunk `c`: M split into N parts, the first M mod N one byte larger.
    pub fn chunk_bytes(&self, c: u32) -> u64 {
        let n = self.n as u64;
        self.bytes / n + u64::from((c as u64) < self.bytes % n)
    }

    /// The chunk member `i` sends at `step`.
    pub fn chunk_of(&self, i: u32, step: u32) -> u32 {
        let n = self.n;
        if step < n - 1 {
            (i + n - step) % n
        } else {
            (i + 1 + n - (step - (n - 1))) % n
        }
    }

    pub fn join(&mut self, now: Time, i: u32, actions: &mut Vec<RingAction>) {
        debug_assert_eq!(self.joined_at[i as usize], NOT_JOINED, "member joined twice");
        self.joined_at[i as usize] = now;
        if self.n == 1 {
            self.finished += 1;
            actions.push(RingAction::Done { member: i });
            return;
        }
        self.try_send(i, actions);
        let p = self.predecessor(i);
        if p != i {
            self.try_send(p, actions);
        }
    }

    /// The step that member `from` sent has been delivered to its successor.
    pub fn delivered(&mut self, now: Time, from: u32, actions: &mut Vec<RingAction>) {
        let to = self.successor(from);
        let f = from as usize;
        self.sending[f] = false;
        self.last_send_done_at[f] = now;
        self.received[to as usize] += 1;
        self.last_recv_at[to as usize] = now;
        self.try_send(from, actions);
        self.try_send(to, actions);
        self.check_done(from, actions);
        if to != from {
            self.check_done(to, actions);
        }
    }

    fn check_done(&mut self, i: u32, actions: &mut Vec<RingAction>) {
        let s = self.steps();
        let iu = i as usize;
        if self.next_send[iu] == s && !self.sending[iu] && self.received[iu] == s {
            // Mark so that it is reported once.
            self.next_send[iu] = s + 1;
            self.finished += 1;
            actions.push(RingAction::Done { member: i });
        }
    }

    fn try_send(&mut self, i: u32, actions: &mut Vec<RingAction>) {
        let iu = i as usize;
        let step = self.next_send[iu];
        if self.joined_at[iu] == NOT_JOINED || self.sending[iu] || step >= self.steps() {
            return;
        }
        if step > 0 && self.received[iu] < step {
            return;
        }
        if self.joined_at[self.successor(i) as usize] == NOT_JOINED {
            return;
        }
        let mut ready = self.joined_at[iu];
        if step > 0 {
            ready = ready.max(self.last_recv_at[iu]).max(self.last_send_done_at[iu]);
        }
        self.sending[iu] = true;
        self.next_send[iu] = step + 1;
        let bytes = self.chunk_bytes(self.chunk_of(i, step));
        actions.push(RingAction::Send { from: i, step, bytes, ready });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drives a ring where every transfer takes `dt` and everyone joins at 0.
    fn run_lockstep(n: u32, bytes: u64, dt: Time) -> (Time, u64, usize) {
        let mut ring = Ring::new(n, bytes);
        let mut actions = Vec::new();
        for i in 0..n {
            ring.join(0, i, &mut actions);
        }
        let mut now = 0;
        let mut sent = 0u64;
        let mut done = 0usize;
        while !actions.is_empty() {
            let batch: Vec<_> = std::mem::take(&mut actions);
            let mut in_flight = Vec::new();
            for a in batch {
                match a {
                    RingAction::Send { from, bytes, .. } => {
                        sent += bytes;
                        in_flight.push(from);
                    }
                    RingAction::Done { .. } => done += 1,
                }
            }
            if in_flight.is_empty() {
                continue;
            }
            now += dt;
            for from in in_flight {
                ring.delivered(now, from, &mut actions);
            }
        }
        (now, sent, done)
    }

    #[test]
    fn ring_takes_two_n_minus_one_steps_and_sends_two_n_minus_one_over_n_of_m() {
        let (t, sent, done) = run_lockstep(4, 4000, 10);
        assert_eq!(t, 2 * 3 * 10);
        assert_eq!(done, 4);
        // each member sends 2(N-1) chunks of M/N
        assert_eq!(sent, 4 * 2 * 3 * 1000);
    }

    #[test]
    fn uneven_chunks_cover_the_tensor_exactly() {
        let ring = Ring::new(3, 10);
        let total: u64 = (0..3).map(|c| ring.chunk_bytes(c)).sum();
        assert_eq!(total, 10);
        assert_eq!([ring.chunk_bytes(0), ring.chunk_bytes(1), ring.chunk_bytes(2)], [4, 3, 3]);
        // In reduce-scatter each member sends every chunk but one, once.
        for i in 0..3 {
            let mut chunks: Vec<u32> = (0..2).map(|s| ring.chunk_of(i, s)).collect();
            chunks.sort();
            chunks.dedup();
            assert_eq!(chunks.len(), 2);
        }
    }

    #[test]
    fn a_single_member_is_done_on_join() {
        let mut ring = Ring::new(1, 100);
        let mut actions = Vec::new();
        ring.join(5, 0, &mut actions);
        assert_eq!(actions, vec![RingAction::Done { member: 0 }]);
        assert!(ring.complete());
    }

    #[test]
    fn nobody_sends_to_a_member_that_has_not_joined() {
        let mut ring = Ring::new(3, 300);
        let mut actions = Vec::new();
        ring.join(0, 0, &mut actions);
        assert!(actions.is_empty(), "member 1 has not joined");
        ring.join(7, 1, &mut actions);
        assert_eq!(actions, vec![RingAction::Send { from: 0, step: 0, bytes: 100, ready: 0 }]);
    }
}
