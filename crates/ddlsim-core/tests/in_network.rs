//! In-network mechanisms for the parameter server: multicast of parameters,
//! in-network aggregation of gradients, both. Closed forms on an idle
//! network, conservation, ordering against plain PS, switch memory.

mod common;

use std::collections::HashMap;

use common::*;
use ddlsim_core::log::{EventLog, KIND_RECV, KIND_SEND};
use ddlsim_core::lower::in_network::{aggregated_groups, InNetworkMode, InNetworkSpec};
use ddlsim_core::lower::training::{GroupSpec, LayerSpec, SyncSpec, TrainingSpec};
use ddlsim_core::network::{Fidelity, NetworkSpec, Routing, TopologySpec};
use ddlsim_core::{simulate_training, RunOutput, TraceDetail};

const MODES: [InNetworkMode; 4] = [InNetworkMode::None, InNetworkMode::Multicast, InNetworkMode::Aggregation, InNetworkMode::Multiagg];

fn ps(workers: u32, groups: Vec<GroupSpec>, layers: usize, mode: InNetworkMode) -> TrainingSpec {
    TrainingSpec {
        seed: 1,
        in_network: InNetworkSpec { mode, switch_memory: None },
        ..TrainingSpec::new(workers, SyncSpec::Ps { servers: 1 }, vec![LayerSpec { fwd_ns: 0, bwd_ns: 0 }; layers], groups)
    }
}

fn one_group(workers: u32, bytes: u64, mode: InNetworkMode) -> TrainingSpec {
    ps(workers, vec![GroupSpec { layers: vec![0], tensor: 0, bytes, server: 0, update_ns: 0 }], 1, mode)
}

fn rows(out: &RunOutput, name: &str, kind: u8) -> Vec<usize> {
    let code = out.op_names.iter().position(|n| n == name).unwrap_or(usize::MAX) as u32;
    (0..out.log.len()).filter(|&i| out.log.op[i] == code && out.log.kind[i] == kind).collect()
}

fn run(spec: &TrainingSpec, net: &NetworkSpec) -> RunOutput {
    let out = simulate_training(spec, net, TraceDetail::Step).unwrap();
    assert_deps_explain_every_start(&out.log);
    assert_conserved(&out);
    out
}

/// Per message: one send and many recvs (multicast), many sends and one
/// recv (aggregation) or one of each, all of one size; bytes handed to the
/// network and bytes delivered match the log, counting every multicast
/// copy delivered and every aggregated contribution.
fn assert_conserved(out: &RunOutput) {
    let log: &EventLog = &out.log;
    let mut by_message: HashMap<i64, (Vec<usize>, Vec<usize>)> = HashMap::new();
    for i in 0..log.len() {
        if log.kind[i] == KIND_SEND {
            by_message.entry(log.message[i]).or_default().0.push(i);
        } else if log.kind[i] == KIND_RECV {
            by_message.entry(log.message[i]).or_default().1.push(i);
        }
    }
    let (mut sent, mut delivered) = (0u64, 0u64);
    for (m, (s, r)) in &by_message {
        assert!(!s.is_empty() && !r.is_empty(), "message {m}: {} sends, {} recvs", s.len(), r.len());
        assert!(s.len() == 1 || r.len() == 1, "message {m}: {} sends and {} recvs", s.len(), r.len());
        let bytes = log.bytes[s[0]] as u64;
        assert!(s.iter().chain(r).all(|&i| log.bytes[i] as u64 == bytes), "message {m}: sizes differ");
        // Every recv ends after every send's transmission ended.
        let last_tx = s.iter().map(|&i| log.end_ns[i]).max().unwrap();
        assert!(r.iter().all(|&i| log.start_ns[i] == last_tx), "message {m}: recv before the last send ended");
        sent += s.len() as u64 * bytes;
        delivered += s.len().max(r.len()) as u64 * bytes;
    }
    assert_eq!(out.bytes_sent.iter().sum::<u64>(), sent);
    assert_eq!(out.bytes_received.iter().sum::<u64>(), delivered);
    // Replication is the only source of extra bytes: sent + extra copies == delivered.
    let copies: u64 = by_message.values().filter(|(s, _)| s.len() == 1).map(|(s, r)| (r.len() as u64 - 1) * log.bytes[s[0]] as u64).sum();
    assert_eq!(sent + copies, delivered);
}

