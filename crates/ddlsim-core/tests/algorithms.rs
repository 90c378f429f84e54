//! Every all-reduce algorithm against its closed form on an idle star, to
//! the nanosecond, and byte conservation per collective. The expected
//! values are computed here from the algorithms' published definitions
//! (tree shapes rebuilt independently), not from the engine's plans.

mod common;

use common::*;
use ddlsim_core::collective::Algorithm;
use ddlsim_core::graph::{CollectiveSpec, CollectiveType, Graph, Kind, Op};
use ddlsim_core::log::{EventLog, KIND_RECV, KIND_SEND};
use ddlsim_core::network::{Fidelity, NetworkSpec};
use ddlsim_core::{run_graph, TraceDetail};

/// 1 byte per ns.
const BPS: f64 = 8e9;

fn star(fidelity: Fidelity, lat: u64) -> NetworkSpec {
    let mut n = net(fidelity, BPS, lat);
    // Whether or not intra-host transfers get links of their own, they run at NIC speed here.
    n.intra_host_bandwidth_bps = Some(BPS);
    n.intra_host_latency_ns = lat;
    n
}

/// A graph of one all-reduce that every member starts at time 0.
fn one_allreduce(algorithm: Algorithm, n: u32, bytes: u64, chunk_bytes: u64, hosts: &[u32]) -> Graph {
    let mut g = Graph::new();
    g.host_of_rank = hosts.to_vec();
    let c = g.add_collective(CollectiveSpec { algorithm, coll_type: CollectiveType::AllReduce, members: (0..n).collect(), bytes, chunk_bytes, gamma_ns_per_byte: 0.0 });
    let name = g.op_name("allreduce");
    for m in 0..n {
        let mut op = Op::new(Kind::Collective, name, m);
        op.collective = c;
        op.member = m;
        op.bytes = bytes;
        g.add(op, &[]);
    }
    g
}

/// One all-reduce started together by every member; returns (makespan, log).
fn run_one(algorithm: Algorithm, n: u32, bytes: u64, chunk_bytes: u64, hosts: &[u32], network: &NetworkSpec) -> (u64, EventLog) {
    let g = one_allreduce(algorithm, n, bytes, chunk_bytes, hosts);
    let out = run_graph(&g, network, TraceDetail::Step).unwrap_or_else(|e| panic!("{algorithm:?} n={n}: {e}"));
    assert_deps_explain_every_start(&out.log);
    (out.makespan, out.log)
}

fn time(algorithm: Algorithm, n: u32, bytes: u64, network: &NetworkSpec) -> u64 {
    run_one(algorithm, n, bytes, 0, &[], network).0
}

fn log2_floor(n: u32) -> u64 {
    (31 - n.leading_zeros()) as u64
}

/// MPICH's fold for N not a power of two: 0 or 1.
fn extra(n: u32) -> u64 {
    u64::from(!n.is_power_of_two())
}

#[test]
fn recursive_doubling_and_butterfly_cost_log2_p_whole_vector_exchanges() {
    // log2(p) (alpha + M beta), plus 2 (alpha + M beta) when N is not a power of two.
    for fidelity in [Fidelity::Flow, Fidelity::Analytic] {
        for n in [2u32, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32] {
            for (m, lat) in [(1000u64, 700u64), (12_345, 3)] {
                let u = lat + m;
                let expected = (log2_floor(n) + 2 * extra(n)) * u;
                for algorithm in [Algorithm::RecursiveDoubling, Algorithm::Butterfly] {
                    assert_eq!(time(algorithm, n, m, &star(fidelity, lat)), expected, "{algorithm:?} {fidelity:?} n={n} M={m}");
                }
            }
        }
    }
}

