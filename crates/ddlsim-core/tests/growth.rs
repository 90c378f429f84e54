//! Graph growth at run time: a graph run whole (its later ops carrying
//! release times) and the same graph grown piece by piece while the run
//! goes on (each piece appended when the run reached its release instant)
//! log exactly the same rows. Property over seeded random graphs: compute,
//! transfers, collectives of several algorithms on FIFO and priority
//! streams, barriers, multicast and aggregation fans, at both fidelities
//! and both trace details.

mod common;

use common::*;
use ddlsim_core::collective::Algorithm;
use ddlsim_core::engine::Time;
use ddlsim_core::graph::{CollectiveSpec, CollectiveType, FanKind, FanSpec, Graph, Kind, Op, PolicyKind, NO_STREAM};
use ddlsim_core::log::EventLog;
use ddlsim_core::network::{build_network, Fidelity};
use ddlsim_core::{run, ErrorKind, RunOutput, Session, TraceDetail};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const RANKS: u32 = 5;

/// One op to add: the op, its deps, its release time (None: none).
struct Add {
    op: Op,
    deps: Vec<u32>,
    release: Option<Time>,
}

/// A piece of the graph: what it adds, appended at `at`.
struct Piece {
    at: Time,
    streams: Vec<(u32, &'static str, PolicyKind)>,
    collectives: Vec<CollectiveSpec>,
    adds: Vec<Add>,
    fans: Vec<FanSpec>,
}

/// Random pieces; op ids, stream ids and collective ids are those of the whole graph.
fn pieces(seed: u64) -> Vec<Piece> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let algorithms = [Algorithm::Ring, Algorithm::HalvingDoubling, Algorithm::BinaryTree, Algorithm::Direct];
    let mut out = Vec::new();
    let (mut ops, mut streams, mut colls) = (0u32, 0u32, 0i64);
    let mut at = 0;
    for k in 0..rng.gen_range(2..5) {
        if k > 0 {
            at += rng.gen_range(1..40_000);
        }
        let mut p = Piece { at, streams: Vec::new(), collectives: Vec::new(), adds: Vec::new(), fans: Vec::new() };
        // Each piece brings one stream per rank (a job's own compute or communication streams).
        let policy = match rng.gen_range(0..3) {
            0 => PolicyKind::Fifo,
            1 => PolicyKind::Priority { preempt: false },
            _ => PolicyKind::Priority { preempt: true },
        };
        let first_stream = streams;
        for r in 0..RANKS {
            p.streams.push((r, if k % 2 == 0 { "compute" } else { "comm" }, policy));
            streams += 1;
        }
        let release = |rng: &mut ChaCha8Rng| if k == 0 { None } else { Some(at + rng.gen_range(0..3) * rng.gen_range(0..5_000)) };
        let deps_of = |rng: &mut ChaCha8Rng, ops: u32| -> Vec<u32> {
            let mut d: Vec<u32> = (0..rng.gen_range(0..3)).filter(|_| ops > 0).map(|_| rng.gen_range(0..ops)).collect();
            d.sort_unstable();
            d.dedup();
            d
        };
        for _ in 0..rng.gen_range(4..14) {
            let choice = rng.gen_range(0..10);
            let rank = rng.gen_range(0..RANKS);
            if choice < 4 {
                let mut op = Op::new(Kind::Compute, 0, rank);
                op.duration = rng.gen_range(0..20_000);
                op.stream = if rng.gen_bool(0.7) { first_stream + rank } else { NO_STREAM };
                op.priority = rng.gen_range(0..4);
                let deps = deps_of(&mut rng, ops);
                p.adds.push(Add { op, deps, release: release(&mut rng) });
                ops += 1;
            } else if choice < 7 {
                let mut op = Op::new(Kind::Transfer, 1, rank);
                op.peer = ((rank + rng.gen_range(1..RANKS)) % RANKS) as i32;
                op.bytes = rng.gen_range(1..200_000);
                op.stream = if rng.gen_bool(0.5) { first_stream + rank } else { NO_STREAM };
                op.band = rng.gen_range(0..2);
                let deps = deps_of(&mut rng, ops);
                p.adds.push(Add { op, deps, release: release(&mut rng) });
                ops += 1;
            } else if choice < 9 {
                // A collective over a random subset of ranks (at least 2), one op per member on this piece's streams.
                let mut members: Vec<u32> = (0..RANKS).filter(|_| rng.gen_bool(0.6)).collect();
                if members.len() < 2 {
                    members = vec![0, 1];
                }
                let bytes = rng.gen_range(1..300_000);
                p.collectives.push(CollectiveSpec {
                    algorithm: algorithms[rng.gen_range(0..algorithms.len())],
                    coll_type: CollectiveType::AllReduce,
                    members: members.clone(),
                    bytes,
                    chunk_bytes: 0,
                    gamma_ns_per_byte: if rng.gen_bool(0.3) { 0.25 } else { 0.0 },
                });
                let priority = rng.gen_range(0..4);
                let rel = release(&mut rng);
                let deps = deps_of(&mut rng, ops);
                for (m, &r) in members.iter().enumerate() {
                    let mut op = Op::new(Kind::Collective, 2, r);
                    op.collective = colls;
                    op.member = m as u32;
                    op.bytes = bytes;
                    op.priority = priority;
                    op.stream = first_stream + r;
                    p.adds.push(Add { op, deps: deps.clone(), release: rel });
                    ops += 1;
                }
                colls += 1;
            } else {
                // A fan: rank multicasts to two others, or two others aggregate at rank.
                let (a, b) = ((rank + 1) % RANKS, (rank + 2) % RANKS);
                let kind = if rng.gen_bool(0.5) { FanKind::Multicast } else { FanKind::Aggregate };
                let bytes = rng.gen_range(1..100_000);
                let rel = release(&mut rng);
                let deps = deps_of(&mut rng, ops);
                let mut fan = Vec::new();
                for other in [a, b] {
                    let (src, dst) = if kind == FanKind::Multicast { (rank, other) } else { (other, rank) };
                    let mut op = Op::new(Kind::Transfer, 3, src);
                    op.peer = dst as i32;
                    op.bytes = bytes;
                    p.adds.push(Add { op, deps: deps.clone(), release: rel });
                    fan.push(ops);
                    ops += 1;
                }
                p.fans.push(FanSpec { kind, ops: fan });
            }
        }
        if rng.gen_bool(0.5) && ops > 0 {
            let deps = deps_of(&mut rng, ops);
            p.adds.push(Add { op: Op::new(Kind::Barrier, 4, 0), deps, release: release(&mut rng) });
            ops += 1;
        }
        out.push(p);
    }
    out
}

