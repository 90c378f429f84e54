//! Shared helpers of the integration tests, written independently of the engine.
#![allow(dead_code)]

use ddlsim_core::collective::Algorithm;
use ddlsim_core::graph::{CollectiveSpec, CollectiveType, Graph, Kind, Op, NO_STREAM};
use ddlsim_core::log::EventLog;
use ddlsim_core::network::{Fidelity, NetworkSpec};

pub fn net(fidelity: Fidelity, bandwidth_bps: f64, latency_ns: u64) -> NetworkSpec {
    NetworkSpec::star(fidelity, bandwidth_bps, latency_ns)
}

pub fn compute(g: &mut Graph, rank: u32, ns: u64, stream: u32) -> Op {
    let mut op = Op::new(Kind::Compute, g.op_name("work"), rank);
    op.duration = ns;
    op.stream = stream;
    op
}

pub fn transfer(g: &mut Graph, src: u32, dst: u32, bytes: u64) -> Op {
    let mut op = Op::new(Kind::Transfer, g.op_name("send"), src);
    op.peer = dst as i32;
    op.bytes = bytes;
    op
}

/// One collective over `members`; returns the op of each member (added with `deps[i]`).
pub fn allreduce(g: &mut Graph, algorithm: Algorithm, members: &[u32], bytes: u64, streams: &[u32], deps: &[Vec<u32>]) -> Vec<u32> {
    let c = g.add_collective(CollectiveSpec { algorithm, coll_type: CollectiveType::AllReduce, members: members.to_vec(), bytes, chunk_bytes: 0, gamma_ns_per_byte: 0.0 });
    let name = g.op_name("allreduce");
    members
        .iter()
        .enumerate()
        .map(|(i, &rank)| {
            let mut op = Op::new(Kind::Collective, name, rank);
            op.collective = c;
            op.member = i as u32;
            op.bytes = bytes;
            op.stream = streams.get(i).copied().unwrap_or(NO_STREAM);
            g.add(op, deps.get(i).map(|d| d.as_slice()).unwrap_or(&[]))
        })
        .collect()
}

pub fn row_of(log: &EventLog, id: i64) -> usize {
    log.id.iter().position(|&x| x == id).expect("row id exists")
}

/// The property the engine promises: every row starts exactly when the
/// latest of its recorded deps ended, or at its ready time if it has none;
/// every dep exists and ended no later than the row started.
pub fn assert_deps_explain_every_start(log: &EventLog) {
    let mut end_of = std::collections::HashMap::new();
    for i in 0..log.len() {
        assert!(end_of.insert(log.id[i], log.end_ns[i]).is_none(), "duplicate id {}", log.id[i]);
    }
    for i in 0..log.len() {
        let deps = log.deps_of(i);
        assert!(log.ready_ns[i] <= log.start_ns[i] && log.start_ns[i] <= log.end_ns[i], "row {} times out of order", log.id[i]);
        if deps.is_empty() {
            assert_eq!(log.start_ns[i], log.ready_ns[i], "row {} (kind {}) has no deps but waited", log.id[i], log.kind[i]);
        } else {
            let latest = deps.iter().map(|d| *end_of.get(d).unwrap_or_else(|| panic!("row {} depends on missing {d}", log.id[i]))).max().unwrap();
            assert_eq!(log.start_ns[i], latest, "row {} (kind {}, op {}) start is not its latest dep's end; deps {deps:?}", log.id[i], log.kind[i], log.op[i]);
        }
    }
}

/// A parameter-server job small enough to reason about by hand: 3 layers, one tensor each (1000, 8000 and 64
/// bytes), 3 workers, 2 servers, 3 iterations; `extra` adds JSON fields (it starts with a comma).
pub fn ps_three_layers(extra: &str) -> ddlsim_core::TrainingSpec {
    let text = format!(
        r#"{{"workers": 3, "iterations": 3, "seed": 7, "sync": {{"kind": "ps", "servers": 2}},
        "layers": [{{"fwd_ns": 1000, "bwd_ns": 2000}}, {{"fwd_ns": 3000, "bwd_ns": 6000}}, {{"fwd_ns": 500, "bwd_ns": 1000}}],
        "groups": [{{"layers": [0], "tensor": 0, "bytes": 1000, "server": 0, "update_ns": 100}},
                   {{"layers": [1], "tensor": 1, "bytes": 8000, "server": 1, "update_ns": 800}},
                   {{"layers": [2], "tensor": 2, "bytes": 64, "server": 0, "update_ns": 7}}]{extra}}}"#
    );
    ddlsim_core::TrainingSpec::from_json(&text).unwrap()
}

/// The rows of a run whose op is named `name` and whose kind is `kind` (a `KIND_*` code).
pub fn op_rows(out: &ddlsim_core::RunOutput, name: &str, kind: u8) -> Vec<usize> {
    let code = out.op_names.iter().position(|n| n == name).map_or(u32::MAX, |c| c as u32);
    (0..out.log.len()).filter(|&i| out.log.op[i] == code && out.log.kind[i] == kind).collect()
}
