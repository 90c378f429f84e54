//! Max-min fair sharing (progressive filling) and the flow-level network
//! that recomputes it, incrementally, whenever a flow starts or finishes.

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
    solver.solve(capacities, flow_links.iter().map(|v| v.as_slice()))
}

#[derive(Default)]
struct WaterFill {
    remaining: Vec<f64>,
    unfrozen: Vec<u32>,
    link_flows: Vec<Vec<u32>>,
}

impl WaterFill {
    fn solve<'a>(&mut self, capacities: &[f64], flows: impl Iterator<Item = &'a [u32]> + Clone) -> Vec<f64> {
        let nl = capacities.len();
        self.remaining.clear();
        self.remaining.extend_from_slice(capacities);
        self.unfrozen.clear();
        self.unfrozen.resize(nl, 0);
        self.link_flows.iter_mut().for_each(Vec::clear);
        self.link_flows.resize_with(nl, Vec::new);
        let paths: Vec<&[u32]> = flows.collect();
        for (f, links) in paths.iter().enumerate() {
            for &l in links.iter() {
                self.unfrozen[l as usize] += 1;
                self.link_flows[l as usize].push(f as u32);
            }
        }
        let mut rate = vec![f64::NAN; paths.len()];
        let mut left = paths.len();
        while left > 0 {
            let mut best = usize::MAX;
            let mut best_share = f64::INFINITY;
            for l in 0..nl {
                if self.unfrozen[l] > 0 {
                    let share = self.remaining[l].max(0.0) / self.unfrozen[l] as f64;
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
                for &l in paths[f] {
                    self.remaining[l as usize] -= best_share;
                    self.unfrozen[l as usize] -= 1;
                }
            }
        }
        rate
    }
}

#[derive(Debug, Clone)]
struct Flow {
    path: Path,
    /// Bytes not yet transmitted as of `last`.
    remaining: f64,
    rate: f64,
    last: Time,
    version: u32,
    active: bool,
}

/// A flow whose transmission-end time was (re)computed: the executor
/// schedules `(flow, version)` at `done_at`; older versions are stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reschedule {
    pub flow: u32,
    pub version: u32,
    pub done_at: Time,
}

/// Flow-level network: every active flow gets its max-min fair rate.
pub struct FlowNetwork {
    topo: Topology,
    flows: Vec<Flow>,
    free: Vec<u32>,
    link_flows: Vec<Vec<u32>>,
    // scratch, reused across recomputations
    link_mark: Vec<u32>,
    flow_mark: Vec<u32>,
    epoch: u32,
    comp_links: Vec<u32>,
    comp_flows: Vec<u32>,
    local_of_link: Vec<u32>,
    local_paths: Vec<Vec<u32>>,
    caps: Vec<f64>,
    solver: WaterFill,
    recomputations: u64,
}

