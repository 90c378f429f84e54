//! Network models: they time transfers. `analytic` charges latency +
//! bytes/bandwidth with no contention; `flow` shares links max-min fairly.

pub mod maxmin;
pub mod topology;

pub use maxmin::{max_min_fair, FlowNetwork, FlowStart, Reschedule};
pub use topology::{transmit_ns, Topology};

use crate::engine::Time;
use crate::spec::{Fidelity, NetworkSpec};

pub enum Network {
    Analytic(Topology),
    Flow(FlowNetwork),
}

/// What starting a transfer produced.
pub enum Started {
    /// Delivered at this time unless later cancelled (flow model only).
    DeliveredAt(Time),
    /// Its end comes through completion events.
    Pending,
}

impl Network {
    pub fn new(spec: &NetworkSpec, hosts: u32) -> Result<Self, String> {
        let topo = Topology::new(spec, hosts)?;
        Ok(match spec.fidelity {
            Fidelity::Analytic => Network::Analytic(topo),
            Fidelity::Flow => Network::Flow(FlowNetwork::new(topo)),
        })
    }

    /// Starts transfer `id` (the caller's); see [`FlowNetwork::start`].
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &mut self,
        now: Time,
        id: u32,
        src: u32,
        dst: u32,
        bytes: u64,
        out: &mut Vec<Reschedule>,
        cancelled: &mut Vec<u32>,
    ) -> Started {
        match self {
            Network::Analytic(topo) => {
                let path = topo.route(src, dst);
                Started::DeliveredAt(now + path.latency + transmit_ns(bytes as f64, topo.bottleneck(&path)))
            }
            Network::Flow(net) => match net.start(now, id, src, dst, bytes, out, cancelled) {
                FlowStart::Lone { tx_end, latency } => Started::DeliveredAt(tx_end + latency),
                FlowStart::Shared => Started::Pending,
            },
        }
    }

    /// Flow-level completion event of a route class; see [`FlowNetwork::finish`].
    pub fn finish(&mut self, now: Time, class: u32, version: u32, done: &mut Vec<(u32, Time)>, out: &mut Vec<Reschedule>) {
        if let Network::Flow(net) = self {
            net.finish(now, class, version, done, out);
        }
    }

    pub fn recomputations(&self) -> u64 {
        match self {
            Network::Analytic(_) => 0,
            Network::Flow(net) => net.recomputations(),
        }
    }
}
