//! The executor on hand-made graphs: streams and their policies, transfers,
//! sharing, collectives, rendezvous, and the dependencies it records.

mod common;

use common::*;
use ddlsim_core::collective::Algorithm;
use ddlsim_core::graph::{Graph, PolicyKind, NO_STREAM};
use ddlsim_core::log::{KIND_COLLECTIVE, KIND_RECV, KIND_SEND};
use ddlsim_core::network::Fidelity;
use ddlsim_core::{run_graph, TraceDetail};

// 8 Gbit/s = 1 byte/ns, 100 ns host-to-host
fn star(fidelity: Fidelity) -> ddlsim_core::NetworkSpec {
    net(fidelity, 8e9, 100)
}

#[test]
fn ops_on_one_stream_run_one_at_a_time_in_ready_order() {
    let mut g = Graph::new();
    let s = g.new_stream(0, "compute", PolicyKind::Fifo);
    let op = compute(&mut g, 0, 50, s);
    let a = g.add(op, &[]);
    let op = compute(&mut g, 0, 30, s);
    let b = g.add(op, &[]);
    let op = compute(&mut g, 0, 10, s);
    let c = g.add(op, &[a]);
    let out = run_graph(&g, &star(Fidelity::Flow), TraceDetail::Step).unwrap();
    let log = &out.log;
    assert_eq!((log.start_ns[a as usize], log.end_ns[a as usize]), (0, 50));
    // b was ready at 0 but waited for a: queueing shows as start - ready, and a is recorded as its dep
    assert_eq!((log.ready_ns[b as usize], log.start_ns[b as usize], log.end_ns[b as usize]), (0, 50, 80));
    assert_eq!(log.deps_of(b as usize), &[a as i64]);
    assert_eq!((log.ready_ns[c as usize], log.start_ns[c as usize], log.end_ns[c as usize]), (50, 80, 90));
    assert_eq!(log.deps_of(c as usize), &[a as i64, b as i64]);
    assert_eq!(out.makespan, 90);
    assert_deps_explain_every_start(log);
}

#[test]
fn a_priority_stream_runs_the_most_urgent_ready_op_first() {
    let mut g = Graph::new();
    let s = g.new_stream(0, "comm", PolicyKind::Priority { preempt: false });
    let mut ids = Vec::new();
    for prio in [5, 9, 1, 3] {
        let mut op = compute(&mut g, 0, 10, s);
        op.priority = prio;
        ids.push(g.add(op, &[]));
    }
    let out = run_graph(&g, &star(Fidelity::Flow), TraceDetail::Step).unwrap();
    let starts: Vec<i64> = ids.iter().map(|&i| out.log.start_ns[i as usize]).collect();
    // the first ready op runs at once; the rest by priority: 1, 3, 9
    assert_eq!(starts, vec![0, 30, 10, 20]);
    assert_deps_explain_every_start(&out.log);
}

#[test]
fn a_transfer_is_a_send_row_and_a_recv_row_joined_by_its_message() {
    let mut g = Graph::new();
    let op = transfer(&mut g, 0, 1, 1000);
    let t = g.add(op, &[]);
    let op = compute(&mut g, 1, 5, NO_STREAM);
    let after = g.add(op, &[t]);
    for fidelity in [Fidelity::Flow, Fidelity::Analytic] {
        let out = run_graph(&g, &star(fidelity), TraceDetail::Step).unwrap();
        let log = &out.log;
        let send = row_of(log, t as i64);
        assert_eq!((log.kind[send], log.start_ns[send], log.end_ns[send]), (KIND_SEND, 0, 1000), "{fidelity:?}");
        let recv = (0..log.len()).find(|&i| log.kind[i] == KIND_RECV).unwrap();
        assert_eq!((log.rank[recv], log.peer[recv], log.message[recv]), (1, 0, log.message[send]));
        assert_eq!((log.start_ns[recv], log.end_ns[recv]), (1000, 1100));
        assert_eq!(log.deps_of(recv), &[t as i64]);
        // the dependent waits for the delivery: its dep is the recv row
        assert_eq!(log.start_ns[row_of(log, after as i64)], 1100);
        assert_eq!(log.deps_of(row_of(log, after as i64)), &[log.id[recv]]);
        assert_eq!(out.bytes_sent, vec![1000, 0]);
        assert_eq!(out.bytes_received, vec![0, 1000]);
        assert_deps_explain_every_start(log);
    }
}

