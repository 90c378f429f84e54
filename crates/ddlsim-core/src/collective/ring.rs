//! Ring all-reduce: N-1 reduce-scatter steps then N-1 all-gather steps;
//! in step s every member sends one chunk (about M/N bytes) to its
//! successor and receives one from its predecessor.

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
}

impl RingPlan {
    pub fn new(n: u32, bytes: u64) -> Self {
        RingPlan { n, bytes }
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
}

impl Plan for RingPlan {
    fn members(&self) -> u32 {
        self.n
    }

    fn stages(&self) -> u32 {
        2 * (self.n - 1)
    }

    fn stage(&self, i: u32, step: u32) -> Stage {
        let n = self.n;
        Stage {
            send: Some(((i + 1) % n, chunk_bytes(self.bytes, n, self.chunk_of(i, step)))),
            recv: Some((i + n - 1) % n),
        }
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
}