#[test]
fn direct_costs_two_n_minus_one_shard_steps() {
    // 2 (N-1) (alpha + M/N beta): the pairwise schedule reaches N-1 peers in N-1 stages.
    for fidelity in [Fidelity::Flow, Fidelity::Analytic] {
        for n in [2u32, 3, 5, 8, 13] {
            let (m, lat) = (n as u64 * 1000, 500);
            let expected = 2 * (n as u64 - 1) * (lat + 1000);
            assert_eq!(time(Algorithm::Direct, n, m, &star(fidelity, lat)), expected, "{fidelity:?} n={n}");
        }
    }
}

#[test]
fn direct_reaches_every_peer_with_its_shard() {
    let (_, log) = run_one(Algorithm::Direct, 5, 5_000, 0, &[], &star(Fidelity::Flow, 10));
    for r in 0..5 {
        let mut peers: Vec<i32> = (0..log.len()).filter(|&i| log.kind[i] == KIND_SEND && log.rank[i] == r).map(|i| log.peer[i]).collect();
        assert_eq!(peers.len(), 8);
        assert!(peers.iter().all(|&p| p != r));
        peers.sort();
        peers.dedup();
        assert_eq!(peers.len(), 4, "rank {r} talks to each peer");
    }
}

/// The in-order binary tree (NCCL): rank 0 on top with one child, then the
/// range [1, N) split at the rank with the most trailing zeros, recursively.
fn in_order_tree(n: u32) -> Vec<Vec<u32>> {
    fn build(lo: u32, hi: u32, kids: &mut Vec<Vec<u32>>) -> Option<u32> {
        if lo >= hi {
            return None;
        }
        let root = (lo..hi).max_by_key(|x| x.trailing_zeros()).unwrap();
        for sub in [build(lo, root, kids), build(root + 1, hi, kids)].into_iter().flatten() {
            kids[root as usize].push(sub);
        }
        Some(root)
    }
    let mut kids = vec![Vec::new(); n as usize];
    if let Some(top) = build(1, n, &mut kids) {
        kids[0].push(top);
    }
    kids
}

/// Reduce to the root (children one after the other), then broadcast
/// (children one after the other); u per transfer. Returns the last finish.
fn tree_time(kids: &[Vec<u32>], root: u32, u: u64) -> u64 {
    fn reduce(v: u32, kids: &[Vec<u32>], u: u64) -> u64 {
        kids[v as usize].iter().fold(0, |t, &c| t.max(reduce(c, kids, u)) + u)
    }
    fn bcast(v: u32, at: u64, kids: &[Vec<u32>], u: u64) -> u64 {
        let mut end = at;
        for (k, &c) in kids[v as usize].iter().enumerate() {
            end = end.max(bcast(c, at + (k as u64 + 1) * u, kids, u));
        }
        end
    }
    bcast(root, reduce(root, kids, u), kids, u)
}

#[test]
fn binary_tree_matches_its_reduce_then_broadcast_recursion() {
    let (m, lat) = (2_000u64, 300u64);
    let u = lat + m;
    // Hand-checked anchors: 0 -> 1; 0 -> 2 -> 1; 0 -> 2 -> {1, 3}; 0 -> 4 -> {2 -> {1, 3}, 6 -> {5, 7}}.
    let anchors = [(2u32, 2 * u), (3, 4 * u), (4, 6 * u), (8, 10 * u), (16, 14 * u)];
    for fidelity in [Fidelity::Flow, Fidelity::Analytic] {
        for (n, expected) in anchors {
            assert_eq!(tree_time(&in_order_tree(n), 0, u), expected, "reference n={n}");
            assert_eq!(time(Algorithm::BinaryTree, n, m, &star(fidelity, lat)), expected, "{fidelity:?} n={n}");
        }
        for n in [5u32, 6, 7, 9, 11, 13, 20, 31, 33] {
            let expected = tree_time(&in_order_tree(n), 0, u);
            assert_eq!(time(Algorithm::BinaryTree, n, m, &star(fidelity, lat)), expected, "{fidelity:?} n={n}");
        }
    }
}

