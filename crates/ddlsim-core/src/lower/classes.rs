//! Rank classes: ranks that behave alike are simulated once.
//!
//! In the closed-form collective model (see
//! [`crate::collective::closed_form`]) a rank's timeline depends only on its
//! own compute, on when each collective launches (when its last member
//! joined) and on its own finish offset in each collective. When every
//! worker has the same compute (no jitter, no stagger, no per-rank
//! variation) and takes part in every all-reduce, two workers whose finish
//! offsets are equal in every collective of the run have the same timeline:
//! they join every collective at the same time, so the launch times (the
//! latest join) are the same whether every worker or one worker per class
//! is simulated. [`rank_classes`] partitions the workers by their offsets
//! (all the run's distinct collective sizes, the real link cost), and the
//! training lowering then builds one worker per class, its *representative*
//! (the class's lowest rank).
//!
//! What the class run logs is exactly the representatives' rows of the
//! per-rank run: ops carry the id they would have there
//! ([`RankClasses::full_id`], applied by [`expand_output`]), and the
//! per-rank byte counts are those of every rank (each collective's closed
//! form counts every member's bytes). `class_size` of a row and the strides
//! turn it back into the per-rank log (`ddlsim.trace.classes.expand`).

use std::collections::HashMap;

use super::spec::{AlgorithmName, CollectiveModel, InNetworkMode, SyncSpec, TrainingSpec};
use super::training::partitions;
use crate::algorithm::LinkCost;
use crate::collective::{closed_form, Params};
use crate::executor::RunOutput;
pub use crate::graph::RankClasses;
use crate::graph::{CollectiveSpec, CollectiveType, Graph};

// The data (`RankClasses`) lives in `graph` beside the graph that carries it; what it does is here.

impl RankClasses {
    /// What a class graph's collective (`spec`, one member per class) needs:
    /// the whole collective's parameters and its size.
    pub fn params(&self, spec: &CollectiveSpec, host_of_rank: &[u32]) -> Params {
        let full = CollectiveSpec { members: (0..self.workers).collect(), ..spec.clone() };
        Params { full_members: self.workers, ..Params::for_spec(&full, host_of_rank) }
    }
}

/// Whether the training can run as rank classes: all-reduce in the
/// closed-form model, every worker alike (no jitter or stagger), no
/// servers, nothing in the network.
pub fn eligible(spec: &TrainingSpec) -> bool {
    spec.rank_classes
        && spec.collective_model == CollectiveModel::ClosedForm
        // Hierarchical ring and direct count a member's bytes by walking its O(n) stages: at scale
        // that walk, not the run, would cost O(n^2) per all-reduce, so they stay per rank (where the
        // size estimate sees their cost).
        && matches!(spec.sync, SyncSpec::Allreduce { algorithm } if !matches!(algorithm, AlgorithmName::HierarchicalRing | AlgorithmName::Direct))
        && spec.in_network.mode == InNetworkMode::None
        && spec.jitter == 0.0
        && spec.stagger_ns == 0
        && !spec.preemption
        && spec.credit_bytes == 0
        && spec.workers > 1
        // per-rank compute (sampled replay, stragglers) makes workers differ
        && !super::variation::varies(spec)
}

/// The workers' classes under `cost`, or None when the training is not
/// [`eligible`] or no two workers are alike (then the per-rank run is as small).
pub fn rank_classes(spec: &TrainingSpec, cost: &LinkCost) -> Option<RankClasses> {
    if !eligible(spec) {
        return None;
    }
    let SyncSpec::Allreduce { algorithm } = spec.sync else { return None };
    let n = spec.workers;
    let full = CollectiveSpec {
        algorithm: algorithm.algorithm(),
        coll_type: CollectiveType::AllReduce,
        members: (0..n).collect(),
        bytes: 0,
        chunk_bytes: spec.chunk_bytes,
        gamma_ns_per_byte: spec.gamma_ns_per_byte,
    };
    let params = Params::for_spec(&full, &spec.host_of_rank);
    let mut sizes: Vec<u64> = spec.groups.iter().flat_map(|g| partitions(g.bytes, spec.partition_bytes)).collect();
    sizes.sort_unstable();
    sizes.dedup();
    // Partition refinement: split classes by each size's finish offsets.
    let mut class_of = vec![0u32; n as usize];
    let mut classes = 1usize;
    for bytes in sizes {
        let offsets = closed_form::finish_offsets(full.algorithm, n, bytes, &params, cost);
        if offsets.iter().all(|&o| o == offsets[0]) {
            continue;
        }
        let mut ids: HashMap<(u32, u64), u32> = HashMap::new();
        for (c, &o) in class_of.iter_mut().zip(&offsets) {
            let next = ids.len() as u32;
            *c = *ids.entry((*c, o)).or_insert(next);
        }
        classes = ids.len();
        if classes == n as usize {
            return None;
        }
    }
    let mut representatives = vec![u32::MAX; classes];
    let mut counts = vec![0u32; classes];
    for (w, &c) in class_of.iter().enumerate() {
        if representatives[c as usize] == u32::MAX {
            representatives[c as usize] = w as u32;
        }
        counts[c as usize] += 1;
    }
    Some(RankClasses { workers: n, class_of, representatives, sizes: counts, ..Default::default() })
}

