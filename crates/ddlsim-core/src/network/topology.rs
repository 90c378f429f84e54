//! Topologies: directed links between ranks, hosts and switches, the
//! switches themselves (addressable, for models that keep state on a
//! switch) and each rank pair's route over them.
//!
//! Links, in index order:
//! - per host `h`: its NIC uplink `2h` and downlink `2h + 1`
//!   (`bandwidth_bps`; the network latency is split over the two);
//! - leaf-spine only, per leaf `a` and spine `s`: the leaf's uplink to the
//!   spine `2H + 2(a*S + s)` and the spine's downlink to the leaf, one more;
//!   each of capacity `bandwidth * hosts_per_leaf / (spines * oversubscription)`,
//!   so a leaf's aggregate uplink is `bandwidth * hosts_per_leaf / oversubscription`;
//! - with `intra_host_bandwidth_bps`, per rank `r`: its intra-host egress
//!   port and ingress port (`intra_host_bandwidth_bps` each, the
//!   `intra_host_latency_ns` split over the two).
//!
//! Routes between ranks:
//! - different hosts: host uplink, [leaf -> spine, spine -> leaf when the
//!   hosts are under different leaves], host downlink. Latency: the
//!   network latency on a star or within a leaf, twice it across leaves.
//! - same host, with an intra-host bandwidth: the source rank's egress port
//!   and the destination rank's ingress port, at the intra-host latency. Each
//!   rank sends and receives on its own ports (an NVLink/NVSwitch-like
//!   fabric: no shared bus), so same-host traffic never touches the NIC.
//! - same host, without one: the transfer hairpins through the host's NIC
//!   and its first switch (star switch or leaf): host uplink then host
//!   downlink, at the NIC bandwidth and network latency, sharing the NIC
//!   with the host's other traffic (the foundation's behaviour).
//!
//! Cross-leaf routing on leaf-spine:
//! - `ecmp`: each (source host, destination host) pair takes one spine,
//!   `splitmix64((src_host << 32) | dst_host) % spines` (the SplitMix64
//!   finaliser, see [`mix`]): fixed per pair and reproducible, so all flows
//!   of a pair share a spine and distinct pairs may collide on one.
//! - `spray`: each flow is split evenly over all spines; it uses every
//!   leaf->spine uplink of its source leaf and every spine->leaf downlink
//!   of its destination leaf at `1/spines` of its rate (in max-min, a link
//!   counts a sprayed flow as `1/spines` of a flow).

use super::config::{NetworkSpec, Routing, TopologySpec};
use crate::engine::Time;
use crate::rng::mix; // ECMP's spine choice: SplitMix64's finaliser

/// An exact positive rational, used for capacities in bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ratio {
    pub num: u128,
    pub den: u128,
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Ratio {
    fn new(num: u128, den: u128) -> Option<Ratio> {
        if num == 0 || den == 0 {
            return None;
        }
        let g = gcd(num, den);
        Some(Ratio { num: num / g, den: den / g })
    }

    /// The exact value of a positive finite f64 (every f64 is m * 2^e).
    pub fn from_f64(x: f64) -> Option<Ratio> {
        if !(x.is_finite() && x > 0.0) {
            return None;
        }
        let bits = x.to_bits();
        let exp = ((bits >> 52) & 0x7ff) as i32;
        let frac = bits & ((1u64 << 52) - 1);
        let (m, e) = if exp == 0 { (frac, -1074) } else { (frac | (1u64 << 52), exp - 1075) };
        let tz = m.trailing_zeros() as i32;
        let (m, e) = ((m >> tz) as u128, e + tz);
        if e >= 0 {
            if e > 70 {
                return None;
            }
            Ratio::new(m << e, 1)
        } else {
            if -e > 120 {
                return None;
            }
            Ratio::new(m, 1u128 << -e)
        }
    }

    /// `self * a / b`, reduced; None on overflow.
    pub fn scale(self, a: u128, b: u128) -> Option<Ratio> {
        let (g1, g2) = (gcd(a, self.den).max(1), gcd(self.num, b).max(1));
        let num = (self.num / g2).checked_mul(a / g1)?;
        let den = (self.den / g1).checked_mul(b / g2)?;
        Ratio::new(num, den)
    }

    /// `self / other`, reduced; None on overflow.
    pub fn over(self, other: Ratio) -> Option<Ratio> {
        self.scale(other.den, other.num)
    }

    /// `self < other`; None on overflow.
    fn lt(self, other: Ratio) -> Option<bool> {
        Some(self.num.checked_mul(other.den)? < other.num.checked_mul(self.den)?)
    }

    pub fn to_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }
}

