//! Lowers synchronous data-parallel SGD into a workload graph.
//!
//! Per iteration and worker: forward layer by layer, backward in reverse on
//! the worker's compute stream. The gradients travel in *groups* chosen by
//! a grouping pass upstream (one group per tensor is wait-free
//! backpropagation; buckets, fusion and merge plans are other passes): a
//! group is ready when the backward of its earliest layer ends (backward
//! runs from the last layer down, so all its layers are done then).
//! Gradient synchronisation per group:
//! - `allreduce`: one collective over all workers on each worker's
//!   communication stream, with the chosen algorithm;
//! - `ps`: push (gradient) to the owning server, server update once all
//!   workers pushed, push acknowledgement, pull request, pull response
//!   (parameters): the four messages of a PS push/pull pair.
//! With `barrier`, the next iteration's forward waits for every worker's
//! synchronisation; without, a layer's forward waits only for the groups
//! holding its tensors.
//!
//! Parameter-server variants (network-operator paper §9):
//! - `ps_split`: every group is split evenly over all servers (§9.1), one
//!   share per server (the first `bytes % servers` shares one byte larger);
//! - `chunk_bytes` (message pipelining, §9.2): each share travels as
//!   messages of at most that size; the server updates and returns a
//!   message as soon as every worker's copy of it arrived;
//! - `distribution` (§9.4): `immediate` (default) returns each parameter
//!   right after its update; `round_robin` (one parameter at a time to every
//!   worker) and `block` (the whole model to one worker, then the next)
//!   send one pull response at a time per server, in that order. With
//!   `barrier` these start only after a server-side global barrier over all
//!   updates of the iteration and go in model (forward) order; without, in
//!   the order the updates become ready. Either way a layer's forward starts
//!   when its parameters arrived (forward pipelining, §8.1.2);
//! - `asynchronous`: every worker's push is applied on its own (no
//!   cross-worker update barrier, the update costs `update_ns / workers`)
//!   and answered at once; a worker's forward waits only for its own pulls.
//!   `staleness = s` adds a bound: iteration i starts only after every
//!   worker's iteration i - s - 1 updates were applied;
//! - `stagger_ns` (backpropagation staggering, §8.1.1): before its first
//!   backward op each iteration, worker w idles `w * stagger_ns` (`fixed`)
//!   or a uniform draw from [0, stagger_ns] (`random`, its own RNG stream).

use rand::Rng;
use rand_distr::{Distribution as _, StandardNormal};

use super::ps::{lower_ps_message, PsMessage, PsNames};
pub use super::spec::*;
use crate::graph::{CollectiveSpec, CollectiveType, Graph, Kind, Op, PolicyKind};
use crate::rng::{stream, Purpose};

/// `ns` scaled by max(0, 1 + cv z), z standard normal from the op's own stream.
fn jittered(spec: &TrainingSpec, ns: u64, purpose: Purpose, rank: u32, iteration: i32, layer: usize) -> u64 {
    if spec.jitter == 0.0 || ns == 0 {
        return ns;
    }
    let z: f64 = StandardNormal.sample(&mut stream(spec.seed, purpose, rank, iteration, layer as u64));
    ((ns as f64) * (1.0 + spec.jitter * z).max(0.0)).round() as u64
}

/// Idle time of worker `w` before its first backward op in `iteration`.
pub fn stagger_ns(spec: &TrainingSpec, w: u32, iteration: i32) -> u64 {
    if spec.stagger_ns == 0 {
        return 0;
    }
    match spec.stagger {
        StaggerMode::Fixed => spec.stagger_ns.saturating_mul(w as u64),
        StaggerMode::Random => stream(spec.seed, Purpose::Stagger, w, iteration, 0).gen_range(0..=spec.stagger_ns),
    }
}

/// One PS message of a group: (server, payload bytes, server update time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub server: u32,
    pub bytes: u64,
    pub update_ns: u64,
}

/// `part` of `total` scaled to `whole` (floor), in 128-bit arithmetic.
fn share(whole: u64, part: u64, total: u64) -> u64 {
    if total == 0 {
        return 0;
    }
    ((whole as u128 * part as u128) / total as u128) as u64
}