// At 10 Gbit/s, 1_250_000 bytes take exactly 1 ms.
const M: u64 = 1_250_000;
const TX: u64 = 1_000_000;

#[test]
fn multicast_pull_takes_one_transmission_plus_latency_not_n() {
    for fidelity in [Fidelity::Flow, Fidelity::Analytic] {
        for n in [2u32, 8, 16] {
            let lat = 5_000;
            let out = run(&one_group(n, M, InNetworkMode::Multicast), &net(fidelity, 10e9, lat));
            let sends = rows(&out, "param_multicast", KIND_SEND);
            let recvs = rows(&out, "param_multicast", KIND_RECV);
            assert_eq!((sends.len(), recvs.len()), (1, n as usize), "one send row, one recv row per worker");
            let s = sends[0];
            assert_eq!(out.log.end_ns[s] - out.log.start_ns[s], TX as i64, "{fidelity:?} N={n}: the server sends one copy");
            let mut receivers: Vec<i32> = recvs.iter().map(|&i| out.log.rank[i]).collect();
            receivers.sort_unstable();
            assert_eq!(receivers, (0..n as i32).collect::<Vec<_>>());
            for &r in &recvs {
                assert_eq!(out.log.message[r], out.log.message[s]);
                assert_eq!(out.log.end_ns[r] - out.log.start_ns[s], (TX + lat) as i64, "{fidelity:?} N={n}: M/B + latency");
            }
            // Plain pushes (flow: incast N*M/B + lat), then the multicast: nothing else.
            let incast = n as u64; // both models serve the server downlink one push after another
            assert_eq!(out.makespan, incast * TX + lat + TX + lat);
        }
    }
}

#[test]
fn aggregation_push_takes_one_transmission_plus_latency_not_n() {
    for fidelity in [Fidelity::Flow, Fidelity::Analytic] {
        for n in [2u32, 8, 16] {
            let lat = 5_000;
            let out = run(&one_group(n, M, InNetworkMode::Aggregation), &net(fidelity, 10e9, lat));
            let sends = rows(&out, "push_request", KIND_SEND);
            let recvs = rows(&out, "push_request", KIND_RECV);
            assert_eq!((sends.len(), recvs.len()), (n as usize, 1), "a send row per worker, one recv row at the server");
            let r = recvs[0];
            assert_eq!(out.log.rank[r], n as i32, "the aggregate arrives at the server");
            assert!(sends.iter().all(|&s| out.log.message[s] == out.log.message[r]));
            assert_eq!(out.log.end_ns[r], (TX + lat) as i64, "{fidelity:?} N={n}: M/B + latency, not N*M/B");
            let update = rows(&out, "update", 0)[0];
            assert_eq!(out.log.start_ns[update], (TX + lat) as i64);
            // Aggregated push, then ack, pull request (empty) and a unicast pull (flow: N*M/B shared).
            let fanout = n as u64; // the server uplink serves the N pulls one after another (shared or FIFO)
            assert_eq!(out.makespan, TX + lat + 2 * lat + fanout * TX + lat, "{fidelity:?} N={n}");
        }
    }
}

#[test]
fn multiagg_is_two_transmissions_plus_two_latencies() {
    for fidelity in [Fidelity::Flow, Fidelity::Analytic] {
        let lat = 7_000;
        let out = run(&one_group(8, M, InNetworkMode::Multiagg), &net(fidelity, 10e9, lat));
        assert_eq!(out.makespan, 2 * (TX + lat));
        assert_eq!(rows(&out, "push_request", KIND_RECV).len(), 1);
        assert_eq!(rows(&out, "param_multicast", KIND_SEND).len(), 1);
        assert_eq!(out.bytes_sent[8], M, "the server hands one copy to the network");
        assert!(out.bytes_received[..8].iter().all(|&b| b == M), "every worker gets its copy");
        assert_eq!(out.bytes_received[8], 8 * M, "every contribution counts as received");
    }
}

