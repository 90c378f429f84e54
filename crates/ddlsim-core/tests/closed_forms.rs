//! On an idle network the simulator must reproduce the closed forms exactly.

mod common;

use common::*;
use ddlsim_core::collective::Algorithm;
use ddlsim_core::graph::Graph;
use ddlsim_core::log::{EventLog, KIND_RECV, KIND_SEND};
use ddlsim_core::lower::training::{AlgorithmName, GroupSpec, LayerSpec, SyncSpec, TrainingSpec};
use ddlsim_core::network::{Fidelity, NetworkSpec};
use ddlsim_core::{run_graph, simulate_training, TraceDetail};

fn one_group(sync: SyncSpec, workers: u32, bytes: u64) -> TrainingSpec {
    let layers = vec![LayerSpec { fwd_ns: 0, bwd_ns: 0 }];
    let groups = vec![GroupSpec { layers: vec![0], tensor: 0, bytes, server: 0, update_ns: 0 }];
    TrainingSpec { seed: 1, ..TrainingSpec::new(workers, sync, layers, groups) }
}

fn op_rows(log: &EventLog, names: &[String], name: &str, kind: u8) -> Vec<usize> {
    let code = names.iter().position(|n| n == name).unwrap() as u32;
    (0..log.len()).filter(|&i| log.op[i] == code && log.kind[i] == kind).collect()
}

/// Makespan of one all-reduce of `bytes` over `n` ranks started together on an idle star.
fn allreduce_time(algorithm: Algorithm, n: u32, bytes: u64, network: &NetworkSpec) -> (u64, EventLog) {
    let mut g = Graph::new();
    let members: Vec<u32> = (0..n).collect();
    allreduce(&mut g, algorithm, &members, bytes, &[], &[]);
    let out = run_graph(&g, network, TraceDetail::Step).unwrap();
    (out.makespan, out.log)
}

#[test]
fn ring_allreduce_matches_closed_form_to_the_nanosecond() {
    // M = N * 1250 B at 10 Gbit/s: each chunk takes exactly 1000 ns.
    for (fidelity, n) in [(Fidelity::Flow, 8), (Fidelity::Analytic, 8), (Fidelity::Flow, 5), (Fidelity::Flow, 2), (Fidelity::Flow, 16)] {
        let m = n as u64 * 1250;
        let lat = 3_000;
        let (makespan, log) = allreduce_time(Algorithm::Ring, n, m, &net(fidelity, 10e9, lat));
        assert_eq!(makespan, 2 * (n as u64 - 1) * (1000 + lat), "{fidelity:?} N={n}");
        let sends = (0..log.len()).filter(|&i| log.kind[i] == KIND_SEND).count();
        assert_eq!(sends, (n * 2 * (n - 1)) as usize);
        assert_deps_explain_every_start(&log);
    }
}

#[test]
fn halving_doubling_matches_its_closed_form_for_powers_of_two() {
    // 2 log2(p) alpha + 2 (p-1)/p M beta, with M/p a whole number of ns at 1 B/ns.
    for fidelity in [Fidelity::Flow, Fidelity::Analytic] {
        for p in [2u32, 4, 8, 16, 32] {
            let (m, lat) = (p as u64 * 1000, 700);
            let (makespan, log) = allreduce_time(Algorithm::HalvingDoubling, p, m, &net(fidelity, 8e9, lat));
            let log2 = p.trailing_zeros() as u64;
            assert_eq!(makespan, 2 * log2 * lat + 2 * (p as u64 - 1) * m / p as u64, "{fidelity:?} p={p}");
            assert_deps_explain_every_start(&log);
        }
    }
}

#[test]
fn halving_doubling_pays_two_whole_vector_steps_off_powers_of_two() {
    for n in [3u32, 5, 6, 7, 12] {
        let p = 1u32 << (31 - n.leading_zeros());
        let (m, lat) = (p as u64 * 1000, 700);
        let (makespan, log) = allreduce_time(Algorithm::HalvingDoubling, n, m, &net(Fidelity::Flow, 8e9, lat));
        let log2 = p.trailing_zeros() as u64;
        let core = 2 * log2 * lat + 2 * (p as u64 - 1) * m / p as u64;
        assert_eq!(makespan, core + 2 * (lat + m), "n={n}");
        assert_deps_explain_every_start(&log);
    }
}

