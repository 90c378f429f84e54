//! Network models: they time transfers. Placeholder adapter over the
//! foundation's models while the network rework lands.

pub mod config;
pub mod maxmin;
pub mod topology;

pub use config::{Fidelity, NetworkSpec, Routing, TopologySpec};
pub use maxmin::{max_min_fair, FlowNetwork, FlowStart, Reschedule};
pub use topology::{transmit_ns, Topology};

use crate::engine::Time;

pub trait Scheduler {
    fn schedule(&mut self, at: Time, token: u64);
}

#[derive(Debug, Clone, Copy)]
pub struct TransferRequest {
    pub id: u32,
    pub message: u64,
    pub src: u32,
    pub dst: u32,
    pub bytes: u64,
    pub band: u8,
    pub tenant: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    pub id: u32,
    pub tx_end: Time,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct NetworkStats {
    pub recomputations: u64,
    pub flows: u64,
}

#[derive(Debug, Clone, Copy)]
pub struct FlowRecord {
    pub message: u64,
    pub src: u32,
    pub dst: u32,
    pub bytes: u64,
    pub band: u8,
    pub tenant: u32,
    pub start: Time,
    pub tx_end: Time,
    pub delivered: Time,
}

pub trait NetworkModel {
    fn start(&mut self, now: Time, req: TransferRequest, sched: &mut dyn Scheduler) -> Result<(), String>;
    fn on_event(&mut self, now: Time, token: u64, sched: &mut dyn Scheduler, out: &mut Vec<Delivery>) -> Result<(), String>;
    fn stats(&self) -> NetworkStats;
    fn take_flows(&mut self) -> Vec<FlowRecord>;
}

pub fn build_network(spec: &NetworkSpec, host_of_rank: &[u32]) -> Result<Box<dyn NetworkModel>, String> {
    let hosts = host_of_rank.iter().copied().max().map_or(0, |h| h + 1);
    let topo = Topology::new(spec, hosts)?;
    Ok(match spec.fidelity {
        Fidelity::Analytic => Box::new(Analytic { topo, hosts: host_of_rank.to_vec(), tx_end: Vec::new() }),
        Fidelity::Flow => Box::new(Flow {
            net: FlowNetwork::new(topo),
            hosts: host_of_rank.to_vec(),
            slots: Vec::new(),
            out: Vec::new(),
            cancelled: Vec::new(),
            done: Vec::new(),
        }),
    })
}

struct Analytic {
    topo: Topology,
    hosts: Vec<u32>,
    tx_end: Vec<Time>,
}

impl NetworkModel for Analytic {
    fn start(&mut self, now: Time, req: TransferRequest, sched: &mut dyn Scheduler) -> Result<(), String> {
        let path = self.topo.route(self.hosts[req.src as usize], self.hosts[req.dst as usize]);
        let tx = transmit_ns(req.bytes as f64, self.topo.bottleneck(&path));
        if self.tx_end.len() <= req.id as usize {
            self.tx_end.resize(req.id as usize + 1, 0);
        }
        self.tx_end[req.id as usize] = now + tx;
        sched.schedule(now + tx + path.latency, req.id as u64);
        Ok(())
    }
    fn on_event(&mut self, _now: Time, token: u64, _s: &mut dyn Scheduler, out: &mut Vec<Delivery>) -> Result<(), String> {
        out.push(Delivery { id: token as u32, tx_end: self.tx_end[token as usize] });
        Ok(())
    }
    fn stats(&self) -> NetworkStats {
        NetworkStats::default()
    }
    fn take_flows(&mut self) -> Vec<FlowRecord> {
        Vec::new()
    }
}

const DELIVER: u64 = 1 << 63;

struct Flow {
    net: FlowNetwork,
    hosts: Vec<u32>,
    /// generation, tx_end per transfer slot
    slots: Vec<(u32, Time)>,
    out: Vec<Reschedule>,
    cancelled: Vec<u32>,
    done: Vec<(u32, Time)>,
}

impl Flow {
    fn flush(&mut self, sched: &mut dyn Scheduler) {
        for r in self.out.drain(..) {
            sched.schedule(r.done_at, ((r.version as u64) << 32) | r.class as u64);
        }
    }
}

impl NetworkModel for Flow {
    fn start(&mut self, now: Time, req: TransferRequest, sched: &mut dyn Scheduler) -> Result<(), String> {
        if self.slots.len() <= req.id as usize {
            self.slots.resize(req.id as usize + 1, (0, 0));
        }
        let (src, dst) = (self.hosts[req.src as usize], self.hosts[req.dst as usize]);
        let started = self.net.start(now, req.id, src, dst, req.bytes, &mut self.out, &mut self.cancelled);
        for &c in &self.cancelled {
            self.slots[c as usize].0 = self.slots[c as usize].0.wrapping_add(1);
        }
        self.cancelled.clear();
        if let FlowStart::Lone { tx_end, latency } = started {
            let slot = &mut self.slots[req.id as usize];
            slot.1 = tx_end;
            sched.schedule(tx_end + latency, DELIVER | ((slot.0 as u64) << 32) | req.id as u64);
        }
        self.flush(sched);
        Ok(())
    }
    fn on_event(&mut self, now: Time, token: u64, sched: &mut dyn Scheduler, out: &mut Vec<Delivery>) -> Result<(), String> {
        if token & DELIVER != 0 {
            let id = (token & 0xffff_ffff) as u32;
            let generation = ((token >> 32) & 0x7fff_ffff) as u32;
            let slot = &mut self.slots[id as usize];
            if slot.0 & 0x7fff_ffff != generation {
                return Ok(());
            }
            slot.0 = slot.0.wrapping_add(1);
            out.push(Delivery { id, tx_end: slot.1 });
            return Ok(());
        }
        let (class, version) = ((token & 0xffff_ffff) as u32, (token >> 32) as u32);
        self.net.finish(now, class, version, &mut self.done, &mut self.out);
        for &(id, latency) in &self.done {
            let slot = &mut self.slots[id as usize];
            slot.1 = now;
            sched.schedule(now + latency, DELIVER | ((slot.0 as u64 & 0x7fff_ffff) << 32) | id as u64);
        }
        self.done.clear();
        self.flush(sched);
        Ok(())
    }
    fn stats(&self) -> NetworkStats {
        NetworkStats { recomputations: self.net.recomputations(), flows: 0 }
    }
    fn take_flows(&mut self) -> Vec<FlowRecord> {
        Vec::new()
    }
}
