//! The parameter server's per-request cost a + b C and its FIFO queue
//! (`lower::server_cost`), against closed forms derived by hand.

mod common;

use common::*;
use ddlsim_core::log::{EventLog, KIND_COMPUTE, KIND_RECV};
use ddlsim_core::lower::server_cost::ServerCost;
use ddlsim_core::lower::training::{build_graph, GroupSpec, LayerSpec, SyncSpec, TrainingSpec};
use ddlsim_core::network::Fidelity;
use ddlsim_core::{simulate_training, RunOutput, TraceDetail};

fn one_group(workers: u32, bytes: u64, cost: ServerCost) -> TrainingSpec {
    let layers = vec![LayerSpec { fwd_ns: 0, bwd_ns: 0 }];
    let groups = vec![GroupSpec { layers: vec![0], tensor: 0, bytes, server: 0, update_ns: 0 }];
    TrainingSpec { seed: 1, server_cost: cost, ..TrainingSpec::new(workers, SyncSpec::Ps { servers: 1 }, layers, groups) }
}

fn ends(log: &EventLog, rows: &[usize]) -> Vec<u64> {
    let mut v: Vec<u64> = rows.iter().map(|&i| log.end_ns[i] as u64).collect();
    v.sort_unstable();
    v
}

#[test]
fn w_requests_at_once_are_served_one_after_another_at_a_plus_b_w_each() {
    // W workers push M bytes at once to one server (10 Gbit/s, latency L): the
    // pushes share the server's downlink and all arrive at T1 = W M 8/10 + L.
    // Each then holds the request processor for s = a + b W, first come first
    // served, so the k-th is handled at T1 + k s and the last W (a + b W)
    // after arriving; the update (0 ns) is ready then. The acks and pull
    // requests carry 0 bytes (a latency each): the pulls arrive at
    // T3 = T1 + W s + 2 L and are served the same way; the k-th pull
    // response leaves at T3 + k s, and as s >= M 8/10 the responses never
    // share the uplink: the last arrives at T3 + W s + M 8/10 + L.
    let (m, lat) = (10_000u64, 3_000u64);
    let tx = m * 8 / 10;
    for (w, a, b) in [(1u32, 20_000u64, 5_000u64), (2, 20_000, 5_000), (3, 9_000, 1_000), (5, 8_000, 0), (4, 0, 2_500)] {
        let s = a + b * w as u64;
        assert!(s >= tx);
        let out = simulate_training(&one_group(w, m, ServerCost { a_ns: a, b_ns: b, ..Default::default() }), &net(Fidelity::Flow, 10e9, lat), TraceDetail::Step).unwrap();
        let t1 = w as u64 * tx + lat;
        let pushes = op_rows(&out, "push_request", KIND_RECV);
        assert!(pushes.iter().all(|&i| out.log.end_ns[i] as u64 == t1), "W={w}");
        let serve = op_rows(&out, "serve", KIND_COMPUTE);
        assert_eq!(serve.len(), 2 * w as usize, "one serve row per push and per pull");
        assert!(serve.iter().all(|&i| out.log.rank[i] == w as i32 && (out.log.end_ns[i] - out.log.start_ns[i]) as u64 == s));
        let t3 = t1 + w as u64 * s + 2 * lat;
        let expected: Vec<u64> = (1..=w as u64).map(|k| t1 + k * s).chain((1..=w as u64).map(|k| t3 + k * s)).collect();
        assert_eq!(ends(&out.log, &serve), expected, "W={w} a={a} b={b}");
        let update = op_rows(&out, "update", KIND_COMPUTE)[0];
        assert_eq!(out.log.ready_ns[update] as u64, t1 + w as u64 * (a + b * w as u64), "W={w}");
        let last = *ends(&out.log, &op_rows(&out, "pull_response", KIND_RECV)).last().unwrap();
        assert_eq!(last, t3 + w as u64 * s + tx + lat, "W={w}");
        assert_eq!(out.makespan, w as u64 * tx + 4 * lat + 2 * w as u64 * s + tx, "W={w}");
        assert_deps_explain_every_start(&out.log);
    }
}

/// Per server rank: its serve rows as (start, end, arrival of the request it serves).
fn served(out: &RunOutput) -> std::collections::BTreeMap<i32, Vec<(i64, i64, i64, i64)>> {
    let log = &out.log;
    let end_of: std::collections::HashMap<i64, i64> = (0..log.len()).map(|i| (log.id[i], log.end_ns[i])).collect();
    let kind_of: std::collections::HashMap<i64, u8> = (0..log.len()).map(|i| (log.id[i], log.kind[i])).collect();
    let mut per: std::collections::BTreeMap<i32, Vec<(i64, i64, i64, i64)>> = Default::default();
    for i in op_rows(out, "serve", KIND_COMPUTE) {
        // the request is its only graph dependency that is a receive; a queued row also records what freed the stream
        let arrival = log.deps_of(i).iter().filter(|d| kind_of[d] == KIND_RECV).map(|d| end_of[d]).max().unwrap();
        per.entry(log.rank[i]).or_default().push((log.start_ns[i], log.end_ns[i], arrival, log.id[i]));
    }
    for v in per.values_mut() {
        v.sort();
    }
    per
}

fn three_layers(cost: &str) -> TrainingSpec {
    ps_three_layers(cost)
}