/// Nanoseconds to send `bytes` at an exact rate of `bps` bits per second:
/// `ceil(bytes * 8e9 / bps)` in u128 integer arithmetic. None if that does
/// not fit (the caller then falls back to f64).
#[inline]
pub fn transmit_ns_exact(bytes: u64, bps: Ratio) -> Option<Time> {
    // Common case in u64: a whole number of bit/s and under 2^30 bytes.
    if bps.den == 1 && bytes < (1 << 30) && bps.num <= u64::MAX as u128 {
        let bits = bytes * 8_000_000_000;
        return Some(bits.div_ceil(bps.num as u64));
    }
    let num = (bytes as u128).checked_mul(8_000_000_000)?.checked_mul(bps.den)?;
    Time::try_from(num.div_ceil(bps.num)).ok()
}

/// Nanoseconds to send `bytes` at `bps` bits per second, rounded up to a
/// whole nanosecond for every size.
///
/// Exact: the f64 `bps` is taken at its exact value (every f64 is
/// `m * 2^e`) and `ceil(bytes * 8e9 / bps)` is computed in u128, which
/// covers every rate between about 1 bit/s and 2^70 bit/s. Fallback, when
/// the u128 product would overflow: f64 division rounded up (`ceil`), which
/// may exceed the exact value by one ns. None if `bps` is not positive and
/// finite or the time does not fit in 64-bit nanoseconds.
pub fn transmit_ns(bytes: u64, bps: f64) -> Option<Time> {
    if bytes == 0 {
        return Some(0);
    }
    let r = Ratio::from_f64(bps);
    if let Some(t) = r.and_then(|r| transmit_ns_exact(bytes, r)) {
        return Some(t);
    }
    if !(bps.is_finite() && bps > 0.0) {
        return None;
    }
    let x = (bytes as f64 * 8e9 / bps).ceil();
    (x < Time::MAX as f64).then_some(x as Time)
}

/// Float noise forgiven by the flow model when it decides at which whole
/// nanosecond a shared flow was served all its bytes: bytes still missing
/// then, within this fraction of the flow's accumulated byte target, count
/// as served (see the flow model's semantics in `maxmin`).
pub const NOISE: f64 = 1e-11;

/// A directed link. `capacity` is in bytes per nanosecond (1 Gbit/s =
/// 0.125); `bps` is the same capacity exactly, in bits per second, when it
/// is a rational small enough for u128.
#[derive(Debug, Clone, Copy)]
pub struct Link {
    pub capacity: f64,
    pub bps: Option<Ratio>,
    pub delay: Time,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwitchKind {
    /// The single switch of a star.
    Star,
    Leaf,
    Spine,
}

/// A switch: its id (index in [`Topology::switches`]), kind, index among
/// its kind (leaf or spine number) and every link that starts or ends at it.
#[derive(Debug, Clone)]
pub struct Switch {
    pub id: u32,
    pub kind: SwitchKind,
    pub index: u32,
    pub links: Vec<u32>,
}

/// A route between two ranks: the links it crosses, each with the share of
/// the flow's rate it carries (`units / scale`: `scale` for a whole flow,
/// 1 for one spine's share of a sprayed flow), the switches it crosses in
/// order (every spine for a sprayed route) and its latency.
#[derive(Debug, Clone, Default)]
pub struct Path {
    links: Vec<u32>,
    units: Vec<u32>,
    switches: Vec<u32>,
    pub latency: Time,
    /// Rate of a flow alone on the route, bytes/ns, and exactly in bit/s.
    pub bottleneck: f64,
    pub bottleneck_bps: Option<Ratio>,
}

impl Path {
    pub fn links(&self) -> &[u32] {
        &self.links
    }

    /// Per link, its usage in units of `1 / Topology::usage_scale()` of a flow.
    pub fn units(&self) -> &[u32] {
        &self.units
    }

    pub fn switches(&self) -> &[u32] {
        &self.switches
    }

