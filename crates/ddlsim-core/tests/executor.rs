//! The executor on hand-made graphs: streams, transfers, collectives.

use ddlsim_core::graph::{CollectiveSpec, Graph, Kind, Op, OpCode};
use ddlsim_core::network::Network;
use ddlsim_core::spec::{Fidelity, NetworkSpec, Topology, TraceDetail};
use ddlsim_core::try_run;

fn star(hosts: u32, fidelity: Fidelity) -> Network {
    // 8 Gbit/s = 1 byte/ns, 100 ns host-to-host
    let spec = NetworkSpec { fidelity, bandwidth_bps: 8e9, latency_ns: 100, topology: Topology::Star };
    Network::new(&spec, hosts).unwrap()
}

fn compute(rank: u32, ns: u64, stream: u32) -> Op {
    let mut op = Op::new(Kind::Compute, OpCode::Forward, rank);
    op.duration = ns;
    op.stream = stream;
    op
}

#[test]
fn ops_on_one_stream_run_one_at_a_time_in_ready_order() {
    let mut g = Graph::new();
    let s = g.new_stream();
    let a = g.add(compute(0, 50, s), &[]);
    let b = g.add(compute(0, 30, s), &[]);
    let c = g.add(compute(0, 10, s), &[a]);
    let out = try_run(&g, star(1, Fidelity::Flow), TraceDetail::Step).unwrap();
    let log = &out.log;
    assert_eq!((log.start_ns[a as usize], log.end_ns[a as usize]), (0, 50));
    // b was ready at 0 but waited for a: queueing shows as start - ready
    assert_eq!((log.ready_ns[b as usize], log.start_ns[b as usize], log.end_ns[b as usize]), (0, 50, 80));
    assert_eq!((log.ready_ns[c as usize], log.start_ns[c as usize], log.end_ns[c as usize]), (50, 80, 90));
    assert_eq!(out.makespan, 90);
}

#[test]
fn a_transfer_ends_at_delivery_and_releases_its_dependents() {
    let mut g = Graph::new();
    let mut t = Op::new(Kind::Transfer, OpCode::Send, 0);
    t.peer = 1;
    t.bytes = 1000;
    let t = g.add(t, &[]);
    let after = g.add(compute(1, 5, u32::MAX), &[t]);
    for fidelity in [Fidelity::Flow, Fidelity::Analytic] {
        let out = try_run(&g, star(2, fidelity), TraceDetail::Step).unwrap();
        assert_eq!(out.log.end_ns[t as usize], 1100, "{fidelity:?}");
        assert_eq!(out.log.start_ns[after as usize], 1100);
        assert_eq!(out.bytes_sent, vec![1000, 0]);
        assert_eq!(out.bytes_received, vec![0, 1000]);
    }
}

#[test]
fn two_flows_into_one_host_share_its_downlink() {
    let mut g = Graph::new();
    for src in [0, 1] {
        let mut t = Op::new(Kind::Transfer, OpCode::Send, src);
        t.peer = 2;
        t.bytes = 1000;
        g.add(t, &[]);
    }
    let out = try_run(&g, star(3, Fidelity::Flow), TraceDetail::Step).unwrap();
    assert_eq!(out.log.end_ns, vec![2100, 2100]);
}

#[test]
fn a_late_member_holds_the_ring_back_and_steps_are_logged_with_causes() {
    let mut g = Graph::new();
    let c = g.add_collective(CollectiveSpec { members: vec![0, 1, 2], bytes: 300 });
    let mut ids = Vec::new();
    for (rank, delay) in [(0u32, 0u64), (1, 0), (2, 1000)] {
        let pre = g.add(compute(rank, delay, u32::MAX), &[]);
        let mut op = Op::new(Kind::Collective, OpCode::AllReduce, rank);
        op.collective = c;
        op.member = rank;
        op.bytes = 300;
        ids.push(g.add(op, &[pre]));
    }
    let out = try_run(&g, star(3, Fidelity::Flow), TraceDetail::Step).unwrap();
    let log = &out.log;
    // 4 steps of 100 B (100 ns) + 100 ns latency, starting when member 2 joins at 1000
    for &id in &ids {
        assert_eq!(log.end_ns[id as usize], 1000 + 4 * 200);
    }
    let steps: Vec<usize> = (0..log.len()).filter(|&i| log.op[i] == OpCode::RingStep as u8).collect();
    assert_eq!(steps.len(), 3 * 4);
    // member 1 could not send to member 2 before it joined
    let first_to_2 = steps.iter().filter(|&&i| log.peer[i] == 2).map(|&i| log.start_ns[i]).min().unwrap();
    assert_eq!(first_to_2, 1000);
    // every step's dependencies ended before it was ready
    let end_of = |id: i64| log.end_ns[log.id.iter().position(|&x| x == id).unwrap()];
    for &i in &steps {
        let deps = &log.deps[log.dep_offsets[i] as usize..log.dep_offsets[i + 1] as usize];
        assert!(!deps.is_empty());
        assert!(deps.iter().all(|&d| end_of(d) <= log.ready_ns[i]));
    }
    assert_eq!(out.bytes_sent.iter().sum::<u64>(), 3 * 4 * 100);
}

#[test]
fn collective_detail_keeps_only_the_per_rank_rows() {
    let mut g = Graph::new();
    let c = g.add_collective(CollectiveSpec { members: vec![0, 1], bytes: 10 });
    for rank in 0..2 {
        let mut op = Op::new(Kind::Collective, OpCode::AllReduce, rank);
        op.collective = c;
        op.member = rank;
        g.add(op, &[]);
    }
    let out = try_run(&g, star(2, Fidelity::Flow), TraceDetail::Collective).unwrap();
    assert_eq!(out.log.len(), 2);
    assert_eq!(out.transfers, 4);
}