#[test]
fn double_binary_tree_costs_one_tree_over_half_the_data_when_the_trees_do_not_collide() {
    // Each tree carries M/2; the second is the first mirrored, so alone each
    // takes the binary tree's time for M/2. On N = 2 and 4 the trees never
    // make a member send twice at once nor share a link direction.
    let (m, lat) = (4_000u64, 300u64);
    let u_half = lat + m / 2;
    for fidelity in [Fidelity::Flow, Fidelity::Analytic] {
        for n in [2u32, 4] {
            let expected = tree_time(&in_order_tree(n), 0, u_half);
            assert_eq!(time(Algorithm::DoubleBinaryTree, n, m, &star(fidelity, lat)), expected, "{fidelity:?} n={n}");
        }
        // Otherwise: no faster than one tree over M/2, no slower than one tree over M.
        for n in [3u32, 5, 6, 7, 8, 9, 16, 17, 32] {
            let lower = tree_time(&in_order_tree(n), 0, u_half);
            let upper = tree_time(&in_order_tree(n), 0, lat + m);
            let t = time(Algorithm::DoubleBinaryTree, n, m, &star(fidelity, lat));
            assert!(lower <= t && t <= upper, "{fidelity:?} n={n}: {lower} <= {t} <= {upper}");
        }
    }
}

#[test]
fn partitioned_ring_pays_one_ring_per_message() {
    // S = ceil(M / c) messages of M/S each: 2 (N-1) (S alpha + M/N beta).
    for fidelity in [Fidelity::Flow, Fidelity::Analytic] {
        for (n, s) in [(2u32, 3u64), (4, 4), (5, 2), (8, 5)] {
            let lat = 1_000u64;
            let m = n as u64 * s * 600; // each message 600 N bytes, 600 per chunk
            for chunk in [m / s, m / s + 1, m / s + 599] {
                let (t, log) = run_one(Algorithm::Ring, n, m, chunk, &[], &star(fidelity, lat));
                assert_eq!(t, 2 * (n as u64 - 1) * (s * lat + m / n as u64), "{fidelity:?} n={n} S={s} chunk={chunk}");
                let sends = (0..log.len()).filter(|&i| log.kind[i] == KIND_SEND).count() as u64;
                assert_eq!(sends, n as u64 * 2 * (n as u64 - 1) * s);
                assert!((0..log.len()).filter(|&i| log.kind[i] == KIND_SEND).all(|i| log.bytes[i] as u64 <= chunk));
            }
        }
    }
}

#[test]
fn unpartitioned_ring_is_unchanged_by_a_chunk_at_least_the_tensor() {
    let network = star(Fidelity::Flow, 777);
    for chunk in [0u64, 1_000_003, 5_000_000] {
        let (t, _) = run_one(Algorithm::Ring, 7, 1_000_003, chunk, &[], &network);
        assert_eq!(t, time(Algorithm::Ring, 7, 1_000_003, &network), "chunk={chunk}");
    }
}