#[test]
fn each_server_serves_one_request_at_a_time_in_arrival_order() {
    let spec = three_layers(r#", "server_cost": {"a_ns": 1500, "b_ns": 700}"#);
    let out = simulate_training(&spec, &net(Fidelity::Flow, 8e9, 1000), TraceDetail::Step).unwrap();
    let per = served(&out);
    assert_eq!(per.keys().copied().collect::<Vec<_>>(), vec![3, 4], "both servers serve");
    // 3 workers x 3 iterations x (push + pull): server 0 holds 2 tensors, server 1 one.
    assert_eq!(per[&3].len(), 2 * 3 * 3 * 2);
    assert_eq!(per[&4].len(), 3 * 3 * 2);
    let s = 1500 + 700 * 3;
    let mut queued = 0;
    for rows in per.values() {
        for pair in rows.windows(2) {
            let ((_, end0, arr0, _), (start1, _, arr1, _)) = (pair[0], pair[1]);
            assert!(arr0 <= arr1, "served out of arrival order: {pair:?}");
            // FIFO, work-conserving: a request starts when it arrived or when the previous one ended
            assert_eq!(start1, arr1.max(end0), "{pair:?}");
            queued += usize::from(end0 > arr1);
        }
        assert!(rows.iter().all(|&(a, b, _, _)| b - a == s));
    }
    assert!(queued > 0, "some requests must have waited for this test to check queueing");
    assert_deps_explain_every_start(&out.log);
    // The same run again: the same order of service (ties included).
    let again = simulate_training(&spec, &net(Fidelity::Flow, 8e9, 1000), TraceDetail::Step).unwrap();
    assert_eq!(served(&again), per);
}

#[test]
fn a_zero_cost_builds_the_same_graph_and_log_as_no_cost() {
    for extra in ["", r#", "distribution": "round_robin""#, r#", "asynchronous": true"#, r#", "ps_split": true, "chunk_bytes": 300"#] {
        let plain = three_layers(extra);
        let zero = three_layers(&format!(r#"{extra}, "server_cost": {{"a_ns": 0, "b_ns": 0}}"#));
        assert_eq!(zero.server_cost, ServerCost::default());
        let (g0, g1) = (build_graph(&plain).unwrap(), build_graph(&zero).unwrap());
        assert_eq!(format!("{:?}", g0.ops), format!("{:?}", g1.ops));
        assert_eq!(g0.streams.len(), g1.streams.len());
        let net = net(Fidelity::Flow, 8e9, 1000);
        let (a, b) = (simulate_training(&plain, &net, TraceDetail::Step).unwrap(), simulate_training(&zero, &net, TraceDetail::Step).unwrap());
        assert_eq!(format!("{:?}", a.log), format!("{:?}", b.log), "{extra}");
        assert_eq!(a.op_names, b.op_names);
        // and a cost changes it
        let costly = simulate_training(&three_layers(&format!(r#"{extra}, "server_cost": {{"a_ns": 1}}"#)), &net, TraceDetail::Step).unwrap();
        assert!(costly.makespan > a.makespan, "{extra}");
    }
}

#[test]
fn ordered_distribution_and_asynchronous_updates_wait_for_their_requests_to_be_served() {
    for extra in [r#", "distribution": "block""#, r#", "asynchronous": true"#] {
        let spec = three_layers(&format!(r#"{extra}, "server_cost": {{"a_ns": 4000, "b_ns": 0}}"#));
        let out = simulate_training(&spec, &net(Fidelity::Flow, 8e9, 1000), TraceDetail::Step).unwrap();
        let log = &out.log;
        let serve_ids: std::collections::HashSet<i64> = op_rows(&out, "serve", KIND_COMPUTE).iter().map(|&i| log.id[i]).collect();
        // every update and every pull response depends on a serve row
        for name in ["update", "pull_response"] {
            let kind = if name == "update" { KIND_COMPUTE } else { ddlsim_core::log::KIND_SEND };
            for i in op_rows(&out, name, kind) {
                assert!(log.deps_of(i).iter().any(|d| serve_ids.contains(d)), "{extra}: {name} row {} waits for no serve row", log.id[i]);
            }
        }
        assert_deps_explain_every_start(log);
    }
}

#[test]
fn a_server_cost_needs_a_plain_parameter_server() {
    let ring = TrainingSpec {
        server_cost: ServerCost { a_ns: 1, ..Default::default() },
        ..TrainingSpec::new(2, SyncSpec::Allreduce { algorithm: ddlsim_core::lower::training::AlgorithmName::Ring }, vec![LayerSpec { fwd_ns: 1, bwd_ns: 1 }], vec![GroupSpec { layers: vec![0], tensor: 0, bytes: 8, server: 0, update_ns: 0 }])
    };
    assert!(build_graph(&ring).unwrap_err().contains("server_cost"));
    let multicast = three_layers(r#", "server_cost": {"b_ns": 3}, "in_network": {"mode": "multicast"}"#);
    assert!(build_graph(&multicast).unwrap_err().contains("server_cost"));
    assert!(TrainingSpec::from_json(&format!("{}", r#"{"workers": 1, "iterations": 1, "seed": 0, "sync": {"kind": "ps", "servers": 1}, "layers": [], "groups": [], "server_cost": {"c_ns": 1}}"#)).is_err());
}
