//! Recursive doubling all-reduce (Thakur, Rabenseifner and Gropp,
//! "Optimization of collective communication operations in MPICH", 2005).
//!
//! With p = 2^k members: k stages; in stage j every member exchanges its
//! whole (partially reduced) vector with the member whose index differs in
//! bit j, and reduces. Idle-network cost: log2(p) (alpha + M beta)
//! (+ log2(p) M gamma for the reduction, which the engine does not charge).
//!
//! Any other N, as MPICH does: with p the largest power of two below N and
//! r = N - p, the first 2r members pair up; each even one sends its whole
//! vector to the odd one above it (first stage), sits out the power-of-two
//! exchange, and gets the result back from it in the last stage. This adds
//! 2 (alpha + M beta): N not a power of two costs (log2(p) + 2)(alpha + M beta).

use super::exchange::{Plan, Stage};

/// The MPICH fold of N members onto a power of two p: which members take
/// part in the power-of-two core and under which index.
#[derive(Debug, Clone, Copy)]
pub struct Fold {
    pub n: u32,
    /// Largest power of two <= n, its log2, and r = n - p.
    pub p: u32,
    pub k: u32,
    pub r: u32,
}

impl Fold {
    pub fn new(n: u32) -> Self {
        let k = 31 - n.max(1).leading_zeros();
        let p = 1u32 << k;
        Fold { n, p, k, r: n - p }
    }

    /// 1 if N is not a power of two (one fold stage before and one after the core).
    pub fn extra(&self) -> u32 {
        u32::from(self.r > 0)
    }

    /// Index among the p core members, or None for an even member of the first 2r.
    pub fn core_index(&self, m: u32) -> Option<u32> {
        if m < 2 * self.r {
            (m % 2 == 1).then_some(m / 2)
        } else {
            Some(m - self.r)
        }
    }

    pub fn member_of_core(&self, v: u32) -> u32 {
        if v < self.r {
            2 * v + 1
        } else {
            v + self.r
        }
    }

    /// The fold stages (first and last of `stages`) move the whole vector
    /// between each even member of the first 2r and the odd one above it.
    /// None when `s` is a core stage.
    pub fn fold_stage(&self, m: u32, s: u32, stages: u32, whole: u64) -> Option<Stage> {
        if self.extra() == 0 || (s != 0 && s != stages - 1) {
            return None;
        }
        if m >= 2 * self.r {
            return Some(Stage::default());
        }
        let even = m % 2 == 0;
        Some(match (s == 0, even) {
            (true, true) => Stage::send(m + 1, whole),
            (true, false) => Stage::recv(m - 1, true),
            (false, true) => Stage::recv(m + 1, false),
            (false, false) => Stage::send(m - 1, whole),
        })
    }
}

pub struct RecursiveDoublingPlan {
    fold: Fold,
    bytes: u64,
}

impl RecursiveDoublingPlan {
    pub fn new(n: u32, bytes: u64) -> Self {
        RecursiveDoublingPlan { fold: Fold::new(n), bytes }
    }
}

impl Plan for RecursiveDoublingPlan {
    fn members(&self) -> u32 {
        self.fold.n
    }

    fn stages(&self) -> u32 {
        if self.fold.n <= 1 {
            return 0;
        }
        self.fold.k + 2 * self.fold.extra()
    }

    fn stage(&self, m: u32, s: u32) -> Stage {
        if let Some(st) = self.fold.fold_stage(m, s, self.stages(), self.bytes) {
            return st;
        }
        let Some(v) = self.fold.core_index(m) else { return Stage::default() };
        let j = s - self.fold.extra();
        let peer = self.fold.member_of_core(v ^ (1 << j));
        Stage::exchange(peer, self.bytes, peer, true)
    }
}

/// Sanity checks shared by the plans' unit tests: every send is matched by
/// the receiver's receive in the same stage and vice versa.
#[cfg(test)]
pub(crate) fn assert_pairs_up<P: Plan>(plan: &P, what: &str) {
    let n = plan.members();
    for s in 0..plan.stages() {
        for m in 0..n {
            if let Some((to, _)) = plan.stage(m, s).send {
                assert!(to < n && to != m, "{what}: s={s} m={m} sends to {to}");
                assert_eq!(plan.stage(to, s).recv, Some(m), "{what}: s={s} m={m} -> {to}");
            }
            if let Some(from) = plan.stage(m, s).recv {
                assert_eq!(plan.stage(from, s).send.map(|x| x.0), Some(m), "{what}: s={s} {from} -> m={m}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_up_and_sends_the_whole_vector_each_stage() {
        for n in 1u32..=17 {
            let plan = RecursiveDoublingPlan::new(n, 999);
            assert_pairs_up(&plan, &format!("rd n={n}"));
            let f = Fold::new(n);
            if n > 1 {
                assert_eq!(plan.stages(), f.k + 2 * f.extra());
            }
            for m in 0..n {
                let sent: u64 = (0..plan.stages()).filter_map(|s| plan.stage(m, s).send).map(|x| x.1).sum();
                let expected = match f.core_index(m) {
                    None => 999,
                    Some(v) if v < f.r => 999 * (f.k as u64 + 1),
                    Some(_) => 999 * f.k as u64,
                };
                assert_eq!(sent, expected, "n={n} m={m}");
            }
        }
    }
}
