//! The parameter server's per-request cost and its queue (the RPC paper's
//! PS_proc and PS_queue, section 3; Fig. 9: the cost grows linearly with the
//! server's concurrent connections).
//!
//! Each request a server handles (a push or a pull request) occupies that
//! server's *request processor* for `a + b * C` ns, where C is the number of
//! workers connected to the server. In the lowered PS every worker pushes and
//! pulls every message it owns, so every server that holds a message has all
//! `workers` as clients: C = `workers`. The processor is one FIFO stream per
//! server (`rpc`), so requests that arrive while it is busy wait in arrival
//! order; requests that arrive at the same instant queue in the order the
//! executor delivers them, which is deterministic. The request's next step
//! (the update for a push, the pull response for a pull) waits for its
//! `serve` compute row.
//!
//! **Serial update** (`update_ns`, `update_ns_per_byte`): a server that is
//! one thread (the PS capture's: `capture/ps_server.py` queues every request
//! and one processing thread serves the queue, updates and answers) also runs
//! each update on its request processor, for `update_ns + update_ns_per_byte
//! * bytes` (the message's payload) instead of the modelled update time. The
//! update runs there right after the `serve` of the push that completes it
//! (a continuation, [`Graph::continuations`]): the processing thread updates
//! inside its handling of that push, so requests that arrived meanwhile wait
//! for it, and requests that arrive while it runs wait too. An asynchronous
//! server runs one such update per push.
//!
//! `a = b = 0` and no update cost (the default) add no stream and no op: the
//! graph, and so every output, is the one built without this part.

use serde::Deserialize;

use crate::graph::{Graph, Kind, Op, PolicyKind};

/// `a_ns + b_ns * C` ns per request (C: the server's concurrent connections); a serial update of
/// `update_ns + update_ns_per_byte * bytes` on the same processor where either is above 0.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerCost {
    #[serde(default)]
    pub a_ns: u64,
    #[serde(default)]
    pub b_ns: u64,
    #[serde(default)]
    pub update_ns: u64,
    #[serde(default)]
    pub update_ns_per_byte: f64,
}

impl ServerCost {
    pub fn is_zero(&self) -> bool {
        self.a_ns == 0 && self.b_ns == 0 && !self.serial_update()
    }

    /// Whether the update runs on the request processor (see the module docs).
    pub fn serial_update(&self) -> bool {
        self.update_ns > 0 || self.update_ns_per_byte > 0.0
    }

    /// The time a serial update of a message of `bytes` (payload) holds the processor.
    pub fn update_ns_for(&self, bytes: u64) -> u64 {
        self.update_ns.saturating_add((self.update_ns_per_byte * bytes as f64).round() as u64)
    }

    /// The time one request holds the processor when the server has `connections` clients.
    pub fn per_request_ns(&self, connections: u32) -> u64 {
        self.a_ns.saturating_add(self.b_ns.saturating_mul(connections as u64))
    }
}

/// Checks a server cost against the strategy it is lowered with (`servers`: 0 for all-reduce; `in_network`:
/// whether an in-network mode is on).
pub fn validate(cost: &ServerCost, servers: u32, in_network: bool) -> Result<(), String> {
    let v = cost.update_ns_per_byte;
    if !(v.is_finite() && (0.0..=1e9).contains(&v)) {
        return Err(format!("server_cost.update_ns_per_byte = {v}: give a number of ns per byte from 0 to 1e9"));
    }
    if cost.is_zero() {
        return Ok(());
    }
    if servers == 0 {
        return Err("server_cost is the parameter server's per-request cost; the all-reduce strategy has no server".into());
    }
    if in_network {
        return Err("server_cost is modelled for the plain parameter server; in-network aggregation / multicast change which requests reach it".into());
    }
    Ok(())
}

/// The servers' request processors: one FIFO stream per server, made only
/// when the cost is not zero (see the module docs).
#[derive(Debug, Clone)]
pub struct RequestProcessors {
    /// Stream of each server (by server index).
    streams: Vec<u32>,
    name: u32,
    per_request_ns: u64,
    cost: ServerCost,
}

impl RequestProcessors {
    /// The processors of `servers` servers (ranks `workers..`), each with all `workers` as clients; None when
    /// the cost is zero: nothing is added to the graph.
    pub fn new(g: &mut Graph, cost: ServerCost, workers: u32, servers: u32) -> Option<Self> {
        if cost.is_zero() || servers == 0 {
            return None;
        }
        let streams = (0..servers).map(|s| g.new_stream(workers + s, "rpc", PolicyKind::Fifo)).collect();
        Some(RequestProcessors { streams, name: g.op_name("serve"), per_request_ns: cost.per_request_ns(workers), cost })
    }

    /// Whether updates run on the processors (a serial update).
    pub fn serial(&self) -> bool {
        self.cost.serial_update()
    }

    /// The time one request holds a processor.
    pub fn per_request_ns(&self) -> u64 {
        self.per_request_ns
    }

    /// Places `update` (an update op of server rank `server`, of `workers` workers, for a message of `bytes`
    /// payload) on the server's processor with the serial update's duration; unchanged without a serial update.
    pub fn serial_update(&self, update: &mut Op, workers: u32, server: u32, bytes: u64) {
        if self.cost.serial_update() {
            update.stream = self.streams[(server - workers) as usize];
            update.duration = self.cost.update_ns_for(bytes);
        }
    }

    /// Server rank `server` (of `workers` workers) handles the request that
    /// `arrived` (its transfer op): a `serve` compute row on the server's
    /// processor; `tag` fills the group's fields, `rpc` is the request's rpc id.
    pub fn handle(&self, g: &mut Graph, workers: u32, server: u32, tag: &dyn Fn(Op) -> Op, arrived: u32, rpc: i64) -> u32 {
        let mut op = tag(Op::new(Kind::Compute, self.name, server));
        op.stream = self.streams[(server - workers) as usize];
        op.duration = self.per_request_ns;
        op.rpc = rpc;
        g.add(op, &[arrived])
    }
}