#[test]
fn ring_allreduce_with_uneven_chunks_is_within_rounding_of_closed_form() {
    let (n, m, lat) = (7u64, 25_557_032u64 * 4, 10_000u64);
    let bw = 10e9;
    let (makespan, _) = allreduce_time(Algorithm::Ring, n as u32, m, &net(Fidelity::Flow, bw, lat));
    let closed = 2.0 * (n - 1) as f64 * ((m as f64 / n as f64) * 8.0 / bw * 1e9 + lat as f64);
    // The largest chunk is ceil(M/N) bytes and every step rounds up to a whole ns.
    let diff = makespan as f64 - closed;
    assert!((0.0..=2.0 * (n - 1) as f64 * 2.0).contains(&diff), "makespan {makespan} closed form {closed}");
}

#[test]
fn ps_incast_shares_the_server_downlink() {
    // N workers push M bytes at once to one server: the last push arrives
    // after N*M/B + latency; the server update is ready exactly then.
    for n in [1u32, 4, 16] {
        let m = 1_000_000u64;
        let lat = 10_000;
        let out = simulate_training(&one_group(SyncSpec::Ps { servers: 1 }, n, m), &net(Fidelity::Flow, 10e9, lat), TraceDetail::Step).unwrap();
        let expected = n as u64 * m * 8 / 10 + lat; // ns at 10 Gbit/s
        let update = op_rows(&out.log, &out.op_names, "update", 0)[0];
        assert_eq!(out.log.ready_ns[update] as u64, expected, "N={n}");
        let arrivals = op_rows(&out.log, &out.op_names, "push_request", KIND_RECV);
        assert_eq!(arrivals.len(), n as usize);
        assert!(arrivals.iter().all(|&i| out.log.end_ns[i] as u64 == expected));
        assert_deps_explain_every_start(&out.log);
    }
}

#[test]
fn analytic_mode_serves_the_server_downlink_one_push_after_another() {
    // The 16 pushes start together; the server's downlink is a FIFO server:
    // the k-th ends its transmission at k M/B and arrives a latency later,
    // so the last one arrives at N M/B + latency, as in the flow model.
    let (n, m, lat) = (16u32, 1_000_000u64, 10_000u64);
    let out = simulate_training(&one_group(SyncSpec::Ps { servers: 1 }, n, m), &net(Fidelity::Analytic, 10e9, lat), TraceDetail::Step).unwrap();
    let tx = m * 8 / 10; // ns at 10 Gbit/s
    let mut sends: Vec<u64> = op_rows(&out.log, &out.op_names, "push_request", KIND_SEND).iter().map(|&i| out.log.end_ns[i] as u64).collect();
    sends.sort_unstable();
    assert_eq!(sends, (1..=n as u64).map(|k| k * tx).collect::<Vec<_>>());
    let mut recvs: Vec<u64> = op_rows(&out.log, &out.op_names, "push_request", KIND_RECV).iter().map(|&i| out.log.end_ns[i] as u64).collect();
    recvs.sort_unstable();
    assert_eq!(recvs, (1..=n as u64).map(|k| k * tx + lat).collect::<Vec<_>>());
    let update = op_rows(&out.log, &out.op_names, "update", 0)[0];
    assert_eq!(out.log.ready_ns[update] as u64, n as u64 * tx + lat);
}

#[test]
fn every_byte_sent_is_received() {
    let mut spec = one_group(SyncSpec::Allreduce { algorithm: AlgorithmName::Ring }, 6, 1_000_003);
    spec.iterations = 3;
    let out = simulate_training(&spec, &net(Fidelity::Flow, 10e9, 1000), TraceDetail::Step).unwrap();
    assert_eq!(out.bytes_sent.iter().sum::<u64>(), out.bytes_received.iter().sum::<u64>());
    let per_rank = out.bytes_sent[0] / 3;
    assert!((per_rank as i64 - (2 * 5 * 1_000_003 / 6) as i64).abs() <= 10);
}

