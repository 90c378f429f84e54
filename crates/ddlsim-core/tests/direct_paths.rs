//! The executor's direct paths (a ring's deliveries handed straight to the
//! network, a lone flow restarted and delivered without the model's generic
//! event handling) against the general path: seeded random scenarios of
//! several collectives (rings with and without partitioning or reduction
//! cost, other algorithms), point-to-point transfers, compute ops and
//! releases that fall on the same nanoseconds as deliveries, FIFO and
//! priority streams (with preemption), two bands, background tenants, both
//! trace details, flow and analytic fidelity. Every output must be the same.

mod common;

use common::*;
use ddlsim_core::collective::Algorithm;
use ddlsim_core::executor::with_direct_paths;
use ddlsim_core::graph::{CollectiveSpec, CollectiveType, Graph, Kind, Op, PolicyKind, NO_STREAM};
use ddlsim_core::network::{Fidelity, NetworkSpec, TenantSpec};
use ddlsim_core::{run_graph, RunOutput, TraceDetail};

struct Rng(u64);

impl Rng {
    fn below(&mut self, k: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % k
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// A random scenario: graph, network, detail.
fn scenario(r: &mut Rng) -> (Graph, NetworkSpec, TraceDetail) {
    let ranks = 2 + r.below(7) as u32;
    let mut g = Graph::new();
    // Per rank: a communication stream (FIFO, priority, preemptive priority) or none.
    let policies = [None, Some(PolicyKind::Fifo), Some(PolicyKind::Fifo), Some(PolicyKind::Priority { preempt: false }), Some(PolicyKind::Priority { preempt: true })];
    let uniform = r.below(2) == 0;
    let first = r.pick(&policies);
    let streams: Vec<u32> = (0..ranks)
        .map(|rank| match if uniform { first } else { r.pick(&policies) } {
            Some(p) => g.new_stream(rank, "comm", p),
            None => NO_STREAM,
        })
        .collect();
    // Durations from a small set, so that ends collide with deliveries.
    let durations = [0u64, 0, 10, 100, 800, 1_000, 8_000];
    let mut last: Vec<Option<u32>> = vec![None; ranks as usize];
    let name = g.op_name("work");
    let mut previous: Option<Vec<u32>> = None;
    for _ in 0..1 + r.below(6) {
        // Some compute first, on some ranks (released at a colliding time now and then).
        for rank in 0..ranks {
            if r.below(3) == 0 {
                let mut op = Op::new(Kind::Compute, name, rank);
                op.duration = r.pick(&durations);
                let deps: Vec<u32> = last[rank as usize].into_iter().collect();
                let id = if r.below(4) == 0 { g.add_released(op, &deps, r.pick(&durations) * 3) } else { g.add(op, &deps) };
                last[rank as usize] = Some(id);
            }
        }
        if r.below(4) == 0 {
            // A point-to-point transfer.
            let src = r.below(ranks as u64) as u32;
            let dst = (src + 1 + r.below(ranks as u64 - 1) as u32) % ranks;
            let deps: Vec<u32> = last[src as usize].into_iter().collect();
            // Now and then a second one beside it (same pair, same start: the first is still on the links).
            for _ in 0..1 + r.below(2) {
                let mut op = transfer(&mut g, src, dst, r.pick(&[0, 1, 1_000, 12_345]));
                op.band = r.below(2) as u8;
                let id = g.add(op, &deps);
                last[src as usize] = Some(id);
            }
            continue;
        }
        // A collective over a random subset of the ranks, in random order,
        // or over the previous one's (their flows then share routes).
        let members = match &previous {
            Some(m) if r.below(3) == 0 => m.clone(),
            _ => {
                let mut members: Vec<u32> = (0..ranks).collect();
                for i in (1..members.len()).rev() {
                    members.swap(i, r.below(i as u64 + 1) as usize);
                }
                members.truncate(2 + r.below(ranks as u64 - 1) as usize);
                members
            }
        };
        previous = Some(members.clone());
        let algorithm = if r.below(5) == 0 { r.pick(&[Algorithm::HalvingDoubling, Algorithm::BinaryTree, Algorithm::Direct]) } else { Algorithm::Ring };
        let bytes = r.pick(&[0, 1, 7, 1_000, 4_097, 100_000, 1_000_003]);
        let chunk_bytes = r.pick(&[0, 0, 0, 333, 40_000]);
        let gamma = if r.below(6) == 0 { 0.01 } else { 0.0 };
        let c = g.add_collective(CollectiveSpec { algorithm, coll_type: CollectiveType::AllReduce, members: members.clone(), bytes, chunk_bytes, gamma_ns_per_byte: gamma });
        let cname = g.op_name("allreduce");
        let priority = r.below(3) as i32;
        let band = r.below(2) as u8;
        for (i, &rank) in members.iter().enumerate() {
            let mut op = Op::new(Kind::Collective, cname, rank);
            op.collective = c;
            op.member = i as u32;
            op.bytes = bytes;
            op.stream = streams[rank as usize];
            op.priority = priority;
            op.band = band;
            let deps: Vec<u32> = last[rank as usize].into_iter().collect();
            let id = g.add(op, &deps);
            // The next op on a rank waits for its collective only now and then (overlap).
            if r.below(2) == 0 {
                last[rank as usize] = Some(id);
            }
        }
    }
    let fidelity = if r.below(5) == 0 { Fidelity::Analytic } else { Fidelity::Flow };
    let mut spec = net(fidelity, r.pick(&[1e9, 10e9, 8e9]), r.pick(&[0, 10, 1_000, 10_000]));
    spec.record_flows = r.below(2) == 0;
    if r.below(3) == 0 {
        let hosts = ranks + 2;
        spec.hosts = Some(hosts);
        spec.tenants = vec![TenantSpec {
            id: 1,
            band: r.below(2) as u8,
            seed: r.below(1000),
            cdf: vec![(100.0, 0.5), (5_000.0, 1.0)],
            rate_per_host: r.pick(&[1e4, 1e5]),
            pairs: if r.below(2) == 0 { Some(vec![(ranks, ranks + 1), (0, 1)]) } else { None },
            hosts: None,
            start_ns: 0,
            stop_ns: Some(r.pick(&[0, 1_000, 200_000])),
        }];
    }
    let detail = if r.below(4) == 0 { TraceDetail::Step } else { TraceDetail::Collective };
    (g, spec, detail)
}

fn outputs(out: &Result<RunOutput, ddlsim_core::Error>) -> String {
    match out {
        Ok(o) => format!(
            "{:?}\n{:?}\nevents {} transfers {} recomputations {} makespan {}\n{:?}\n{:?}\n{:?}",
            o.log, o.op_names, o.events, o.transfers, o.recomputations, o.makespan, o.bytes_sent, o.bytes_received, o.flows
        ),
        Err(e) => format!("error {e:?}"),
    }
}

#[test]
fn direct_paths_give_the_general_paths_outputs() {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut lone_runs, mut rows) = (0, 0usize);
    for case in 0..400 {
        let (g, spec, detail) = scenario(&mut r);
        let direct = with_direct_paths(true, || run_graph(&g, &spec, detail));
        let general = with_direct_paths(false, || run_graph(&g, &spec, detail));
        let (a, b) = (outputs(&direct), outputs(&general));
        if a != b {
            let first = a.chars().zip(b.chars()).position(|(x, y)| x != y).unwrap_or(0);
            panic!("case {case}: outputs differ from char {first}:\n direct  ...{}\n general ...{}", &a[first.saturating_sub(80)..(first + 200).min(a.len())], &b[first.saturating_sub(80)..(first + 200).min(b.len())]);
        }
        if let Ok(o) = &direct {
            rows += o.log.len();
            lone_runs += usize::from(o.recomputations > 0 && o.transfers > 0);
        }
    }
    // The cases must exercise the paths.
    assert!(lone_runs > 100 && rows > 10_000, "{lone_runs} flow runs with transfers, {rows} rows");
}

#[test]
fn direct_paths_give_the_general_paths_outputs_on_a_ring_of_many_steps() {
    // A ring of 16 over an idle star (every flow lone, the direct paths'
    // own case) next to compute ops that end on the deliveries' nanoseconds.
    let mut g = Graph::new();
    let members: Vec<u32> = (0..16).collect();
    let ops = allreduce(&mut g, Algorithm::Ring, &members, 16 * 1_250, &[], &[]);
    let name = g.op_name("work");
    for (rank, &op) in ops.iter().enumerate() {
        // 1,250 bytes at 10 Gbit/s: 1,000 ns; plus 10 ns latency: steps land every 1,010 ns.
        let mut w = Op::new(Kind::Compute, name, rank as u32);
        w.duration = 1_010 * (1 + rank as u64 % 5);
        let _ = op;
        g.add(w, &[]);
    }
    let spec = net(Fidelity::Flow, 10e9, 10);
    for detail in [TraceDetail::Collective, TraceDetail::Step] {
        let direct = with_direct_paths(true, || run_graph(&g, &spec, detail));
        let general = with_direct_paths(false, || run_graph(&g, &spec, detail));
        assert_eq!(outputs(&direct), outputs(&general));
        let o = direct.unwrap();
        assert_eq!(o.transfers, 16 * 2 * 15);
        // 30 steps of 1,010 ns each.
        assert_eq!(o.makespan, 30 * 1_010);
    }
}

/// Symmetric rings (every member joins at once, every flow lone on an idle
/// star: the ring lane takes a whole instant's deliveries from the queue
/// itself) and what must stop it or keep it out: a second ring whose
/// deliveries fall on the same nanoseconds (same members without a stream,
/// or other members on the same links), a member on a priority stream,
/// another band or tenant for one member, compute ops that end on the
/// deliveries' nanoseconds, a straggler that joins late, a point-to-point
/// transfer that shares a ring's links (contention, cancelled lone ends),
/// background tenants; uneven chunks (0- and 1-byte ones too) and
/// partitioning; flow and analytic fidelity, both details.
fn symmetric_scenario(r: &mut Rng) -> (Graph, NetworkSpec, TraceDetail, String) {
    let ranks = 3 + r.below(16) as u32;
    let mut g = Graph::new();
    let mut what = Vec::new();
    let streamed = r.below(4) != 0;
    let streams: Vec<u32> = (0..ranks).map(|rank| if streamed { g.new_stream(rank, "comm", PolicyKind::Fifo) } else { NO_STREAM }).collect();
    let bandwidth = r.pick(&[10e9, 8e9, 1e9]);
    let latency = r.pick(&[0, 10, 1_000]);
    let name = g.op_name("work");
    let cname = g.op_name("allreduce");
    // A straggler: one rank computes longer before the first ring.
    let mut first_deps: Vec<Vec<u32>> = vec![Vec::new(); ranks as usize];
    if r.below(4) == 0 {
        let late = r.below(ranks as u64) as u32;
        let mut op = Op::new(Kind::Compute, name, late);
        op.duration = r.pick(&[1, 10, 1_000, 12_345]);
        first_deps[late as usize].push(g.add(op, &[]));
        what.push(format!("straggler {late}"));
    }
    let rings = 1 + r.below(3);
    let mut previous: Vec<u32> = vec![u32::MAX; ranks as usize];
    for k in 0..rings {
        // The ring over every rank, or (for a second ring) over the same ranks
        // in another order or a subset; it runs beside the first unless it waits for it.
        let mut members: Vec<u32> = (0..ranks).collect();
        if k > 0 && r.below(2) == 0 {
            for i in (1..members.len()).rev() {
                members.swap(i, r.below(i as u64 + 1) as usize);
            }
            members.truncate(2 + r.below(ranks as u64 - 1) as usize);
        }
        let bytes = r.pick(&[0, 1, 5, ranks as u64 - 1, 1_000 * ranks as u64, 1_000 * ranks as u64 + 3, 4_096, 99_999]);
        // Partitioned into about three messages now and then.
        let chunk_bytes = if r.below(4) == 0 { bytes / 3 + 1 } else { 0 };
        let c = g.add_collective(CollectiveSpec { algorithm: Algorithm::Ring, coll_type: CollectiveType::AllReduce, members: members.clone(), bytes, chunk_bytes, gamma_ns_per_byte: 0.0 });
        let after = k > 0 && r.below(2) == 0;
        let on_stream = k == 0 || r.below(2) == 0;
        let odd = if r.below(3) == 0 { Some((r.below(members.len() as u64) as usize, r.below(4))) } else { None };
        what.push(format!("ring {k}: {} members, {bytes} bytes, chunk {chunk_bytes}, after {after}, stream {on_stream}, odd {odd:?}", members.len()));
        for (i, &rank) in members.iter().enumerate() {
            let mut op = Op::new(Kind::Collective, cname, rank);
            op.collective = c;
            op.member = i as u32;
            op.bytes = bytes;
            op.stream = if on_stream { streams[rank as usize] } else { NO_STREAM };
            match odd {
                // One member that is not like the others.
                Some((m, 0)) if m == i => op.band = 1,
                Some((m, 1)) if m == i => op.tenant = 7,
                Some((m, p)) if m == i && p >= 2 => {
                    // On a priority stream, with an op of its own released on it while the ring runs.
                    op.stream = g.new_stream(rank, "prio", PolicyKind::Priority { preempt: p == 3 });
                    // (Mostly more urgent: it preempts the member between two sends.)
                    op.priority = 1 + r.below(2) as i32;
                    let mut other = Op::new(Kind::Compute, name, rank);
                    other.duration = r.pick(&[10, 1_000]);
                    other.stream = op.stream;
                    other.priority = r.pick(&[0, 0, 0, 2]);
                    g.add_released(other, &[], r.pick(&[100, 2_000, 5_000, 20_000]));
                }
                _ => {}
            }
            let mut deps = if k == 0 { first_deps[rank as usize].clone() } else { Vec::new() };
            if after && previous[rank as usize] != u32::MAX {
                deps.push(previous[rank as usize]);
            }
            previous[rank as usize] = g.add(op, &deps);
        }
    }
    // Compute ops ending on the deliveries' nanoseconds (multiples of a step's time) on some ranks.
    if r.below(2) == 0 {
        let step = ((1_000.0 * 8.0 / bandwidth * 1e9) as u64) + latency;
        for rank in 0..ranks {
            if r.below(2) == 0 {
                let mut op = Op::new(Kind::Compute, name, rank);
                op.duration = step * (1 + r.below(6));
                g.add(op, &[]);
            }
        }
        what.push("compute on the deliveries' ns".into());
    }
    // A transfer that shares a ring's links for a while.
    if r.below(3) == 0 {
        let src = r.below(ranks as u64) as u32;
        let dst = (src + 1 + r.below(ranks as u64 - 1) as u32) % ranks;
        let mut wait = Op::new(Kind::Compute, name, src);
        wait.duration = r.pick(&[0, 500, 3_000]);
        let w = g.add(wait, &[]);
        let mut op = transfer(&mut g, src, dst, r.pick(&[1, 2_000, 50_000]));
        op.band = r.below(2) as u8;
        g.add(op, &[w]);
        what.push(format!("transfer {src} -> {dst}"));
    }
    let fidelity = if r.below(6) == 0 { Fidelity::Analytic } else { Fidelity::Flow };
    let mut spec = net(fidelity, bandwidth, latency);
    spec.record_flows = r.below(2) == 0;
    if r.below(5) == 0 {
        spec.hosts = Some(ranks + 2);
        spec.tenants = vec![TenantSpec {
            id: 1,
            band: r.below(2) as u8,
            seed: r.below(1000),
            cdf: vec![(100.0, 0.5), (5_000.0, 1.0)],
            rate_per_host: 1e5,
            pairs: None,
            hosts: None,
            start_ns: 0,
            stop_ns: Some(r.pick(&[1_000, 100_000])),
        }];
        what.push("tenants".into());
    }
    let detail = if r.below(6) == 0 { TraceDetail::Step } else { TraceDetail::Collective };
    what.push(format!("{fidelity:?} {bandwidth} bps {latency} ns {detail:?} record {}", spec.record_flows));
    (g, spec, detail, what.join("; "))
}

#[test]
fn direct_paths_give_the_general_paths_outputs_on_symmetric_rings() {
    let mut r = Rng(0x2545_f491_4f6c_dd1d);
    let (mut transfers, mut lone) = (0u64, 0);
    for case in 0..300 {
        let (g, spec, detail, what) = symmetric_scenario(&mut r);
        let direct = with_direct_paths(true, || run_graph(&g, &spec, detail));
        let general = with_direct_paths(false, || run_graph(&g, &spec, detail));
        let (a, b) = (outputs(&direct), outputs(&general));
        if a != b {
            let first = a.chars().zip(b.chars()).position(|(x, y)| x != y).unwrap_or(0);
            panic!("case {case} ({what}): outputs differ from char {first}:\n direct  ...{}\n general ...{}", &a[first.saturating_sub(80)..(first + 200).min(a.len())], &b[first.saturating_sub(80)..(first + 200).min(b.len())]);
        }
        if let Ok(o) = &direct {
            transfers += o.transfers;
            lone += usize::from(o.recomputations > 0 && o.transfers > 100);
        }
    }
    assert!(transfers > 100_000 && lone > 100, "{transfers} transfers, {lone} flow runs with more than 100");
}