    /// Whole nanoseconds for `bytes` alone on this route, rounded up
    /// (exact in u128 when the bottleneck is an exact rational).
    #[inline]
    pub fn transmit_ns(&self, bytes: u64) -> Option<Time> {
        if bytes == 0 {
            return Some(0);
        }
        if let Some(t) = self.bottleneck_bps.and_then(|r| transmit_ns_exact(bytes, r)) {
            return Some(t);
        }
        transmit_ns(bytes, self.bottleneck * 8e9)
    }
}

#[derive(Debug, Clone)]
pub struct Topology {
    pub links: Vec<Link>,
    switches: Vec<Switch>,
    host_of_rank: Vec<u32>,
    hosts: u32,
    /// (hosts_per_leaf, spines, routing) for leaf-spine; None for a star.
    leaf_spine: Option<(u32, u32, Routing)>,
    /// First intra-host port link, when the intra-host fabric exists.
    intra_base: Option<u32>,
    intra_latency: Time,
}

/// Bits per second to bytes per nanosecond.
pub fn bps_to_bytes_per_ns(bps: f64) -> f64 {
    bps / 8e9
}

fn positive(field: &str, x: f64) -> Result<f64, String> {
    if x.is_finite() && x > 0.0 && x < 1e18 {
        Ok(x)
    } else {
        Err(format!("network: {field} must be a positive finite number below 1e18, got {x}"))
    }
}

fn link(bps: Option<Ratio>, approx_bps: f64, delay: Time) -> Link {
    Link { capacity: bps.map_or(approx_bps, Ratio::to_f64) / 8e9, bps, delay }
}

impl Topology {
    /// One rank per host (rank i on host i).
    pub fn with_hosts(spec: &NetworkSpec, hosts: u32) -> Result<Self, String> {
        Self::new(spec, &(0..hosts).collect::<Vec<_>>())
    }

    /// The topology for ranks placed on hosts by `host_of_rank`.
    pub fn new(spec: &NetworkSpec, host_of_rank: &[u32]) -> Result<Self, String> {
        let bw = positive("bandwidth_bps", spec.bandwidth_bps)?;
        let hosts = host_of_rank.iter().copied().max().map_or(0, |h| h + 1);
        if hosts >= 1 << 27 || host_of_rank.len() >= 1 << 27 {
            return Err(format!("network: at most {} ranks and hosts", (1u32 << 27) - 1));
        }
        let bw_exact = Ratio::from_f64(bw);
        let (up_delay, down_delay) = (spec.latency_ns - spec.latency_ns / 2, spec.latency_ns / 2);
        if spec.latency_ns > crate::engine::MAX_TIME / 4 || spec.intra_host_latency_ns > crate::engine::MAX_TIME / 4 {
            return Err("network: latency_ns / intra_host_latency_ns is far too large".into());
        }
        let mut links = Vec::with_capacity(2 * hosts as usize);
        for _ in 0..hosts {
            links.push(link(bw_exact, bw, up_delay));
            links.push(link(bw_exact, bw, down_delay));
        }
        let mut switches = Vec::new();
        let leaf_spine = match spec.topology {
            TopologySpec::Star => {
                switches.push(Switch { id: 0, kind: SwitchKind::Star, index: 0, links: (0..2 * hosts).collect() });
                None
            }
            TopologySpec::LeafSpine { hosts_per_leaf, spines, oversubscription, routing } => {
                if hosts_per_leaf == 0 || spines == 0 {
                    return Err("network: leaf_spine needs hosts_per_leaf >= 1 and spines >= 1".into());
                }
                let os = positive("oversubscription", oversubscription)?;
                let leaves = hosts.div_ceil(hosts_per_leaf);
                let fabric_approx = bw * hosts_per_leaf as f64 / (spines as f64 * os);
                let fabric = bw_exact.zip(Ratio::from_f64(os)).and_then(|(b, o)| b.scale(hosts_per_leaf as u128, spines as u128)?.over(o));
                let base = 2 * hosts;
                for a in 0..leaves {
                    let mut attached: Vec<u32> = (a * hosts_per_leaf..((a + 1) * hosts_per_leaf).min(hosts)).flat_map(|h| [2 * h, 2 * h + 1]).collect();
                    attached.extend((0..spines).flat_map(|s| [base + 2 * (a * spines + s), base + 2 * (a * spines + s) + 1]));
                    switches.push(Switch { id: a, kind: SwitchKind::Leaf, index: a, links: attached });
                }
                for s in 0..spines {
                    let attached = (0..leaves).flat_map(|a| [base + 2 * (a * spines + s), base + 2 * (a * spines + s) + 1]).collect();
                    switches.push(Switch { id: leaves + s, kind: SwitchKind::Spine, index: s, links: attached });
                }
                for _ in 0..leaves * spines {
                    links.push(link(fabric, fabric_approx, up_delay));
                    links.push(link(fabric, fabric_approx, down_delay));
                }
                Some((hosts_per_leaf, spines, routing))
            }
        };
        let intra_base = match spec.intra_host_bandwidth_bps {
            None => None,
            Some(ibw) => {
                let ibw = positive("intra_host_bandwidth_bps", ibw)?;
                let exact = Ratio::from_f64(ibw);
                let base = links.len() as u32;
                let lat = spec.intra_host_latency_ns;
                for _ in host_of_rank {
                    links.push(link(exact, ibw, lat - lat / 2));
                    links.push(link(exact, ibw, lat / 2));
                }
                Some(base)
            }
        };
        if links.len() > u32::MAX as usize / 2 {
            return Err("network: too many links".into());
        }
        Ok(Topology {
            links,
            switches,
            host_of_rank: host_of_rank.to_vec(),
            hosts,
            leaf_spine,
            intra_base,
            intra_latency: spec.intra_host_latency_ns,
        })
    }

