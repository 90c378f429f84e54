//! Topologies: directed links between hosts and switches, and each host
//! pair's route over them.

use crate::engine::Time;
use super::config::{NetworkSpec, TopologySpec};

/// A directed link. Capacity is in bytes per nanosecond (1 Gbit/s = 0.125).
#[derive(Debug, Clone, Copy)]
pub struct Link {
    pub capacity: f64,
    pub delay: Time,
}

/// A route: up to four links (host-leaf-spine-leaf-host) and their total delay.
#[derive(Debug, Clone, Copy, Default)]
pub struct Path {
    links: [u32; 4],
    len: u8,
    pub latency: Time,
}

impl Path {
    pub fn links(&self) -> &[u32] {
        &self.links[..self.len as usize]
    }
}

#[derive(Debug, Clone)]
pub struct Topology {
    pub links: Vec<Link>,
    hosts: u32,
    /// (hosts_per_leaf, spines) for leaf-spine; None for a star.
    leaf_spine: Option<(u32, u32)>,
}

/// Bits per second to bytes per nanosecond.
pub fn bps_to_bytes_per_ns(bps: f64) -> f64 {
    bps / 8e9
}

impl Topology {
    pub fn new(spec: &NetworkSpec, hosts: u32) -> Result<Self, String> {
        let host_cap = bps_to_bytes_per_ns(spec.bandwidth_bps);
        let up_delay = spec.latency_ns - spec.latency_ns / 2;
        let down_delay = spec.latency_ns / 2;
        let mut links = Vec::with_capacity(2 * hosts as usize);
        for _ in 0..hosts {
            links.push(Link { capacity: host_cap, delay: up_delay });
            links.push(Link { capacity: host_cap, delay: down_delay });
        }
        let leaf_spine = match spec.topology {
            TopologySpec::Star => None,
            TopologySpec::LeafSpine { hosts_per_leaf, spines, oversubscription, .. } => {
                let leaves = hosts.div_ceil(hosts_per_leaf);
                let fabric_cap = host_cap * hosts_per_leaf as f64 / (spines as f64 * oversubscription);
                for _ in 0..leaves * spines {
                    links.push(Link { capacity: fabric_cap, delay: up_delay });
                    links.push(Link { capacity: fabric_cap, delay: down_delay });
                }
                Some((hosts_per_leaf, spines))
            }
        };
        Ok(Topology { links, hosts, leaf_spine })
    }

    pub fn hosts(&self) -> u32 {
        self.hosts
    }

    fn uplink(host: u32) -> u32 {
        2 * host
    }

    fn downlink(host: u32) -> u32 {
        2 * host + 1
    }

    /// The route from `src` to `dst`. Cross-rack flows take one spine chosen
    /// by a fixed hash of the pair (per-flow ECMP, reproducible).
    pub fn route(&self, src: u32, dst: u32) -> Path {
        let mut path = Path::default();
        let push = |p: &mut Path, link: u32| {
            p.links[p.len as usize] = link;
            p.len += 1;
            p.latency += self.links[link as usize].delay;
        };
        push(&mut path, Self::uplink(src));
        if let Some((per_leaf, spines)) = self.leaf_spine {
            let (a, b) = (src / per_leaf, dst / per_leaf);
            if a != b {
                let spine = (mix(((src as u64) << 32) | dst as u64) % spines as u64) as u32;
                let base = 2 * self.hosts;
                push(&mut path, base + 2 * (a * spines + spine));
                push(&mut path, base + 2 * (b * spines + spine) + 1);
            }
        }
        push(&mut path, Self::downlink(dst));
        path
    }

    /// Lowest capacity on a path (its rate when alone on the network).
    pub fn bottleneck(&self, path: &Path) -> f64 {
        path.links().iter().map(|&l| self.links[l as usize].capacity).fold(f64::INFINITY, f64::min)
    }
}

/// SplitMix64 finaliser: a fixed, well-spread hash.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Nanoseconds to move `bytes` at `rate` bytes/ns, rounded up to a whole
/// nanosecond; a float error below a millionth of a ns is not rounded up.
pub fn transmit_ns(bytes: f64, rate: f64) -> Time {
    if bytes <= 0.0 {
        return 0;
    }
    let exact = bytes / rate;
    let floor = exact.floor();
    if exact - floor <= 1e-6 * exact.max(1.0) {
        floor as Time
    } else {
        exact.ceil() as Time
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use super::super::config::Fidelity;

    fn spec(topology: TopologySpec) -> NetworkSpec {
        NetworkSpec { fidelity: Fidelity::Flow, bandwidth_bps: 10e9, latency_ns: 1001, topology, intra_host_bandwidth_bps: None, intra_host_latency_ns: 0, record_flows: false }
    }

    #[test]
    fn star_route_is_uplink_then_downlink_with_full_latency() {
        let t = Topology::new(&spec(TopologySpec::Star), 4).unwrap();
        let p = t.route(1, 3);
        assert_eq!(p.links(), &[2, 7]);
        assert_eq!(p.latency, 1001);
        assert_eq!(t.bottleneck(&p), 1.25);
    }

    #[test]
    fn leaf_spine_cross_rack_uses_fabric_links() {
        let s = spec(TopologySpec::LeafSpine { hosts_per_leaf: 2, spines: 2, oversubscription: 2.0, routing: Default::default() });
        let t = Topology::new(&s, 4).unwrap();
        assert_eq!(t.links.len(), 8 + 2 * 2 * 2);
        let same = t.route(0, 1);
        assert_eq!(same.links().len(), 2);
        let cross = t.route(0, 3);
        assert_eq!(cross.links().len(), 4);
        assert_eq!(cross.latency, 2 * 1001);
        // 2 hosts * 1.25 B/ns / (2 spines * 2) = 0.625 B/ns per fabric link
        assert_eq!(t.bottleneck(&cross), 0.625);
    }

    #[test]
    fn transmit_time_rounds_up_but_forgives_float_noise() {
        assert_eq!(transmit_ns(1250.0, 1.25), 1000);
        assert_eq!(transmit_ns(1251.0, 1.25), 1001);
        assert_eq!(transmit_ns(0.1 + 0.2, 0.3), 1);
        assert_eq!(transmit_ns(0.0, 1.0), 0);
    }
}
