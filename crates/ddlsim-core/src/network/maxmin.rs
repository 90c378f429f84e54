//! Max-min fair sharing (progressive filling) with strict-priority bands,
//! and the flow-level network that recomputes it, incrementally, whenever a
//! flow starts or finishes.
//!
//! Semantics (what the randomized oracle test reproduces): rates are
//! constant between events, and events happen at whole nanoseconds. Band 0
//! gets the max-min fair shares of the full link capacities; band 1 shares
//! what band 0 left, max-min within the band, and so on. A link counts a
//! flow by the share of its rate it carries (a sprayed flow is `1/spines` of
//! a flow on each spine link). A flow is done at the first whole nanosecond
//! at which the bytes it was served reach its size: `ceil` of the exact
//! crossing time, computed in f64 with only float noise forgiven (bytes
//! missing at a whole ns that are within 1e-11 of the flow's accumulated
//! target, [`NOISE`], count as served); it keeps its
//! rate until then and its share is released at that nanosecond. A flow
//! alone on its route is timed exactly ([`Path::transmit_ns`], u128).

use std::cmp::Reverse;

use rustc_hash::FxHashMap as HashMap;

use super::topology::{Path, Topology, NOISE};
use crate::engine::Time;
use crate::engine::MAX_TIME;
use crate::error::Error;

/// Max-min fair rates by progressive filling (one band, whole flows).
///
/// `capacities[l]` is link l's capacity; `flow_links[f]` the links flow f
/// crosses. Repeatedly the link with the smallest fair share
/// (remaining capacity / unfrozen flows) is saturated and its flows frozen at
/// that share. Ties go to the lower link index, so the result is reproducible.
pub fn max_min_fair(capacities: &[f64], flow_links: &[Vec<u32>]) -> Vec<f64> {
    let bands = vec![0u8; flow_links.len()];
    max_min_fair_banded(capacities, flow_links, &bands)
}

/// Strict-priority max-min: flows of band 0 share the full capacities
/// max-min fairly, band 1 shares what band 0 left, and so on.
pub fn max_min_fair_banded(capacities: &[f64], flow_links: &[Vec<u32>], bands: &[u8]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..flow_links.len()).collect();
    order.sort_by_key(|&f| (bands[f], f));
    let mut p = Problem::default();
    for &f in &order {
        p.push(bands[f], 1, flow_links[f].iter().map(|&l| (l, 1)));
    }
    let mut solver = WaterFill::default();
    let rates = solver.solve(capacities, &p, 1.0);
    let mut out = vec![0.0; flow_links.len()];
    for (i, &f) in order.iter().enumerate() {
        out[f] = rates[i];
    }
    out
}

/// A max-min problem in flat arrays, its entries in band order: entry i
/// stands for `weight[i]` identical flows crossing `links[offs[i]..offs[i+1]]`,
/// each link carrying `units / scale` of a flow's rate.
#[derive(Default)]
struct Problem {
    offs: Vec<u32>,
    links: Vec<u32>,
    units: Vec<u32>,
    weight: Vec<u32>,
    band: Vec<u8>,
}

impl Problem {
    fn clear(&mut self) {
        self.offs.clear();
        self.links.clear();
        self.units.clear();
        self.weight.clear();
        self.band.clear();
    }

    fn push(&mut self, band: u8, weight: u32, links: impl Iterator<Item = (u32, u32)>) {
        if self.offs.is_empty() {
            self.offs.push(0);
        }
        for (l, u) in links {
            self.links.push(l);
            self.units.push(u);
        }
        self.offs.push(self.links.len() as u32);
        self.weight.push(weight);
        self.band.push(band);
    }

    fn len(&self) -> usize {
        self.weight.len()
    }
}

#[derive(Default)]
struct WaterFill {
    remaining: Vec<f64>,
    /// Unfrozen usage per link, in units (exact integers).
    unfrozen: Vec<u64>,
    link_flows: Vec<Vec<u32>>,
    rate: Vec<f64>,
    frozen: Vec<bool>,
}

/// A remaining capacity below this fraction of the link's capacity is float
/// residue of a saturated link.
const RESIDUE: f64 = 1e-12;