    pub fn hosts(&self) -> u32 {
        self.hosts
    }

    pub fn ranks(&self) -> u32 {
        self.host_of_rank.len() as u32
    }

    pub fn host_of(&self, rank: u32) -> u32 {
        self.host_of_rank[rank as usize]
    }

    /// Every switch, by id: the star's one switch, or the leaves (ids
    /// `0..leaves`) then the spines.
    pub fn switches(&self) -> &[Switch] {
        &self.switches
    }

    /// A link's usage is counted in units of `1 / usage_scale()` of a
    /// flow: the number of spines under spray routing, else 1.
    pub fn usage_scale(&self) -> u32 {
        match self.leaf_spine {
            Some((_, spines, Routing::Spray)) => spines,
            _ => 1,
        }
    }

    /// An identity of the route between two ranks: transfers with equal keys
    /// take the same links the same way. Bits 0..27: destination (host, or
    /// rank on the intra-host fabric), 27..54: source, 54: intra-host fabric;
    /// bits 55.. are free for the caller (the flow model puts the band there).
    #[inline]
    pub fn route_key(&self, src: u32, dst: u32) -> u64 {
        let (a, b) = (self.host_of(src), self.host_of(dst));
        if a == b && self.intra_base.is_some() {
            (1 << 54) | ((src as u64) << 27) | dst as u64
        } else {
            ((a as u64) << 27) | b as u64
        }
    }

    fn uplink(host: u32) -> u32 {
        2 * host
    }

    fn downlink(host: u32) -> u32 {
        2 * host + 1
    }

    /// The route from rank `src` to rank `dst` (see the module doc).
    pub fn route(&self, src: u32, dst: u32) -> Path {
        let mut p = Path::default();
        self.route_into(src, dst, &mut p);
        p
    }