/// The messages a group travels as under PS: one share per server with
/// `ps_split` (else the group's server), each cut into messages of at most
/// `chunk_bytes`. Update time is divided in proportion to bytes (the parts
/// add up to the group's).
pub fn ps_pieces(spec: &TrainingSpec, group: &GroupSpec) -> Vec<Piece> {
    let k = spec.servers().max(1) as u64;
    let shares: Vec<(u32, u64, u64)> = if spec.ps_split && k > 1 {
        let (q, r) = (group.bytes / k, group.bytes % k);
        let mut start = 0;
        (0..k)
            .filter_map(|s| {
                let b = q + u64::from(s < r);
                let begin = start;
                start += b;
                (b > 0).then_some((s as u32, begin, b))
            })
            .collect()
    } else {
        vec![(if spec.ps_split { 0 } else { group.server }, 0, group.bytes)]
    };
    let shares = if shares.is_empty() { vec![(0, 0, 0)] } else { shares };
    let mut out = Vec::new();
    for (server, begin, b) in shares {
        let c = if spec.chunk_bytes > 0 && b > spec.chunk_bytes { spec.chunk_bytes } else { b.max(1) };
        let mut off = 0;
        loop {
            let len = c.min(b - off);
            let (lo, hi) = (begin + off, begin + off + len);
            let update_ns =
                if group.bytes == 0 { group.update_ns } else { share(group.update_ns, hi, group.bytes) - share(group.update_ns, lo, group.bytes) };
            out.push(Piece { server, bytes: len, update_ns });
            off += len;
            if off >= b {
                break;
            }
        }
    }
    out
}

/// ByteScheduler's partitions of `bytes`: ceil(bytes / partition) parts,
/// the first `bytes % parts` one byte larger; the whole when it fits (or `partition` is 0).
pub fn partitions(bytes: u64, partition: u64) -> Vec<u64> {
    if partition == 0 || bytes <= partition {
        return vec![bytes];
    }
    let parts = bytes.div_ceil(partition);
    let (q, r) = (bytes / parts, bytes % parts);
    (0..parts).map(|i| q + u64::from(i < r)).collect()
}

struct Names {
    forward: u32,
    backward: u32,
    update: u32,
    push_request: u32,
    push_response: u32,
    pull_request: u32,
    pull_response: u32,
    allreduce: u32,
    barrier: u32,
}

pub fn build_graph(spec: &TrainingSpec) -> Result<Graph, String> {
    build_graph_classes(spec, None)
}

