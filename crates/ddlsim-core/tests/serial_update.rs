//! The parameter server's serial update (`lower::server_cost`, `update_ns` /
//! `update_ns_per_byte`): one server thread serves the requests and runs the
//! updates; requests first come, first served, and each update right after the push that completes it (the
//! thread updates inside its handling of that push, `capture/ps_server.py`). Against a closed form derived by hand.

mod common;

use common::*;
use ddlsim_core::log::{KIND_COMPUTE, KIND_RECV};
use ddlsim_core::lower::server_cost::ServerCost;
use ddlsim_core::lower::training::{build_graph, GroupSpec, LayerSpec, SyncSpec, TrainingSpec};
use ddlsim_core::network::Fidelity;
use ddlsim_core::{simulate_training, RunOutput, TraceDetail};

/// Two one-layer groups on one server: group A (layer 1, whose backward takes 0 ns) is ready at 0, group B
/// (layer 0, backward `d`) at `d`.
fn two_groups(workers: u32, bytes: u64, d: u64, cost: ServerCost) -> TrainingSpec {
    let layers = vec![LayerSpec { fwd_ns: 0, bwd_ns: d }, LayerSpec { fwd_ns: 0, bwd_ns: 0 }];
    let groups = vec![
        GroupSpec { layers: vec![1], tensor: 1, bytes, server: 0, update_ns: 0 },
        GroupSpec { layers: vec![0], tensor: 0, bytes, server: 0, update_ns: 0 },
    ];
    TrainingSpec { seed: 1, server_cost: cost, ..TrainingSpec::new(workers, SyncSpec::Ps { servers: 1 }, layers, groups) }
}

fn sorted(out: &RunOutput, rows: &[usize], end: bool) -> Vec<u64> {
    let mut v: Vec<u64> = rows.iter().map(|&i| if end { out.log.end_ns[i] } else { out.log.start_ns[i] } as u64).collect();
    v.sort_unstable();
    v
}

