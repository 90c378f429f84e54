//! Per-rank compute variation: measured per-layer time vectors that each
//! rank and iteration draws from (replay at scale), and stragglers (a rank
//! slower every iteration, or any rank slower in some iterations).
//!
//! - `compute_pool`: per-layer (forward, backward) time vectors, e.g. one per
//!   captured (rank, iteration). Rank w in iteration i uses the vector
//!   `compute_assign[w][i mod len]` when `compute_assign` is given, else a
//!   uniform draw from the pool from its own random stream
//!   ([`Purpose::ComputeSample`]), one draw per (rank, iteration): a whole
//!   vector, so the layers of one draw keep their correlation. An empty pool
//!   (the default): every rank takes the layer table's times.
//! - `stragglers`: rank `rank`'s compute takes `factor` times as long, every iteration.
//! - `transient_stragglers`: in each iteration each rank independently takes
//!   `factor` times as long with probability `probability`
//!   ([`Purpose::TransientStraggler`], one draw per rank, iteration and entry).
//!
//! The factors multiply the (jittered) duration of every forward and
//! backward op of that rank in that iteration; the stagger idle time is not scaled.
//! The fields and their checks live in `lower::spec` (the data); this file holds what they do.

use rand::Rng;
use super::spec::{ComputeVector, TrainingSpec};
use crate::rng::{stream, Purpose};

/// Whether the spec asks for any per-rank compute variation.
pub fn varies(spec: &TrainingSpec) -> bool {
    !spec.compute_pool.is_empty() || !spec.stragglers.is_empty() || !spec.transient_stragglers.is_empty()
}


/// The pool vector worker `w` uses in `iteration`, None without a pool.
pub fn vector_of(spec: &TrainingSpec, w: u32, iteration: i32) -> Option<&ComputeVector> {
    if spec.compute_pool.is_empty() {
        return None;
    }
    let index = match spec.compute_assign.get(w as usize) {
        Some(row) => row[iteration.max(0) as usize % row.len()] as usize,
        None => stream(spec.seed, Purpose::ComputeSample, w, iteration, 0).gen_range(0..spec.compute_pool.len()),
    };
    Some(&spec.compute_pool[index])
}

/// How many times slower worker `w` computes in `iteration` (1.0: not a straggler).
pub fn slowdown(spec: &TrainingSpec, w: u32, iteration: i32) -> f64 {
    let mut factor: f64 = spec.stragglers.iter().filter(|s| s.rank == w).map(|s| s.factor).product();
    for (j, t) in spec.transient_stragglers.iter().enumerate() {
        if t.probability > 0.0 && stream(spec.seed, Purpose::TransientStraggler, w, iteration, j as u64).gen::<f64>() < t.probability {
            factor *= t.factor;
        }
    }
    factor
}

/// `ns` scaled by `factor` (rounded), unchanged at 1.
pub fn scaled(ns: u64, factor: f64) -> u64 {
    if factor == 1.0 {
        ns
    } else {
        ((ns as f64) * factor).round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lower::spec::{AlgorithmName, LayerSpec, Straggler, SyncSpec, TransientStraggler};

    fn spec(workers: u32) -> TrainingSpec {
        let layers = (0..2).map(|_| LayerSpec { fwd_ns: 10, bwd_ns: 20 }).collect();
        TrainingSpec::new(workers, SyncSpec::Allreduce { algorithm: AlgorithmName::Ring }, layers, vec![])
    }

    #[test]
    fn transient_stragglers_hit_about_p_of_rank_iterations_and_persistent_ones_always() {
        let mut s = spec(64);
        s.seed = 3;
        s.stragglers = vec![Straggler { rank: 5, factor: 2.0 }];
        s.transient_stragglers = vec![TransientStraggler { probability: 0.25, factor: 3.0 }];
        let (mut slow, mut total) = (0, 0);
        for it in 0..200 {
            for w in 0..64 {
                let f = slowdown(&s, w, it);
                let persistent = if w == 5 { 2.0 } else { 1.0 };
                assert!(f == persistent || f == persistent * 3.0, "factor {f}");
                slow += usize::from(f != persistent);
                total += 1;
            }
        }
        // binomial(12800, 0.25): sd = 49; 5 sd either side
        assert!((slow as f64 - 0.25 * total as f64).abs() < 245.0, "{slow} of {total}");
    }

    #[test]
    fn assigned_vectors_cycle_over_iterations_and_drawn_ones_cover_the_pool() {
        let mut s = spec(2);
        s.compute_pool = (0..3).map(|i| ComputeVector { fwd_ns: vec![i; 2], bwd_ns: vec![i; 2] }).collect();
        s.compute_assign = vec![vec![2, 0], vec![1]];
        assert_eq!(vector_of(&s, 0, 0).unwrap().fwd_ns[0], 2);
        assert_eq!(vector_of(&s, 0, 3).unwrap().fwd_ns[0], 0);
        assert_eq!(vector_of(&s, 1, 7).unwrap().fwd_ns[0], 1);
        s.compute_assign.clear();
        let seen: std::collections::BTreeSet<u64> = (0..100).map(|it| vector_of(&s, 0, it).unwrap().fwd_ns[0]).collect();
        assert_eq!(seen.len(), 3);
        assert!(s.validate().is_ok());
        s.compute_pool[1].bwd_ns.pop();
        assert!(s.validate().unwrap_err().contains("compute_pool[1]"));
    }
}
