//! Max-min fair sharing (progressive filling) and the flow-level network
//! that recomputes it, incrementally, whenever a flow starts or finishes.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap as HashMap;

use super::topology::{transmit_ns, Path, Topology};
use crate::engine::Time;

/// Max-min fair rates by progressive filling.
///
/// `capacities[l]` is link l's capacity; `flow_links[f]` the links flow f
/// crosses. Repeatedly the link with the smallest fair share
/// (remaining capacity / unfrozen flows) is saturated and its flows frozen at
/// that share. Ties go to the lower link index, so the result is reproducible.
pub fn max_min_fair(capacities: &[f64], flow_links: &[Vec<u32>]) -> Vec<f64> {
    let mut solver = WaterFill::default();
    solver.solve_weighted(capacities, flow_links, &vec![1.0; flow_links.len()])
}

#[derive(Default)]
struct WaterFill {
    remaining: Vec<f64>,
    unfrozen: Vec<f64>,
    link_flows: Vec<Vec<u32>>,
}

impl WaterFill {
    /// Progressive filling where entry f stands for `weights[f]` identical
    /// flows; returns the rate of one such flow.
    fn solve_weighted(&mut self, capacities: &[f64], paths: &[Vec<u32>], weights: &[f64]) -> Vec<f64> {
        let nl = capacities.len();
        self.remaining.clear();
        self.remaining.extend_from_slice(capacities);
        self.unfrozen.clear();
        self.unfrozen.resize(nl, 0.0);
        self.link_flows.iter_mut().for_each(Vec::clear);
        self.link_flows.resize_with(nl, Vec::new);
        for (f, links) in paths.iter().enumerate() {
            for &l in links.iter() {
                self.unfrozen[l as usize] += weights[f];
                self.link_flows[l as usize].push(f as u32);
            }
        }
        let mut rate = vec![f64::NAN; paths.len()];
        let mut left = paths.len();
        while left > 0 {
            let mut best = usize::MAX;
            let mut best_share = f64::INFINITY;
            for l in 0..nl {
                if self.unfrozen[l] > 0.0 {
                    let share = self.remaining[l].max(0.0) / self.unfrozen[l];
                    if share < best_share {
                        best_share = share;
                        best = l;
                    }
                }
            }
            if best == usize::MAX {
                // Flows crossing no link: unconstrained.
                for r in rate.iter_mut().filter(|r| r.is_nan()) {
                    *r = f64::INFINITY;
                }
                break;
            }
            for i in 0..self.link_flows[best].len() {
                let f = self.link_flows[best][i] as usize;
                if !rate[f].is_nan() {
                    continue;
                }
                rate[f] = best_share;
                left -= 1;
                for &l in &paths[f] {
                    self.remaining[l as usize] -= best_share * weights[f];
                    self.unfrozen[l as usize] -= weights[f];
                }
            }
            // Guard against float residue keeping a link "unfrozen".
            for u in self.unfrozen.iter_mut() {
                if *u < 0.5 {
                    *u = 0.0;
                }
            }
        }
        rate
    }
}

/// Flows with the same route form a class: max-min gives them the same
/// rate, so they progress in lockstep. A class keeps its per-flow service
/// (bytes each member has sent since the class formed); a member is done
/// when the service reaches its target. Only the class's earliest target
/// needs a pending event, so a rate change costs O(classes), not O(flows).
#[derive(Debug, Clone)]
struct Class {
    path: Path,
    /// (target service, flow id), earliest first.
    members: BinaryHeap<Reverse<(OrderedBytes, u32)>>,
    service: f64,
    rate: f64,
    last: Time,
    version: u32,
    /// Set while the class is a lone flow whose end was handed to the caller
    /// directly (no completion event): its transmission ends then, unless
    /// another flow joins one of its links first.
    lone_until: Option<Time>,
}

#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
struct OrderedBytes(f64);
impl Eq for OrderedBytes {}
impl Ord for OrderedBytes {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl Class {
    fn settle(&mut self, now: Time) {
        self.service += self.rate * (now - self.last) as f64;
        self.last = now;
    }

    fn count(&self) -> u32 {
        self.members.len() as u32
    }