#[test]
fn an_update_runs_right_after_its_last_push_and_holds_the_server_thread_while_requests_wait() {
    // W workers, M bytes per group, 10 Gbit/s (tx = M 8 / 10 ns per push, W pushes share the server's downlink),
    // latency L, acks and pull requests of 0 bytes. One thread: s = a + b W per request, u = update_ns +
    // update_ns_per_byte M per update.
    // - A's pushes arrive at T1 = W tx + L and are served one after another: the k-th ends at T1 + k s.
    // - A's update runs [T1 + W s, E], E = T1 + W s + u, on the thread.
    // - B's pushes leave at d = W s + u / 2 (>= W tx: the downlink is free) and arrive at T1 + W s + u / 2,
    //   during A's update: they wait for it and are served [E + (k - 1) s, E + k s].
    // - A's acks leave at E; its W pull requests arrive at E + 2 L, behind B's requests (2 L < W s).
    // - B's update runs at once after B's last push is served, [E + W s, F], F = E + W s + u, ahead of A's pull
    //   requests queued since E + 2 L (the thread that served the push updates; it does not go back to its queue
    //   first). A's pull requests are then served [F + (k - 1) s, F + k s].
    // - B's pull requests arrive at F + 2 L, while A's are served (2 L < W s): served [F + W s + (k - 1) s, ...].
    // Without the serial update the update would not hold the thread and B's requests would be served at
    // once on arrival (checked below).
    let (m, lat) = (10_000u64, 3_000u64);
    let tx = m * 8 / 10;
    for (w, a, b, upd, per_byte) in [(1u32, 20_000u64, 5_000u64, 40_000u64, 0.5f64), (2, 20_000, 5_000, 40_000, 0.5), (3, 9_000, 3_000, 10_000, 3.0), (4, 12_000, 0, 0, 6.0)] {
        let s = a + b * w as u64;
        let u = upd + (per_byte * m as f64) as u64;
        assert!(2 * lat < w as u64 * s && w as u64 * s + u / 2 >= w as u64 * tx);
        let d = w as u64 * s + u / 2;
        let cost = ServerCost { a_ns: a, b_ns: b, update_ns: upd, update_ns_per_byte: per_byte };
        let out = simulate_training(&two_groups(w, m, d, cost), &net(Fidelity::Flow, 10e9, lat), TraceDetail::Step).unwrap();
        let t1 = w as u64 * tx + lat;
        let e = t1 + w as u64 * s + u;
        let f = e + w as u64 * s + u;
        let k = |base: u64| (1..=w as u64).map(move |k| base + k * s);
        let expected: Vec<u64> = k(t1).chain(k(e)).chain(k(f)).chain(k(f + w as u64 * s)).collect();
        let serve = op_rows(&out, "serve", KIND_COMPUTE);
        assert_eq!(sorted(&out, &serve, true), expected, "W={w}");
        let updates = op_rows(&out, "update", KIND_COMPUTE);
        assert_eq!(sorted(&out, &updates, false), vec![t1 + w as u64 * s, e + w as u64 * s], "W={w}");
        assert_eq!(sorted(&out, &updates, true), vec![e, f], "W={w}");
        // the updates run on the same stream as the serve rows: the server's one thread
        let stream = out.log.stream[serve[0]];
        assert!(updates.iter().chain(&serve).all(|&i| out.log.stream[i] == stream && out.log.rank[i] == w as i32));
        let b_push = op_rows(&out, "push_request", KIND_RECV).into_iter().filter(|&i| out.log.tensor[i] == 0).collect::<Vec<_>>();
        assert!(b_push.iter().all(|&i| out.log.end_ns[i] as u64 == t1 + w as u64 * s + u / 2), "W={w}");
        assert_deps_explain_every_start(&out.log);

        // The same without the serial update: the update runs beside the thread, not on it.
        let plain = ServerCost { update_ns: 0, update_ns_per_byte: 0.0, ..cost };
        let out = simulate_training(&two_groups(w, m, d, plain), &net(Fidelity::Flow, 10e9, lat), TraceDetail::Step).unwrap();
        let b_serves: Vec<usize> = op_rows(&out, "serve", KIND_COMPUTE).into_iter().filter(|&i| out.log.tensor[i] == 0).collect();
        let update = op_rows(&out, "update", KIND_COMPUTE)[0];
        assert_ne!(out.log.stream[update], out.log.stream[b_serves[0]], "W={w}");
    }
}

#[test]
fn no_update_cost_builds_the_same_graph_and_log_as_before() {
    for extra in ["", r#", "distribution": "round_robin""#, r#", "asynchronous": true"#, r#", "ps_split": true, "chunk_bytes": 300"#] {
        let before = ps_three_layers(&format!(r#"{extra}, "server_cost": {{"a_ns": 1500, "b_ns": 700}}"#));
        let zero = ps_three_layers(&format!(r#"{extra}, "server_cost": {{"a_ns": 1500, "b_ns": 700, "update_ns": 0, "update_ns_per_byte": 0.0}}"#));
        let (g0, g1) = (build_graph(&before).unwrap(), build_graph(&zero).unwrap());
        assert_eq!(format!("{:?}", g0.ops), format!("{:?}", g1.ops), "{extra}");
        let net = net(Fidelity::Flow, 8e9, 1000);
        let (a, b) = (simulate_training(&before, &net, TraceDetail::Step).unwrap(), simulate_training(&zero, &net, TraceDetail::Step).unwrap());
        assert_eq!(format!("{:?}", a.log), format!("{:?}", b.log), "{extra}");
        // an update cost alone makes the processors and changes the run
        let serial = ps_three_layers(&format!(r#"{extra}, "server_cost": {{"update_ns": 50000}}"#));
        let c = simulate_training(&serial, &net, TraceDetail::Step).unwrap();
        assert!(c.makespan > a.makespan - 1 && format!("{:?}", c.log) != format!("{:?}", a.log), "{extra}");
    }
    assert!(build_graph(&ps_three_layers(r#", "server_cost": {"update_ns_per_byte": -1.0}"#)).unwrap_err().contains("update_ns_per_byte"));
}