    /// [`Topology::route`] into a reused path.
    pub fn route_into(&self, src: u32, dst: u32, p: &mut Path) {
        p.links.clear();
        p.units.clear();
        p.switches.clear();
        p.latency = 0;
        let scale = self.usage_scale();
        let (a, b) = (self.host_of(src), self.host_of(dst));
        let push = |p: &mut Path, link: u32, units: u32| {
            p.links.push(link);
            p.units.push(units);
        };
        if a == b && self.intra_base.is_some() {
            let base = self.intra_base.unwrap_or(0);
            push(p, base + 2 * src, scale);
            push(p, base + 2 * dst + 1, scale);
            p.latency = self.intra_latency;
        } else {
            push(p, Self::uplink(a), scale);
            match self.leaf_spine {
                None => p.switches.push(0),
                Some((per_leaf, spines, routing)) => {
                    let (la, lb) = (a / per_leaf, b / per_leaf);
                    p.switches.push(la);
                    if la != lb {
                        let leaves = self.hosts.div_ceil(per_leaf);
                        let base = 2 * self.hosts;
                        let (up_delay, down_delay) = (self.links[base as usize].delay, self.links[base as usize + 1].delay);
                        match routing {
                            Routing::Ecmp => {
                                let s = (mix(((a as u64) << 32) | b as u64) % spines as u64) as u32;
                                push(p, base + 2 * (la * spines + s), scale);
                                push(p, base + 2 * (lb * spines + s) + 1, scale);
                                p.switches.push(leaves + s);
                            }
                            Routing::Spray => {
                                for s in 0..spines {
                                    push(p, base + 2 * (la * spines + s), 1);
                                }
                                for s in 0..spines {
                                    push(p, base + 2 * (lb * spines + s) + 1, 1);
                                    p.switches.push(leaves + s);
                                }
                            }
                        }
                        p.latency += up_delay + down_delay;
                        p.switches.push(lb);
                    }
                }
            }
            push(p, Self::downlink(b), scale);
            p.latency += self.links[Self::uplink(a) as usize].delay + self.links[Self::downlink(b) as usize].delay;
        }
        self.set_bottleneck(p);
    }

    /// Whether ranks `src` and `dst` talk over the intra-host fabric.
    pub fn intra_host(&self, src: u32, dst: u32) -> bool {
        self.intra_base.is_some() && self.host_of(src) == self.host_of(dst)
    }

    /// Links of the network proper (hosts, switches), before any intra-host port.
    pub fn network_links(&self) -> u32 {
        self.intra_base.unwrap_or(self.links.len() as u32)
    }

    /// Whether link `l` is a host NIC's uplink (the host's egress port).
    pub fn link_is_nic(&self, l: u32) -> bool {
        l < 2 * self.hosts && l % 2 == 0
    }

    /// Whether cross-leaf routes spray over every spine.
    pub fn sprays(&self) -> bool {
        matches!(self.leaf_spine, Some((_, _, Routing::Spray)))
    }

    fn switch_name(&self, id: u32) -> String {
        match self.switches[id as usize].kind {
            SwitchKind::Star => "star".to_string(),
            SwitchKind::Leaf => format!("leaf {}", self.switches[id as usize].index),
            SwitchKind::Spine => format!("spine {}", self.switches[id as usize].index),
        }
    }

    /// The switch a host's NIC is cabled to (the star, or its leaf).
    fn edge_switch(&self, host: u32) -> u32 {
        self.leaf_spine.map_or(0, |(per_leaf, _, _)| host / per_leaf)
    }

    fn first_rank_of(&self, host: u32) -> u32 {
        self.host_of_rank.iter().position(|&h| h == host).map_or(u32::MAX, |r| r as u32)
    }

    /// Link `l`'s sending end, which owns its egress queue: a host's NIC
    /// (numbered by the host's first rank; `u32::MAX` for a host without
    /// ranks), a rank's intra-host port (the rank), or a switch (the number
    /// of ranks plus the switch id). Returns (node, readable name).
    pub fn link_owner(&self, l: u32) -> (u32, String) {
        let ranks = self.ranks();
        let hosts = self.hosts;
        if l < 2 * hosts {
            let h = l / 2;
            let sw = self.edge_switch(h);
            return if l % 2 == 0 {
                (self.first_rank_of(h), format!("host {h} -> {}", self.switch_name(sw)))
            } else {
                (ranks + sw, format!("{} -> host {h}", self.switch_name(sw)))
            };
        }
        if let Some(base) = self.intra_base {
            if l >= base {
                let r = (l - base) / 2;
                return if (l - base) % 2 == 0 { (r, format!("rank {r} -> host fabric")) } else { (r, format!("host fabric -> rank {r}")) };
            }
        }
        let (_, spines, _) = self.leaf_spine.unwrap_or((1, 1, Routing::Ecmp));
        let leaves = self.switches.len() as u32 - spines;
        let k = (l - 2 * hosts) / 2;
        let (a, s) = (k / spines, k % spines);
        if (l - 2 * hosts) % 2 == 0 {
            (ranks + a, format!("leaf {a} -> spine {s}"))
        } else {
            (ranks + leaves + s, format!("spine {s} -> leaf {a}"))
        }
    }

