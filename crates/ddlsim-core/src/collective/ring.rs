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

#[cfg(test)]
mod tests {
    use super::*;

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
