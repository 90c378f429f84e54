//! On an idle network the simulator must reproduce the closed forms exactly.

use ddlsim_core::graph::OpCode;
use ddlsim_core::spec::*;
use ddlsim_core::{simulate_training, RunOutput};

fn network(fidelity: Fidelity, bandwidth_bps: f64, latency_ns: u64) -> NetworkSpec {
    NetworkSpec { fidelity, bandwidth_bps, latency_ns, topology: Topology::Star }
}

fn one_tensor(strategy: Strategy, workers: u32, bytes: u64, net: NetworkSpec) -> TrainingSpec {
    TrainingSpec {
        strategy,
        workers,
        servers: if strategy == Strategy::Ps { 1 } else { 0 },
        iterations: 1,
        seed: 1,
        jitter: 0.0,
        barrier: true,
        header_bytes: 0,
        layers: vec![LayerSpec { fwd_ns: 0, bwd_ns: 0 }],
        tensors: vec![TensorSpec { layer: 0, bytes, server: 0, update_ns: 0 }],
        network: net,
        trace_detail: TraceDetail::Step,
    }
}

fn rows_with(out: &RunOutput, code: OpCode) -> Vec<usize> {
    (0..out.log.len()).filter(|&i| out.log.op[i] == code as u8).collect()
}

#[test]
fn ring_allreduce_matches_closed_form_to_the_nanosecond() {
    // M = N * 1250 B at 10 Gbit/s: each chunk takes exactly 1000 ns.
    for (fidelity, n) in [(Fidelity::Flow, 8), (Fidelity::Analytic, 8), (Fidelity::Flow, 5), (Fidelity::Flow, 2)] {
        let m = n as u64 * 1250;
        let lat = 3_000;
        let out = simulate_training(&one_tensor(Strategy::Ring, n, m, network(fidelity, 10e9, lat))).unwrap();
        let expected = 2 * (n as u64 - 1) * (1000 + lat);
        assert_eq!(out.makespan, expected, "{fidelity:?} N={n}");
        assert_eq!(rows_with(&out, OpCode::RingStep).len(), (n * 2 * (n - 1)) as usize);
    }
}

#[test]
fn ring_allreduce_with_uneven_chunks_is_within_rounding_of_closed_form() {
    let (n, m, lat) = (7u64, 25_557_032u64 * 4, 10_000u64);
    let bw = 10e9;
    let out = simulate_training(&one_tensor(Strategy::Ring, n as u32, m, network(Fidelity::Flow, bw, lat))).unwrap();
    let closed = 2.0 * (n - 1) as f64 * ((m as f64 / n as f64) * 8.0 / bw * 1e9 + lat as f64);
    // The largest chunk is ceil(M/N) bytes and every step rounds up to a whole ns.
    let diff = out.makespan as f64 - closed;
    assert!((0.0..=2.0 * (n - 1) as f64 * 2.0).contains(&diff), "makespan {} closed form {closed}", out.makespan);
}

#[test]
fn ps_incast_shares_the_server_downlink() {
    // N workers push M bytes at once to one server: the last push arrives
    // after N*M/B + latency; the server update is ready exactly then.
    for n in [1u32, 4, 16] {
        let m = 1_000_000u64;
        let lat = 10_000;
        let out = simulate_training(&one_tensor(Strategy::Ps, n, m, network(Fidelity::Flow, 10e9, lat))).unwrap();
        let update = rows_with(&out, OpCode::Update)[0];
        let expected = n as u64 * m * 8 / 10 + lat; // ns at 10 Gbit/s
        assert_eq!(out.log.ready_ns[update] as u64, expected, "N={n}");
        let pushes = rows_with(&out, OpCode::PushRequest);
        assert!(pushes.iter().all(|&i| out.log.end_ns[i] as u64 == expected));
    }
}

#[test]
fn analytic_mode_is_latency_plus_size_over_bandwidth_without_contention() {
    let (n, m, lat) = (16u32, 1_000_000u64, 10_000u64);
    let out = simulate_training(&one_tensor(Strategy::Ps, n, m, network(Fidelity::Analytic, 10e9, lat))).unwrap();
    for i in rows_with(&out, OpCode::PushRequest) {
        assert_eq!((out.log.end_ns[i] - out.log.start_ns[i]) as u64, lat + m * 8 / 10);
    }
}

#[test]
fn every_byte_sent_is_received() {
    let mut spec = one_tensor(Strategy::Ring, 6, 1_000_003, network(Fidelity::Flow, 10e9, 1000));
    spec.iterations = 3;
    let out = simulate_training(&spec).unwrap();
    assert_eq!(out.bytes_sent.iter().sum::<u64>(), out.bytes_received.iter().sum::<u64>());
    // each rank sends 2(N-1) chunks per iteration: 2(N-1)/N of M, give or take the uneven bytes
    let per_rank = out.bytes_sent[0] / 3;
    assert!((per_rank as i64 - (2 * 5 * 1_000_003 / 6) as i64).abs() <= 10);
}