#[test]
fn training_logs_explain_every_start_for_every_strategy() {
    let layers: Vec<LayerSpec> = (0..6).map(|l| LayerSpec { fwd_ns: 1000 + 100 * l, bwd_ns: 2000 + 50 * l }).collect();
    let groups: Vec<GroupSpec> =
        (0..6).map(|l| GroupSpec { layers: vec![l], tensor: l as i32, bytes: 50_000 + 7_919 * l as u64, server: l % 2, update_ns: 300 }).collect();
    let mut syncs: Vec<SyncSpec> = AlgorithmName::ALL.iter().map(|&algorithm| SyncSpec::Allreduce { algorithm }).collect();
    syncs.push(SyncSpec::Ps { servers: 2 });
    for sync in syncs {
        for (barrier, policy, preemption) in [(true, "fifo", false), (false, "priority", false), (false, "priority", true)] {
            let mut spec = one_group(sync.clone(), 5, 1);
            spec.layers = layers.clone();
            spec.groups = groups.clone();
            spec.iterations = 3;
            spec.jitter = 0.2;
            spec.barrier = barrier;
            spec.stream_policy = if policy == "fifo" { Default::default() } else { ddlsim_core::lower::training::StreamPolicyName::Priority };
            spec.preemption = preemption;
            if let SyncSpec::Allreduce { algorithm } = sync {
                // Two ranks per host (the last alone) for the hierarchical ring; messages for the ring.
                if algorithm == AlgorithmName::HierarchicalRing {
                    spec.host_of_rank = vec![0, 0, 1, 1, 2];
                }
                spec.chunk_bytes = if algorithm == AlgorithmName::Ring && preemption { 20_000 } else { 0 };
            }
            for fidelity in [Fidelity::Flow, Fidelity::Analytic] {
                let out = simulate_training(&spec, &net(fidelity, 10e9, 2_000), TraceDetail::Step)
                    .unwrap_or_else(|e| panic!("{sync:?} barrier={barrier} {policy} preemption={preemption} {fidelity:?}: {e}"));
                assert_deps_explain_every_start(&out.log);
            }
        }
    }
}

/// Priority streams must never deadlock, whatever order the ranks become
/// ready in: random models, jitter and rank counts, with and without chunk
/// preemption, every all-reduce algorithm, no barrier (so iterations overlap).
#[test]
fn priority_streams_finish_for_any_readiness_order() {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |bound: u64| {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % bound
    };
    for case in 0..120 {
        let workers = 2 + next(11) as u32;
        let num_layers = 2 + next(15) as u32;
        let layers: Vec<LayerSpec> = (0..num_layers).map(|_| LayerSpec { fwd_ns: 100 + next(20_000), bwd_ns: 100 + next(40_000) }).collect();
        let groups: Vec<GroupSpec> = (0..num_layers)
            .map(|l| GroupSpec { layers: vec![l], tensor: l as i32, bytes: 1 + next(400_000), server: 0, update_ns: next(500) })
            .collect();
        let algorithm = AlgorithmName::ALL[next(AlgorithmName::ALL.len() as u64) as usize];
        let mut spec = one_group(SyncSpec::Allreduce { algorithm }, workers, 1);
        spec.layers = layers;
        spec.groups = groups;
        spec.iterations = 4;
        spec.seed = case;
        spec.jitter = 0.05 + next(50) as f64 / 100.0;
        spec.barrier = false;
        spec.stream_policy = ddlsim_core::lower::training::StreamPolicyName::Priority;
        spec.preemption = next(2) == 0;
        // Ring: sometimes partitioned; hierarchical ring: sometimes 2 or 3 ranks per host.
        if algorithm == AlgorithmName::Ring && next(2) == 0 {
            spec.chunk_bytes = 1 + next(100_000);
        }
        if algorithm == AlgorithmName::HierarchicalRing && next(3) != 0 {
            let per = 2 + next(2) as u32;
            spec.host_of_rank = (0..workers).map(|r| r / per).collect();
        }
        let fidelity = if next(2) == 0 { Fidelity::Flow } else { Fidelity::Analytic };
        let out = simulate_training(&spec, &net(fidelity, 10e9, 1_000), TraceDetail::Step).unwrap_or_else(|e| {
            panic!("case {case}: {workers} workers {num_layers} layers {algorithm:?} preemption={} {fidelity:?}: {e}", spec.preemption)
        });
        assert_deps_explain_every_start(&out.log);
    }
}
