//! The parameter-server workers' own per-request cost: the time a worker's
//! training loop is held issuing a request (an `rpc_async` call: pickling,
//! TensorPipe's hand-off) and handling a response (reading it from the
//! receive queue, an ack or copying the parameters into the model).
//!
//! A worker's request issuer is its training thread: the worker's compute
//! stream (FIFO), which also runs its forward and backward ops, as a Python
//! training loop that calls `rpc_async` after `backward()` does. A push
//! whose gradient is ready while later layers' backward ops run waits for
//! the running op, so the last push of an iteration leaves after the whole
//! backward and every earlier issue. Every push and pull request the worker sends first holds
//! it for an `issue` compute row of `issue_ns + issue_ns_per_byte * bytes`
//! (bytes: the request's), and only then goes on the wire. Every push and
//! pull response the worker receives holds it for a `handle` row of
//! `receive_ns + receive_ns_per_byte * bytes` (the response's bytes); what
//! follows the response (the pull request after a push's ack, the next
//! forward after a pull) waits for that row. One thread per worker: requests
//! and responses that find it busy wait in the order they became ready, so
//! W requests ready at t0 on an idle thread leave at t0 + k c (k = 1..W).
//!
//! A response that reaches a worker whose training thread is idle (blocked
//! waiting for it: nothing running on the compute stream) is taken
//! `wakeup_ns` later: the loop's wake-up (the RPC thread's callback queues
//! the response; the training thread must be scheduled and take the GIL).
//! Its `handle` row starts then, holding the thread from the arrival on
//! ([`Graph::wakeups`]). A response that finds the thread busy waits its turn
//! as before, with no wake-up: a response arriving at an idle worker at t is
//! handled from t + w, one arriving while the thread is busy until b > t from
//! b. A wake-up without a receive cost adds a `handle` row of 0 ns.
//!
//! A zero cost (the default) adds no stream and no op: the graph, and so
//! every output, is the one built without this part. Measured by
//! `ddlsim capture ps` (`client_cost` in its metadata).

use serde::Deserialize;

use crate::graph::{Graph, Kind, Op};

/// The worker's per-request cost (ns; per-byte terms in ns per byte).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClientCost {
    #[serde(default)]
    pub issue_ns: u64,
    #[serde(default)]
    pub issue_ns_per_byte: f64,
    #[serde(default)]
    pub receive_ns: u64,
    #[serde(default)]
    pub receive_ns_per_byte: f64,
    /// The wake-up of an idle worker's training thread before it takes a response (see the module docs).
    #[serde(default)]
    pub wakeup_ns: u64,
}

fn per_byte(ns: u64, per_byte: f64, bytes: u64) -> u64 {
    ns.saturating_add((per_byte * bytes as f64).round() as u64)
}

impl ClientCost {
    pub fn is_zero(&self) -> bool {
        !self.issues() && !self.receives()
    }

    fn issues(&self) -> bool {
        self.issue_ns > 0 || self.issue_ns_per_byte > 0.0
    }

    /// Whether a response gets a `handle` row: a receive cost or a wake-up.
    fn receives(&self) -> bool {
        self.receive_ns > 0 || self.receive_ns_per_byte > 0.0 || self.wakeup_ns > 0
    }

    /// The time issuing a request of `bytes` holds the worker.
    pub fn issue_ns_for(&self, bytes: u64) -> u64 {
        per_byte(self.issue_ns, self.issue_ns_per_byte, bytes)
    }

    /// The time handling a response of `bytes` holds the worker.
    pub fn receive_ns_for(&self, bytes: u64) -> u64 {
        per_byte(self.receive_ns, self.receive_ns_per_byte, bytes)
    }
}

/// Checks a client cost against the strategy it is lowered with (`servers`: 0 for all-reduce; `in_network`:
/// whether an in-network mode is on).
pub fn validate(cost: &ClientCost, servers: u32, in_network: bool) -> Result<(), String> {
    for (name, v) in [("issue_ns_per_byte", cost.issue_ns_per_byte), ("receive_ns_per_byte", cost.receive_ns_per_byte)] {
        if !(v.is_finite() && (0.0..=1e9).contains(&v)) {
            return Err(format!("client_cost.{name} = {v}: give a number of ns per byte from 0 to 1e9"));
        }
    }
    if cost.is_zero() {
        return Ok(());
    }
    if servers == 0 {
        return Err("client_cost is the parameter-server workers' per-request cost; the all-reduce strategy has no requests".into());
    }
    if in_network {
        return Err("client_cost is modelled for the plain parameter server; in-network aggregation / multicast change which requests a worker sends".into());
    }
    Ok(())
}

/// The workers' request issuers: each worker's compute stream, used only when
/// the cost is not zero (see the module docs).
#[derive(Debug, Clone)]
pub struct RequestIssuers {
    /// Compute stream of each worker (by worker rank).
    streams: Vec<u32>,
    issue: u32,
    handle: u32,
    cost: ClientCost,
}

impl RequestIssuers {
    /// The issuers of workers 0.. (`compute_streams[w]`: worker w's compute stream); None when the cost is zero:
    /// nothing is added to the graph.
    pub fn new(g: &mut Graph, cost: ClientCost, compute_streams: &[u32]) -> Option<Self> {
        if cost.is_zero() {
            return None;
        }
        Some(RequestIssuers { streams: compute_streams.to_vec(), issue: g.op_name("issue"), handle: g.op_name("handle"), cost })
    }

    fn row(&self, g: &mut Graph, mut op: Op, duration: u64, after: u32, wakeup: u64) -> u32 {
        op.stream = self.streams[op.rank as usize];
        op.duration = duration;
        g.add_woken(op, &[after], wakeup)
    }

    /// Worker `worker` issues a request of `bytes` once `after` is done: its `issue` row (`tag` fills the
    /// group's fields), which the request's transfer waits for; `after` itself without an issue cost. The row
    /// has no rpc id: a worker's compute rows with the rpc are its handling of the response (W_queue, W_proc of
    /// `ddlsim.analyze.rpc_table` start at the response), and the issue comes before the request.
    pub fn issue(&self, g: &mut Graph, worker: u32, tag: &dyn Fn(Op) -> Op, after: u32, bytes: u64) -> u32 {
        if !self.cost.issues() {
            return after;
        }
        let op = tag(Op::new(Kind::Compute, self.issue, worker));
        self.row(g, op, self.cost.issue_ns_for(bytes), after, 0)
    }

    /// The worker that response transfer `arrived` goes to handles it: a `handle` row with the response's
    /// fields, which what follows the response waits for, woken `wakeup_ns` after the arrival where the worker's
    /// thread is idle; `arrived` itself without a receive cost or wake-up.
    pub fn receive(&self, g: &mut Graph, arrived: u32) -> u32 {
        if !self.cost.receives() {
            return arrived;
        }
        let response = &g.ops[arrived as usize];
        let mut op = Op::new(Kind::Compute, self.handle, response.peer as u32);
        (op.iteration, op.layer, op.tensor, op.group, op.priority, op.band, op.tenant, op.rpc) = (
            response.iteration, response.layer, response.tensor, response.group, response.priority, response.band, response.tenant, response.rpc,
        );
        let duration = self.cost.receive_ns_for(response.bytes);
        self.row(g, op, duration, arrived, self.cost.wakeup_ns)
    }
}
