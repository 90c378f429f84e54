//! Direct all-reduce: a reduce-scatter in which every member sends each
//! peer that peer's 1/N shard directly, then an all-gather in which every
//! member sends its reduced shard directly to every peer (no forwarding:
//! each shard crosses the network once per phase).
//!
//! Schedule: the pairwise exchange MPI uses for large all-to-alls. In
//! stage s = 1..N-1 of each phase member i sends to i+s and receives from
//! i-s (mod N), so every member has one transfer in flight at a time, as
//! the executor's preemption at step boundaries requires, and the N-1
//! peers are reached in N-1 stages. Works for any N.
//! Idle-network cost on a star: 2 (N-1) (alpha + M/N beta), like the ring,
//! but every member talks to every other (on a leaf-spine most shards cross
//! the spine, where a ring crosses it only at rack boundaries).

use super::exchange::{Plan, Stage};
use super::ring::chunk_bytes;

pub struct DirectPlan {
    n: u32,
    bytes: u64,
}

impl DirectPlan {
    pub fn new(n: u32, bytes: u64) -> Self {
        DirectPlan { n, bytes }
    }
}

impl Plan for DirectPlan {
    fn members(&self) -> u32 {
        self.n
    }

    fn stages(&self) -> u32 {
        2 * (self.n.max(1) - 1)
    }

    fn stage(&self, i: u32, stage: u32) -> Stage {
        let n = self.n;
        let phase_len = n - 1;
        let (gather, s) = (stage >= phase_len, stage % phase_len + 1);
        let to = (i + s) % n;
        let from = (i + n - s) % n;
        // Reduce-scatter: the receiver's shard; all-gather: my own reduced shard.
        let shard = if gather { i } else { to };
        Stage::exchange(to, chunk_bytes(self.bytes, n, shard), from, !gather)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::recursive_doubling::assert_pairs_up;

    #[test]
    fn every_member_sends_each_peer_its_shard_then_its_own() {
        for n in 1u32..=9 {
            let plan = DirectPlan::new(n, 1003);
            assert_pairs_up(&plan, &format!("direct n={n}"));
            for i in 0..n {
                let mut peers: Vec<u32> = (0..plan.stages()).map(|s| plan.stage(i, s).send.unwrap().0).collect();
                let sent: u64 = (0..plan.stages()).map(|s| plan.stage(i, s).send.unwrap().1).sum();
                let own = chunk_bytes(1003, n, i);
                assert_eq!(sent, (1003 - own) + (n as u64 - 1) * own, "n={n} i={i}");
                peers.sort();
                peers.dedup();
                assert_eq!(peers.len(), n as usize - 1);
            }
        }
    }
}