impl WaterFill {
    /// Progressive filling band by band; returns the rate of one flow of each entry.
    fn solve(&mut self, caps: &[f64], p: &Problem, scale: f64) -> &[f64] {
        let nl = caps.len();
        let k = p.len();
        self.remaining.clear();
        self.remaining.extend_from_slice(caps);
        self.unfrozen.clear();
        self.unfrozen.resize(nl, 0);
        self.link_flows.iter_mut().for_each(Vec::clear);
        self.link_flows.resize_with(nl, Vec::new);
        self.rate.clear();
        self.rate.resize(k, 0.0);
        self.frozen.clear();
        self.frozen.resize(k, false);
        let mut start = 0;
        while start < k {
            let band = p.band[start];
            let mut end = start;
            while end < k && p.band[end] == band {
                end += 1;
            }
            if start > 0 {
                self.unfrozen.iter_mut().for_each(|u| *u = 0);
                self.link_flows.iter_mut().for_each(Vec::clear);
            }
            for f in start..end {
                for j in p.offs[f] as usize..p.offs[f + 1] as usize {
                    let l = p.links[j] as usize;
                    self.unfrozen[l] += p.weight[f] as u64 * p.units[j] as u64;
                    self.link_flows[l].push(f as u32);
                }
            }
            let mut left = end - start;
            while left > 0 {
                let mut best = usize::MAX;
                let mut best_share = f64::INFINITY;
                for (l, ((&units, &rem), &cap)) in self.unfrozen.iter().zip(&self.remaining).zip(caps).enumerate() {
                    if units > 0 {
                        let rem = if rem <= cap * RESIDUE { 0.0 } else { rem };
                        let share = rem * scale / units as f64;
                        if share < best_share {
                            best_share = share;
                            best = l;
                        }
                    }
                }
                if best == usize::MAX {
                    // Flows crossing no link: unconstrained.
                    for f in start..end {
                        if !self.frozen[f] {
                            self.rate[f] = f64::INFINITY;
                        }
                    }
                    break;
                }
                for i in 0..self.link_flows[best].len() {
                    let f = self.link_flows[best][i] as usize;
                    if self.frozen[f] {
                        continue;
                    }
                    self.frozen[f] = true;
                    self.rate[f] = best_share;
                    left -= 1;
                    for j in p.offs[f] as usize..p.offs[f + 1] as usize {
                        let l = p.links[j] as usize;
                        let used = p.weight[f] as u64 * p.units[j] as u64;
                        self.remaining[l] -= best_share * used as f64 / scale;
                        self.unfrozen[l] -= used;
                    }
                }
                self.remaining[best] = 0.0;
            }
            for (rem, &cap) in self.remaining.iter_mut().zip(caps) {
                if *rem <= cap * RESIDUE {
                    *rem = 0.0;
                }
            }
            start = end;
        }
        &self.rate
    }
}

/// Flows with the same route and band form a class: max-min gives them the
/// same rate, so they progress in lockstep. A class keeps its per-flow
/// service (bytes each member was served since the class formed) as
/// `base + rate * (t - since)`, `since` being its last rate change; a member
/// is done when the service reaches its target. Only the class's earliest
/// target needs a pending event, so a rate change costs O(classes), not
/// O(flows).
#[derive(Debug, Clone)]
struct Class {
    band: u8,
    /// (target service, flow id), earliest first.
    members: MaxHeap<Reverse<(OrderedBytes, u32)>>,
    base: f64,
    since: Time,
    rate: f64,
    version: u32,
    /// Set while the class is a lone flow whose end was handed to the caller
    /// directly (no completion event): its transmission ends then, unless
    /// another flow joins one of its links first.
    lone_until: Option<Time>,
    /// The transmission time of the last size sent alone on the class's
    /// path (a pure function of path and size: a ring sends the same chunk
    /// size again and again; 0 bytes take 0 ns, a true first entry).
    last_bytes: u64,
    last_tx: Time,
}

/// A max-heap (as `std`'s `BinaryHeap`: its items pop in the same order,
/// the greatest first, whatever the heap's layout, as the items here are
/// distinct) that can replace its only item in place.
#[derive(Debug, Clone)]
struct MaxHeap<T>(Vec<T>);

impl<T> Default for MaxHeap<T> {
    fn default() -> Self {
        MaxHeap(Vec::new())
    }
}

impl<T: Ord + Copy> MaxHeap<T> {
    #[inline]
    fn len(&self) -> usize {
        self.0.len()
    }
    #[inline]
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    #[inline]
    fn peek(&self) -> Option<&T> {
        self.0.first()
    }
    #[inline]
    fn clear(&mut self) {
        self.0.clear();
    }
    /// The heap of one item becomes the heap of `x` alone.
    #[inline(always)]
    fn replace_only(&mut self, x: T) {
        debug_assert_eq!(self.0.len(), 1);
        self.0[0] = x;
    }
    fn push(&mut self, x: T) {
        let h = &mut self.0;
        h.push(x);
        let mut i = h.len() - 1;
        while i > 0 {
            let parent = (i - 1) / 2;
            if h[parent] >= h[i] {
                break;
            }
            h.swap(parent, i);
            i = parent;
        }
    }
    fn pop(&mut self) -> Option<T> {
        let h = &mut self.0;
        let last = h.pop()?;
        if h.is_empty() {
            return Some(last);
        }
        let top = std::mem::replace(&mut h[0], last);
        let (n, mut i) = (h.len(), 0);
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut big = i;
            if l < n && h[l] > h[big] {
                big = l;
            }
            if r < n && h[r] > h[big] {
                big = r;
            }
            if big == i {
                break;
            }
            h.swap(i, big);
            i = big;
        }
        Some(top)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct OrderedBytes(f64);
impl Eq for OrderedBytes {}
impl PartialOrd for OrderedBytes {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrderedBytes {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl Class {
    fn service_at(&self, now: Time) -> f64 {
        if self.rate == 0.0 {
            self.base
        } else {
            self.base + self.rate * (now - self.since) as f64
        }
    }

    fn settle(&mut self, now: Time) {
        self.base = self.service_at(now);
        self.since = now;
    }

    fn count(&self) -> u32 {
        self.members.len() as u32
    }

    fn head_target(&self) -> f64 {
        self.members.peek().map(|Reverse((t, _))| t.0).unwrap_or(self.base)
    }

