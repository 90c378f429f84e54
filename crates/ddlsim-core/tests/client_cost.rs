//! The parameter-server workers' per-request cost on their FIFO request
//! issuers (`lower::client_cost`), against closed forms derived by hand.

mod common;

use common::*;
use ddlsim_core::log::{EventLog, KIND_COMPUTE, KIND_RECV, KIND_SEND};
use ddlsim_core::lower::client_cost::ClientCost;
use ddlsim_core::lower::training::{build_graph, GroupSpec, LayerSpec, SyncSpec, TrainingSpec};
use ddlsim_core::network::Fidelity;
use ddlsim_core::{simulate_training, TraceDetail};

/// `workers` workers, one server, one layer (forward 1 us, backward 2 us: every gradient is ready at
/// t0 = 3 us), `groups` tensors of `bytes` each on that layer, no update time.
fn spec(workers: u32, groups: u32, bytes: u64, cost: ClientCost) -> TrainingSpec {
    let layers = vec![LayerSpec { fwd_ns: 1_000, bwd_ns: 2_000 }];
    let groups = (0..groups).map(|t| GroupSpec { layers: vec![0], tensor: t as i32, bytes, server: 0, update_ns: 0 }).collect();
    TrainingSpec { seed: 1, client_cost: cost, ..TrainingSpec::new(workers, SyncSpec::Ps { servers: 1 }, layers, groups) }
}

const T0: u64 = 3_000;

fn starts(log: &EventLog, rows: &[usize]) -> Vec<u64> {
    let mut v: Vec<u64> = rows.iter().map(|&i| log.start_ns[i] as u64).collect();
    v.sort_unstable();
    v
}

fn ends(log: &EventLog, rows: &[usize]) -> Vec<u64> {
    let mut v: Vec<u64> = rows.iter().map(|&i| log.end_ns[i] as u64).collect();
    v.sort_unstable();
    v
}

fn on_rank(log: &EventLog, rows: &[usize], rank: i32) -> Vec<usize> {
    rows.iter().copied().filter(|&i| log.rank[i] == rank).collect()
}

#[test]
fn w_requests_issued_back_to_back_leave_at_t0_plus_k_c() {
    // One worker has W pushes ready at t0; each holds its issuer c ns, one
    // after another, so the k-th push leaves at t0 + k c (k = 1..W). M bytes
    // at 10 Gbit/s take tx = M 8 / 10 <= c: the pushes never share the link,
    // push k arrives at t0 + k c + tx + L and its ack (0 bytes) at
    // t0 + k c + tx + 2 L. Each pull request then holds the issuer c.
    // Pull k's issue starts at the later of its ack's arrival and the end of
    // the issuer's previous row (FIFO: the pushes, all ready at t0, first).
    // - Short latency (tx + 2 L <= (W - 1) c): every ack arrives while pushes
    //   are still being issued; the pulls queue behind them and pull k
    //   leaves at t0 + (W + k) c; its response arrives tx + 2 L later:
    //   makespan t0 + 2 W c + tx + 2 L.
    // - Long latency (tx + 2 L >= (W - 1) c, always with W = 1): every ack
    //   arrives after the last push was issued, acks come c apart, so pull k is issued at once:
    //   it leaves at t0 + k c + tx + 2 L + c, and the last response arrives
    //   at t0 + (W + 1) c + 2 tx + 4 L.
    let (m, c) = (1_250u64, 5_000u64);
    let tx = m * 8 / 10;
    for (w, lat, long) in [(1u32, 100u64, true), (3, 100, false), (4, 300, false), (3, 20_000, true), (5, 30_000, true)] {
        assert!(tx <= c && long == (tx + 2 * lat >= (w as u64 - 1) * c));
        let out = simulate_training(&spec(1, w, m, ClientCost { issue_ns: c, ..Default::default() }), &net(Fidelity::Flow, 10e9, lat), TraceDetail::Step).unwrap();
        let log = &out.log;
        let pushes = op_rows(&out, "push_request", KIND_SEND);
        let expected: Vec<u64> = (1..=w as u64).map(|k| T0 + k * c).collect();
        assert_eq!(starts(log, &pushes), expected, "W={w} L={lat}");
        let issues = op_rows(&out, "issue", KIND_COMPUTE);
        assert_eq!(issues.len(), 2 * w as usize, "one issue row per push and per pull");
        assert!(issues.iter().all(|&i| log.rank[i] == 0 && (log.end_ns[i] - log.start_ns[i]) as u64 == c));
        let pulls = starts(log, &op_rows(&out, "pull_request", KIND_SEND));
        let expected: Vec<u64> =
            (1..=w as u64).map(|k| if long { T0 + k * c + tx + 2 * lat + c } else { T0 + (w as u64 + k) * c }).collect();
        assert_eq!(pulls, expected, "W={w} L={lat}");
        let makespan = if long { T0 + (w as u64 + 1) * c + 2 * tx + 4 * lat } else { T0 + 2 * w as u64 * c + tx + 2 * lat };
        assert_eq!(out.makespan, makespan, "W={w} L={lat}");
        // the issue rows never overlap: one issuer, serial
        let mut spans: Vec<(i64, i64)> = issues.iter().map(|&i| (log.start_ns[i], log.end_ns[i])).collect();
        spans.sort();
        assert!(spans.windows(2).all(|p| p[0].1 <= p[1].0));
        assert_deps_explain_every_start(log);
    }
}