#[test]
fn a_multicast_tree_crosses_each_leaf_spine_link_once() {
    // 8 workers on two leaves of 4 hosts, the server on a third leaf; one
    // spine whose links have the NIC bandwidth (oversubscription 4).
    let lat = 2_000;
    let mut network = net(Fidelity::Flow, 10e9, lat);
    network.topology = TopologySpec::LeafSpine { hosts_per_leaf: 4, spines: 1, oversubscription: 4.0, routing: Routing::Ecmp };
    let out = run(&one_group(8, M, InNetworkMode::Multiagg), &network);
    // Cross-leaf routes have twice the latency; one tree, one rate each way.
    assert_eq!(out.makespan, 2 * (TX + 2 * lat));
    let plain = run(&one_group(8, M, InNetworkMode::None), &network);
    assert!(plain.makespan > 8 * TX, "unicast shares the server's links eight ways: {}", plain.makespan);
    // With spray over two spines each tree link carries half the tree.
    network.topology = TopologySpec::LeafSpine { hosts_per_leaf: 4, spines: 2, oversubscription: 2.0, routing: Routing::Spray };
    let out = run(&one_group(8, M, InNetworkMode::Multiagg), &network);
    assert_eq!(out.makespan, 2 * (TX + 2 * lat));
}

#[test]
fn a_group_beyond_the_switch_memory_goes_to_the_server() {
    let groups = vec![
        GroupSpec { layers: vec![2], tensor: 2, bytes: 3_000_000, server: 0, update_ns: 0 },
        GroupSpec { layers: vec![1], tensor: 1, bytes: 1_000_000, server: 0, update_ns: 0 },
        GroupSpec { layers: vec![0], tensor: 0, bytes: 500_000, server: 0, update_ns: 0 },
    ];
    let mut spec = ps(4, groups, 3, InNetworkMode::Aggregation);
    spec.header_bytes = 100;
    spec.in_network.switch_memory = Some(1_500_200);
    // Group order: 3 MB does not fit, 1 MB (+ header) does, then 500 kB (+ header) fits exactly.
    assert_eq!(aggregated_groups(&spec), vec![false, true, true]);
    spec.in_network.switch_memory = Some(1_500_199);
    assert_eq!(aggregated_groups(&spec), vec![false, true, false]);
    let out = run(&spec, &net(Fidelity::Flow, 10e9, 1_000));
    let recvs = rows(&out, "push_request", KIND_RECV);
    let per_group = |g: i32| recvs.iter().filter(|&&i| out.log.group[i] == g).count();
    assert_eq!((per_group(0), per_group(1), per_group(2)), (4, 1, 4), "only group 1 is aggregated in the switch");
    spec.in_network.switch_memory = None;
    assert_eq!(aggregated_groups(&spec), vec![true; 3]);
    spec.in_network.switch_memory = Some(0);
    assert_eq!(aggregated_groups(&spec), vec![false; 3]);
}

/// SplitMix64, for reproducible random scenarios.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[test]
fn in_network_mechanisms_are_never_slower_than_plain_ps() {
    for seed in 1..=40u64 {
        let mut s = seed;
        let workers = 2 + (next(&mut s) % 9) as u32;
        let servers = 1 + (next(&mut s) % 2) as u32;
        let layers = 1 + (next(&mut s) % 6) as usize;
        let groups: Vec<GroupSpec> = (0..layers)
            .map(|l| GroupSpec {
                layers: vec![l as u32],
                tensor: l as i32,
                bytes: 1_000 + next(&mut s) % 4_000_000,
                server: (l as u32) % servers,
                update_ns: next(&mut s) % 50_000,
            })
            .collect();
        let mut base = ps(workers, groups, layers, InNetworkMode::None);
        base.sync = SyncSpec::Ps { servers };
        base.iterations = 2;
        base.seed = seed;
        base.jitter = 0.1;
        base.header_bytes = next(&mut s) % 200;
        base.barrier = next(&mut s).is_multiple_of(2);
        base.layers = (0..layers).map(|_| LayerSpec { fwd_ns: next(&mut s) % 400_000, bwd_ns: next(&mut s) % 800_000 }).collect();
        let mut network =
            net(if seed % 3 == 0 { Fidelity::Analytic } else { Fidelity::Flow }, [1e9, 10e9, 25e9][(seed % 3) as usize], next(&mut s) % 20_000);
        if seed % 2 == 0 {
            network.topology = TopologySpec::LeafSpine { hosts_per_leaf: 3, spines: 2, oversubscription: 1.5, routing: Routing::Ecmp };
        }
        let time = |mode: InNetworkMode| {
            let mut spec = base.clone();
            spec.in_network.mode = mode;
            run(&spec, &network).makespan
        };
        let [plain, multicast, aggregation, multiagg] = MODES.map(time);
        let ctx = format!("seed {seed}: plain {plain} multicast {multicast} aggregation {aggregation} multiagg {multiagg}");
        assert!(multicast <= plain, "{ctx}");
        assert!(aggregation <= plain, "{ctx}");
        assert!(multiagg <= multicast && multiagg <= aggregation, "{ctx}");
        assert!(multiagg < plain, "{ctx}: with 2+ workers both mechanisms save time");
    }
}

