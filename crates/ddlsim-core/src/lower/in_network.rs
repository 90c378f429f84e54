//! In-network mechanisms for the parameter-server lowering (paper §3.4,
//! §8.1): IP multicast of the new parameters and in-network aggregation of
//! the gradients at a switch. How the network times them: see
//! [`crate::network::innet`].
//!
//! Per group, by `in_network.mode`:
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
//! Switch memory (`switch_memory`, bytes; none: unlimited): the switch must
//! hold a group's running sum (payload plus header) while it aggregates.
//! Groups are given switch memory first come, first served in group order
//! (tensor order), once for the whole run: a group whose size does not fit
//! in what is left is aggregated at the server (plain pushes) and later,
//! smaller groups may still fit. One budget is shared by all aggregating
//! switches (exact on a star, or when the servers share a leaf).

use serde::Deserialize;

use super::training::{SyncSpec, TrainingSpec};
use crate::graph::{FanKind, FanSpec, Graph, Kind, Op};

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum InNetworkMode {
    #[default]
    None,
    Multicast,
    Aggregation,
    Multiagg,
}

impl InNetworkMode {
    pub fn aggregates(self) -> bool {
        matches!(self, InNetworkMode::Aggregation | InNetworkMode::Multiagg)
    }
    pub fn multicasts(self) -> bool {
        matches!(self, InNetworkMode::Multicast | InNetworkMode::Multiagg)
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InNetworkSpec {
    #[serde(default)]
    pub mode: InNetworkMode,
    /// Aggregation memory of the switch, bytes; None: unlimited.
    #[serde(default)]
    pub switch_memory: Option<u64>,
}

pub fn validate(spec: &TrainingSpec) -> Result<(), String> {
    if spec.in_network.mode != InNetworkMode::None && !matches!(spec.sync, SyncSpec::Ps { .. }) {
        return Err("in_network mechanisms apply to the parameter-server strategy only".into());
    }
    Ok(())
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

/// Lowers one PS group's exchange with the in-network mechanisms.
/// `ready[w]`: the op after which worker w's gradient is ready; `tag` fills
/// the group's common fields. Returns, per worker, the op after which it
/// holds the group's new parameters.
#[allow(clippy::too_many_arguments)]
pub fn lower_ps_group(
    g: &mut Graph,
    spec: &TrainingSpec,
    gi: usize,
    tag: &dyn Fn(Op) -> Op,
    ready: &[u32],
    server_stream: u32,
    rpc_counter: &mut i64,
    aggregate: bool,
) -> Vec<u32> {
    let n = spec.workers;
    let group = &spec.groups[gi];
    let server = n + group.server;
    let mode = spec.in_network.mode;
    let (push_request, push_response) = (g.op_name("push_request"), g.op_name("push_response"));
    let (pull_request, pull_response) = (g.op_name("pull_request"), g.op_name("pull_response"));
    let (update_name, multicast_name) = (g.op_name("update"), g.op_name("param_multicast"));
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
    let bytes = group.bytes + spec.header_bytes;
    let pushes: Vec<u32> =
        (0..n).map(|w| g.add(transfer(push_request, w, server, bytes, push_rpc + w as i64), &[ready[w as usize]])).collect();
    if aggregate && n > 1 {
        g.fans.push(FanSpec { kind: FanKind::Aggregate, ops: pushes.clone() });
    }
    let mut update = tag(Op::new(Kind::Compute, update_name, server));
    update.duration = group.update_ns;
    update.stream = server_stream;
    let update = g.add(update, &pushes);
    if mode.multicasts() {
        let copies: Vec<u32> = (0..n).map(|w| g.add(transfer(multicast_name, server, w, bytes, -1), &[update])).collect();
        if n > 1 {
            g.fans.push(FanSpec { kind: FanKind::Multicast, ops: copies.clone() });
        }
        return copies;
    }
    (0..n)
        .map(|w| {
            let header = spec.header_bytes;
            let ack = g.add(transfer(push_response, server, w, header, push_rpc + w as i64), &[update]);
            let req = g.add(transfer(pull_request, w, server, header, pull_rpc + w as i64), &[ack]);
            g.add(transfer(pull_response, server, w, bytes, pull_rpc + w as i64), &[req])
        })
        .collect()
}