/// Turns a class run's output into the per-rank run's view: log ids and
/// dependencies as in the per-rank graph, and every rank's byte counts
/// (each collective's closed-form bytes of all its members).
pub fn expand_output(out: &mut RunOutput, graph: &Graph) {
    let Some(classes) = &graph.rank_classes else { return };
    let map = |id: i64| -> i64 {
        if id >= 0 && (id as usize) < classes.full_id.len() {
            classes.full_id[id as usize] as i64
        } else {
            id
        }
    };
    for id in out.log.id.iter_mut() {
        *id = map(*id);
    }
    for d in out.log.deps.iter_mut() {
        *d = map(*d);
    }
    let ranks = out.bytes_sent.len().max(classes.workers as usize);
    let (mut sent, mut received) = (vec![0u64; ranks], vec![0u64; ranks]);
    // Each collective of the class graph ran once (a run that ends early is an error).
    let mut memo: HashMap<u64, (Vec<u64>, Vec<u64>)> = HashMap::new();
    let linear = graph.collectives.first().and_then(|c| closed_form::linear_parts(c.algorithm, classes.workers));
    for spec in &graph.collectives {
        let mut full = spec.clone();
        full.members = (0..classes.workers).collect();
        let params = Params::for_spec(&full, &graph.host_of_rank);
        let (s, r) = memo.entry(spec.bytes).or_insert_with(|| match &linear {
            Some(parts) => closed_form::member_bytes_of_parts(parts, full.bytes),
            None => closed_form::member_bytes(full.algorithm, classes.workers, full.bytes, &params),
        });
        for w in 0..classes.workers as usize {
            sent[w] = sent[w].saturating_add(s[w]);
            received[w] = received[w].saturating_add(r[w]);
        }
    }
    out.bytes_sent = sent;
    out.bytes_received = received;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lower::spec::{GroupSpec, LayerSpec};

    fn spec(workers: u32, algorithm: AlgorithmName) -> TrainingSpec {
        let layers = (0..3).map(|l| LayerSpec { fwd_ns: 1_000 + l, bwd_ns: 2_000 + l }).collect();
        let groups = [1000u64, 4097, 10]
            .iter()
            .enumerate()
            .map(|(l, &bytes)| GroupSpec { layers: vec![l as u32], tensor: l as i32, bytes, server: 0, update_ns: 0 })
            .collect();
        TrainingSpec {
            iterations: 2,
            collective_model: CollectiveModel::ClosedForm,
            rank_classes: true,
            ..TrainingSpec::new(workers, SyncSpec::Allreduce { algorithm }, layers, groups)
        }
    }

    const COST: LinkCost = LinkCost { latency_ns: 5_000, bandwidth_bps: 1e10, intra: None };

    #[test]
    fn a_ring_is_one_class_and_variation_or_no_request_is_none() {
        let c = rank_classes(&spec(100, AlgorithmName::Ring), &COST).expect("ring workers are alike");
        assert_eq!((c.representatives, c.sizes), (vec![0], vec![100]));
        assert!(c.class_of.iter().all(|&k| k == 0));
        assert!(rank_classes(&TrainingSpec { jitter: 0.1, ..spec(8, AlgorithmName::Ring) }, &COST).is_none());
        assert!(rank_classes(&TrainingSpec { stagger_ns: 10, ..spec(8, AlgorithmName::Ring) }, &COST).is_none());
        assert!(rank_classes(&TrainingSpec { rank_classes: false, ..spec(8, AlgorithmName::Ring) }, &COST).is_none());
        assert!(rank_classes(&spec(8, AlgorithmName::Direct), &COST).is_none());
        assert!(rank_classes(&spec(8, AlgorithmName::HierarchicalRing), &COST).is_none());
    }

    #[test]
    fn classes_partition_the_workers_by_their_offsets() {
        for algorithm in [AlgorithmName::BinaryTree, AlgorithmName::HalvingDoubling, AlgorithmName::DoubleBinaryTree] {
            let s = spec(21, algorithm);
            let c = rank_classes(&s, &COST).expect("some workers are alike");
            assert_eq!(c.sizes.iter().sum::<u32>(), 21);
            let SyncSpec::Allreduce { algorithm } = s.sync else { unreachable!() };
            for bytes in [1000u64, 4097, 10] {
                let params = Params::default();
                let offsets = closed_form::finish_offsets(algorithm.algorithm(), 21, bytes, &params, &COST);
                for (w, &k) in c.class_of.iter().enumerate() {
                    let rep = c.representatives[k as usize] as usize;
                    assert!(rep <= w, "a representative is its class's lowest rank");
                    assert_eq!(offsets[w], offsets[rep], "{algorithm:?}: rank {w} and its representative {rep}");
                }
            }
            // the class graph's ops carry increasing per-rank ids
            let g = super::super::training::build_graph_classes(&s, Some(c.clone())).unwrap();
            let ids = &g.rank_classes.as_ref().unwrap().full_id;
            assert_eq!(ids.len(), g.ops.len());
            assert!(ids.windows(2).all(|p| p[0] < p[1]));
        }
    }
}