impl FlowNetwork {
    pub fn new(topo: Topology) -> Self {
        let nl = topo.links.len();
        FlowNetwork {
            topo,
            flows: Vec::new(),
            free: Vec::new(),
            link_flows: vec![Vec::new(); nl],
            link_mark: vec![0; nl],
            flow_mark: Vec::new(),
            epoch: 0,
            comp_links: Vec::new(),
            comp_flows: Vec::new(),
            local_of_link: vec![0; nl],
            local_paths: Vec::new(),
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
        self.flows.iter().filter(|f| f.active).count()
    }

    /// Current rate of an active flow, in bytes/ns.
    pub fn rate(&self, flow: u32) -> f64 {
        self.flows[flow as usize].rate
    }

    /// Starts a flow of `bytes` from `src` to `dst`; appends every flow whose
    /// end time changed (the new one included) to `out`.
    pub fn start(&mut self, now: Time, src: u32, dst: u32, bytes: u64, out: &mut Vec<Reschedule>) -> u32 {
        let path = self.topo.route(src, dst);
        let flow = Flow { path, remaining: bytes as f64, rate: 0.0, last: now, version: 0, active: true };
        let id = match self.free.pop() {
            Some(id) => {
                self.flows[id as usize] = flow;
                id
            }
            None => {
                self.flows.push(flow);
                self.flow_mark.push(0);
                (self.flows.len() - 1) as u32
            }
        };
        for &l in path.links() {
            self.link_flows[l as usize].push(id);
        }
        self.reallocate(now, &path, out);
        id
    }

    /// Handles a transmission-end event. Returns the path latency still to
    /// elapse before delivery, or None if the event is stale.
    pub fn finish(&mut self, now: Time, flow: u32, version: u32, out: &mut Vec<Reschedule>) -> Option<Time> {
        let f = &mut self.flows[flow as usize];
        if !f.active || f.version != version {
            return None;
        }
        f.active = false;
        f.remaining = 0.0;
        let path = f.path;
        for &l in path.links() {
            let list = &mut self.link_flows[l as usize];
            let pos = list.iter().position(|&x| x == flow).expect("flow registered on its links");
            list.swap_remove(pos);
        }
        self.free.push(flow);
        self.reallocate(now, &path, out);
        Some(path.latency)
    }

    /// Recomputes max-min rates for the flows connected (through shared
    /// links, transitively) to `seed`'s links; flows elsewhere keep theirs.
    fn reallocate(&mut self, now: Time, seed: &Path, out: &mut Vec<Reschedule>) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.link_mark.iter_mut().for_each(|m| *m = 0);
            self.flow_mark.iter_mut().for_each(|m| *m = 0);
            self.epoch = 1;
        }
        let epoch = self.epoch;
        self.comp_links.clear();
        self.comp_flows.clear();
        let mut stack: Vec<u32> = Vec::new();
        for &l in seed.links() {
            if self.link_mark[l as usize] != epoch {
                self.link_mark[l as usize] = epoch;
                stack.push(l);
            }
        }
        while let Some(l) = stack.pop() {
            self.comp_links.push(l);
            for &f in &self.link_flows[l as usize] {
                if self.flow_mark[f as usize] == epoch {
                    continue;
                }
                self.flow_mark[f as usize] = epoch;
                self.comp_flows.push(f);
                for &l2 in self.flows[f as usize].path.links() {
                    if self.link_mark[l2 as usize] != epoch {
                        self.link_mark[l2 as usize] = epoch;
                        stack.push(l2);
                    }
                }
            }
        }
        if self.comp_flows.is_empty() {
            return;
        }
        self.recomputations += 1;
        // Deterministic order regardless of traversal details.
        self.comp_flows.sort_unstable();
        self.comp_links.sort_unstable();
        for &f in &self.comp_flows {
            let fl = &mut self.flows[f as usize];
            fl.remaining = (fl.remaining - fl.rate * (now - fl.last) as f64).max(0.0);
            fl.last = now;
        }
        if self.comp_flows.len() == 1 {
            let f = self.comp_flows[0];
            let rate = self.topo.bottleneck(&self.flows[f as usize].path);
            self.set_rate(now, f, rate, out);
            return;
        }
        self.caps.clear();
        for (i, &l) in self.comp_links.iter().enumerate() {
            self.local_of_link[l as usize] = i as u32;
            self.caps.push(self.topo.links[l as usize].capacity);
        }
        self.local_paths.resize_with(self.comp_flows.len(), Vec::new);
        for (i, &f) in self.comp_flows.iter().enumerate() {
            let p = &mut self.local_paths[i];
            p.clear();
            p.extend(self.flows[f as usize].path.links().iter().map(|&l| self.local_of_link[l as usize]));
        }
        let rates = self
            .solver
            .solve(&self.caps, self.local_paths[..self.comp_flows.len()].iter().map(|v| v.as_slice()));
        for i in 0..self.comp_flows.len() {
            let f = self.comp_flows[i];
            self.set_rate(now, f, rates[i], out);
        }
    }

    fn set_rate(&mut self, now: Time, f: u32, rate: f64, out: &mut Vec<Reschedule>) {
        let fl = &mut self.flows[f as usize];
        let unchanged = fl.rate > 0.0 && (rate - fl.rate).abs() <= 1e-12 * fl.rate;
        if unchanged {
            return;
        }
        fl.rate = rate;
        fl.version = fl.version.wrapping_add(1);
        out.push(Reschedule { flow: f, version: fl.version, done_at: now + transmit_ns(fl.remaining, rate) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::topology::Topology;
    use crate::spec::{Fidelity, NetworkSpec, Topology as TopologySpec};

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
        };
        FlowNetwork::new(Topology::new(&spec, hosts).unwrap())
    }

    #[test]
    fn incast_shares_the_receiver_downlink_and_speeds_up_as_flows_leave() {
        let mut net = star(3);
        let mut out = Vec::new();
        let a = net.start(0, 0, 2, 1000, &mut out);
        assert_eq!(out, vec![Reschedule { flow: a, version: 1, done_at: 1000 }]);
        out.clear();
        // At t=500, a has 500 left; b joins: both at 0.5 B/ns.
        let b = net.start(500, 1, 2, 250, &mut out);
        assert_eq!(out.len(), 2);
        assert!(out.contains(&Reschedule { flow: a, version: 2, done_at: 1500 }));
        assert!(out.contains(&Reschedule { flow: b, version: 1, done_at: 1000 }));
        out.clear();
        // b ends at 1000; a has 250 left and gets the full link back.
        assert_eq!(net.finish(1000, b, 1, &mut out), Some(0));
        assert_eq!(out, vec![Reschedule { flow: a, version: 3, done_at: 1250 }]);
        out.clear();
        // The stale event for a (version 2) is ignored.
        assert_eq!(net.finish(1500, a, 2, &mut out), None);
        assert_eq!(net.finish(1250, a, 3, &mut out), Some(0));
        assert_eq!(net.active_flows(), 0);
    }

    #[test]
    fn flows_on_disjoint_links_do_not_disturb_each_other() {
        let mut net = star(4);
        let mut out = Vec::new();
        net.start(0, 0, 1, 100, &mut out);
        out.clear();
        net.start(10, 2, 3, 100, &mut out);
        assert_eq!(out.len(), 1, "only the new flow is rescheduled");
        assert_eq!(net.recomputations(), 2);
    }
}