#[test]
fn each_worker_has_its_own_issuer() {
    // Two workers, two pushes each: both issuers run at once, each worker's k-th push leaves at t0 + k c.
    let c = 4_000u64;
    let out = simulate_training(&spec(2, 2, 1_250, ClientCost { issue_ns: c, ..Default::default() }), &net(Fidelity::Flow, 10e9, 100), TraceDetail::Step).unwrap();
    let pushes = op_rows(&out, "push_request", KIND_SEND);
    for w in 0..2 {
        assert_eq!(starts(&out.log, &on_rank(&out.log, &pushes, w)), vec![T0 + c, T0 + 2 * c], "worker {w}");
    }
}

#[test]
fn per_byte_terms_and_the_handling_of_responses_add_up_on_one_request() {
    // One worker, one tensor of M bytes: push issue c0 + beta M, push
    // tx + L, ack L, ack handled r0 (0 bytes), pull issue c0 (0 bytes), pull
    // request L, response tx + L, handled r0 + rho M:
    // makespan = t0 + 2 c0 + beta M + 2 r0 + rho M + 2 tx + 4 L.
    let (m, lat) = (1_250u64, 700u64);
    let tx = m * 8 / 10;
    let cost = ClientCost { issue_ns: 3_000, issue_ns_per_byte: 0.8, receive_ns: 500, receive_ns_per_byte: 2.0, ..Default::default() };
    let out = simulate_training(&spec(1, 1, m, cost), &net(Fidelity::Flow, 10e9, lat), TraceDetail::Step).unwrap();
    assert_eq!(out.makespan, T0 + 2 * 3_000 + 1_000 + 2 * 500 + 2_500 + 2 * tx + 4 * lat);
    let log = &out.log;
    let handle = op_rows(&out, "handle", KIND_COMPUTE);
    let mut durations: Vec<i64> = handle.iter().map(|&i| log.end_ns[i] - log.start_ns[i]).collect();
    durations.sort();
    assert_eq!(durations, vec![500, 3_000]);
    // each handle row starts when its response arrives, on the worker, with the response's rpc id
    for &i in &handle {
        assert_eq!(log.rank[i], 0);
        let recv = (0..log.len()).find(|&j| log.kind[j] == KIND_RECV && log.rpc[j] == log.rpc[i] && log.rank[j] == 0).unwrap();
        assert_eq!(log.start_ns[i], log.end_ns[recv]);
    }
    let mut issue: Vec<i64> = op_rows(&out, "issue", KIND_COMPUTE).iter().map(|&i| log.end_ns[i] - log.start_ns[i]).collect();
    issue.sort();
    assert_eq!(issue, vec![3_000, 4_000]);
    assert_deps_explain_every_start(log);
}

