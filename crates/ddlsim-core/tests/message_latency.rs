//! Per-message transport times from measured iterations (`lower::message_latency`), against closed forms
//! derived by hand.

mod common;

use common::*;
use ddlsim_core::log::{KIND_RECV, KIND_SEND};
use ddlsim_core::lower::message_latency::{MessageKey, MessageLatency};
use ddlsim_core::lower::training::{GroupSpec, LayerSpec, SyncSpec, TrainingSpec};
use ddlsim_core::network::Fidelity;
use ddlsim_core::{simulate_training, TraceDetail};

/// One worker (rank 0), one server (rank 1), one layer (forward 1 us, backward 2 us: the gradient is ready at
/// t0 = 3 us), one tensor of `bytes`, no update time, `iterations` iterations with the barrier between them.
fn spec(bytes: u64, iterations: u32, latency: MessageLatency) -> TrainingSpec {
    let layers = vec![LayerSpec { fwd_ns: 1_000, bwd_ns: 2_000 }];
    let groups = vec![GroupSpec { layers: vec![0], tensor: 0, bytes, server: 0, update_ns: 0 }];
    TrainingSpec { seed: 4, iterations, message_latency: latency, ..TrainingSpec::new(1, SyncSpec::Ps { servers: 1 }, layers, groups) }
}

fn keys() -> Vec<MessageKey> {
    [(0, "push_request"), (1, "push_response"), (0, "pull_request"), (1, "pull_response")]
        .into_iter()
        .map(|(rank, op)| MessageKey(rank, op.to_string(), 0))
        .collect()
}

const T0: u64 = 3_000;

#[test]
fn each_message_arrives_its_own_time_later_and_what_follows_waits_for_it() {
    // Without the times: the push (M bytes, tx = 8 M / 10 ns at 10 Gbit/s) arrives at t0 + tx + L, the ack
    // (0 bytes) L later, the pull request L later, the pull response tx + L later: makespan t0 + 2 tx + 4 L.
    // With one measured iteration of times d1..d4 (push, ack, pull request, pull response), each message arrives
    // its time later, and so each later message leaves that much later: the k-th arrives at its time without
    // them plus d1 + ... + dk.
    let (m, lat) = (1_250u64, 700u64);
    let tx = m * 8 / 10;
    let d = [11_000u64, 0, 3_000, 250];
    let measured = MessageLatency { keys: keys(), iterations: vec![d.iter().map(|&x| Some(x)).collect()], first: 0 };
    for fidelity in [Fidelity::Analytic, Fidelity::Flow] {
        let out = simulate_training(&spec(m, 1, measured.clone()), &net(fidelity, 10e9, lat), TraceDetail::Step).unwrap();
        let plain = simulate_training(&spec(m, 1, MessageLatency::default()), &net(fidelity, 10e9, lat), TraceDetail::Step).unwrap();
        assert_eq!(plain.makespan, T0 + 2 * tx + 4 * lat);
        assert_eq!(out.makespan, T0 + 2 * tx + 4 * lat + d.iter().sum::<u64>(), "{fidelity:?}");
        let without = [T0 + tx + lat, T0 + tx + 2 * lat, T0 + tx + 3 * lat, T0 + 2 * tx + 4 * lat];
        for (k, op) in ["push_request", "push_response", "pull_request", "pull_response"].into_iter().enumerate() {
            let recv = op_rows(&out, op, KIND_RECV);
            let send = op_rows(&out, op, KIND_SEND);
            assert_eq!((recv.len(), send.len()), (1, 1), "{op}");
            let extra: u64 = d[..=k].iter().sum();
            assert_eq!(out.log.end_ns[recv[0]] as u64, without[k] + extra, "{op} {fidelity:?}");
            // the link is free at the network's delivery: the send row ends when its bytes are out, as before
            let before: u64 = d[..k].iter().sum();
            assert_eq!(out.log.end_ns[send[0]] - out.log.start_ns[send[0]], plain.log.end_ns[op_rows(&plain, op, KIND_SEND)[0]] - plain.log.start_ns[op_rows(&plain, op, KIND_SEND)[0]]);
            assert_eq!(out.log.start_ns[send[0]] as u64, plain.log.start_ns[op_rows(&plain, op, KIND_SEND)[0]] as u64 + before, "{op}");
        }
        assert_deps_explain_every_start(&out.log);
    }
}