    /// A path over explicit links (a multicast or aggregation tree, see
    /// [`super::innet`]): `units` per link as in [`Path::units`]; its rate
    /// alone is the least `capacity * scale / units` over its links.
    pub fn path_over(&self, links: Vec<u32>, units: Vec<u32>, switches: Vec<u32>, latency: Time) -> Path {
        let mut p = Path { links, units, switches, latency, bottleneck: 0.0, bottleneck_bps: None };
        self.set_bottleneck(&mut p);
        p
    }

    fn set_bottleneck(&self, p: &mut Path) {
        let scale = self.usage_scale();
        // Alone, a flow's rate is the least of capacity / share over its links.
        let mut best = f64::INFINITY;
        let mut exact: Option<Ratio> = None;
        let mut exact_ok = true;
        for (&l, &u) in p.links.iter().zip(&p.units) {
            let link = &self.links[l as usize];
            let rate = link.capacity * scale as f64 / u as f64;
            best = best.min(rate);
            match link.bps.and_then(|r| r.scale(scale as u128, u as u128)) {
                Some(r) if exact_ok => {
                    exact = match exact {
                        None => Some(r),
                        Some(e) => match r.lt(e) {
                            Some(true) => Some(r),
                            Some(false) => Some(e),
                            None => {
                                exact_ok = false;
                                None
                            }
                        },
                    }
                }
                _ => {
                    exact_ok = false;
                    exact = None;
                }
            }
        }
        p.bottleneck = match exact {
            Some(r) => r.to_f64() / 8e9,
            None => best,
        };
        p.bottleneck_bps = exact;
    }