fn three_layers(extra: &str) -> TrainingSpec {
    ps_three_layers(extra)
}

#[test]
fn a_zero_cost_builds_the_same_graph_and_log_as_no_cost() {
    let variants = [
        "",
        r#", "distribution": "round_robin""#,
        r#", "distribution": "block", "barrier": false"#,
        r#", "asynchronous": true"#,
        r#", "ps_split": true, "chunk_bytes": 300"#,
        r#", "server_cost": {"a_ns": 900, "b_ns": 100}"#,
    ];
    for extra in variants {
        let plain = three_layers(extra);
        let zero = three_layers(&format!(r#"{extra}, "client_cost": {{"issue_ns": 0, "issue_ns_per_byte": 0.0, "receive_ns": 0, "receive_ns_per_byte": 0.0}}"#));
        assert_eq!(zero.client_cost, ClientCost::default());
        let (g0, g1) = (build_graph(&plain).unwrap(), build_graph(&zero).unwrap());
        assert_eq!(format!("{:?}", g0.ops), format!("{:?}", g1.ops));
        assert_eq!(g0.streams.len(), g1.streams.len());
        let net = net(Fidelity::Flow, 8e9, 1000);
        let (a, b) = (simulate_training(&plain, &net, TraceDetail::Step).unwrap(), simulate_training(&zero, &net, TraceDetail::Step).unwrap());
        assert_eq!(format!("{:?}", a.log), format!("{:?}", b.log), "{extra}");
        assert_eq!(a.op_names, b.op_names);
        // and either cost changes it
        for cost in [r#"{"issue_ns": 1000}"#, r#"{"receive_ns_per_byte": 0.5}"#] {
            let costly = simulate_training(&three_layers(&format!(r#"{extra}, "client_cost": {cost}"#)), &net, TraceDetail::Step).unwrap();
            assert!(costly.makespan > a.makespan, "{extra} {cost}");
            assert_deps_explain_every_start(&costly.log);
        }
    }
}

#[test]
fn what_follows_a_response_waits_for_its_handling_under_every_distribution() {
    // Each worker's next forward (or, per layer, its layer's forward) waits for the handle rows of its pulls.
    for extra in ["", r#", "distribution": "block""#, r#", "distribution": "round_robin", "barrier": false"#, r#", "asynchronous": true"#] {
        let spec = three_layers(&format!(r#"{extra}, "client_cost": {{"issue_ns": 700, "receive_ns": 2000}}"#));
        let out = simulate_training(&spec, &net(Fidelity::Flow, 8e9, 1000), TraceDetail::Step).unwrap();
        let log = &out.log;
        let handle = op_rows(&out, "handle", KIND_COMPUTE);
        // 3 workers x 3 iterations x 3 tensors x (ack + pull response)
        assert_eq!(handle.len(), 3 * 3 * 3 * 2, "{extra}");
        for &i in &handle {
            assert_eq!(log.end_ns[i] - log.start_ns[i], 2000);
        }
        // a tensor's last handled response (its pull's) ends before its worker's forward of that layer (tensor t
        // is layer t here) in the next iteration starts
        let forwards = op_rows(&out, "forward", KIND_COMPUTE);
        for w in 0..3 {
            for it in 1..3 {
                for t in 0..3 {
                    let fwd = forwards.iter().find(|&&i| log.rank[i] == w && log.iteration[i] == it && log.layer[i] == t).map(|&i| log.start_ns[i]).unwrap();
                    let mine = on_rank(log, &handle, w);
                    let handled = mine.iter().filter(|&&i| log.iteration[i] == it - 1 && log.tensor[i] == t).map(|&i| log.end_ns[i]).max().unwrap();
                    assert!(fwd >= handled, "{extra}: worker {w} layer {t} iteration {it} starts at {fwd} before its pull is handled at {handled}");
                }
            }
        }
        assert_eq!(ends(log, &op_rows(&out, "pull_response", KIND_RECV)).len(), 27);
        assert_deps_explain_every_start(log);
    }
}

#[test]
fn a_client_cost_needs_a_plain_parameter_server_and_sane_numbers() {
    let ring = TrainingSpec {
        client_cost: ClientCost { issue_ns: 1, ..Default::default() },
        ..TrainingSpec::new(2, SyncSpec::Allreduce { algorithm: ddlsim_core::lower::training::AlgorithmName::Ring }, vec![LayerSpec { fwd_ns: 1, bwd_ns: 1 }], vec![GroupSpec { layers: vec![0], tensor: 0, bytes: 8, server: 0, update_ns: 0 }])
    };
    assert!(build_graph(&ring).unwrap_err().contains("client_cost"));
    let multicast = three_layers(r#", "client_cost": {"receive_ns": 3}, "in_network": {"mode": "multicast"}"#);
    assert!(build_graph(&multicast).unwrap_err().contains("client_cost"));
    for bad in [-1.0, f64::NAN, f64::INFINITY, 2e9] {
        let s = TrainingSpec { client_cost: ClientCost { receive_ns_per_byte: bad, ..Default::default() }, ..spec(1, 1, 8, ClientCost::default()) };
        let e = build_graph(&s).unwrap_err();
        assert!(e.contains("client_cost.receive_ns_per_byte"), "{e}");
    }
    assert!(TrainingSpec::from_json(r#"{"workers": 1, "iterations": 1, "seed": 0, "sync": {"kind": "ps", "servers": 1}, "layers": [], "groups": [], "client_cost": {"send_ns": 1}}"#).is_err());
}

#[test]
fn the_issuer_is_the_training_thread_the_last_push_leaves_after_the_whole_backward_and_every_issue() {
    // One worker, L layers (forward f_l, backward b_l), one tensor per layer: the worker's compute stream runs the
    // forwards, the backwards and every issue row one at a time and is never idle until the last push leaves, so
    // the last push leaves at sum f + sum b + L c, whatever the order the ready ops take; no two of its ops overlap.
    let layers: Vec<LayerSpec> = [(1_000u64, 2_000u64), (3_000, 6_000), (500, 1_000), (700, 1_500)].iter().map(|&(f, b)| LayerSpec { fwd_ns: f, bwd_ns: b }).collect();
    let compute: u64 = layers.iter().map(|l| l.fwd_ns + l.bwd_ns).sum();
    let groups: Vec<GroupSpec> = (0..4).map(|l| GroupSpec { layers: vec![l], tensor: l as i32, bytes: 1_250, server: 0, update_ns: 0 }).collect();
    for c in [400u64, 5_000, 20_000] {
        let spec = TrainingSpec { seed: 1, client_cost: ClientCost { issue_ns: c, ..Default::default() }, ..TrainingSpec::new(1, SyncSpec::Ps { servers: 1 }, layers.clone(), groups.clone()) };
        let out = simulate_training(&spec, &net(Fidelity::Flow, 10e9, 1_000_000), TraceDetail::Step).unwrap();
        let log = &out.log;
        let pushes = starts(log, &op_rows(&out, "push_request", KIND_SEND));
        assert_eq!(*pushes.last().unwrap(), compute + 4 * c, "c={c}");
        // the worker's rows on its compute stream (forward, backward, issue; no handle rows: no receive cost)
        let mut spans: Vec<(i64, i64)> = (0..log.len()).filter(|&i| log.rank[i] == 0 && log.kind[i] == KIND_COMPUTE).map(|i| (log.start_ns[i], log.end_ns[i])).collect();
        spans.sort();
        assert!(spans.windows(2).all(|p| p[0].1 <= p[1].0), "c={c}: the training thread runs one op at a time");
        assert_deps_explain_every_start(log);
    }
}

/// `assert_deps_explain_every_start`, except that a `handle` row may start its wake-up `w` after its latest dep's
/// end (the response's arrival, its ready time): the only rows a wake-up may delay.
fn assert_deps_or_wakeup_explain_every_start(out: &ddlsim_core::RunOutput, w: u64) {
    let log = &out.log;
    let handle = out.op_names.iter().position(|n| n == "handle").map(|i| i as u32);
    let end_of: std::collections::HashMap<i64, i64> = (0..log.len()).map(|i| (log.id[i], log.end_ns[i])).collect();
    for i in 0..log.len() {
        let deps = log.deps_of(i);
        assert!(log.ready_ns[i] <= log.start_ns[i] && log.start_ns[i] <= log.end_ns[i], "row {} times out of order", log.id[i]);
        if deps.is_empty() {
            assert_eq!(log.start_ns[i], log.ready_ns[i]);
            continue;
        }
        let latest = deps.iter().map(|d| end_of[d]).max().unwrap();
        let woken = Some(log.op[i]) == handle && log.kind[i] == KIND_COMPUTE && log.start_ns[i] == latest + w as i64;
        assert!(log.start_ns[i] == latest || woken, "row {} (op {}) starts at {}: neither its latest dep's end {latest} nor {w} ns after it", log.id[i], log.op[i], log.start_ns[i]);
    }
}

#[test]
fn a_response_that_reaches_an_idle_worker_is_handled_its_wake_up_later() {
    // One worker, one tensor of M bytes, receive cost r, wake-up w, no issue cost. The backward ends at t0 and
    // the worker's training thread is then idle until each response arrives: the push leaves at t0 (tx + L), its
    // ack (0 bytes) arrives at t = t0 + tx + 2 L and is handled from t + w to t + w + r; the pull request leaves
    // then (L), its response (tx + L) arrives at t' = t + w + r + tx + 2 L, handled from t' + w:
    // makespan = t0 + 2 tx + 4 L + 2 w + 2 r, i.e. the makespan without a wake-up + 2 w.
    let (m, lat) = (1_250u64, 700u64);
    let tx = m * 8 / 10;
    for (r, w) in [(500u64, 0u64), (500, 1), (500, 3_000), (0, 4_000), (2_000, 250_000)] {
        let cost = ClientCost { receive_ns: r, wakeup_ns: w, ..Default::default() };
        let out = simulate_training(&spec(1, 1, m, cost), &net(Fidelity::Flow, 10e9, lat), TraceDetail::Step).unwrap();
        assert_eq!(out.makespan, T0 + 2 * tx + 4 * lat + 2 * w + 2 * r, "r={r} w={w}");
        let log = &out.log;
        let handle = op_rows(&out, "handle", KIND_COMPUTE);
        assert_eq!(handle.len(), 2, "a handle row per response, of r ns (0 with a wake-up alone)");
        for &i in &handle {
            let recv = (0..log.len()).find(|&j| log.kind[j] == KIND_RECV && log.rpc[j] == log.rpc[i] && log.rank[j] == 0).unwrap();
            assert_eq!(log.start_ns[i], log.end_ns[recv] + w as i64, "r={r} w={w}");
            assert_eq!(log.ready_ns[i], log.end_ns[recv], "ready at the arrival: W_queue = w");
            assert_eq!(log.end_ns[i] - log.start_ns[i], r as i64);
        }
        assert_deps_or_wakeup_explain_every_start(&out, w);
    }
}

#[test]
fn a_response_that_reaches_a_busy_worker_starts_when_the_thread_frees_without_a_wake_up() {
    // One worker, two tensors ready at t0, issue cost c with tx + 2 L < c: push k leaves at t0 + k c, so ack 1
    // arrives at t = t0 + c + tx + 2 L, while push 2 is being issued (the thread is busy until b = t0 + 2 c > t):
    // ack 1 is handled from b, whatever the wake-up. Ack 2 arrives at t0 + 2 c + tx + 2 L; with r > tx + 2 L the
    // thread is still handling ack 1 (until b + r), so ack 2 is handled from b + r, then the pull-1 issue (ready at
    // b + r, queued after it) runs, all without a wake-up.
    let (m, lat, c, r) = (1_250u64, 100u64, 5_000u64, 2_000u64);
    let tx = m * 8 / 10;
    assert!(tx + 2 * lat < c && tx + 2 * lat < r);
    let b = T0 + 2 * c;
    for w in [0u64, 700, 40_000] {
        let cost = ClientCost { issue_ns: c, receive_ns: r, wakeup_ns: w, ..Default::default() };
        let out = simulate_training(&spec(1, 2, m, cost), &net(Fidelity::Flow, 10e9, lat), TraceDetail::Step).unwrap();
        let log = &out.log;
        let acks: Vec<usize> = op_rows(&out, "handle", KIND_COMPUTE).into_iter().filter(|&i| {
            (0..log.len()).any(|j| log.kind[j] == KIND_RECV && log.rpc[j] == log.rpc[i] && log.op[j] == out.op_names.iter().position(|n| n == "push_response").unwrap() as u32)
        }).collect();
        assert_eq!(starts(log, &acks), vec![b, b + r], "w={w}");
        assert_deps_or_wakeup_explain_every_start(&out, w);
    }
}

#[test]
fn with_a_wake_up_every_response_is_handled_w_after_it_reached_an_idle_thread_or_when_the_busy_one_freed() {
    // The property behind both closed forms, on every distribution: a handle row that found its worker's thread
    // idle (no compute row of the worker running at its arrival, no other response waking it) starts w after the
    // arrival; one that found it busy starts at the end of a compute row of its worker; a wake-up never makes a
    // run shorter.
    for extra in ["", r#", "distribution": "block""#, r#", "distribution": "round_robin", "barrier": false"#, r#", "asynchronous": true"#] {
        let plain = simulate_training(&three_layers(&format!(r#"{extra}, "client_cost": {{"issue_ns": 700, "receive_ns": 2000}}"#)), &net(Fidelity::Flow, 8e9, 1000), TraceDetail::Step).unwrap();
        for w in [1u64, 900, 15_000] {
            let spec = three_layers(&format!(r#"{extra}, "client_cost": {{"issue_ns": 700, "receive_ns": 2000, "wakeup_ns": {w}}}"#));
            let out = simulate_training(&spec, &net(Fidelity::Flow, 8e9, 1000), TraceDetail::Step).unwrap();
            assert!(out.makespan > plain.makespan, "{extra} w={w}");
            let log = &out.log;
            let compute: Vec<usize> = (0..log.len()).filter(|&i| log.kind[i] == KIND_COMPUTE).collect();
            let handles = op_rows(&out, "handle", KIND_COMPUTE);
            // a woken handle row holds its thread from its response's arrival (its ready time)
            let woke = |i: usize| handles.contains(&i) && log.start_ns[i] - log.ready_ns[i] == w as i64;
            let (mut idle, mut busy) = (0, 0);
            for &h in &handles {
                let (rank, t) = (log.rank[h], log.ready_ns[h]);
                let mine: Vec<usize> = compute.iter().copied().filter(|&i| log.rank[i] == rank && i != h).collect();
                // the thread is held from an op's ready time (its wake-up included) to its end
                let hold_from = |i: usize| if woke(i) { log.ready_ns[i] } else { log.start_ns[i] };
                let held = mine.iter().any(|&i| hold_from(i) <= t && t < log.end_ns[i]);
                if held {
                    busy += 1;
                    assert!(mine.iter().any(|&i| log.end_ns[i] == log.start_ns[h]), "{extra} w={w}: a busy thread's response starts as a row ends");
                } else if mine.iter().any(|&i| log.end_ns[i] == t) {
                    // a row that ends at the very instant the response arrives: the engine takes the events of one
                    // instant in order, so the thread was busy (start at t) or idle (t + w) by that order
                    assert!(log.start_ns[h] == t || log.start_ns[h] == t + w as i64, "{extra} w={w}: a tie at {t}");
                } else {
                    idle += 1;
                    assert_eq!(log.start_ns[h], t + w as i64, "{extra} w={w}: an idle thread's response starts its wake-up later");
                }
            }
            assert!(idle > 0 && busy > 0, "{extra} w={w}: responses reach idle ({idle}) and busy ({busy}) threads");
            assert_deps_or_wakeup_explain_every_start(&out, w);
        }
    }
}

#[test]
fn a_zero_wake_up_builds_the_same_graph_and_log_as_none() {
    for extra in ["", r#", "distribution": "round_robin""#, r#", "asynchronous": true"#, r#", "ps_split": true, "chunk_bytes": 300"#] {
        let plain = three_layers(&format!(r#"{extra}, "client_cost": {{"issue_ns": 700, "receive_ns": 2000}}"#));
        let zero = three_layers(&format!(r#"{extra}, "client_cost": {{"issue_ns": 700, "receive_ns": 2000, "wakeup_ns": 0}}"#));
        let (g0, g1) = (build_graph(&plain).unwrap(), build_graph(&zero).unwrap());
        assert_eq!(format!("{:?}", g0.ops), format!("{:?}", g1.ops));
        assert!(g0.wakeups.is_empty() && g1.wakeups.is_empty());
        let net = net(Fidelity::Flow, 8e9, 1000);
        let (a, b) = (simulate_training(&plain, &net, TraceDetail::Step).unwrap(), simulate_training(&zero, &net, TraceDetail::Step).unwrap());
        assert_eq!(format!("{:?}", a.log), format!("{:?}", b.log), "{extra}");
        // and a wake-up alone (no receive cost) adds a 0 ns handle row per response
        let woken = three_layers(&format!(r#"{extra}, "client_cost": {{"wakeup_ns": 5000}}"#));
        let g = build_graph(&woken).unwrap();
        assert_eq!(g.wakeups.len(), g.ops.iter().filter(|o| g.op_names[o.name as usize] == "handle").count());
        assert!(g.wakeups.iter().all(|&(op, w)| w == 5000 && g.ops[op as usize].duration == 0));
    }
}

#[test]
fn a_graph_refuses_a_wake_up_on_anything_but_a_compute_op_on_a_stream_or_twice() {
    let mut g = build_graph(&three_layers(r#", "client_cost": {"wakeup_ns": 5000}"#)).unwrap();
    g.check().unwrap();
    let (op, w) = g.wakeups[0];
    let transfer = g.ops.iter().position(|o| o.kind == ddlsim_core::graph::Kind::Transfer).unwrap() as u32;
    for (bad, needle) in [((transfer, 1), "compute op on a stream"), ((op, w), "two wake-ups"), ((g.ops.len() as u32, 1), "names op"),
                          ((op, u64::MAX), "")] {
        let mut h = g.clone();
        if bad == (op, u64::MAX) {
            h.wakeups[0].1 = u64::MAX; // past the engine's clock
        } else {
            h.wakeups.push(bad);
        }
        let e = h.check().unwrap_err();
        assert!(e.contains(needle) || (needle.is_empty() && e.contains("past the engine's clock")), "{e}");
    }
    g.wakeups.clear();
    g.check().unwrap();
}