#[test]
fn two_flows_into_one_host_share_its_downlink() {
    let mut g = Graph::new();
    for src in [0, 1] {
        let op = transfer(&mut g, src, 2, 1000);
        g.add(op, &[]);
    }
    let out = run_graph(&g, &star(Fidelity::Flow), TraceDetail::Step).unwrap();
    let recv_ends: Vec<i64> = (0..out.log.len()).filter(|&i| out.log.kind[i] == KIND_RECV).map(|i| out.log.end_ns[i]).collect();
    assert_eq!(recv_ends, vec![2100, 2100]);
}

#[test]
fn a_late_member_holds_the_collective_back_and_steps_record_their_causes() {
    for algorithm in Algorithm::ALL {
        let mut g = Graph::new();
        let mut pre = Vec::new();
        for (rank, delay) in [(0u32, 0u64), (1, 0), (2, 1000), (3, 0)] {
            let op = compute(&mut g, rank, delay, NO_STREAM);
            pre.push(vec![g.add(op, &[])]);
        }
        let ids = allreduce(&mut g, algorithm, &[0, 1, 2, 3], 400, &[], &pre);
        let out = run_graph(&g, &star(Fidelity::Flow), TraceDetail::Step).unwrap();
        let log = &out.log;
        // ring: 6 steps of 100 B; halving-doubling: 200 B, 100 B, 100 B, 200 B; each + 100 ns latency
        // recursive doubling / butterfly: 2 x 400 B; direct: 6 x 100 B;
        // binary tree 0 -> 2 -> {1, 3}: 6 transfers of 400 B in a row (see collective::binary_tree);
        // double binary tree: the same 6 of 200 B in each tree, without contention;
        // hierarchical ring with one rank per host: the flat ring.
        let expected = match algorithm {
            Algorithm::Ring | Algorithm::Direct | Algorithm::HierarchicalRing => 1000 + 6 * 200,
            Algorithm::HalvingDoubling => 1000 + (300 + 200 + 200 + 300),
            Algorithm::RecursiveDoubling | Algorithm::Butterfly => 1000 + 2 * 500,
            Algorithm::BinaryTree => 1000 + 6 * 500,
            Algorithm::DoubleBinaryTree => 1000 + 6 * 300,
        };
        // Tree members are done when their own part is (the root before the last leaf).
        let tree = matches!(algorithm, Algorithm::BinaryTree | Algorithm::DoubleBinaryTree);
        let ends: Vec<i64> = ids.iter().map(|&id| log.end_ns[row_of(log, id as i64)]).collect();
        assert_eq!(*ends.iter().max().unwrap(), expected, "{algorithm:?}");
        if !tree {
            assert!(ends.iter().all(|&e| e == expected), "{algorithm:?} {ends:?}");
        }
        // nobody sent to member 2 before it joined
        let first_to_2 = (0..log.len()).filter(|&i| log.kind[i] == KIND_SEND && log.peer[i] == 2).map(|i| log.start_ns[i]).min().unwrap();
        assert_eq!(first_to_2, 1000, "{algorithm:?}");
        assert_deps_explain_every_start(log);
    }
}

#[test]
fn collective_detail_keeps_only_the_per_rank_rows() {
    let mut g = Graph::new();
    allreduce(&mut g, Algorithm::Ring, &[0, 1], 10, &[], &[]);
    let out = run_graph(&g, &star(Fidelity::Flow), TraceDetail::Collective).unwrap();
    assert_eq!(out.log.len(), 2);
    assert!(out.log.kind.iter().all(|&k| k == KIND_COLLECTIVE));
    assert_eq!(out.transfers, 4);
}

#[test]
fn chunk_preemption_lets_an_urgent_collective_overtake_a_running_one() {
    // Two ranks, one comm stream each. A big low-priority all-reduce starts
    // at 0; an urgent small one becomes ready at 500. With preemption the
    // small one runs between the big one's steps; without, it waits.
    let run = |preempt: bool| {
        let mut g = Graph::new();
        let streams: Vec<u32> = (0..2).map(|r| g.new_stream(r, "comm", PolicyKind::Priority { preempt })).collect();
        let mut gates = Vec::new();
        for r in 0..2 {
            let op = compute(&mut g, r, 500, NO_STREAM);
            gates.push(vec![g.add(op, &[])]);
        }
        let big = allreduce(&mut g, Algorithm::Ring, &[0, 1], 20_000, &streams, &[]);
        let small = allreduce(&mut g, Algorithm::Ring, &[0, 1], 200, &streams, &gates);
        for &op in big.iter() {
            g.ops[op as usize].priority = 10;
        }
        for &op in small.iter() {
            g.ops[op as usize].priority = 1;
        }
        let out = run_graph(&g, &star(Fidelity::Flow), TraceDetail::Step).unwrap();
        assert_deps_explain_every_start(&out.log);
        let end = |op: u32| out.log.end_ns[row_of(&out.log, op as i64)];
        (end(small[0]), end(big[0]))
    };
    // No preemption: big = 2 steps of 10,000 B + 100 ns = 20,200; small then 2 x 200 = 20,600.
    assert_eq!(run(false), (20_600, 20_200));
    // Preemption: the big member is mid-send at 500, so the small one starts
    // when that step is delivered (10,100) and ends at 10,500; big resumes: 20,600.
    assert_eq!(run(true), (10_500, 20_600));
}