#[test]
fn every_simulated_iteration_takes_one_measured_iteration_whole_in_turn() {
    // Three measured iterations whose times sum to 1, 5 and 2 ms, the first taken by simulated iteration 1. With
    // the barrier, each simulated iteration lasts its length without them plus the sum of the measured iteration it
    // takes (one message after another, as above): iterations 0..7 take rows 2, 0, 1, 2, 0, 1, 2, 0.
    let (m, lat) = (1_250u64, 700u64);
    let measured = MessageLatency {
        keys: keys(),
        iterations: vec![
            vec![Some(400_000), Some(100_000), Some(300_000), Some(200_000)],
            vec![Some(2_000_000), Some(1_000_000), Some(1_500_000), Some(500_000)],
            vec![Some(500_000), Some(500_000), Some(500_000), Some(500_000)],
        ],
        first: 1,
    };
    let sums = [1_000_000u64, 5_000_000, 2_000_000];
    let rows = [2usize, 0, 1, 2, 0, 1, 2, 0];
    let iterations = rows.len() as u32;
    let s = spec(m, iterations, measured.clone());
    let out = simulate_training(&s, &net(Fidelity::Flow, 10e9, lat), TraceDetail::Step).unwrap();
    let plain = simulate_training(&spec(m, iterations, MessageLatency::default()), &net(Fidelity::Flow, 10e9, lat), TraceDetail::Step).unwrap();
    let per = plain.makespan / iterations as u64;
    assert_eq!(per * iterations as u64, plain.makespan, "iterations alike without the times");
    // each iteration's end: the last pull response's recv row of that iteration
    let ends = op_rows(&out, "pull_response", KIND_RECV);
    assert_eq!(ends.len(), rows.len());
    let mut t = 0;
    for (it, &row) in rows.iter().enumerate() {
        t += per + sums[row];
        assert_eq!(measured.row_of(it as i32), row);
        assert_eq!(out.log.end_ns[ends[it]] as u64, t, "iteration {it}");
    }
    assert_eq!(out.makespan, t);
    // no seed in it: another seed, the same run
    let other = TrainingSpec { seed: 99, ..s };
    let again = simulate_training(&other, &net(Fidelity::Flow, 10e9, lat), TraceDetail::Step).unwrap();
    assert_eq!(again.log.end_ns, out.log.end_ns);
}

#[test]
fn times_of_zero_build_the_same_run_as_none() {
    let zero = MessageLatency { keys: keys(), iterations: vec![vec![Some(0); 4]], first: 0 };
    let a = simulate_training(&spec(5_000, 3, zero), &net(Fidelity::Flow, 10e9, 900), TraceDetail::Step).unwrap();
    let b = simulate_training(&spec(5_000, 3, MessageLatency::default()), &net(Fidelity::Flow, 10e9, 900), TraceDetail::Step).unwrap();
    assert_eq!((a.makespan, a.events), (b.makespan, b.events));
    assert_eq!((a.log.start_ns, a.log.end_ns, a.log.id), (b.log.start_ns, b.log.end_ns, b.log.id));
}

#[test]
fn a_ring_job_or_a_bad_table_is_refused() {
    let mut s = ps_three_layers("");
    s.message_latency = MessageLatency { keys: vec![], iterations: vec![vec![Some(1)]], first: 0 };
    assert!(s.validate().is_ok());
    s.sync = SyncSpec::Allreduce { algorithm: ddlsim_core::lower::spec::AlgorithmName::Ring };
    assert!(s.validate().unwrap_err().contains("all-reduce"));
    let text = r#", "message_latency": {"keys": [[0, "push_request", 0]], "iterations": [[5, 6]]}"#;
    assert!(ps_three_layers(text).validate().unwrap_err().contains("2 times for 1 keys"));
}

#[test]
fn a_graph_refuses_a_transit_delay_on_anything_but_a_point_to_point_transfer_or_twice() {
    use ddlsim_core::graph::{FanKind, FanSpec, Kind};
    use ddlsim_core::lower::training::build_graph;
    let table = MessageLatency { keys: vec![], iterations: vec![vec![Some(5_000)]], first: 0 };
    let mut g = build_graph(&spec(1_250, 2, table)).unwrap();
    g.check().unwrap();
    assert!(!g.transit_delays.is_empty());
    let (op, d) = g.transit_delays[0];
    let compute = g.ops.iter().position(|o| o.kind == Kind::Compute).unwrap() as u32;
    for (bad, needle) in [((compute, 1), "applies to a transfer op"), ((op, d), "two transit delays"),
                          ((g.ops.len() as u32, 1), "names op"), ((op, u64::MAX), "past the engine's clock")] {
        let mut h = g.clone();
        if bad == (op, u64::MAX) {
            h.transit_delays[0].1 = u64::MAX;
        } else {
            h.transit_delays.push(bad);
        }
        let e = h.check().unwrap_err();
        assert!(e.contains(needle), "{e}");
    }
    // a fan's transfer: its delivery is the fan's, not the op's (two pushes of one size to one receiver, summed)
    let mut f = ddlsim_core::graph::Graph::new();
    let a = transfer(&mut f, 0, 2, 1_000);
    let a = f.add(a, &[]);
    let b = transfer(&mut f, 1, 2, 1_000);
    let b = f.add(b, &[]);
    f.fans.push(FanSpec { kind: FanKind::Aggregate, ops: vec![a, b] });
    f.check().unwrap();
    f.transit_delays.push((b, 10));
    let e = f.check().unwrap_err();
    assert!(e.contains("not a fan's"), "{e}");
}
