//! In-network mechanisms for the parameter-server lowering (paper §3.4,
//! §8.1): IP multicast of the new parameters and in-network aggregation of
//! the gradients at a switch. How the network times them: see
//! [`crate::network::innet`].
//!
//! Per group, by `in_network.mode` (lowered by [`super::ps::lower_ps_message`], the one PS exchange):
//! - `none`: the plain PS exchange (push, update, ack, pull request, pull response).
//! - `aggregation`: the workers' pushes are one aggregation fan (a switch
//!   sums them and forwards one aggregate to the server: one send row per
//!   worker and one recv row at the server, one message id); the server
//!   updates, then acks and serves pulls by unicast as usual.
//! - `multicast`: pushes as usual; once the server updated, it multicasts
//!   the new parameters to every worker (`param_multicast`: one send row,
//!   one recv row per worker, one message id). The multicast replaces the
//!   ack and the pull request/response pair: the server pushes the
//!   parameters to the group, workers do not ask.
//! - `multiagg`: both.
//!
//! With the ring all-reduce, `multicast` makes its all-gather a multicast
//! ([`lower_ring_multicast`]).
//!
//! Switch memory (`switch_memory`, bytes; none: unlimited): the switch must
//! hold a group's running sum (payload plus header) while it aggregates.
//! Groups are given switch memory first come, first served in group order
//! (tensor order), once for the whole run: a group whose size does not fit
//! in what is left is aggregated at the server (plain pushes) and later,
//! smaller groups may still fit. One budget is shared by all aggregating
//! switches (exact on a star, or when the servers share a leaf).

pub use super::spec::{InNetworkMode, InNetworkSpec};
use super::spec::TrainingSpec;
use crate::graph::{FanKind, FanSpec, Graph, Kind, Op};

/// Ring all-reduce whose second ring (all-gather) is multicast (paper
/// §8.4), lowered to point-to-point transfers: N-1 reduce-scatter steps on
/// each worker's communication stream (in step s worker i sends chunk
/// `(i - s) mod N`, about M/N bytes, to its successor, once it received
/// step s-1's chunk), then every worker multicasts the chunk it fully
/// reduced, `(i + 1) mod N`, to all the others (one multicast fan each). A
/// worker holds the new values once every other chunk reached it (a
/// `ring_multicast_done` marker). Idle star: `2 (N-1) M/(N B) + N alpha`,
/// N-2 latencies less than the ring: each worker downlink receives N-1
/// chunks during the all-gather either way.
#[allow(clippy::too_many_arguments)]
pub fn lower_ring_multicast(g: &mut Graph, spec: &TrainingSpec, gi: usize, tag: &dyn Fn(Op) -> Op, ready: &[u32], comm_stream: &[u32]) -> Vec<u32> {
    let n = spec.workers;
    let bytes = spec.groups[gi].bytes;
    let (step_name, gather_name, done_name) = (g.op_name("ring_rs_step"), g.op_name("ring_multicast"), g.op_name("ring_multicast_done"));
    if n == 1 {
        let mut done = tag(Op::new(Kind::Marker, done_name, 0));
        done.bytes = bytes;
        return vec![g.add(done, &[ready[0]])];
    }
    let chunk = |c: u32| crate::collective::ring::chunk_bytes(bytes, n, c);
    // last[i]: worker i's latest reduce-scatter send and the latest chunk it received.
    let mut last: Vec<Vec<u32>> = (0..n as usize).map(|i| vec![ready[i]]).collect();
    for s in 0..n - 1 {
        let sends: Vec<u32> = (0..n)
            .map(|i| {
                let mut op = tag(Op::new(Kind::Transfer, step_name, i));
                op.peer = ((i + 1) % n) as i32;
                op.bytes = chunk((i + n - s) % n);
                op.stream = comm_stream[i as usize];
                g.add(op, &last[i as usize])
            })
            .collect();
        for i in 0..n {
            last[i as usize] = vec![sends[i as usize], sends[((i + n - 1) % n) as usize]];
        }
    }
    let mut copies_to: Vec<Vec<u32>> = last.clone();
    for i in 0..n {
        let owned = chunk((i + 1) % n);
        let ops: Vec<u32> = (0..n)
            .filter(|&j| j != i)
            .map(|j| {
                let mut op = tag(Op::new(Kind::Transfer, gather_name, i));
                op.peer = j as i32;
                op.bytes = owned;
                g.add(op, &last[i as usize])
            })
            .collect();
        for &op in &ops {
            copies_to[g.ops[op as usize].peer as usize].push(op);
        }
        if ops.len() > 1 {
            g.fans.push(FanSpec { kind: FanKind::Multicast, ops });
        }
    }
    (0..n)
        .map(|w| {
            let mut done = tag(Op::new(Kind::Marker, done_name, w));
            done.bytes = bytes;
            g.add(done, &copies_to[w as usize])
        })
        .collect()
}

/// Per group: whether the switch aggregates it (see the module doc).
pub fn aggregated_groups(spec: &TrainingSpec) -> Vec<bool> {
    if !spec.in_network.mode.aggregates() {
        return vec![false; spec.groups.len()];
    }
    let mut left = spec.in_network.switch_memory.unwrap_or(u64::MAX);
    spec.groups
        .iter()
        .map(|g| {
            let need = g.bytes.saturating_add(spec.header_bytes);
            if need <= left {
                left -= need;
                true
            } else {
                false
            }
        })
        .collect()
}