#[test]
fn a_member_that_never_joins_is_an_error_not_a_hang() {
    let mut g = Graph::new();
    let s = g.new_stream(0, "compute", PolicyKind::Fifo);
    let op = compute(&mut g, 0, 10, s);
    g.add(op, &[]);
    // member 1 of a two-member collective never joins
    let c = allreduce(&mut g, Algorithm::Ring, &[0, 1], 10, &[], &[]);
    g.ops.truncate(c[0] as usize + 1);
    let fixed = Graph::from_parts(
        g.ops.clone(),
        g.dep_offsets()[..g.ops.len() + 1].to_vec(),
        g.dep_ids().to_vec(),
        g.collectives.clone(),
        g.streams.clone(),
        vec![],
        g.op_names.clone(),
        g.stream_names.clone(),
    )
    .unwrap();
    let err = run_graph(&fixed, &star(Fidelity::Flow), TraceDetail::Step).err().unwrap();
    assert!(err.contains("cannot finish"), "{err}");
    assert_eq!(err.kind, ddlsim_core::ErrorKind::Stuck);
}

#[test]
fn a_compute_time_beyond_the_clock_is_refused() {
    let mut g = Graph::new();
    let op = compute(&mut g, 0, u64::MAX / 2, NO_STREAM);
    let a = g.add(op, &[]);
    let op = compute(&mut g, 0, u64::MAX / 2, NO_STREAM);
    g.add(op, &[a]);
    let err = run_graph(&g, &star(Fidelity::Analytic), TraceDetail::Step).err().unwrap();
    assert!(err.contains("overflow"), "{err}");
    assert_eq!(err.kind, ddlsim_core::ErrorKind::OutOfRange);
}

/// Enough independent ops on one stream for many looks at the clock (one per 1,024 events); the hook tests ask
/// for an interval of zero, so the hook is called at every look whatever the machine's speed (with the default
/// 50 ms an optimized build finished this graph before the first call).
fn long_graph() -> Graph {
    let mut g = Graph::new();
    let s = g.new_stream(0, "compute", PolicyKind::Fifo);
    for _ in 0..100_000 {
        let op = compute(&mut g, 0, 10, s);
        g.add(op, &[]);
    }
    g
}

#[test]
fn a_progress_hook_that_returns_false_stops_the_run_as_interrupted() {
    let g = long_graph();
    let mut calls = 0;
    let mut hook = |p: &ddlsim_core::Progress| {
        calls += 1;
        assert!(p.ops_done < p.ops_total && p.events > 0);
        false
    };
    let err = ddlsim_core::run_graph_with_hook_every(&g, &star(Fidelity::Analytic), TraceDetail::Step, Some(&mut hook), std::time::Duration::ZERO).err();
    assert_eq!(err.as_deref(), Some(ddlsim_core::INTERRUPTED));
    assert_eq!(err.map(|e| e.kind), Some(ddlsim_core::ErrorKind::Interrupted));
    // stopped at the first call (after 1,024 events), with work left
    assert_eq!(calls, 1);
}

#[test]
fn a_progress_hook_sees_time_and_work_advance_and_changes_nothing() {
    let g = long_graph();
    let mut seen: Vec<ddlsim_core::Progress> = Vec::new();
    let mut hook = |p: &ddlsim_core::Progress| {
        seen.push(*p);
        true
    };
    let with = ddlsim_core::run_graph_with_hook_every(&g, &star(Fidelity::Analytic), TraceDetail::Step, Some(&mut hook), std::time::Duration::ZERO).unwrap();
    let without = run_graph(&g, &star(Fidelity::Analytic), TraceDetail::Step).unwrap();
    assert!(!seen.is_empty(), "a run this long calls its hook");
    for pair in seen.windows(2) {
        assert!(pair[0].now <= pair[1].now && pair[0].events < pair[1].events && pair[0].ops_done <= pair[1].ops_done);
    }
    assert!(seen.iter().all(|p| p.ops_total == g.len() as u64 && p.ops_done <= p.ops_total));
    assert_eq!((with.makespan, with.events), (without.makespan, without.events));
    // interval zero: one call at every look at the clock, which comes after each 1,024 events
    assert_eq!(seen.len() as u64, with.events / 1024);
    assert_eq!(with.log.end_ns, without.log.end_ns);
}