    fn head_target(&self) -> f64 {
        self.members.peek().map(|Reverse((t, _))| t.0).unwrap_or(self.service)
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

/// Flow-level network: every active flow gets its max-min fair rate.
pub struct FlowNetwork {
    topo: Topology,
    classes: Vec<Class>,
    class_of_pair: HashMap<(u32, u32), u32>,
    link_classes: Vec<Vec<u32>>,
    active: usize,
    // scratch, reused across recomputations
    link_mark: Vec<u32>,
    class_mark: Vec<u32>,
    epoch: u32,
    comp_links: Vec<u32>,
    comp_classes: Vec<u32>,
    stack: Vec<u32>,
    local_of_link: Vec<u32>,
    local_paths: Vec<Vec<u32>>,
    weights: Vec<f64>,
    caps: Vec<f64>,
    solver: WaterFill,
    recomputations: u64,
}

impl FlowNetwork {
    pub fn new(topo: Topology) -> Self {
        let nl = topo.links.len();
        FlowNetwork {
            topo,
            classes: Vec::new(),
            class_of_pair: HashMap::default(),
            link_classes: vec![Vec::new(); nl],
            active: 0,
            link_mark: vec![0; nl],
            class_mark: Vec::new(),
            epoch: 0,
            comp_links: Vec::new(),
            comp_classes: Vec::new(),
            stack: Vec::new(),
            local_of_link: vec![0; nl],
            local_paths: Vec::new(),
            weights: Vec::new(),
            caps: Vec::new(),
            solver: WaterFill::default(),
            recomputations: 0,
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

    /// Current per-flow rate between two hosts, in bytes/ns (0 if none).
    pub fn rate_between(&self, src: u32, dst: u32) -> f64 {
        self.class_of_pair.get(&(src, dst)).map(|&c| self.classes[c as usize].rate).unwrap_or(0.0)
    }

    /// Starts flow `flow` (the caller's id) of `bytes` from `src` to `dst`.
    ///
    /// A flow alone on every link of its route is [`FlowStart::Lone`]: its
    /// end is known now and no completion event is needed. If a later flow
    /// joins one of its links before that end, its id is appended to
    /// `cancelled` and it gets a normal completion event like any shared
    /// flow. Classes whose next completion changed are appended to `out`.
    pub fn start(
        &mut self,
        now: Time,
        flow: u32,
        src: u32,
        dst: u32,
        bytes: u64,
        out: &mut Vec<Reschedule>,
        cancelled: &mut Vec<u32>,
    ) -> FlowStart {
        self.active += 1;
        let class = match self.class_of_pair.get(&(src, dst)) {
            Some(&c) => c,
            None => self.new_class(now, src, dst),
        };
        let path = self.classes[class as usize].path;
        for &l in path.links() {
            self.resolve_lone(now, l, out, cancelled);
        }
        let alone = self.classes[class as usize].members.is_empty()
            && path.links().iter().all(|&l| self.link_classes[l as usize].is_empty());
        let c = &mut self.classes[class as usize];
        if c.members.is_empty() {
            // An idle class restarts from zero service.
            c.service = 0.0;
            c.rate = 0.0;
            c.last = now;
        }
        c.settle(now);
        let old_head = c.head_target();
        let was_empty = c.members.is_empty();
        c.members.push(Reverse((OrderedBytes(c.service + bytes as f64), flow)));
        let head_changed = was_empty || c.head_target() != old_head;
        if was_empty {
            for &l in path.links() {
                self.link_classes[l as usize].push(class);
            }
        }
        if alone {
            self.recomputations += 1;
            let c = &mut self.classes[class as usize];
            c.rate = self.topo.bottleneck(&path);
            c.version = c.version.wrapping_add(1);
            let tx_end = now + transmit_ns(bytes as f64, c.rate);
            c.lone_until = Some(tx_end);
            return FlowStart::Lone { tx_end, latency: path.latency };
        }
        self.reallocate(now, &path, if head_changed { Some(class) } else { None }, out);
        FlowStart::Shared
    }

    /// Settles a lone class on `link` before another flow uses the link: if
    /// its transmission is over it leaves the network; otherwise it becomes
    /// an ordinary class with a completion event (and its direct end is
    /// cancelled).
    fn resolve_lone(&mut self, now: Time, link: u32, out: &mut Vec<Reschedule>, cancelled: &mut Vec<u32>) {
        let Some(&class) = self.link_classes[link as usize].first() else { return };
        let c = &mut self.classes[class as usize];
        let Some(end) = c.lone_until.take() else { return };
        debug_assert_eq!(self.link_classes[link as usize].len(), 1, "a lone class shares no link");
        if end <= now {
            c.members.clear();
            c.rate = 0.0;
            c.version = c.version.wrapping_add(1);
            self.active -= 1;
            let path = c.path;
            for &l in path.links() {
                let list = &mut self.link_classes[l as usize];
                let pos = list.iter().position(|&x| x == class).expect("class registered on its links");
                list.swap_remove(pos);
            }
        } else {
            c.settle(now);
            c.version = c.version.wrapping_add(1);
            let Reverse((_, flow)) = *c.members.peek().expect("a lone class has its flow");
            cancelled.push(flow);
            out.push(Reschedule { class, version: c.version, done_at: end });
        }
    }

    /// Classes live as long as the network: an idle one keeps its heap's
    /// capacity and is simply off its links' lists.
    fn new_class(&mut self, now: Time, src: u32, dst: u32) -> u32 {
        self.classes.push(Class {
            path: self.topo.route(src, dst),
            members: BinaryHeap::new(),
            service: 0.0,
            rate: 0.0,
            last: now,
            version: 0,
            lone_until: None,
        });
        self.class_mark.push(0);
        let id = (self.classes.len() - 1) as u32;
        self.class_of_pair.insert((src, dst), id);
        id
    }

    /// Handles a class's completion event: every member whose target is
    /// reached is done. Appends `(flow, path latency)` for each to `done`;
    /// appends nothing if the event is stale.
    pub fn finish(&mut self, now: Time, class: u32, version: u32, done: &mut Vec<(u32, Time)>, out: &mut Vec<Reschedule>) {
        let c = &mut self.classes[class as usize];
        if c.version != version || c.members.is_empty() || c.lone_until.is_some() {
            return;
        }
        c.settle(now);
        let latency = c.path.latency;
        let tolerance = 1e-6 * c.service.abs().max(1.0);
        let first = done.len();
        while let Some(&Reverse((target, flow))) = c.members.peek() {
            // The head is due by construction of the event time; others
            // finish with it if they reached their target too.
            if target.0 > c.service + tolerance && done.len() > first {
                break;
            }
            c.members.pop();
            done.push((flow, latency));
        }
        self.active -= done.len() - first;
        let path = c.path;
        let emptied = c.members.is_empty();
        if emptied {
            c.rate = 0.0;
            c.version = c.version.wrapping_add(1);
            for &l in path.links() {
                let list = &mut self.link_classes[l as usize];
                let pos = list.iter().position(|&x| x == class).expect("class registered on its links");
                list.swap_remove(pos);
            }
        }
        self.reallocate(now, &path, if emptied { None } else { Some(class) }, out);
    }

    /// Recomputes max-min rates for the classes connected (through shared
    /// links, transitively) to `seed`'s links; others keep theirs. `force`
    /// is a class whose next completion must be rescheduled even if its rate
    /// stays the same (its head member changed).
    fn reallocate(&mut self, now: Time, seed: &Path, force: Option<u32>, out: &mut Vec<Reschedule>) {
        if let Some(c) = force {
            let alone = seed.links().iter().all(|&l| {
                let on = &self.link_classes[l as usize];
                on.len() == 1 && on[0] == c
            });
            if alone {
                // The common case of a lone route: its own bottleneck, no traversal.
                self.recomputations += 1;
                let cl = &mut self.classes[c as usize];
                cl.settle(now);
                let rate = self.topo.bottleneck(&cl.path) / cl.count() as f64;
                self.set_rate(now, c, rate, true, out);
                return;
            }
        } else if seed.links().iter().all(|&l| self.link_classes[l as usize].is_empty()) {
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
        for &l in seed.links() {
            if self.link_mark[l as usize] != epoch {
                self.link_mark[l as usize] = epoch;
                stack.push(l);
            }
        }
        while let Some(l) = stack.pop() {
            self.comp_links.push(l);
            for &c in &self.link_classes[l as usize] {
                if self.class_mark[c as usize] == epoch {
                    continue;
                }
                self.class_mark[c as usize] = epoch;
                self.comp_classes.push(c);
                for &l2 in self.classes[c as usize].path.links() {
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
        // Deterministic order regardless of traversal details.
        self.comp_classes.sort_unstable();
        self.comp_links.sort_unstable();
        for &c in &self.comp_classes {
            self.classes[c as usize].settle(now);
        }
        if self.comp_classes.len() == 1 {
            let c = self.comp_classes[0];
            let cl = &self.classes[c as usize];
            let rate = self.topo.bottleneck(&cl.path) / cl.count() as f64;
            self.set_rate(now, c, rate, force == Some(c), out);
            return;
        }
        self.caps.clear();
        for (i, &l) in self.comp_links.iter().enumerate() {
            self.local_of_link[l as usize] = i as u32;
            self.caps.push(self.topo.links[l as usize].capacity);
        }
        let k = self.comp_classes.len();
        self.local_paths.resize_with(k, Vec::new);
        self.weights.clear();
        for (i, &c) in self.comp_classes.iter().enumerate() {
            let p = &mut self.local_paths[i];
            p.clear();
            p.extend(self.classes[c as usize].path.links().iter().map(|&l| self.local_of_link[l as usize]));
            self.weights.push(self.classes[c as usize].count() as f64);
        }
        let rates = self.solver.solve_weighted(&self.caps, &self.local_paths[..k], &self.weights);
        for i in 0..k {
            let c = self.comp_classes[i];
            self.set_rate(now, c, rates[i], force == Some(c), out);
        }
    }

    fn set_rate(&mut self, now: Time, c: u32, rate: f64, force: bool, out: &mut Vec<Reschedule>) {
        let cl = &mut self.classes[c as usize];
        let unchanged = cl.rate > 0.0 && (rate - cl.rate).abs() <= 1e-12 * cl.rate;
        if unchanged && !force {
            return;
        }
        if !unchanged {
            cl.rate = rate;
        }
        cl.version = cl.version.wrapping_add(1);
        let left = (cl.head_target() - cl.service).max(0.0);
        out.push(Reschedule { class: c, version: cl.version, done_at: now + transmit_ns(left, cl.rate) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::topology::Topology;
    use crate::network::config::{Fidelity, NetworkSpec, TopologySpec};

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1.0)
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
        let spec = NetworkSpec {
            fidelity: Fidelity::Flow,
            bandwidth_bps: 8e9, // 1 byte/ns
            latency_ns: 0,
            topology: TopologySpec::Star,
            intra_host_bandwidth_bps: None,
            intra_host_latency_ns: 0,
            record_flows: false,
        };
        FlowNetwork::new(Topology::new(&spec, hosts).unwrap())
    }

    #[test]
    fn incast_shares_the_receiver_downlink_and_speeds_up_as_flows_leave() {
        let mut net = star(3);
        let (mut out, mut done, mut cancelled) = (Vec::new(), Vec::new(), Vec::new());
        // a is alone: its end is known at once.
        assert_eq!(net.start(0, 10, 0, 2, 1000, &mut out, &mut cancelled), FlowStart::Lone { tx_end: 1000, latency: 0 });
        assert!(out.is_empty());
        // At t=500, a has 500 left; b joins from another host: 0.5 B/ns each.
        assert_eq!(net.start(500, 11, 1, 2, 250, &mut out, &mut cancelled), FlowStart::Shared);
        assert_eq!(cancelled, vec![10], "a's direct end no longer holds");
        let latest = |out: &Vec<Reschedule>, class: u32| *out.iter().filter(|r| r.class == class).last().unwrap();
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
        assert_eq!(net.start(0, 1, 0, 1, 100, &mut out, &mut cancelled), FlowStart::Lone { tx_end: 100, latency: 0 });
        assert_eq!(net.start(100, 2, 0, 1, 50, &mut out, &mut cancelled), FlowStart::Lone { tx_end: 150, latency: 0 });
        assert!(cancelled.is_empty() && out.is_empty());
        assert_eq!(net.active_flows(), 1);
    }

    #[test]
    fn flows_of_one_route_share_it_and_finish_in_size_order() {
        let mut net = star(2);
        let (mut out, mut done, mut cancelled) = (Vec::new(), Vec::new(), Vec::new());
        net.start(0, 1, 0, 1, 300, &mut out, &mut cancelled);
        net.start(0, 2, 0, 1, 100, &mut out, &mut cancelled);
        assert_eq!(cancelled, vec![1]);
        assert_eq!(net.rate_between(0, 1), 0.5);
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

    #[test]
    fn flows_on_disjoint_links_do_not_disturb_each_other() {
        let mut net = star(4);
        let (mut out, mut cancelled) = (Vec::new(), Vec::new());
        assert!(matches!(net.start(0, 0, 0, 1, 100, &mut out, &mut cancelled), FlowStart::Lone { .. }));
        assert!(matches!(net.start(10, 1, 2, 3, 100, &mut out, &mut cancelled), FlowStart::Lone { .. }));
        assert!(out.is_empty() && cancelled.is_empty());
    }
}
