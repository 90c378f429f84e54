//! The parameter-server exchange of one message (a piece of a group, see
//! [`super::training::ps_pieces`]), written once for every PS variant:
//! each worker pushes its gradient to the server (`push_request`; with
//! in-network aggregation the pushes are one aggregation fan), the server
//! updates (once for all pushes, or per push when asynchronous), then
//! either multicasts the new parameters to every worker (`param_multicast`,
//! one multicast fan) or answers each worker with an ack
//! (`push_response`), which the worker follows with a pull request
//! (`pull_request`) that the server answers with the parameters
//! (`pull_response`), at once or, under an ordered distribution, later
//! (the caller places it). Under a per-request server cost
//! ([`super::server_cost`]) each push and pull request first passes the
//! server's request processor (a `serve` row), and what follows it waits for that.
//! Under a worker-side cost ([`super::client_cost`]) each request first holds
//! its worker's issuer (an `issue` row) and each response is handled there (a `handle` row).

use super::client_cost::RequestIssuers;
use super::server_cost::RequestProcessors;
use super::spec::TrainingSpec;
use crate::graph::{FanKind, FanSpec, Graph, Kind, Op};

/// Names of the exchange's ops.
#[derive(Debug, Clone, Copy)]
pub struct PsNames {
    pub push_request: u32,
    pub push_response: u32,
    pub pull_request: u32,
    pub pull_response: u32,
    pub update: u32,
    /// Interned only when the spec has an in-network mode.
    pub param_multicast: u32,
}

/// One message's exchange.
pub struct PsMessage<'a> {
    /// Server rank, its stream, the message's bytes (payload plus header) and its update time.
    pub server: u32,
    pub server_stream: u32,
    pub bytes: u64,
    pub update_ns: u64,
    /// `ready[w]`: the op after which worker w's gradient is ready.
    pub ready: &'a [u32],
    /// The switch sums the pushes (an aggregation fan).
    pub aggregate: bool,
    /// The server multicasts the new parameters instead of answering pulls.
    pub multicast: bool,
    /// The pull responses are placed by the caller (ordered distribution).
    pub hold_responses: bool,
    /// The servers' per-request cost (see [`super::server_cost`]); None: requests cost nothing.
    pub processors: Option<&'a RequestProcessors>,
    /// The workers' per-request cost (see [`super::client_cost`]); None: issuing and handling cost nothing.
    pub issuers: Option<&'a RequestIssuers>,
}

/// What the exchange made.
pub struct PsLowered {
    /// The server's updates (one, or one per worker when asynchronous).
    pub updates: Vec<u32>,
    /// Per worker: the op after which it holds the new parameters (none when held).
    pub ends: Vec<u32>,
    /// Held pull responses: (worker, its pull request (its `serve` row under a server cost), the rpc id); the
    /// caller hands each response to [`RequestIssuers::receive`] under a client cost.
    pub held: Vec<(u32, u32, i64)>,
}

/// Lowers one message's exchange; `tag` fills the group's common fields.
pub fn lower_ps_message(g: &mut Graph, spec: &TrainingSpec, names: &PsNames, tag: &dyn Fn(Op) -> Op, m: &PsMessage<'_>, rpc_counter: &mut i64) -> PsLowered {
    let n = spec.workers;
    let header = spec.header_bytes;
    let transfer = |name: u32, src: u32, dst: u32, bytes: u64, rpc: i64| {
        let mut op = tag(Op::new(Kind::Transfer, name, src));
        op.peer = dst as i32;
        op.bytes = bytes;
        op.rpc = rpc;
        op
    };
    let push_rpc = *rpc_counter;
    let pull_rpc = *rpc_counter + n as i64;
    *rpc_counter += 2 * n as i64;
    // The worker issues each request (a no-op without a client cost) and handles each response.
    let issued = |g: &mut Graph, w: u32, after: u32, bytes: u64| match m.issuers {
        Some(i) => i.issue(g, w, tag, after, bytes),
        None => after,
    };
    let received = |g: &mut Graph, arrived: u32| match m.issuers {
        Some(i) => i.receive(g, arrived),
        None => arrived,
    };
    let pushes: Vec<u32> = (0..n)
        .map(|w| {
            let after = issued(g, w, m.ready[w as usize], m.bytes);
            g.add(transfer(names.push_request, w, m.server, m.bytes, push_rpc + w as i64), &[after])
        })
        .collect();
    if m.aggregate && n > 1 {
        g.fans.push(FanSpec { kind: FanKind::Aggregate, ops: pushes.clone() });
    }
    // The server handles each request on its request processor (a no-op without a server cost).
    let handled = |g: &mut Graph, arrived: u32, rpc: i64| match m.processors {
        Some(p) => p.handle(g, n, m.server, tag, arrived, rpc),
        None => arrived,
    };
    let pushes: Vec<u32> = pushes.iter().enumerate().map(|(w, &p)| handled(g, p, push_rpc + w as i64)).collect();
    let mut update = tag(Op::new(Kind::Compute, names.update, m.server));
    update.stream = m.server_stream;
    let update_of = |g: &mut Graph, w: u32| -> u32 {
        let mut u = update.clone();
        u.duration = if spec.asynchronous { m.update_ns / n as u64 } else { m.update_ns };
        if let Some(p) = m.processors {
            p.serial_update(&mut u, n, m.server, m.bytes.saturating_sub(header)); // one server thread: on its processor
        }
        let id = if spec.asynchronous { g.add(u, &[pushes[w as usize]]) } else { g.add(u, &pushes) };
        if m.processors.is_some_and(|p| p.serial()) {
            g.continuations.push(id); // the thread that served the completing push updates at once
        }
        id
    };
    let shared = if spec.asynchronous { None } else { Some(update_of(g, 0)) };
    let mut out = PsLowered { updates: shared.into_iter().collect(), ends: Vec::new(), held: Vec::new() };
    if m.multicast {
        let upd = shared.expect("a multicast answers a synchronous update");
        out.ends = (0..n).map(|w| g.add(transfer(names.param_multicast, m.server, w, m.bytes, -1), &[upd])).collect();
        if n > 1 {
            g.fans.push(FanSpec { kind: FanKind::Multicast, ops: out.ends.clone() });
        }
        return out;
    }
    for w in 0..n {
        let upd = match shared {
            Some(u) => u,
            None => {
                let u = update_of(g, w);
                out.updates.push(u);
                u
            }
        };
        let ack = g.add(transfer(names.push_response, m.server, w, header, push_rpc + w as i64), &[upd]);
        let ack = received(g, ack);
        let after = issued(g, w, ack, header);
        let req = g.add(transfer(names.pull_request, w, m.server, header, pull_rpc + w as i64), &[after]);
        let req = handled(g, req, pull_rpc + w as i64);
        if m.hold_responses {
            out.held.push((w, req, pull_rpc + w as i64));
        } else {
            let resp = g.add(transfer(names.pull_response, m.server, w, m.bytes, pull_rpc + w as i64), &[req]);
            out.ends.push(received(g, resp));
        }
    }
    out
}