#[test]
fn hierarchical_ring_matches_the_2d_closed_form_under_analytic_fidelity() {
    // 2 (L-1) (alpha + M/L beta) + 2 (H-1) (alpha + M/(L H) beta) when every
    // rank has a NIC of its own (L = 1). With L ranks on a host, the intra
    // phases use each rank's own intra-host ports, but the L inter-host rings
    // share the host's NIC, which the analytic links serialise: the formula
    // is then a lower bound, and so is the NIC's load, L ranks' 2 (H-1) M/(L H)
    // bytes at 1 B/ns plus one latency. By hand, H = L = 2 (M = 3600, alpha =
    // 250): intra reduce-scatter ends at 2050; the NIC serves ring 0's 900 B
    // then ring 1's in each inter step (ends 5000 and 5900); the intra
    // all-gather waits for the later member: 5900 + 1800 + 250 = 7950.
    for (h, l) in [(2u32, 2u32), (3, 2), (4, 4), (2, 8), (5, 3), (8, 1), (1, 6)] {
        let n = h * l;
        let (m, lat) = (n as u64 * 900, 250u64);
        // Blocks of L consecutive ranks per host, as ranks_per_host does.
        let hosts: Vec<u32> = (0..n).map(|r| r / l).collect();
        let (t, log) = run_one(Algorithm::HierarchicalRing, n, m, 0, &hosts, &star(Fidelity::Analytic, lat));
        let (hh, ll) = (h as u64, l as u64);
        let expected = 2 * (ll - 1) * (lat + m / ll) + 2 * (hh - 1) * (lat + m / (ll * hh));
        if l == 1 {
            assert_eq!(t, expected, "H={h} L={l}");
        } else {
            let nic = ll * 2 * (hh - 1) * m / (ll * hh) + lat;
            assert!(t >= expected.max(nic), "H={h} L={l}: {t} < max({expected}, {nic})");
            if (h, l) == (2, 2) {
                assert_eq!(t, 7950);
            }
        }
        // Structure: per rank, 2 (L-1) M/L bytes stay on the host, 2 (H-1) M/(L H) leave it.
        let steps = 2 * (l - 1) + 2 * (h - 1);
        for r in 0..n as i32 {
            let rows: Vec<usize> = (0..log.len()).filter(|&i| log.kind[i] == KIND_SEND && log.rank[i] == r).collect();
            assert_eq!(rows.len() as u32, steps, "H={h} L={l} rank {r}");
            let same = |i: usize| hosts[log.peer[i] as usize] == hosts[r as usize];
            let intra: u64 = rows.iter().filter(|&&i| same(i)).map(|&i| log.bytes[i] as u64).sum();
            let inter: u64 = rows.iter().filter(|&&i| !same(i)).map(|&i| log.bytes[i] as u64).sum();
            assert_eq!(intra, 2 * (ll - 1) * m / ll, "H={h} L={l} rank {r}");
            assert_eq!(inter, 2 * (hh - 1) * m / (ll * hh), "H={h} L={l} rank {r}");
        }
    }
}

#[test]
fn hierarchical_ring_is_the_flat_ring_with_one_rank_per_host_or_uneven_hosts() {
    let network = star(Fidelity::Flow, 100);
    for hosts in [vec![], vec![0, 0, 0, 0, 1, 1], vec![0, 1, 1, 2, 2, 2]] {
        let flat = run_one(Algorithm::Ring, 6, 60_000, 0, &hosts, &network).0;
        assert_eq!(run_one(Algorithm::HierarchicalRing, 6, 60_000, 0, &hosts, &network).0, flat, "{hosts:?}");
    }
}

/// Total bytes an all-reduce of M over N ranks puts on the wire, per algorithm.
fn wire_bytes(algorithm: Algorithm, n: u32, m: u64, hosts_l: u32) -> u64 {
    let (nn, p) = (n as u64, 1u64 << log2_floor(n));
    let r = nn - p;
    match algorithm {
        Algorithm::Ring | Algorithm::Direct | Algorithm::BinaryTree | Algorithm::DoubleBinaryTree => 2 * (nn - 1) * m,
        Algorithm::HalvingDoubling => 2 * (p - 1) * m + 2 * r * m,
        Algorithm::RecursiveDoubling | Algorithm::Butterfly => p * log2_floor(n) * m + 2 * r * m,
        Algorithm::HierarchicalRing => {
            let (l, h) = (hosts_l as u64, nn / hosts_l as u64);
            2 * h * (l - 1) * m + 2 * (h - 1) * m
        }
    }
}

#[test]
fn every_collective_conserves_bytes_and_moves_what_its_algorithm_says() {
    for algorithm in Algorithm::ALL {
        for n in [1u32, 2, 3, 4, 6, 7, 8, 12] {
            for m in [1u64, 999, 100_003] {
                let l = if algorithm == Algorithm::HierarchicalRing && n % 2 == 0 { 2 } else { 1 };
                let hosts: Vec<u32> = (0..n).map(|r| r / l).collect();
                for fidelity in [Fidelity::Flow, Fidelity::Analytic] {
                    let (_, log) = run_one(algorithm, n, m, 0, &hosts, &star(fidelity, 50));
                    let sum = |kind: u8| {
                        (0..log.len()).filter(|&i| log.kind[i] == kind && log.collective[i] == 0).map(|i| log.bytes[i] as u64).sum::<u64>()
                    };
                    let (sent, received) = (sum(KIND_SEND), sum(KIND_RECV));
                    assert_eq!(sent, received, "{algorithm:?} n={n} M={m}");
                    assert_eq!(sent, wire_bytes(algorithm, n, m, l), "{algorithm:?} n={n} M={m} L={l}");
                }
            }
        }
    }
}

