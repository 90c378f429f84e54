//! Hierarchical (2D) ring all-reduce for several ranks per host, the
//! scheme of Horovod's hierarchical all-reduce and of 2D-torus all-reduce
//! (Mikami et al. 2018; Jia et al. 2018):
//!
//! 1. intra-host ring reduce-scatter: on each host the L local ranks run
//!    the L-1 reduce-scatter steps of a ring over M, so local rank l ends up
//!    with one reduced chunk of M/L (the ring's chunk l+1 mod L);
//! 2. inter-host ring all-reduce: the H ranks with the same local index l
//!    (one per host) run a full ring all-reduce (2 (H-1) steps) of that
//!    chunk; the L rings run side by side;
//! 3. intra-host ring all-gather: the L-1 all-gather steps of the ring of 1.
//!
//! Hosts come from the graph's rank -> host map; hosts are ordered by their
//! first member and local ranks by member order. Idle-network cost:
//! 2 (L-1) (alpha_intra + M/L beta_intra) + 2 (H-1) (alpha + M/(L H) beta).
//! Only 1/L of the vector crosses the inter-host network per rank, at the
//! price of the intra-host steps. If the hosts do not all hold the same
//! number of members the plan falls back to the flat ring over all members
//! (what Horovod does when ranks are not spread evenly).

use super::exchange::{Plan, Stage};
use super::ring::{chunk_bytes, RingPlan};

pub struct HierarchicalRingPlan {
    n: u32,
    bytes: u64,
    /// Hosts H and ranks per host L (H = 1, L = n for the flat fallback... see `flat`).
    h: u32,
    l: u32,
    /// (host index, local index) of each member and the member at host*L + local.
    pos: Vec<(u32, u32)>,
    member_at: Vec<u32>,
    /// The flat ring used when hosts are uneven.
    flat: Option<RingPlan>,
    intra: RingPlan,
    /// Inter-host ring of each local index, over its chunk.
    inter: Vec<RingPlan>,
}

impl HierarchicalRingPlan {
    /// `hosts[m]` is member m's host; empty means one host per member.
    pub fn new(bytes: u64, hosts: &[u32], n: u32) -> Self {
        let hosts: Vec<u32> = if hosts.is_empty() { (0..n).collect() } else { hosts.to_vec() };
        assert_eq!(hosts.len(), n as usize, "one host per member");
        // Distinct hosts numbered in order of their first member.
        let mut index_of: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
        let mut count: Vec<u32> = Vec::new();
        let mut pos = Vec::with_capacity(n as usize);
        for &host in &hosts {
            let hi = *index_of.entry(host).or_insert_with(|| {
                count.push(0);
                count.len() - 1
            });
            pos.push((hi as u32, count[hi]));
            count[hi] += 1;
        }
        let h = count.len().max(1) as u32;
        let l = count.first().copied().unwrap_or(1).max(1);
        let even = count.iter().all(|&c| c == l);
        let mut member_at = vec![0; n as usize];
        for (m, &(hi, li)) in pos.iter().enumerate() {
            if even {
                member_at[(hi * l + li) as usize] = m as u32;
            }
        }
        let flat = (!even).then(|| RingPlan::new(n, bytes));
        let intra = RingPlan::new(l, bytes);
        let inter = (0..l).map(|li| RingPlan::new(h, chunk_bytes(bytes, l, (li + 1) % l))).collect();
        HierarchicalRingPlan { n, bytes, h, l, pos, member_at, flat, intra, inter }
    }

    /// (hosts, ranks per host), or None when falling back to the flat ring.
    pub fn shape(&self) -> Option<(u32, u32)> {
        self.flat.is_none().then_some((self.h, self.l))
    }

    fn at(&self, hi: u32, li: u32) -> u32 {
        self.member_at[(hi * self.l + li) as usize]
    }
}

impl Plan for HierarchicalRingPlan {
    fn members(&self) -> u32 {
        self.n
    }

    fn stages(&self) -> u32 {
        match &self.flat {
            Some(ring) => ring.stages(),
            None if self.n <= 1 => 0,
            None => 2 * (self.l - 1) + 2 * (self.h - 1),
        }
    }

    fn stage(&self, m: u32, s: u32) -> Stage {
        if let Some(ring) = &self.flat {
            return ring.stage(m, s);
        }
        let _ = self.bytes;
        let (hi, li) = self.pos[m as usize];
        let (h, l) = (self.h, self.l);
        let (rs, inter) = (l - 1, 2 * (h - 1));
        let intra_stage =
            |st: Stage| Stage { send: st.send.map(|(to, b)| (self.at(hi, to), b)), recv: st.recv.map(|from| self.at(hi, from)), reduce: st.reduce };
        if s < rs {
            intra_stage(self.intra.stage(li, s))
        } else if s < rs + inter {
            let st = self.inter[li as usize].stage(hi, s - rs);
            Stage { send: st.send.map(|(to, b)| (self.at(to, li), b)), recv: st.recv.map(|from| self.at(from, li)), reduce: st.reduce }
        } else {
            intra_stage(self.intra.stage(li, rs + (s - rs - inter)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::recursive_doubling::assert_pairs_up;

    #[test]
    fn two_d_scheme_moves_one_lth_across_hosts() {
        for (hosts_n, per) in [(1u32, 4u32), (4, 1), (3, 2), (2, 4), (5, 3)] {
            let n = hosts_n * per;
            // Interleaved host map: member m on host (m % hosts).
            let hosts: Vec<u32> = (0..n).map(|m| 10 + m % hosts_n).collect();
            let m_bytes = 1200u64 * n as u64;
            let plan = HierarchicalRingPlan::new(m_bytes, &hosts, n);
            assert_eq!(plan.shape(), Some((hosts_n, per)));
            assert_pairs_up(&plan, &format!("hring {hosts_n}x{per}"));
            assert_eq!(plan.stages(), 2 * (per - 1) + 2 * (hosts_n - 1));
            for m in 0..n {
                let (mut intra, mut inter) = (0u64, 0u64);
                for s in 0..plan.stages() {
                    if let Some((to, b)) = plan.stage(m, s).send {
                        if hosts[to as usize] == hosts[m as usize] {
                            intra += b;
                        } else {
                            inter += b;
                        }
                    }
                }
                assert_eq!(intra, 2 * (per as u64 - 1) * m_bytes / per as u64, "{hosts_n}x{per} m={m}");
                assert_eq!(inter, 2 * (hosts_n as u64 - 1) * m_bytes / (per * hosts_n) as u64, "{hosts_n}x{per} m={m}");
            }
        }
    }

    #[test]
    fn uneven_hosts_fall_back_to_the_flat_ring() {
        let plan = HierarchicalRingPlan::new(1000, &[0, 0, 0, 1, 1], 5);
        assert_eq!(plan.shape(), None);
        assert_eq!(plan.stages(), 8);
        assert_pairs_up(&plan, "uneven");
    }
}