    /// The whole nanosecond at which a member with `target` is done at the
    /// current rate; None if never (rate 0) or beyond the engine's clock.
    fn end_of(&self, target: f64) -> Option<Time> {
        if self.rate.is_nan() || self.rate <= 0.0 {
            return None;
        }
        let left = target - self.base;
        let x = left.max(0.0) / self.rate;
        if x.is_nan() || x >= 1.8e19 {
            return None;
        }
        // Whole ns at which the service reaches the target: floor(x) if the
        // bytes still missing then are float noise of the accumulated service
        // (NOISE relative to the target), else floor(x) + 1.
        let whole = x.floor();
        let dt = if left - whole * self.rate <= NOISE * target.abs().max(1.0) { whole as Time } else { whole as Time + 1 };
        self.since.checked_add(dt).filter(|&t| t <= MAX_TIME)
    }
}

/// Settles a lone class on `link` before another flow uses the link: if
/// its transmission is over it leaves the network; otherwise it becomes
/// an ordinary class with a completion event at its (exact) end, and its
/// direct end is cancelled.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn resolve_lone(
    classes: &mut [Class],
    link_classes: &mut [Vec<u32>],
    paths: &[Path],
    active: &mut usize,
    now: Time,
    link: u32,
    out: &mut Vec<Reschedule>,
    cancelled: &mut Vec<u32>,
) {
    let Some(&class) = link_classes[link as usize].first() else { return };
    let c = &mut classes[class as usize];
    let Some(end) = c.lone_until.take() else { return };
    debug_assert_eq!(link_classes[link as usize].len(), 1, "a lone class shares no link");
    c.version = c.version.wrapping_add(1);
    if end <= now {
        c.members.clear();
        c.rate = 0.0;
        *active -= 1;
        for &l in paths[class as usize].links() {
            let list = &mut link_classes[l as usize];
            let pos = list.iter().position(|&x| x == class).expect("class registered on its links");
            list.swap_remove(pos);
        }
    } else {
        let Reverse((_, flow)) = *c.members.peek().expect("a lone class has its flow");
        cancelled.push(flow);
        out.push(Reschedule { class, version: c.version, done_at: end });
    }
}

/// A class whose next member-completion time was (re)computed: the executor
/// schedules `(class, version)` at `done_at`; older versions are stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reschedule {
    pub class: u32,
    pub version: u32,
    pub done_at: Time,
}

/// What starting a flow led to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowStart {
    /// Alone on its route: transmission ends at `tx_end`, delivery
    /// `latency` later, unless the flow is later reported as cancelled.
    Lone { tx_end: Time, latency: Time },
    /// Sharing links: its end comes through completion events.
    Shared,
}


/// Flow-level network: every active flow gets its strict-priority max-min rate.
pub struct FlowNetwork {
    topo: Topology,
    classes: Vec<Class>,
    /// Route of each class (apart from `classes` so both can be borrowed).
    paths: Vec<Path>,
    /// Class of each (route key | band << 55).
    class_of: HashMap<u64, u32>,
    /// Per sender rank: (receiver, band, class) of its last transfer, so that
    /// a member sending to the same peer step after step skips `class_of`.
    last_class: Vec<(u32, u8, u32)>,
    /// Class of each explicit path (its links, latency) and band ([`FlowNetwork::start_on`]).
    tree_class_of: HashMap<(Vec<u32>, u8, Time), u32>,
    link_classes: Vec<Vec<u32>>,
    active: usize,
    scale: f64,
    // scratch, reused across recomputations
    seed: Vec<u32>,
    link_mark: Vec<u32>,
    class_mark: Vec<u32>,
    epoch: u32,
    comp_links: Vec<u32>,
    comp_classes: Vec<u32>,
    stack: Vec<u32>,
    local_of_link: Vec<u32>,
    problem: Problem,
    caps: Vec<f64>,
    solver: WaterFill,
    recomputations: u64,
    /// Tests only: every start takes the general path (the oracle of the fast ones).
    #[cfg(test)]
    general_only: bool,
}

impl FlowNetwork {
    pub fn new(topo: Topology) -> Self {
        let nl = topo.links.len();
        let ranks = topo.ranks() as usize;
        let scale = topo.usage_scale() as f64;
        FlowNetwork {
            topo,
            classes: Vec::new(),
            paths: Vec::new(),
            class_of: HashMap::default(),
            last_class: vec![(u32::MAX, 0, 0); ranks],
            tree_class_of: HashMap::default(),
            link_classes: vec![Vec::new(); nl],
            active: 0,
            scale,
            seed: Vec::new(),
            link_mark: vec![0; nl],
            class_mark: Vec::new(),
            epoch: 0,
            comp_links: Vec::new(),
            comp_classes: Vec::new(),
            stack: Vec::new(),
            local_of_link: vec![0; nl],
            problem: Problem::default(),
            caps: Vec::new(),
            solver: WaterFill::default(),
            recomputations: 0,
            #[cfg(test)]
            general_only: false,
        }
    }

    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// How many max-min recomputations ran (for benchmarks).
    pub fn recomputations(&self) -> u64 {
        self.recomputations
    }

    pub fn active_flows(&self) -> usize {
        self.active
    }

    /// Current per-flow rate from rank `src` to rank `dst` in `band`, in bytes/ns (0 if none).
    pub fn rate_between(&self, src: u32, dst: u32, band: u8) -> f64 {
        let key = self.topo.route_key(src, dst) | (band as u64) << 55;
        self.class_of.get(&key).map(|&c| &self.classes[c as usize]).filter(|c| !c.members.is_empty()).map_or(0.0, |c| c.rate)
    }