// ------------------------------------------------------------ closed-form mode

use ddlsim_core::collective::closed_form::LinkCost;
use ddlsim_core::lower::training::{AlgorithmName, CollectiveModel, GroupSpec, LayerSpec, SyncSpec, TrainingSpec};
use ddlsim_core::simulate_training;

/// Divisible by every chunk count used below (2^6 * 3^2 * 5 * 7 * 11 * 13).
const EVEN: u64 = 2_882_880;

/// Every member's end, and the makespan, of one collective in `mode`.
fn member_ends(algorithm: Algorithm, n: u32, bytes: u64, chunk: u64, hosts: &[u32], network: &NetworkSpec, closed: bool) -> (Vec<i64>, u64) {
    member_ends_reducing(algorithm, n, bytes, chunk, hosts, network, closed, 0.0)
}

/// As [`member_ends`], each member reducing what it receives at `gamma` ns per byte.
#[allow(clippy::too_many_arguments)]
fn member_ends_reducing(
    algorithm: Algorithm, n: u32, bytes: u64, chunk: u64, hosts: &[u32], network: &NetworkSpec, closed: bool, gamma: f64,
) -> (Vec<i64>, u64) {
    let mut g = Graph::new();
    g.host_of_rank = hosts.to_vec();
    if closed {
        g.closed_form = Some(LinkCost::of_network(network).unwrap());
    }
    let c =
        g.add_collective(CollectiveSpec { algorithm, coll_type: CollectiveType::AllReduce, members: (0..n).collect(), bytes, chunk_bytes: chunk, gamma_ns_per_byte: gamma });
    let name = g.op_name("allreduce");
    let ids: Vec<u32> = (0..n)
        .map(|m| {
            let mut op = Op::new(Kind::Collective, name, m);
            op.collective = c;
            op.member = m;
            op.bytes = bytes;
            g.add(op, &[])
        })
        .collect();
    let out = run_graph(&g, network, TraceDetail::Step).unwrap();
    assert_deps_explain_every_start(&out.log);
    (ids.iter().map(|&id| out.log.end_ns[row_of(&out.log, id as i64)]).collect(), out.makespan)
}

