//! Butterfly mixing as the network-operator paper defines it (§3.3.2,
//! after Zhao and Canny, SDM 2013): log2(W) phases; in phase j every worker
//! sends its entire model to its butterfly partner (index XOR 2^j: A-B and
//! C-D, then A-C and B-D) and averages what it receives. Traffic-wise that
//! is recursive doubling: idle-network cost log2(W) (alpha + M beta). The
//! paper's "pipelined per parameter" is the graph's business: with one
//! group per tensor every parameter is its own butterfly, started as soon
//! as its gradient is computed, so phases of different parameters overlap.
//!
//! The paper only uses powers of two. Any other W is folded as MPICH's
//! recursive doubling does (see [`super::recursive_doubling`]): two extra
//! whole-model stages, (log2(p) + 2)(alpha + M beta) with p the largest
//! power of two below W. The schedule is recursive doubling's; it has its
//! own name (and `butterfly_step` rows in the log) so that a scenario says
//! which of the two it models.

use super::exchange::{Plan, Stage};
use super::recursive_doubling::RecursiveDoublingPlan;

pub struct ButterflyPlan(RecursiveDoublingPlan);

impl ButterflyPlan {
    pub fn new(n: u32, bytes: u64) -> Self {
        ButterflyPlan(RecursiveDoublingPlan::new(n, bytes))
    }
}

impl Plan for ButterflyPlan {
    fn members(&self) -> u32 {
        self.0.members()
    }
    fn stages(&self) -> u32 {
        self.0.stages()
    }
    fn stage(&self, m: u32, s: u32) -> Stage {
        self.0.stage(m, s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_workers_pair_as_in_the_paper() {
        // A=0, B=1, C=2, D=3: A-B and C-D first, then A-C and B-D.
        let plan = ButterflyPlan::new(4, 100);
        let partners = |s| (0..4).map(|m| plan.stage(m, s).send.unwrap().0).collect::<Vec<_>>();
        assert_eq!(partners(0), vec![1, 0, 3, 2]);
        assert_eq!(partners(1), vec![2, 3, 0, 1]);
        assert!((0..4).all(|m| (0..2).all(|s| plan.stage(m, s).send.unwrap().1 == 100)));
    }
}