fn base_graph() -> Graph {
    let mut g = Graph::new();
    g.host_of_rank = (0..RANKS).collect();
    for name in ["work", "send", "allreduce", "fan", "barrier"] {
        g.op_name(name);
    }
    g
}

fn add_piece(g: &mut Graph, p: &Piece) {
    for &(rank, name, policy) in &p.streams {
        g.new_stream(rank, name, policy);
    }
    for c in &p.collectives {
        g.add_collective(c.clone());
    }
    for a in &p.adds {
        match a.release {
            Some(t) => g.add_released(a.op.clone(), &a.deps, t),
            None => g.add(a.op.clone(), &a.deps),
        };
    }
    g.fans.extend(p.fans.iter().cloned());
}

fn whole(pieces: &[Piece], fidelity: Fidelity, detail: TraceDetail) -> Result<RunOutput, ddlsim_core::Error> {
    let mut g = base_graph();
    for p in pieces {
        add_piece(&mut g, p);
    }
    let network = build_network(&net(fidelity, 8e9, 1_000), &g.hosts()).unwrap();
    run(&g, network, detail)
}

fn grown(pieces: &[Piece], fidelity: Fidelity, detail: TraceDetail) -> Result<RunOutput, ddlsim_core::Error> {
    let mut g = base_graph();
    add_piece(&mut g, &pieces[0]);
    let network = build_network(&net(fidelity, 8e9, 1_000), &g.hosts()).unwrap();
    let mut session = Session::new(g, network, detail)?;
    for p in &pieces[1..] {
        session.run_until(p.at)?;
        assert_eq!(session.now(), p.at);
        session.append(|growth| {
            for &(rank, name, policy) in &p.streams {
                growth.new_stream(rank, name, policy);
            }
            for c in &p.collectives {
                growth.add_collective(c.clone());
            }
            for a in &p.adds {
                growth.add(a.op.clone(), &a.deps, a.release.expect("later pieces carry release times"));
            }
            for f in &p.fans {
                growth.add_fan(f.clone());
            }
        })?;
    }
    session.finish()
}

fn columns(log: &EventLog) -> Vec<Vec<i64>> {
    let w = |v: &[i32]| v.iter().map(|&x| x as i64).collect::<Vec<_>>();
    vec![
        log.id.clone(),
        w(&log.iteration),
        w(&log.rank),
        log.kind.iter().map(|&x| x as i64).collect(),
        log.op.iter().map(|&x| x as i64).collect(),
        w(&log.layer),
        w(&log.tensor),
        w(&log.group),
        w(&log.peer),
        log.message.clone(),
        log.bytes.clone(),
        w(&log.priority),
        w(&log.tenant),
        log.collective.clone(),
        w(&log.step),
        log.rpc.clone(),
        w(&log.stream),
        log.ready_ns.clone(),
        log.start_ns.clone(),
        log.end_ns.clone(),
        log.dep_offsets.clone(),
        log.deps.clone(),
    ]
}