#[test]
fn closed_form_mode_equals_the_step_by_step_run_on_an_idle_star() {
    for bps in [8e9, 10e9, 25e9] {
        let network = net(Fidelity::Analytic, bps, 1_234);
        for algorithm in Algorithm::ALL {
            for n in [1u32, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16] {
                if algorithm == Algorithm::DoubleBinaryTree && n > 4 {
                    continue; // see the next test
                }
                let hosts: Vec<u32> = match algorithm {
                    Algorithm::HierarchicalRing if n % 3 == 0 => (0..n).map(|r| r / 3).collect(),
                    Algorithm::HierarchicalRing if n % 2 == 0 => (0..n).map(|r| r / 2).collect(),
                    _ => vec![],
                };
                let chunks: &[u64] = if algorithm == Algorithm::Ring { &[0, EVEN / 4, EVEN / 2 + 7] } else { &[0] };
                for &chunk in chunks {
                    for bytes in [EVEN, 3 * EVEN] {
                        for gamma in [0.0, 0.37] {
                            let steps = member_ends_reducing(algorithm, n, bytes, chunk, &hosts, &network, false, gamma);
                            let closed = member_ends_reducing(algorithm, n, bytes, chunk, &hosts, &network, true, gamma);
                            if hosts.is_empty() {
                                assert_eq!(closed, steps, "{algorithm:?} n={n} M={bytes} chunk={chunk} {bps} gamma={gamma}");
                            } else {
                                // Ranks sharing a host share its NIC, which the closed form ignores: a lower bound.
                                assert!(closed.1 <= steps.1, "{algorithm:?} n={n} M={bytes} chunk={chunk} {bps} gamma={gamma}");
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn closed_form_mode_charges_uneven_chunks_their_largest_within_a_ns_per_stage() {
    let network = net(Fidelity::Analytic, 10e9, 700);
    for (algorithm, n, bytes, chunk) in [
        (Algorithm::Ring, 5u32, EVEN, EVEN / 5 + 7),
        (Algorithm::Ring, 7, 1_000_003, 0),
        (Algorithm::Direct, 6, 999_999, 0),
        (Algorithm::HalvingDoubling, 6, 1_000_001, 0),
    ] {
        let (_, steps) = member_ends(algorithm, n, bytes, chunk, &[], &network, false);
        let (_, closed) = member_ends(algorithm, n, bytes, chunk, &[], &network, true);
        let stages = 2 * (n as u64 - 1) * 6;
        assert!(steps <= closed && closed <= steps + stages, "{algorithm:?} n={n}: steps {steps} closed {closed}");
    }
}

#[test]
fn closed_form_double_binary_tree_is_a_lower_bound_where_the_trees_share_a_sender() {
    let network = net(Fidelity::Analytic, 10e9, 1_000);
    for n in [5u32, 6, 7, 8, 9, 16, 33] {
        let (_, steps) = member_ends(Algorithm::DoubleBinaryTree, n, EVEN, 0, &[], &network, false);
        let (_, closed) = member_ends(Algorithm::DoubleBinaryTree, n, EVEN, 0, &[], &network, true);
        let single = member_ends(Algorithm::BinaryTree, n, EVEN / 2, 0, &[], &network, false).1;
        assert_eq!(closed, single, "n={n}: the two trees in parallel take one tree's time over M/2");
        assert!(closed <= steps, "n={n}: {closed} > {steps}");
    }
}

#[test]
fn closed_form_mode_is_refused_at_flow_fidelity_and_with_preemption() {
    assert!(LinkCost::of_network(&net(Fidelity::Flow, 10e9, 1)).is_err());
}

fn training(workers: u32, algorithm: AlgorithmName, model: CollectiveModel) -> TrainingSpec {
    let layers: Vec<LayerSpec> = (0..5).map(|l| LayerSpec { fwd_ns: 10_000 + 1_000 * l, bwd_ns: 20_000 + 3_000 * l }).collect();
    let groups = (0..5).map(|l| GroupSpec { layers: vec![l], tensor: l as i32, bytes: EVEN * (1 + l as u64 % 3), server: 0, update_ns: 0 }).collect();
    TrainingSpec {
        iterations: 2,
        seed: 7,
        jitter: 0.1,
        barrier: false,
        host_of_rank: if algorithm == AlgorithmName::HierarchicalRing { (0..workers).map(|r| r / 2).collect() } else { vec![] },
        collective_model: model,
        ..TrainingSpec::new(workers, SyncSpec::Allreduce { algorithm }, layers, groups)
    }
}

#[test]
fn closed_form_training_reproduces_every_op_end_at_analytic_fidelity() {
    // One rank per host: a rank's collectives run one at a time on its
    // stream and every ring/tree/exchange step has links of its own, so
    // per-collective exactness carries over to a whole training run with
    // jitter. (Several ranks per host share the NIC, which the closed form
    // does not see: there it is a lower bound.)
    let network = net(Fidelity::Analytic, 25e9, 5_000);
    for algorithm in AlgorithmName::ALL {
        if algorithm == AlgorithmName::DoubleBinaryTree {
            continue;
        }
        for workers in [4u32, 6, 8] {
            let steps = simulate_training(&training(workers, algorithm, CollectiveModel::Steps), &network, TraceDetail::Collective).unwrap();
            let closed = simulate_training(&training(workers, algorithm, CollectiveModel::ClosedForm), &network, TraceDetail::Collective).unwrap();
            if algorithm == AlgorithmName::HierarchicalRing {
                assert!(closed.makespan <= steps.makespan, "{algorithm:?} {workers}");
                continue;
            }
            assert_eq!(closed.makespan, steps.makespan, "{algorithm:?} {workers}");
            let ends = |log: &EventLog| {
                (0..log.len())
                    .filter(|&i| log.id[i] >= 0 && log.kind[i] != KIND_SEND && log.kind[i] != KIND_RECV)
                    .map(|i| (log.id[i], log.end_ns[i]))
                    .collect::<Vec<_>>()
            };
            assert_eq!(ends(&closed.log), ends(&steps.log), "{algorithm:?} {workers}");
        }
    }
    let mut spec = training(4, AlgorithmName::Ring, CollectiveModel::ClosedForm);
    spec.stream_policy = ddlsim_core::lower::training::StreamPolicyName::Priority;
    spec.preemption = true;
    assert!(simulate_training(&spec, &network, TraceDetail::Collective).is_err());
    assert!(simulate_training(
        &training(4, AlgorithmName::Ring, CollectiveModel::ClosedForm),
        &net(Fidelity::Flow, 25e9, 5_000),
        TraceDetail::Collective
    )
    .is_err());
}

// ------------------------------------------------------------ reduction cost (gamma)

/// MG-WFBP Table II's gamma terms, derived on paper for an idle star with every
/// chunk whole: a member reduces each receipt of the reduce phase before its next
/// step, ceil(gamma * bytes) ns each.
#[test]
fn the_reduction_cost_adds_table_ii_gamma_terms_to_the_nanosecond() {
    let gamma = 0.37;
    let reduce = |bytes: u64| (bytes as f64 * gamma).ceil() as u64;
    for fidelity in [Fidelity::Analytic, Fidelity::Flow] {
        let network = net(fidelity, BPS, 1_000);
        let bytes = EVEN;
        for n in [2u32, 4, 8, 16] {
            let k = log2_floor(n);
            let u = |b: u64| 1_000 + b; // alpha + b beta at 1 byte/ns
            let expected = [
                // ring: 2(N-1) steps of M/N; the N-1 reduce-scatter receipts are reduced
                (Algorithm::Ring, 2 * (n as u64 - 1) * u(bytes / n as u64) + (n as u64 - 1) * reduce(bytes / n as u64)),
                // direct: the same shards, sent straight to their owners
                (Algorithm::Direct, 2 * (n as u64 - 1) * u(bytes / n as u64) + (n as u64 - 1) * reduce(bytes / n as u64)),
                // recursive doubling and butterfly: log2 p exchanges of M, each reduced
                (Algorithm::RecursiveDoubling, k * (u(bytes) + reduce(bytes))),
                (Algorithm::Butterfly, k * (u(bytes) + reduce(bytes))),
                // Rabenseifner: halving stage j moves and reduces M / 2^(j+1), doubling moves it back
                (Algorithm::HalvingDoubling, (0..k).map(|j| 2 * u(bytes >> (j + 1)) + reduce(bytes >> (j + 1))).sum()),
            ];
            for (algorithm, want) in expected {
                let (_, makespan) = member_ends_reducing(algorithm, n, bytes, 0, &[], &network, false, gamma);
                assert_eq!(makespan, want, "{algorithm:?} n={n} {fidelity:?}");
            }
        }
    }
}

#[test]
fn a_binary_tree_parent_reduces_each_child_before_taking_the_next() {
    // Three ranks, in-order tree rooted at 1 with children 0 and 2: the root
    // takes 0, reduces, takes 2, reduces, then sends to 0 and then to 2.
    let network = net(Fidelity::Analytic, BPS, 500);
    let (bytes, gamma) = (10_000u64, 0.5);
    let (u, r) = (500 + bytes, 5_000);
    let (ends, makespan) = member_ends_reducing(Algorithm::BinaryTree, 3, bytes, 0, &[], &network, false, gamma);
    let root_done = 2 * (u + r) + 2 * u;
    assert_eq!(makespan, root_done);
    assert_eq!(*ends.iter().max().unwrap() as u64, root_done);
}

/// Per-rank (bytes sent, bytes received) of one collective, step by step or in closed form.
fn collective_bytes(algorithm: Algorithm, n: u32, bytes: u64, chunk: u64, hosts: &[u32], network: &NetworkSpec, closed: bool) -> (Vec<u64>, Vec<u64>) {
    let mut g = one_allreduce(algorithm, n, bytes, chunk, hosts);
    if closed {
        g.closed_form = Some(LinkCost::of_network(network).unwrap());
    }
    let out = run_graph(&g, network, TraceDetail::Collective).unwrap();
    (out.bytes_sent, out.bytes_received)
}

#[test]
fn closed_form_mode_counts_the_bytes_the_steps_move() {
    // Per rank, equal to the step-by-step run; in all, the algorithm's wire
    // bytes on paper (`wire_bytes`). Before, closed-form runs counted 0 B.
    let network = star(Fidelity::Analytic, 50);
    for algorithm in Algorithm::ALL {
        for n in [1u32, 2, 3, 4, 6, 7, 8, 12] {
            for m in [1u64, 999, 100_003] {
                let l = if algorithm == Algorithm::HierarchicalRing && n % 2 == 0 { 2 } else { 1 };
                let hosts: Vec<u32> = (0..n).map(|r| r / l).collect();
                let chunks: &[u64] = if algorithm == Algorithm::Ring { &[0, 300, 1_000] } else { &[0] };
                for &chunk in chunks {
                    let closed = collective_bytes(algorithm, n, m, chunk, &hosts, &network, true);
                    let steps = collective_bytes(algorithm, n, m, chunk, &hosts, &network, false);
                    assert_eq!(closed, steps, "{algorithm:?} n={n} M={m} chunk={chunk}");
                    let total: u64 = closed.0.iter().sum();
                    assert_eq!(total, closed.1.iter().sum::<u64>());
                    assert_eq!(total, wire_bytes(algorithm, n, m, l), "{algorithm:?} n={n} M={m} L={l}");
                }
            }
        }
    }
    // Ring on paper per rank: 2 (N-1) M/N when N divides M.
    let (sent, received) = collective_bytes(Algorithm::Ring, 6, 6_000, 0, &[], &network, true);
    assert!(sent.iter().chain(&received).all(|&b| b == 2 * 5 * 1_000), "{sent:?} {received:?}");
}

#[test]
fn a_closed_form_time_past_64_bits_is_an_error_not_a_wrapped_time() {
    // 2^60 bytes at 1 bit/s: each transfer is past the clock limit, and
    // 2 (N-1) of them overflow 64 bits (wrapping gave a tiny time before).
    let network = net(Fidelity::Analytic, 1.0, 0);
    for algorithm in [Algorithm::Ring, Algorithm::Direct, Algorithm::HalvingDoubling, Algorithm::BinaryTree, Algorithm::HierarchicalRing] {
        let mut g = Graph::new();
        g.closed_form = Some(LinkCost::of_network(&network).unwrap());
        let c = g.add_collective(CollectiveSpec {
            algorithm,
            coll_type: CollectiveType::AllReduce,
            members: (0..5).collect(),
            bytes: 1 << 60,
            chunk_bytes: 0,
            gamma_ns_per_byte: 0.0,
        });
        let name = g.op_name("allreduce");
        for m in 0..5 {
            let mut op = Op::new(Kind::Collective, name, m);
            op.collective = c;
            op.member = m;
            g.add(op, &[]);
        }
        let err = run_graph(&g, &network, TraceDetail::Collective).err().unwrap_or_else(|| panic!("{algorithm:?}: no error"));
        assert!(err.contains("would pass"), "{algorithm:?}: {err}");
    }
}