#[test]
fn aggregation_needs_a_parameter_server() {
    let mut spec = one_group(4, M, InNetworkMode::Aggregation);
    spec.sync = SyncSpec::Allreduce { algorithm: ddlsim_core::lower::training::AlgorithmName::Ring };
    let err = simulate_training(&spec, &net(Fidelity::Flow, 10e9, 0), TraceDetail::Step).err().unwrap();
    assert!(err.contains("parameter-server"), "{err}");
    assert_eq!(err.kind, ddlsim_core::ErrorKind::BadInput);
}

fn ring(workers: u32, bytes: u64, mode: InNetworkMode) -> TrainingSpec {
    let mut spec = one_group(workers, bytes, mode);
    spec.sync = SyncSpec::Allreduce { algorithm: ddlsim_core::lower::training::AlgorithmName::Ring };
    spec
}

#[test]
fn ring_with_a_multicast_all_gather_saves_n_minus_2_latencies() {
    for fidelity in [Fidelity::Flow, Fidelity::Analytic] {
        for n in [2u32, 3, 8, 16] {
            // M/N = 1250 B: 1000 ns per chunk at 10 Gbit/s.
            let (m, lat) = (n as u64 * 1250, 3_000u64);
            let out = run(&ring(n, m, InNetworkMode::Multicast), &net(fidelity, 10e9, lat));
            let plain = run(&ring(n, m, InNetworkMode::None), &net(fidelity, 10e9, lat));
            assert_eq!(plain.makespan, 2 * (n as u64 - 1) * (1000 + lat));
            // Reduce-scatter as the ring; the all-gather: every downlink takes N-1 chunks
            // at once (flow) and every copy its latency once. Analytic: a multicast
            // holds every link of its tree; with N >= 3 any two trees share the
            // downlink of a third worker, so the N multicasts go one after another
            // (N = 2: two disjoint trees, one chunk time).
            let gather = match fidelity {
                Fidelity::Flow => (n as u64 - 1) * 1000,
                Fidelity::Analytic if n == 2 => 1000,
                Fidelity::Analytic => n as u64 * 1000,
                Fidelity::Packet => unreachable!("multicast is refused at packet level"),
            };
            assert_eq!(out.makespan, (n as u64 - 1) * (1000 + lat) + gather + lat, "{fidelity:?} N={n}");
            assert!(out.makespan <= plain.makespan);
            let copies = rows(&out, "ring_multicast", KIND_RECV).len();
            let sends = rows(&out, "ring_multicast", KIND_SEND).len();
            assert_eq!((sends, copies), (n as usize, (n * (n - 1)) as usize), "one multicast per worker, a copy to each other worker");
        }
    }
}

#[test]
fn ring_multicast_is_a_valid_all_reduce_under_load() {
    let mut spec = ps(
        6,
        (0..4).map(|l| GroupSpec { layers: vec![l], tensor: l as i32, bytes: 1_000_003 * (l as u64 + 1), server: 0, update_ns: 0 }).collect(),
        4,
        InNetworkMode::Multicast,
    );
    spec.sync = SyncSpec::Allreduce { algorithm: ddlsim_core::lower::training::AlgorithmName::Ring };
    spec.iterations = 3;
    spec.jitter = 0.2;
    spec.barrier = false;
    spec.layers = (0..4).map(|l| LayerSpec { fwd_ns: 100_000 * (l + 1), bwd_ns: 200_000 }).collect();
    let out = run(&spec, &net(Fidelity::Flow, 10e9, 5_000));
    // Every worker ends each group with one marker, after every other worker's chunk reached it.
    assert_eq!(rows(&out, "ring_multicast_done", ddlsim_core::log::KIND_MARKER).len(), 6 * 4 * 3);
    spec.sync = SyncSpec::Allreduce { algorithm: ddlsim_core::lower::training::AlgorithmName::HalvingDoubling };
    assert!(simulate_training(&spec, &net(Fidelity::Flow, 10e9, 0), TraceDetail::Step).is_err());
    spec.sync = SyncSpec::Allreduce { algorithm: ddlsim_core::lower::training::AlgorithmName::Ring };
    spec.in_network.mode = InNetworkMode::Aggregation;
    assert!(simulate_training(&spec, &net(Fidelity::Flow, 10e9, 0), TraceDetail::Step).is_err());
}