/// Every dep of a row ended no later than the row started (a release is a
/// wait of its own, not a row: a released row may start after its deps).
fn assert_causal(log: &EventLog) {
    let end_of: std::collections::HashMap<i64, i64> = (0..log.len()).map(|i| (log.id[i], log.end_ns[i])).collect();
    assert_eq!(end_of.len(), log.len(), "row ids are unique");
    for i in 0..log.len() {
        assert!(log.ready_ns[i] <= log.start_ns[i] && log.start_ns[i] <= log.end_ns[i]);
        for d in log.deps_of(i) {
            assert!(end_of[d] <= log.start_ns[i], "row {} starts before its dep {d} ended", log.id[i]);
        }
    }
}

#[test]
fn a_graph_grown_while_it_runs_logs_what_the_whole_graph_logs() {
    let (mut finished, mut cases) = (0, 0);
    for seed in 0..60u64 {
        let pieces = pieces(seed);
        for fidelity in [Fidelity::Flow, Fidelity::Analytic] {
            for detail in [TraceDetail::Step, TraceDetail::Collective] {
                cases += 1;
                let (a, b) = (whole(&pieces, fidelity, detail), grown(&pieces, fidelity, detail));
                match (a, b) {
                    (Ok(a), Ok(b)) => {
                        finished += 1;
                        assert_eq!(a.op_names, b.op_names, "seed {seed} {fidelity:?} {detail:?}");
                        assert_eq!(columns(&a.log), columns(&b.log), "seed {seed} {fidelity:?} {detail:?}: the logs differ");
                        assert_eq!((a.makespan, a.transfers, &a.bytes_sent, &a.bytes_received), (b.makespan, b.transfers, &b.bytes_sent, &b.bytes_received));
                        assert_causal(&b.log);
                        // Nothing released at t started before t.
                        let mut g = base_graph();
                        pieces.iter().for_each(|p| add_piece(&mut g, p));
                        for &(op, t) in &g.releases {
                            // (A multicast copy other than the first has no row of its own.)
                            if let Some(row) = b.log.id.iter().position(|&x| x == op as i64) {
                                assert!(b.log.ready_ns[row] >= t as i64, "seed {seed}: op {op} ready before its release {t}");
                            }
                        }
                    }
                    (Err(a), Err(b)) => assert_eq!((a.kind, a.message), (b.kind, b.message), "seed {seed}"),
                    (a, b) => panic!("seed {seed} {fidelity:?} {detail:?}: whole {:?} grown {:?}", a.err(), b.err()),
                }
            }
        }
    }
    assert!(finished * 10 >= cases * 7, "only {finished} of {cases} random graphs finished");
}

#[test]
fn a_job_arriving_at_t_waits_for_t() {
    // Rank 0 computes 10 us; a second job's transfer 0 -> 1 arrives at 25 us and depends on that compute.
    let mut g = base_graph();
    let s = g.new_stream(0, "compute", PolicyKind::Fifo);
    let op = compute(&mut g, 0, 10_000, s);
    let first = g.add(op, &[]);
    let network = build_network(&net(Fidelity::Analytic, 8e9, 1_000), &g.hosts()).unwrap();
    let mut session = Session::new(g, network, TraceDetail::Step).unwrap();
    session.run_until(25_000).unwrap();
    let id = session
        .append(|growth| {
            let name = growth.op_name("late");
            let mut op = Op::new(Kind::Transfer, name, 0);
            op.peer = 1;
            op.bytes = 1_000;
            growth.add(op, &[first], 25_000)
        })
        .unwrap();
    let out = session.finish().unwrap();
    let row = row_of(&out.log, id as i64);
    // Ready at its release, sent in 1000 ns at 1 B/ns, received 1 us later.
    assert_eq!((out.log.ready_ns[row], out.log.start_ns[row], out.log.end_ns[row]), (25_000, 25_000, 26_000));
    assert_eq!(out.makespan, 27_000);
    assert_eq!(out.op_names[out.log.op[row] as usize], "late");
}

#[test]
fn growth_that_breaks_the_run_is_refused() {
    let g = base_graph();
    let network = build_network(&net(Fidelity::Analytic, 8e9, 1_000), &g.hosts()).unwrap();
    let mut session = Session::new(g, network, TraceDetail::Step).unwrap();
    session.run_until(1_000).unwrap();
    let early = session.append(|growth| growth.add(Op::new(Kind::Barrier, 4, 0), &[], 500)).unwrap_err();
    assert!(early.contains("before the instant the run stands at"), "{early}");
    assert_eq!(early.kind, ErrorKind::BadInput);
    assert!(session.run_until(10).unwrap_err().contains("cannot go back"));
}