    /// Lowest capacity on a path (its rate when alone on the network), bytes/ns.
    pub fn bottleneck(&self, path: &Path) -> f64 {
        path.bottleneck
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::Fidelity;
    use super::*;

    fn spec(topology: TopologySpec) -> NetworkSpec {
        NetworkSpec { fidelity: Fidelity::Flow, bandwidth_bps: 10e9, latency_ns: 1001, topology, intra_host_bandwidth_bps: None, intra_host_latency_ns: 0, record_flows: false, packet: None, hosts: None, tenants: Vec::new() }
    }

    fn leaf_spine(routing: Routing) -> NetworkSpec {
        spec(TopologySpec::LeafSpine { hosts_per_leaf: 2, spines: 2, oversubscription: 2.0, routing })
    }

    #[test]
    fn star_route_is_uplink_then_downlink_with_full_latency() {
        let t = Topology::with_hosts(&spec(TopologySpec::Star), 4).unwrap();
        let p = t.route(1, 3);
        assert_eq!(p.links(), &[2, 7]);
        assert_eq!(p.latency, 1001);
        assert_eq!(t.bottleneck(&p), 1.25);
        assert_eq!(p.switches(), &[0]);
        assert_eq!(t.switches().len(), 1);
        assert_eq!(t.switches()[0].kind, SwitchKind::Star);
        assert_eq!(t.switches()[0].links, (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn leaf_spine_cross_rack_uses_fabric_links() {
        let t = Topology::with_hosts(&leaf_spine(Routing::Ecmp), 4).unwrap();
        assert_eq!(t.links.len(), 8 + 2 * 2 * 2);
        let same = t.route(0, 1);
        assert_eq!(same.links().len(), 2);
        assert_eq!(same.switches(), &[0]);
        let cross = t.route(0, 3);
        assert_eq!(cross.links().len(), 4);
        assert_eq!(cross.latency, 2 * 1001);
        // 2 hosts * 1.25 B/ns / (2 spines * 2) = 0.625 B/ns per fabric link
        assert_eq!(t.bottleneck(&cross), 0.625);
        assert_eq!(cross.bottleneck_bps, Some(Ratio { num: 5_000_000_000, den: 1 }));
        // The documented hash picks the spine.
        let s = (mix(3) % 2) as u32;
        assert_eq!(cross.links()[1], 8 + 2 * s);
        assert_eq!(cross.links()[2], 8 + 2 * (2 + s) + 1);
        assert_eq!(cross.switches(), &[0, 2 + s, 1]);
    }

    #[test]
    fn spray_uses_every_spine_at_a_share_and_the_aggregate_capacity() {
        let t = Topology::with_hosts(&leaf_spine(Routing::Spray), 4).unwrap();
        assert_eq!(t.usage_scale(), 2);
        let cross = t.route(0, 3);
        assert_eq!(cross.links(), &[0, 8, 10, 13, 15, 7]);
        assert_eq!(cross.units(), &[2, 1, 1, 1, 1, 2]);
        assert_eq!(cross.switches(), &[0, 2, 3, 1]);
        // aggregate uplink 2 * 1.25 / 2 = 1.25 B/ns: the host link binds too
        assert_eq!(cross.bottleneck, 1.25);
        assert_eq!(cross.latency, 2 * 1001);
    }

    #[test]
    fn switches_list_the_links_that_attach() {
        let t = Topology::with_hosts(&leaf_spine(Routing::Ecmp), 4).unwrap();
        let sw = t.switches();
        assert_eq!(sw.iter().map(|s| (s.id, s.kind, s.index)).collect::<Vec<_>>(), vec![
            (0, SwitchKind::Leaf, 0),
            (1, SwitchKind::Leaf, 1),
            (2, SwitchKind::Spine, 0),
            (3, SwitchKind::Spine, 1)
        ]);
        assert_eq!(sw[0].links, vec![0, 1, 2, 3, 8, 9, 10, 11]);
        assert_eq!(sw[3].links, vec![10, 11, 14, 15]);
        // every link of every route attaches to the switches the route names
        for (a, b) in [(0, 3), (1, 2), (0, 1), (3, 0)] {
            let p = t.route(a, b);
            for pair in p.links().windows(2) {
                let shared = p.switches().iter().any(|&s| sw[s as usize].links.contains(&pair[0]) && sw[s as usize].links.contains(&pair[1]));
                assert!(shared, "{a}->{b}: links {pair:?}");
            }
        }
    }

    #[test]
    fn same_host_ranks_use_their_own_ports_or_hairpin_through_the_nic() {
        let mut s = spec(TopologySpec::Star);
        let t = Topology::new(&s, &[0, 0, 1]).unwrap();
        let p = t.route(0, 1);
        assert_eq!((p.links(), p.latency), (&[0u32, 1][..], 1001));
        assert_eq!(t.route_key(0, 1), 0);
        s.intra_host_bandwidth_bps = Some(800e9);
        s.intra_host_latency_ns = 300;
        let t = Topology::new(&s, &[0, 0, 1]).unwrap();
        let p = t.route(0, 1);
        assert_eq!(p.links(), &[4, 7]);
        assert_eq!(p.latency, 300);
        assert_eq!(p.bottleneck, 100.0);
        assert!(p.switches().is_empty());
        assert_eq!(t.route(0, 2).links(), &[0, 3]);
        assert_eq!(t.route_key(0, 1), (1 << 54) | 1);
        assert_eq!(t.route_key(0, 2), 1);
    }

    #[test]
    fn transmit_time_is_exact_and_rounds_up() {
        assert_eq!(transmit_ns(1250, 10e9), Some(1000));
        assert_eq!(transmit_ns(1251, 10e9), Some(1001));
        assert_eq!(transmit_ns(0, 1.0), Some(0));
        assert_eq!(transmit_ns(100_000_000_001, 10e9), Some(80_000_000_001));
        assert_eq!(transmit_ns(3, 3e9), Some(8));
        assert_eq!(transmit_ns(1, 0.0), None);
        assert_eq!(transmit_ns(u64::MAX, 1.0), None);
        assert_eq!(Ratio::from_f64(0.375), Some(Ratio { num: 3, den: 8 }));
        assert_eq!(Ratio::from_f64(10e9), Some(Ratio { num: 10_000_000_000, den: 1 }));
    }

    #[test]
    fn bad_numbers_are_refused_naming_the_field() {
        let mut s = spec(TopologySpec::Star);
        s.bandwidth_bps = f64::NAN;
        assert!(Topology::with_hosts(&s, 2).unwrap_err().contains("bandwidth_bps"));
        let mut s = leaf_spine(Routing::Ecmp);
        if let TopologySpec::LeafSpine { oversubscription, .. } = &mut s.topology {
            *oversubscription = 0.0;
        }
        assert!(Topology::with_hosts(&s, 2).unwrap_err().contains("oversubscription"));
    }
}