#[test]
fn an_aggregate_waits_for_the_slowest_contribution() {
    // Jittered backward passes: the workers push at different times; the
    // switch can only sum at the pace of the last one.
    for fidelity in [Fidelity::Flow, Fidelity::Analytic] {
        let mut spec = one_group(6, M, InNetworkMode::Aggregation);
        spec.layers = vec![LayerSpec { fwd_ns: 0, bwd_ns: 2_000_000 }];
        spec.jitter = 0.3;
        let lat = 4_000;
        let out = run(&spec, &net(fidelity, 10e9, lat));
        let sends = rows(&out, "push_request", KIND_SEND);
        let starts: Vec<i64> = sends.iter().map(|&i| out.log.start_ns[i]).collect();
        let last = *starts.iter().max().unwrap();
        assert!(starts.iter().any(|&s| s + 100_000 < last), "jitter spreads the pushes: {starts:?}");
        let recv = rows(&out, "push_request", KIND_RECV)[0];
        assert_eq!(out.log.end_ns[recv], last + (TX + lat) as i64, "{fidelity:?}");
        // Every contribution's transmission ends with the aggregate's, which
        // started once the last push's first bytes crossed the uplink (lat - lat/2).
        assert!(sends.iter().all(|&i| out.log.end_ns[i] == last + (TX + lat - lat / 2) as i64));
    }
}

/// The PS exchange is lowered once for every variant: in-network
/// aggregation of a group split over two servers (`ps_split`) and cut into
/// messages (`chunk_bytes`) aggregates each message at its own server; the
/// in-network path no longer ignores the split as a second copy of the PS
/// lowering once did.
#[test]
fn in_network_aggregation_follows_the_split_and_the_messages_of_plain_ps() {
    let mut spec = one_group(3, 1_000_001, InNetworkMode::Aggregation);
    spec.sync = SyncSpec::Ps { servers: 2 };
    spec.ps_split = true;
    spec.chunk_bytes = 300_000;
    let out = run(&spec, &net(Fidelity::Flow, 10e9, 1_000));
    let mut plain = spec.clone();
    plain.in_network = InNetworkSpec::default();
    let base = simulate_training(&plain, &net(Fidelity::Flow, 10e9, 1_000), TraceDetail::Step).unwrap();
    // Shares of 500,001 and 500,000 bytes, each cut into messages of 300,000 and the rest: 4 messages.
    let pushes = |o: &RunOutput| {
        let mut v: Vec<(i32, i64)> = rows(o, "push_request", KIND_SEND).iter().map(|&i| (o.log.peer[i], o.log.bytes[i])).collect();
        v.sort();
        v
    };
    assert_eq!(pushes(&out), pushes(&base), "the same pushes, to the same servers, as plain PS");
    let aggregates = rows(&out, "push_request", KIND_RECV);
    assert_eq!(aggregates.len(), 4, "one aggregate per message");
    let mut received: Vec<(i32, i64)> = aggregates.iter().map(|&i| (out.log.rank[i], out.log.bytes[i])).collect();
    received.sort();
    assert_eq!(received, vec![(3, 200_001), (3, 300_000), (4, 200_000), (4, 300_000)]);
}

#[test]
fn a_parameter_multicast_needs_a_synchronous_update() {
    let mut spec = one_group(3, 1_000, InNetworkMode::Multicast);
    spec.asynchronous = true;
    let err = simulate_training(&spec, &net(Fidelity::Flow, 10e9, 0), TraceDetail::Step).err().expect("refused");
    assert!(err.contains("synchronous"), "{err}");
}
