//! Recursive halving-doubling all-reduce (Rabenseifner; Thakur et al.,
//! "Optimization of collective communication operations in MPICH", 2005).
//!
//! With p = 2^k members: k reduce-scatter stages by recursive halving (in
//! stage j a member exchanges half of its current segment with the member
//! whose index differs in bit k-1-j, keeping the half its bit selects),
//! then k all-gather stages by recursive doubling in the reverse order.
//! Idle-network cost: 2 log2(p) alpha + 2 (p-1)/p M beta.
//!
//! Any other N (as MPICH does): with p the largest power of two below N
//! and r = N - p, the first 2r members pair up; each even one sends its
//! whole vector to the odd one above it (stage 0), sits out the power-of-
//! two algorithm, and receives the result back in the last stage. This
//! adds 2 (alpha + M beta).

use super::exchange::{Plan, Stage};

pub struct HalvingDoublingPlan {
    n: u32,
    bytes: u64,
    /// Largest power of two <= n, its log2, and r = n - p.
    p: u32,
    k: u32,
    r: u32,
}

impl HalvingDoublingPlan {
    pub fn new(n: u32, bytes: u64) -> Self {
        let k = 31 - n.max(1).leading_zeros();
        let p = 1u32 << k;
        HalvingDoublingPlan { n, bytes, p, k, r: n - p }
    }

    fn extra(&self) -> u32 {
        u32::from(self.r > 0)
    }

    /// Index among the p core members, or None for an even member of the first 2r.
    fn core_index(&self, m: u32) -> Option<u32> {
        if m < 2 * self.r {
            (m % 2 == 1).then_some(m / 2)
        } else {
            Some(m - self.r)
        }
    }

    fn member_of_core(&self, v: u32) -> u32 {
        if v < self.r {
            2 * v + 1
        } else {
            v + self.r
        }
    }

    /// Bytes of the blocks [lo, hi) when M is cut into p blocks, the first M mod p one byte larger.
    fn segment_bytes(&self, lo: u32, hi: u32) -> u64 {
        let (p, m) = (self.p as u64, self.bytes);
        let (q, rem) = (m / p, m % p);
        let (lo, hi) = (lo as u64, hi as u64);
        (hi - lo) * q + hi.min(rem).saturating_sub(lo.min(rem))
    }

    /// Segment of blocks core member v holds after `j` halving stages.
    fn segment(&self, v: u32, j: u32) -> (u32, u32) {
        // v's bits, from the top, select the half kept at each halving.
        let mut lo = 0;
        for i in 0..j {
            let bit = self.k - 1 - i;
            if v >> bit & 1 == 1 {
                lo += self.p >> (i + 1);
            }
        }
        (lo, lo + (self.p >> j))
    }
}

impl Plan for HalvingDoublingPlan {
    fn members(&self) -> u32 {
        self.n
    }

    fn stages(&self) -> u32 {
        2 * self.k + 2 * self.extra()
    }

    fn stage(&self, m: u32, s: u32) -> Stage {
        let e = self.extra();
        let last = self.stages() - 1;
        if e == 1 && (s == 0 || s == last) {
            if m >= 2 * self.r {
                return Stage::default();
            }
            let whole = self.bytes;
            let even = m % 2 == 0;
            return match (s == 0, even) {
                (true, true) => Stage::send(m + 1, whole),
                (true, false) => Stage::recv(m - 1, true),
                (false, true) => Stage::recv(m + 1, false),
                (false, false) => Stage::send(m - 1, whole),
            };
        }
        let Some(v) = self.core_index(m) else { return Stage::default() };
        let j = s - e;
        let (partner, bytes) = if j < self.k {
            // Halving: send the half of the current segment the partner keeps.
            let bit = self.k - 1 - j;
            let partner = v ^ (1 << bit);
            let (lo, hi) = self.segment(partner, j + 1);
            (partner, self.segment_bytes(lo, hi))
        } else {
            // Doubling, reverse order: send the whole segment held now.
            let i = j - self.k;
            let bit = i;
            let partner = v ^ (1 << bit);
            let (lo, hi) = self.segment(v, self.k - i);
            (partner, self.segment_bytes(lo, hi))
        };
        let peer = self.member_of_core(partner);
        Stage::exchange(peer, bytes, peer, j < self.k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_member_ends_up_sending_2_p_minus_1_over_p_of_m_in_the_core() {
        for n in [2u32, 4, 8, 16] {
            let plan = HalvingDoublingPlan::new(n, 1000 * n as u64);
            for m in 0..n {
                let sent: u64 = (0..plan.stages()).filter_map(|s| plan.stage(m, s).send).map(|(_, b)| b).sum();
                assert_eq!(sent, 2 * (n as u64 - 1) * 1000, "n={n} m={m}");
            }
        }
    }

    #[test]
    fn sends_and_receives_pair_up_stage_by_stage() {
        for n in 1u32..=13 {
            let plan = HalvingDoublingPlan::new(n, 12345);
            for s in 0..plan.stages() {
                for m in 0..n {
                    if let Some((to, bytes)) = plan.stage(m, s).send {
                        assert_eq!(plan.stage(to, s).recv, Some(m), "n={n} s={s} m={m}");
                        assert!(bytes > 0);
                    }
                    if let Some(from) = plan.stage(m, s).recv {
                        assert_eq!(plan.stage(from, s).send.map(|x| x.0), Some(m), "n={n} s={s} m={m}");
                    }
                }
            }
        }
    }

    #[test]
    fn halving_segments_partition_the_blocks() {
        let plan = HalvingDoublingPlan::new(8, 8000);
        let mut final_segments: Vec<(u32, u32)> = (0..8).map(|v| plan.segment(v, 3)).collect();
        final_segments.sort();
        assert_eq!(final_segments, (0..8).map(|b| (b, b + 1)).collect::<Vec<_>>());
        assert_eq!(plan.segment_bytes(0, 8), 8000);
    }
}