/// [`build_graph`] with one worker per rank class (its representative; see
/// [`super::classes`]) when `classes` is given; the graph keeps them, with
/// each op's id in the per-rank graph.
pub fn build_graph_classes(spec: &TrainingSpec, classes: Option<crate::graph::RankClasses>) -> Result<Graph, String> {
    spec.validate()?;
    let mut g = Graph::new();
    g.preempt_at_messages = spec.preemption && spec.preempt_at_messages;
    let names = Names {
        forward: g.op_name("forward"),
        backward: g.op_name("backward"),
        update: g.op_name("update"),
        push_request: g.op_name("push_request"),
        push_response: g.op_name("push_response"),
        pull_request: g.op_name("pull_request"),
        pull_response: g.op_name("pull_response"),
        allreduce: g.op_name("allreduce"),
        barrier: g.op_name("barrier"),
    };
    let stagger_name = if spec.stagger_ns > 0 { g.op_name("stagger") } else { 0 };
    let mut ps_names = PsNames {
        push_request: names.push_request,
        push_response: names.push_response,
        pull_request: names.pull_request,
        pull_response: names.pull_response,
        update: names.update,
        param_multicast: u32::MAX,
    };
    g.host_of_rank = spec.host_of_rank.clone();
    let n = spec.workers;
    let num_layers = spec.layers.len();
    let policy = spec.policy();
    // The workers the graph simulates: every one, or one per rank class.
    let ranks: Vec<u32> = match &classes {
        Some(c) => c.representatives.clone(),
        None => (0..n).collect(),
    };
    let compute_stream: Vec<u32> = ranks.iter().map(|&w| g.new_stream(w, "compute", PolicyKind::Fifo)).collect();
    let comm_stream: Vec<u32> = ranks.iter().map(|&w| g.new_stream(w, "comm", policy)).collect();
    for &s in &comm_stream {
        g.streams[s as usize].credit = spec.credit_bytes;
    }
    let server_stream: Vec<u32> = (0..spec.servers()).map(|s| g.new_stream(n + s, "server", policy)).collect();
    let processors = super::server_cost::RequestProcessors::new(&mut g, spec.server_cost, n, spec.servers());
    let issuers = super::client_cost::RequestIssuers::new(&mut g, spec.client_cost, &compute_stream);

    let mut groups_of_layer: Vec<Vec<u32>> = vec![Vec::new(); num_layers];
    for (i, group) in spec.groups.iter().enumerate() {
        for &l in &group.layers {
            groups_of_layer[l as usize].push(i as u32);
        }
    }
    // Groups by the layer whose backward makes them ready, latest layer first.
    let mut order: Vec<u32> = (0..spec.groups.len() as u32).collect();
    let ready_layer = |i: u32| *spec.groups[i as usize].layers.iter().min().expect("validated non-empty");
    order.sort_by_key(|&i| (std::cmp::Reverse(ready_layer(i)), i));
    let pieces: Vec<Vec<Piece>> = spec.groups.iter().map(|gr| ps_pieces(spec, gr)).collect();
    let ordered = spec.distribution != Distribution::Immediate;
    // Without a barrier op gating the next iteration, forwards wait per layer.
    let pipelined_forward = !spec.barrier || ordered || spec.asynchronous;

    // gates[w][l]: ops the forward of layer l on worker w waits for.
    let mut gates: Vec<Vec<Vec<u32>>> = vec![vec![Vec::new(); num_layers]; ranks.len()];
    let mut rpc_counter: i64 = 0;
    let in_switch = super::in_network::aggregated_groups(spec);
    let mut bwd_of: Vec<Vec<u32>> = vec![vec![0; num_layers]; ranks.len()];
    // sync_end[w][group]: the ops after which worker w holds the group's new values.
    let mut sync_end: Vec<Vec<Vec<u32>>> = vec![vec![Vec::new(); spec.groups.len()]; ranks.len()];
    // Rank classes: ids in the per-rank graph, whose iteration holds every
    // worker's compute (2L ops each), then each all-reduce's ops (one per
    // worker), then the barrier.
    let mut full_id: Vec<u64> = Vec::new();
    let (n64, l2) = (n as u64, 2 * num_layers as u64);
    let all_reduces: u64 = spec.groups.iter().map(|gr| partitions(gr.bytes, spec.partition_bytes).len() as u64).sum();
    let per_iteration = n64 * l2 + all_reduces * n64 + u64::from(!pipelined_forward);
    // Server updates of each iteration (asynchronous staleness bound).
    let mut updates_of: Vec<Vec<u32>> = Vec::new();

    for it in 0..spec.iterations as i32 {
        let base = it as u64 * per_iteration;
        let mut all_reduce_index: u64 = 0;
        for (wu, &w) in ranks.iter().enumerate() {
            let mut prev: Option<u32> = None;
            // per-rank variation (lower::variation): this rank-iteration's own layer times and slowdown
            let (vector, slow) = (super::variation::vector_of(spec, w, it), super::variation::slowdown(spec, w, it));
            let fwd_ns = |l: usize| vector.map_or(spec.layers[l].fwd_ns, |v| v.fwd_ns[l]);
            let bwd_ns = |l: usize| vector.map_or(spec.layers[l].bwd_ns, |v| v.bwd_ns[l]);
            for l in 0..num_layers {
                let mut op = Op::new(Kind::Compute, names.forward, w);
                op.duration = super::variation::scaled(jittered(spec, fwd_ns(l), Purpose::ForwardJitter, w, it, l), slow);
                op.stream = compute_stream[wu];
                op.iteration = it;
                op.layer = l as i32;
                op.tenant = spec.tenant;
                let mut deps: Vec<u32> = prev.into_iter().collect();
                deps.append(&mut gates[wu][l]);
                if l == 0 {
                    if let (Some(s), true) = (spec.staleness, spec.asynchronous) {
                        if let Some(old) = (it - s as i32 - 1 >= 0).then(|| &updates_of[(it - s as i32 - 1) as usize]) {
                            deps.extend_from_slice(old);
                        }
                    }
                }
                prev = Some(g.add(op, &deps));
                if classes.is_some() {
                    full_id.push(base + w as u64 * l2 + l as u64);
                }
            }
            let skew = stagger_ns(spec, w, it);
            if skew > 0 {
                let mut op = Op::new(Kind::Compute, stagger_name, w);
                op.duration = skew;
                op.stream = compute_stream[wu];
                op.iteration = it;
                op.tenant = spec.tenant;
                prev = Some(g.add(op, &prev.into_iter().collect::<Vec<_>>()));
            }
            for l in (0..num_layers).rev() {
                let mut op = Op::new(Kind::Compute, names.backward, w);
                op.duration = super::variation::scaled(jittered(spec, bwd_ns(l), Purpose::BackwardJitter, w, it, l), slow);
                op.stream = compute_stream[wu];
                op.iteration = it;
                op.layer = l as i32;
                op.tenant = spec.tenant;
                let id = g.add(op, &prev.into_iter().collect::<Vec<_>>());
                if classes.is_some() {
                    full_id.push(base + w as u64 * l2 + (2 * num_layers - 1 - l) as u64);
                }
                bwd_of[wu][l] = id;
                prev = Some(id);
            }
        }
        for v in sync_end.iter_mut() {
            v.iter_mut().for_each(Vec::clear);
        }
        let mut iteration_updates: Vec<u32> = Vec::new();
        // Ordered distribution: (group, piece, worker, pull request, server, bytes, rpc) awaiting their response.
        let mut pending: Vec<(u32, usize, u32, u32, u32, u64, i64)> = Vec::new();
        for &gi in &order {
            let group = &spec.groups[gi as usize];
            let l = ready_layer(gi) as usize;
            let band = spec.group_band(gi as usize, l, num_layers);
            let tag = |mut op: Op| {
                op.iteration = it;
                op.layer = l as i32;
                op.tensor = group.tensor;
                op.group = gi as i32;
                op.priority = l as i32;
                op.band = band;
                op.tenant = spec.tenant;
                op
            };
            match spec.sync {
                SyncSpec::Allreduce { .. } if spec.in_network.mode == InNetworkMode::Multicast => {
                    let ready: Vec<u32> = (0..n as usize).map(|w| bwd_of[w][l]).collect();
                    let ends = super::in_network::lower_ring_multicast(&mut g, spec, gi as usize, &tag, &ready, &comm_stream);
                    for (w, end) in ends.into_iter().enumerate() {
                        sync_end[w][gi as usize].push(end);
                    }
                }
                SyncSpec::Allreduce { algorithm } => {
                    for bytes in partitions(group.bytes, spec.partition_bytes) {
                        let c = g.add_collective(CollectiveSpec {
                            algorithm: algorithm.algorithm(),
                            coll_type: CollectiveType::AllReduce,
                            members: ranks.clone(),
                            bytes,
                            chunk_bytes: spec.chunk_bytes,
                            gamma_ns_per_byte: spec.gamma_ns_per_byte,
                        });
                        for (k, &w) in ranks.iter().enumerate() {
                            let mut op = tag(Op::new(Kind::Collective, names.allreduce, w));
                            op.bytes = bytes;
                            op.stream = comm_stream[k];
                            op.collective = c;
                            op.member = k as u32;
                            let id = g.add(op, &[bwd_of[k][l]]);
                            if classes.is_some() {
                                full_id.push(base + n64 * l2 + all_reduce_index * n64 + w as u64);
                            }
                            sync_end[k][gi as usize].push(id);
                        }
                        all_reduce_index += 1;
                    }
                }
                SyncSpec::Ps { .. } => {
                    let in_network = spec.in_network.mode != InNetworkMode::None;
                    if in_network && ps_names.param_multicast == u32::MAX {
                        ps_names.param_multicast = g.op_name("param_multicast");
                    }
                    let ready: Vec<u32> = (0..n as usize).map(|w| bwd_of[w][l]).collect();
                    for (pi, piece) in pieces[gi as usize].iter().enumerate() {
                        let message = PsMessage {
                            server: n + piece.server,
                            server_stream: server_stream[piece.server as usize],
                            bytes: piece.bytes + spec.header_bytes,
                            update_ns: piece.update_ns,
                            ready: &ready,
                            aggregate: in_switch[gi as usize],
                            multicast: spec.in_network.mode.multicasts(),
                            hold_responses: ordered,
                            processors: processors.as_ref(),
                            issuers: issuers.as_ref(),
                        };
                        let lowered = lower_ps_message(&mut g, spec, &ps_names, &tag, &message, &mut rpc_counter);
                        iteration_updates.extend_from_slice(&lowered.updates);
                        for (w, end) in lowered.ends.into_iter().enumerate() {
                            sync_end[w][gi as usize].push(end);
                        }
                        for (w, req, rpc) in lowered.held {
                            pending.push((gi, pi, w, req, message.server, message.bytes, rpc));
                        }
                    }
                }
            }
        }
        if ordered {
            // Server-side global barrier: distribution starts once every update of the iteration is applied.
            let gate = spec.barrier.then(|| {
                let mut b = Op::new(Kind::Barrier, names.barrier, 0);
                b.iteration = it;
                b.tenant = spec.tenant;
                g.add(b, &iteration_updates)
            });
            // Parameter order: model order after a barrier, else the order updates become ready.
            let mut params: Vec<(u32, usize)> = pending.iter().map(|p| (p.0, p.1)).collect();
            params.dedup();
            if spec.barrier {
                params.sort_by_key(|&(gi, pi)| (ready_layer(gi), gi, pi));
            }
            let rank_of: std::collections::HashMap<(u32, usize), usize> = params.iter().enumerate().map(|(r, &p)| (p, r)).collect();
            pending.sort_by_key(|p| {
                let r = rank_of[&(p.0, p.1)];
                match spec.distribution {
                    Distribution::Block => (p.2 as usize, r),
                    _ => (r, p.2 as usize),
                }
            });
            let mut last_send: Vec<Option<u32>> = vec![None; spec.servers() as usize];
            for (gi, _pi, w, req, server, bytes, rpc) in pending {
                let group = &spec.groups[gi as usize];
                let l = ready_layer(gi) as usize;
                let mut op = Op::new(Kind::Transfer, names.pull_response, server);
                op.peer = w as i32;
                op.bytes = bytes;
                op.rpc = rpc;
                op.iteration = it;
                op.layer = l as i32;
                op.tensor = group.tensor;
                op.group = gi as i32;
                op.priority = l as i32;
                op.band = spec.group_band(gi as usize, l, num_layers);
                op.tenant = spec.tenant;
                let s = (server - n) as usize;
                let mut deps = vec![req];
                deps.extend(gate);
                deps.extend(last_send[s]);
                let resp = g.add(op, &deps);
                last_send[s] = Some(resp);
                sync_end[w as usize][gi as usize].push(issuers.as_ref().map_or(resp, |i| i.receive(&mut g, resp)));
            }
        }
        updates_of.push(iteration_updates);
        if !pipelined_forward {
            let all: Vec<u32> = sync_end.iter().flat_map(|v| v.iter().flatten().copied()).collect();
            let mut b = Op::new(Kind::Barrier, names.barrier, 0);
            b.iteration = it;
            b.tenant = spec.tenant;
            let b = g.add(b, &all);
            if classes.is_some() {
                full_id.push(base + n64 * l2 + all_reduces * n64);
            }
            for gw in gates.iter_mut() {
                gw[0].push(b);
            }
        } else {
            for (w, gw) in gates.iter_mut().enumerate() {
                for (l, groups) in groups_of_layer.iter().enumerate() {
                    gw[l].extend(groups.iter().flat_map(|&gi| sync_end[w][gi as usize].iter().copied()));
                }
            }
        }
    }
    spec.idle_wake.attach(&mut g, &compute_stream, names.forward, names.backward);
    spec.message_latency.attach(&mut g, spec.seed);
    if let Some(mut c) = classes {
        if full_id.len() != g.ops.len() {
            return Err(format!("rank classes: {} ops for {} per-rank ids (a lowering path the classes do not cover)", g.ops.len(), full_id.len()));
        }
        c.full_id = full_id;
        c.compute_stride = l2;
        c.collective_stride = 1;
        g.rank_classes = Some(Box::new(c));
    }
    Ok(g)
}