    /// Starts flow `flow` (the caller's id) of `bytes` from rank `src` to
    /// rank `dst` in priority `band` (0 first).
    ///
    /// A flow alone on every link of its route is [`FlowStart::Lone`]: its
    /// end is known now (exactly) and no completion event is needed. If a
    /// later flow joins one of its links before that end, its id is appended
    /// to `cancelled` and it gets a normal completion event like any shared
    /// flow. Classes whose next completion changed are appended to `out`.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn start(
        &mut self,
        now: Time,
        flow: u32,
        src: u32,
        dst: u32,
        bytes: u64,
        band: u8,
        out: &mut Vec<Reschedule>,
        cancelled: &mut Vec<u32>,
    ) -> Result<FlowStart, Error> {
        let class = match self.last_class.get(src as usize) {
            Some(&(d, b, c)) if d == dst && b == band => c,
            _ => {
                let key = self.topo.route_key(src, dst) | (band as u64) << 55;
                let class = match self.class_of.get(&key) {
                    Some(&c) => c,
                    None => self.new_class(now, src, dst, band, key),
                };
                if let Some(last) = self.last_class.get_mut(src as usize) {
                    *last = (dst, band, class);
                }
                class
            }
        };
        self.start_in(now, class, flow, bytes, out, cancelled)
    }

    /// Starts flow `flow` over an explicit path (a multicast or aggregation
    /// tree, [`super::innet`]): one flow that every link of `path` counts
    /// once (by its units), so the whole tree moves at one max-min rate.
    /// Flows over the same links in the same band (and latency) share a class.
    #[allow(clippy::too_many_arguments)]
    pub fn start_on(
        &mut self,
        now: Time,
        flow: u32,
        path: &Path,
        bytes: u64,
        band: u8,
        out: &mut Vec<Reschedule>,
        cancelled: &mut Vec<u32>,
    ) -> Result<FlowStart, Error> {
        let key = (path.links().to_vec(), band, path.latency);
        let class = match self.tree_class_of.get(&key) {
            Some(&c) => c,
            None => {
                self.classes.push(Class { band, members: MaxHeap::default(), base: 0.0, since: now, rate: 0.0, version: 0, lone_until: None, last_bytes: 0, last_tx: 0 });
                self.paths.push(path.clone());
                self.class_mark.push(0);
                let id = (self.classes.len() - 1) as u32;
                self.tree_class_of.insert(key, id);
                id
            }
        };
        self.start_in(now, class, flow, bytes, out, cancelled)
    }

    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn start_in(
        &mut self,
        now: Time,
        class: u32,
        flow: u32,
        bytes: u64,
        out: &mut Vec<Reschedule>,
        cancelled: &mut Vec<u32>,
    ) -> Result<FlowStart, Error> {
        #[cfg(test)]
        let fast = !self.general_only;
        #[cfg(not(test))]
        let fast = true;
        if let Some(end) = self.classes[class as usize].lone_until.filter(|_| fast) {
            if end <= now && !self.paths[class as usize].links().is_empty() {
                return self.restart_lone(now, class, flow, bytes);
            }
        }
        self.active += 1;
        let links = self.paths[class as usize].links();
        for &l in links {
            resolve_lone(&mut self.classes, &mut self.link_classes, &self.paths, &mut self.active, now, l, out, cancelled);
        }
        let alone = self.classes[class as usize].members.is_empty() && links.iter().all(|&l| self.link_classes[l as usize].is_empty());
        let c = &mut self.classes[class as usize];
        let was_empty = c.members.is_empty();
        if was_empty {
            // An idle class restarts from zero service.
            c.base = 0.0;
            c.rate = 0.0;
            c.since = now;
        }
        let old_head = c.head_target();
        c.members.push(Reverse((OrderedBytes(c.service_at(now) + bytes as f64), flow)));
        let head_changed = was_empty || c.head_target() != old_head;
        if was_empty {
            for &l in self.paths[class as usize].links() {
                self.link_classes[l as usize].push(class);
            }
        }
        if alone {
            self.recomputations += 1;
            let path = &self.paths[class as usize];
            let c = &mut self.classes[class as usize];
            if c.last_bytes != bytes {
                c.last_tx = path.transmit_ns(bytes).ok_or_else(|| super::too_long(bytes))?;
                c.last_bytes = bytes;
            }
            let tx_end = now.checked_add(c.last_tx).filter(|&t| t <= MAX_TIME).ok_or_else(|| super::too_long(bytes))?;
            c.rate = path.bottleneck;
            c.version = c.version.wrapping_add(1);
            c.lone_until = Some(tx_end);
            return Ok(FlowStart::Lone { tx_end, latency: path.latency });
        }
        self.reallocate(now, class, if head_changed { Some(class) } else { None }, out);
        Ok(FlowStart::Shared)
    }

    /// The class a flow from `src` to `dst` in `band` starting at `now`
    /// would restart in place ([`FlowNetwork::start`] would take
    /// `restart_lone`): the sender's last class, lone, its transmission
    /// over. Looks only; `None` when the general path is needed.
    #[inline(always)]
    pub fn lone_restartable(&self, now: Time, src: u32, dst: u32, band: u8) -> Option<u32> {
        #[cfg(test)]
        if self.general_only {
            return None;
        }
        match self.last_class.get(src as usize) {
            Some(&(d, b, c)) if d == dst && b == band => match self.classes[c as usize].lone_until {
                Some(end) if end <= now && !self.paths[c as usize].links().is_empty() => Some(c),
                _ => None,
            },
            _ => None,
        }
    }

    /// [`FlowNetwork::start`] of a flow whose class [`FlowNetwork::lone_restartable`] gave.
    #[inline(always)]
    pub fn restart_lone_class(&mut self, now: Time, class: u32, flow: u32, bytes: u64) -> Result<(Time, Time), Error> {
        match self.restart_lone(now, class, flow, bytes)? {
            FlowStart::Lone { tx_end, latency } => Ok((tx_end, latency)),
            FlowStart::Shared => unreachable!("a lone restart is lone"),
        }
    }

    /// A flow of a lone class whose last flow's transmission is over (a
    /// member sending to the same peer again, as a ring does step after
    /// step): the same state as the general path's (the old flow leaves, the
    /// class is alone again on its links, which list nothing else: a lone
    /// class shares no link), without taking the class off its links and
    /// putting it back.
    #[inline(always)]
    fn restart_lone(&mut self, now: Time, class: u32, flow: u32, bytes: u64) -> Result<FlowStart, Error> {
        self.recomputations += 1;
        let path = &self.paths[class as usize];
        let c = &mut self.classes[class as usize];
        debug_assert_eq!(c.members.len(), 1, "a lone class has one flow");
        debug_assert!(path.links().iter().all(|&l| self.link_classes[l as usize] == [class]), "a lone class shares no link");
        // The general path bumps the version twice: once when the old flow leaves, once for the new lone end.
        c.version = c.version.wrapping_add(2);
        // Its one flow replaced in place (a heap of one stays a heap; no sift, no reallocation).
        c.members.replace_only(Reverse((OrderedBytes(bytes as f64), flow)));
        c.base = 0.0;
        c.since = now;
        if c.last_bytes != bytes {
            c.last_tx = path.transmit_ns(bytes).ok_or_else(|| super::too_long(bytes))?;
            c.last_bytes = bytes;
        }
        let tx_end = now.checked_add(c.last_tx).filter(|&t| t <= MAX_TIME).ok_or_else(|| super::too_long(bytes))?;
        c.rate = path.bottleneck;
        c.lone_until = Some(tx_end);
        Ok(FlowStart::Lone { tx_end, latency: path.latency })
    }

    /// Classes live as long as the network: an idle one keeps its heap's
    /// capacity and is simply off its links' lists.
    fn new_class(&mut self, now: Time, src: u32, dst: u32, band: u8, key: u64) -> u32 {
        self.classes.push(Class { band, members: MaxHeap::default(), base: 0.0, since: now, rate: 0.0, version: 0, lone_until: None, last_bytes: 0, last_tx: 0 });
        self.paths.push(self.topo.route(src, dst));
        self.class_mark.push(0);
        let id = (self.classes.len() - 1) as u32;
        self.class_of.insert(key, id);
        id
    }

    /// Handles a class's completion event: its head member is done, and so
    /// is every other member whose own completion time, computed the same
    /// way, is not later. Appends `(flow, path latency)` for each to `done`;
    /// appends nothing if the event is stale.
    pub fn finish(&mut self, now: Time, class: u32, version: u32, done: &mut Vec<(u32, Time)>, out: &mut Vec<Reschedule>) {
        let c = &mut self.classes[class as usize];
        if c.version != version || c.members.is_empty() || c.lone_until.is_some() {
            return;
        }
        let latency = self.paths[class as usize].latency;
        let first = done.len();
        let Reverse((_, head)) = c.members.pop().expect("non-empty");
        done.push((head, latency));
        while let Some(&Reverse((target, flow))) = c.members.peek() {
            if c.end_of(target.0).is_some_and(|t| t <= now) {
                c.members.pop();
                done.push((flow, latency));
            } else {
                break;
            }
        }
        self.active -= done.len() - first;
        let emptied = c.members.is_empty();
        if emptied {
            c.rate = 0.0;
            c.version = c.version.wrapping_add(1);
            for &l in self.paths[class as usize].links() {
                let list = &mut self.link_classes[l as usize];
                let pos = list.iter().position(|&x| x == class).expect("class registered on its links");
                list.swap_remove(pos);
            }
        }
        self.reallocate(now, class, if emptied { None } else { Some(class) }, out);
    }

    /// Recomputes rates for the classes connected (through shared links,
    /// transitively, whatever their band) to `seed`'s links; others keep
    /// theirs. `force` is a class whose next completion must be rescheduled
    /// even if its rate stays the same (its head member changed).
    fn reallocate(&mut self, now: Time, seed_class: u32, force: Option<u32>, out: &mut Vec<Reschedule>) {
        let mut seed = std::mem::take(&mut self.seed);
        seed.clear();
        seed.extend_from_slice(self.paths[seed_class as usize].links());
        if let Some(c) = force {
            let alone = seed.iter().all(|&l| {
                let on = &self.link_classes[l as usize];
                on.len() == 1 && on[0] == c
            });
            if alone {
                // The common case of a lone route: its own bottleneck, no traversal.
                self.seed = seed;
                self.recomputations += 1;
                let rate = self.paths[c as usize].bottleneck / self.classes[c as usize].count() as f64;
                self.set_rate(now, c, rate, true, out);
                return;
            }
        } else if seed.iter().all(|&l| self.link_classes[l as usize].is_empty()) {
            self.seed = seed;
            return;
        }
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.link_mark.iter_mut().for_each(|m| *m = 0);
            self.class_mark.iter_mut().for_each(|m| *m = 0);
            self.epoch = 1;
        }
        let epoch = self.epoch;
        self.comp_links.clear();
        self.comp_classes.clear();
        let mut stack = std::mem::take(&mut self.stack);
        for &l in &seed {
            if self.link_mark[l as usize] != epoch {
                self.link_mark[l as usize] = epoch;
                stack.push(l);
            }
        }
        self.seed = seed;
        while let Some(l) = stack.pop() {
            self.comp_links.push(l);
            for &c in &self.link_classes[l as usize] {
                if self.class_mark[c as usize] == epoch {
                    continue;
                }
                self.class_mark[c as usize] = epoch;
                self.comp_classes.push(c);
                for &l2 in self.paths[c as usize].links() {
                    if self.link_mark[l2 as usize] != epoch {
                        self.link_mark[l2 as usize] = epoch;
                        stack.push(l2);
                    }
                }
            }
        }
        self.stack = stack;
        if self.comp_classes.is_empty() {
            return;
        }
        self.recomputations += 1;
        if self.comp_classes.len() == 1 {
            let c = self.comp_classes[0];
            let rate = self.paths[c as usize].bottleneck / self.classes[c as usize].count() as f64;
            self.set_rate(now, c, rate, force == Some(c), out);
            return;
        }
        // Deterministic order regardless of traversal details; bands in priority order.
        let classes = &self.classes;
        self.comp_classes.sort_unstable_by_key(|&c| (classes[c as usize].band, c));
        self.comp_links.sort_unstable();
        self.caps.clear();
        for (i, &l) in self.comp_links.iter().enumerate() {
            self.local_of_link[l as usize] = i as u32;
            self.caps.push(self.topo.links[l as usize].capacity);
        }
        self.problem.clear();
        for &c in &self.comp_classes {
            let path = &self.paths[c as usize];
            let local = &self.local_of_link;
            let cl = &self.classes[c as usize];
            self.problem.push(cl.band, cl.count(), path.links().iter().zip(path.units()).map(|(&l, &u)| (local[l as usize], u)));
        }
        self.solver.solve(&self.caps, &self.problem, self.scale);
        for i in 0..self.comp_classes.len() {
            let c = self.comp_classes[i];
            let rate = self.solver.rate[i];
            self.set_rate(now, c, rate, force == Some(c), out);
        }
    }

    fn set_rate(&mut self, now: Time, c: u32, rate: f64, force: bool, out: &mut Vec<Reschedule>) {
        let cl = &mut self.classes[c as usize];
        let unchanged = rate == cl.rate || (cl.rate > 0.0 && (rate - cl.rate).abs() <= 1e-14 * cl.rate);
        if unchanged && !force {
            return;
        }
        if !unchanged {
            cl.settle(now);
            cl.rate = rate;
        }
        cl.version = cl.version.wrapping_add(1);
        if let Some(done_at) = cl.end_of(cl.head_target()) {
            out.push(Reschedule { class: c, version: cl.version, done_at });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::topology::Topology;
    use crate::network::config::{Fidelity, NetworkSpec};

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1.0)
    }

    #[test]
    fn max_heap_pops_as_the_standard_binary_heap() {
        // Seeded pushes, pops and lone replacements of (target, flow) items, many targets equal.
        let mut state: u64 = 0x0bad_5eed_1234_5678;
        let mut next = move |k: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % k
        };
        let mut flow = 0u32;
        for _ in 0..200 {
            let mut ours = MaxHeap::default();
            let mut std_heap = std::collections::BinaryHeap::new();
            for _ in 0..300 {
                match next(5) {
                    0 | 1 | 2 => {
                        let x = Reverse((OrderedBytes(next(20) as f64 * 0.5), flow));
                        flow += 1;
                        ours.push(x);
                        std_heap.push(x);
                    }
                    3 => assert_eq!(ours.pop(), std_heap.pop()),
                    _ if ours.len() == 1 => {
                        let x = Reverse((OrderedBytes(next(20) as f64), flow));
                        flow += 1;
                        ours.replace_only(x);
                        std_heap.clear();
                        std_heap.push(x);
                    }
                    _ => {}
                }
                assert_eq!(ours.len(), std_heap.len());
                assert_eq!(ours.peek(), std_heap.peek());
            }
            while let Some(x) = std_heap.pop() {
                assert_eq!(ours.pop(), Some(x));
            }
            assert!(ours.is_empty());
        }
    }

    #[test]
    fn textbook_max_min_with_shared_bottlenecks() {
        // Bertsekas & Gallager's example: links A (cap 1) and B (cap 1) in a
        // line; flow 0 crosses both, flows 1 and 2 cross A, flow 3 crosses B.
        // A has three flows -> 1/3 each for 0,1,2; B then gives 3 the rest 2/3.
        let caps = [1.0, 1.0];
        let flows = vec![vec![0, 1], vec![0], vec![0], vec![1]];
        let r = max_min_fair(&caps, &flows);
        assert!(close(r[0], 1.0 / 3.0) && close(r[1], 1.0 / 3.0) && close(r[2], 1.0 / 3.0));
        assert!(close(r[3], 2.0 / 3.0));
    }

    #[test]
    fn a_lower_band_shares_only_what_the_higher_band_left() {
        // Link 0 (cap 10) carries flows 0 (band 0), 1 (band 1), 2 (band 1);
        // link 1 (cap 3) carries flow 0 alone: band 0 takes 3 on link 0,
        // band 1 splits the 7 left.
        let caps = [10.0, 3.0];
        let flows = vec![vec![0, 1], vec![0], vec![0]];
        let r = max_min_fair_banded(&caps, &flows, &[0, 1, 1]);
        assert!(close(r[0], 3.0) && close(r[1], 3.5) && close(r[2], 3.5));
        // A saturating higher band starves the lower one completely.
        let r = max_min_fair_banded(&[1.0], &[vec![0], vec![0], vec![0]], &[2, 0, 1]);
        assert_eq!(r, vec![0.0, 1.0, 0.0]);
    }

    #[test]
    fn max_min_with_two_levels_of_bottleneck() {
        // Link 0 cap 10 shared by flows 0,1,2; link 1 cap 2 carries flows 0 and 3;
        // link 2 cap 4 carries flow 1 alone (not binding).
        // Link 1 saturates first: flows 0,3 get 1 each. Link 0 leaves 9 for
        // flows 1 and 2 -> 4.5, but link 2 caps flow 1 at 4 -> flow 2 gets 5.
        let caps = [10.0, 2.0, 4.0];
        let flows = vec![vec![0, 1], vec![0, 2], vec![0], vec![1]];
        let r = max_min_fair(&caps, &flows);
        assert!(close(r[0], 1.0));
        assert!(close(r[3], 1.0));
        assert!(close(r[1], 4.0));
        assert!(close(r[2], 5.0));
        // Feasible and every flow has a saturated bottleneck link.
        let load0 = r[0] + r[1] + r[2];
        assert!(load0 <= 10.0 + 1e-9 && r[0] + r[3] <= 2.0 + 1e-9);
    }

    fn star(hosts: u32) -> FlowNetwork {
        let spec = NetworkSpec::star(Fidelity::Flow, 8e9, 0); // 1 byte/ns
        FlowNetwork::new(Topology::with_hosts(&spec, hosts).unwrap())
    }

    #[test]
    fn incast_shares_the_receiver_downlink_and_speeds_up_as_flows_leave() {
        let mut net = star(3);
        let (mut out, mut done, mut cancelled) = (Vec::new(), Vec::new(), Vec::new());
        // a is alone: its end is known at once.
        assert_eq!(net.start(0, 10, 0, 2, 1000, 0, &mut out, &mut cancelled).unwrap(), FlowStart::Lone { tx_end: 1000, latency: 0 });
        assert!(out.is_empty());
        // At t=500, a has 500 left; b joins from another host: 0.5 B/ns each.
        assert_eq!(net.start(500, 11, 1, 2, 250, 0, &mut out, &mut cancelled).unwrap(), FlowStart::Shared);
        assert_eq!(cancelled, vec![10], "a's direct end no longer holds");
        let latest = |out: &Vec<Reschedule>, class: u32| *out.iter().rfind(|r| r.class == class).unwrap();
        assert_eq!(latest(&out, 0).done_at, 1500);
        assert_eq!(latest(&out, 1), Reschedule { class: 1, version: 1, done_at: 1000 });
        let a_version = latest(&out, 0).version;
        out.clear();
        // b ends at 1000; a has 250 left and gets the full link back.
        net.finish(1000, 1, 1, &mut done, &mut out);
        assert_eq!(done, vec![(11, 0)]);
        assert_eq!(out, vec![Reschedule { class: 0, version: a_version + 1, done_at: 1250 }]);
        out.clear();
        done.clear();
        // The stale event for a is ignored.
        net.finish(1500, 0, a_version, &mut done, &mut out);
        assert!(done.is_empty());
        net.finish(1250, 0, a_version + 1, &mut done, &mut out);
        assert_eq!(done, vec![(10, 0)]);
        assert_eq!(net.active_flows(), 0);
    }

    #[test]
    fn a_lone_flow_that_ended_leaves_when_the_next_one_comes() {
        let mut net = star(2);
        let (mut out, mut cancelled) = (Vec::new(), Vec::new());
        assert_eq!(net.start(0, 1, 0, 1, 100, 0, &mut out, &mut cancelled).unwrap(), FlowStart::Lone { tx_end: 100, latency: 0 });
        assert_eq!(net.start(100, 2, 0, 1, 50, 0, &mut out, &mut cancelled).unwrap(), FlowStart::Lone { tx_end: 150, latency: 0 });
        assert!(cancelled.is_empty() && out.is_empty());
        assert_eq!(net.active_flows(), 1);
    }

    #[test]
    fn flows_of_one_route_share_it_and_finish_in_size_order() {
        let mut net = star(2);
        let (mut out, mut done, mut cancelled) = (Vec::new(), Vec::new(), Vec::new());
        net.start(0, 1, 0, 1, 300, 0, &mut out, &mut cancelled).unwrap();
        net.start(0, 2, 0, 1, 100, 0, &mut out, &mut cancelled).unwrap();
        assert_eq!(cancelled, vec![1]);
        assert_eq!(net.rate_between(0, 1, 0), 0.5);
        // the small flow is the class head: done after 100 B at 0.5 B/ns.
        let head = *out.last().unwrap();
        assert_eq!(head.done_at, 200);
        out.clear();
        net.finish(200, 0, head.version, &mut done, &mut out);
        assert_eq!(done, vec![(2, 0)]);
        // the big one has 200 left at the full 1 B/ns.
        assert_eq!(out, vec![Reschedule { class: 0, version: head.version + 1, done_at: 400 }]);
        done.clear();
        net.finish(400, 0, head.version + 1, &mut done, &mut out);
        assert_eq!(done, vec![(1, 0)]);
    }

    /// Runs `flows` (start, src, dst, bytes, band) through `net` with a
    /// small event loop of its own; returns each flow's end of transmission.
    fn drive(net: &mut FlowNetwork, flows: &[(Time, u32, u32, u64, u8)]) -> Vec<Time> {
        use std::collections::BTreeMap;
        let mut tx_end = vec![Time::MAX; flows.len()];
        // (time, seq) -> class completion (class, version); starts are taken in (start, index) order between them.
        let mut events: BTreeMap<(Time, u64), (u32, u32)> = BTreeMap::new();
        let mut lone: HashMap<u32, Time> = HashMap::default();
        let (mut out, mut cancelled, mut done) = (Vec::new(), Vec::new(), Vec::new());
        let mut order: Vec<usize> = (0..flows.len()).collect();
        order.sort_by_key(|&i| (flows[i].0, i));
        let mut seq = 0u64;
        let mut next_start = 0;
        loop {
            let start_at = order.get(next_start).map(|&i| flows[i].0);
            let event_at = events.keys().next().map(|&(t, _)| t);
            match (start_at, event_at) {
                (None, None) => break,
                (Some(t), e) if e.is_none_or(|e| t < e) => {
                    let i = order[next_start];
                    next_start += 1;
                    let (_, src, dst, bytes, band) = flows[i];
                    if let FlowStart::Lone { tx_end: end, .. } = net.start(t, i as u32, src, dst, bytes, band, &mut out, &mut cancelled).unwrap() {
                        lone.insert(i as u32, end);
                    }
                    for c in cancelled.drain(..) {
                        lone.remove(&c);
                    }
                }
                _ => {
                    let (&(t, k), &(class, version)) = events.iter().next().unwrap();
                    events.remove(&(t, k));
                    net.finish(t, class, version, &mut done, &mut out);
                    for (f, _) in done.drain(..) {
                        tx_end[f as usize] = t;
                    }
                }
            }
            for r in out.drain(..) {
                events.insert((r.done_at, seq), (r.class, r.version));
                seq += 1;
            }
        }
        for (f, end) in lone {
            tx_end[f as usize] = end;
        }
        tx_end
    }

    /// The fast path of a lone flow restarted on its class gives exactly
    /// the ends the general path gives, on seeded random flow sets: rings
    /// (each host sends to the next, step after step, each send starting
    /// after the previous ended or not), mixed with random flows in random
    /// bands that share links, cancel lone ends and leave classes idle.
    #[test]
    fn lone_restarts_end_exactly_where_the_general_path_ends_them() {
        let mut state: u64 = 0x0dd_ba11_5eed;
        let mut next = move |k: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % k
        };
        let (mut restarts, mut shared, mut total) = (0u64, 0usize, 0usize);
        for case in 0..400 {
            let hosts = 2 + next(6) as u32;
            let mut flows = Vec::new();
            // A ring: step s of host h starts at a jittered multiple of the step time.
            let steps = next(12);
            let chunk = 1 + next(5_000);
            for s in 0..steps {
                for h in 0..hosts {
                    let start = s * (chunk + next(3) * next(chunk + 1)) + next(4);
                    flows.push((start, h, (h + 1) % hosts, chunk + next(2), 0u8));
                }
            }
            // Random flows across it.
            for _ in 0..next(8) {
                let src = next(hosts as u64) as u32;
                let dst = (src + 1 + next(hosts as u64 - 1) as u32) % hosts;
                flows.push((next(steps.max(1) * chunk * 2), src, dst, 1 + next(20_000), next(3) as u8));
            }
            let mut fast = star(hosts);
            let mut general = star(hosts);
            general.general_only = true;
            let a = drive(&mut fast, &flows);
            let b = drive(&mut general, &flows);
            assert_eq!(a, b, "case {case}: {flows:?}");
            assert!(a.iter().all(|&t| t != Time::MAX), "case {case}: every flow ends");
            assert_eq!(fast.active_flows(), general.active_flows());
            assert_eq!(fast.recomputations(), general.recomputations());
            let state = |n: &FlowNetwork| n.classes.iter().map(|c| (c.version, c.count(), c.rate.to_bits(), c.lone_until)).collect::<Vec<_>>();
            assert_eq!(state(&fast), state(&general), "case {case}: class states");
            restarts += fast.classes.iter().map(|c| c.version as u64).sum::<u64>();
            shared += flows.iter().zip(&a).filter(|(f, &end)| end - f.0 > f.3).count();
            total += flows.len();
        }
        assert!(total > 5_000 && shared > total / 20 && restarts > 0, "{total} flows, {shared} slowed by sharing");
    }

    #[test]
    fn flows_on_disjoint_links_do_not_disturb_each_other() {
        let mut net = star(4);
        let (mut out, mut cancelled) = (Vec::new(), Vec::new());
        assert!(matches!(net.start(0, 0, 0, 1, 100, 0, &mut out, &mut cancelled).unwrap(), FlowStart::Lone { .. }));
        assert!(matches!(net.start(10, 1, 2, 3, 100, 0, &mut out, &mut cancelled).unwrap(), FlowStart::Lone { .. }));
        assert!(out.is_empty() && cancelled.is_empty());
    }
}
