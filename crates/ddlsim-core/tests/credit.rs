//! ByteScheduler's credit on a stream: the next queued op starts while the
//! running ops move fewer bytes than the credit. Checked against a
//! list-scheduling oracle written here, a closed form for concurrent
//! all-reduces, and training graphs that must not deadlock.

mod common;

use common::*;
use ddlsim_core::collective::Algorithm;
use ddlsim_core::graph::{Graph, PolicyKind, NO_STREAM};
use ddlsim_core::lower::training::{partitions, AlgorithmName, GroupSpec, LayerSpec, StreamPolicyName, SyncSpec, TrainingSpec};
use ddlsim_core::network::Fidelity;
use ddlsim_core::{run_graph, simulate_training, TraceDetail};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One job of the oracle: ready time, duration, bytes, priority.
#[derive(Clone, Copy)]
struct Job {
    ready: u64,
    duration: u64,
    bytes: u64,
    priority: i32,
}

/// Start time of each job under ByteScheduler's loop, simulated event by
/// event: at each instant, finished jobs return their bytes, arrivals join
/// the queue, then the head of the queue starts while the stream is empty
/// or the running bytes are below the credit. `by_priority`: the queue is
/// ordered by (priority, job index); else by arrival.
fn oracle(jobs: &[Job], credit: u64, by_priority: bool) -> Vec<u64> {
    let mut start = vec![u64::MAX; jobs.len()];
    let mut running: Vec<(u64, usize)> = Vec::new(); // (end, job)
    let mut queue: Vec<usize> = Vec::new();
    let mut arrivals: Vec<usize> = (0..jobs.len()).collect();
    arrivals.sort_by_key(|&j| (jobs[j].ready, j));
    let mut next_arrival = 0;
    let mut done = 0;
    while done < jobs.len() {
        let t_end = running.iter().map(|r| r.0).min().unwrap_or(u64::MAX);
        let t_arr = arrivals.get(next_arrival).map_or(u64::MAX, |&j| jobs[j].ready);
        let now = t_end.min(t_arr);
        running.retain(|&(end, _)| {
            let finished = end == now;
            done += finished as usize;
            !finished
        });
        while next_arrival < arrivals.len() && jobs[arrivals[next_arrival]].ready == now {
            queue.push(arrivals[next_arrival]);
            next_arrival += 1;
        }
        if by_priority {
            queue.sort_by_key(|&j| (jobs[j].priority, j));
        }
        loop {
            let in_flight: u64 = running.iter().map(|&(_, j)| jobs[j].bytes).sum();
            if queue.is_empty() || !(running.is_empty() || in_flight < credit) {
                break;
            }
            let j = queue.remove(0);
            start[j] = now;
            running.push((now + jobs[j].duration, j));
        }
    }
    start
}

/// The same jobs as compute ops on one stream of the engine (a gate op off
/// any stream makes each ready at its time).
fn engine_starts(jobs: &[Job], credit: u64, policy: PolicyKind) -> Vec<u64> {
    let mut g = Graph::new();
    let s = g.new_stream(0, "comm", policy);
    g.streams[s as usize].credit = credit;
    let ids: Vec<u32> = jobs
        .iter()
        .map(|job| {
            let deps = if job.ready > 0 {
                let gate = compute(&mut g, 0, job.ready, NO_STREAM);
                vec![g.add(gate, &[])]
            } else {
                Vec::new()
            };
            let mut op = compute(&mut g, 0, job.duration, s);
            op.bytes = job.bytes;
            op.priority = job.priority;
            g.add(op, &deps)
        })
        .collect();
    let out = run_graph(&g, &net(Fidelity::Flow, 8e9, 100), TraceDetail::Step).unwrap();
    assert_deps_explain_every_start(&out.log);
    ids.iter().map(|&i| out.log.start_ns[i as usize] as u64).collect()
}

fn random_jobs(rng: &mut ChaCha8Rng, n: usize) -> Vec<Job> {
    // Times drawn from a wide range so that no two events coincide (the
    // oracle and the engine may order simultaneous events differently).
    (0..n)
        .map(|_| Job {
            ready: rng.gen_range(0..1_000_000_000),
            duration: rng.gen_range(1..300_000_000),
            bytes: rng.gen_range(1..8_000_000),
            priority: rng.gen_range(0..20),
        })
        .collect()
}

#[test]
fn the_credit_loop_matches_list_scheduling_for_fifo_and_priority() {
    let mut rng = ChaCha8Rng::seed_from_u64(20261123);
    for case in 0..200 {
        let n = rng.gen_range(1..25);
        let jobs = random_jobs(&mut rng, n);
        let credit = [1, 4_000_000, 16_000_000, u64::MAX / 4][case % 4];
        let fifo = engine_starts(&jobs, credit, PolicyKind::Fifo);
        assert_eq!(fifo, oracle(&jobs, credit, false), "case {case}: FIFO, credit {credit}");
        let prio = engine_starts(&jobs, credit, PolicyKind::Priority { preempt: false });
        assert_eq!(prio, oracle(&jobs, credit, true), "case {case}: priority, credit {credit}");
    }
}

#[test]
fn no_credit_is_one_op_at_a_time() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for _ in 0..50 {
        let jobs = random_jobs(&mut rng, 12);
        // Credit 0 and a credit of one byte behave alike: an op starts only on an empty stream.
        assert_eq!(engine_starts(&jobs, 0, PolicyKind::Fifo), oracle(&jobs, 1, false));
        assert_eq!(engine_starts(&jobs, 0, PolicyKind::Fifo), engine_starts(&jobs, 1, PolicyKind::Fifo));
    }
}

#[test]
fn two_all_reduces_within_the_credit_share_the_links_and_save_the_second_ones_latencies() {
    // Two ranks at 1 byte/ns, 100 ns: a 2-rank ring all-reduce of B bytes is
    // two steps of B/2 bytes, 2 x (100 + B/2) ns alone. Sequential, the second
    // ends at 2 x that; run side by side, each step carries both halves
    // (B bytes per link): both end at 2 x (100 + B).
    let b: u64 = 100_000;
    let run = |credit: u64| {
        let mut g = Graph::new();
        let streams: Vec<u32> = (0..2).map(|r| g.new_stream(r, "comm", PolicyKind::Fifo)).collect();
        for &s in &streams {
            g.streams[s as usize].credit = credit;
        }
        let first = allreduce(&mut g, Algorithm::Ring, &[0, 1], b, &streams, &[]);
        let second = allreduce(&mut g, Algorithm::Ring, &[0, 1], b, &streams, &[]);
        let out = run_graph(&g, &net(Fidelity::Flow, 8e9, 100), TraceDetail::Step).unwrap();
        assert_deps_explain_every_start(&out.log);
        let end = |op: u32| out.log.end_ns[row_of(&out.log, op as i64)] as u64;
        (end(first[0]), end(second[0]))
    };
    assert_eq!(run(0), (2 * (100 + b / 2), 4 * (100 + b / 2)));
    // The credit counts bytes: the second starts only while fewer than `credit` run.
    assert_eq!(run(b), (2 * (100 + b / 2), 4 * (100 + b / 2)));
    assert_eq!(run(b + 1), (2 * (100 + b), 2 * (100 + b)));
}

#[test]
fn partitions_are_ceil_many_nearly_equal_parts_that_add_up() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for _ in 0..2000 {
        let bytes = rng.gen_range(0..50_000_000u64);
        let p = rng.gen_range(1..10_000_000u64);
        let parts = partitions(bytes, p);
        assert_eq!(parts.iter().sum::<u64>(), bytes);
        let expected = if bytes <= p { 1 } else { bytes.div_ceil(p) };
        assert_eq!(parts.len() as u64, expected, "{bytes} B by {p}");
        assert!(parts.iter().all(|&x| x <= p.max(bytes.min(p))), "{parts:?} over {p}");
        let (lo, hi) = (*parts.iter().min().unwrap(), *parts.iter().max().unwrap());
        assert!(hi - lo <= 1 && parts.windows(2).all(|w| w[0] >= w[1]), "{parts:?}");
    }
    assert_eq!(partitions(10, 0), vec![10]);
    assert_eq!(partitions(10, 4), vec![4, 3, 3]);
}

fn bytescheduler_training(workers: u32, policy: StreamPolicyName, partition: u64, credit: u64, jitter: f64, seed: u64) -> TrainingSpec {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let layers: Vec<LayerSpec> = (0..12).map(|_| LayerSpec { fwd_ns: rng.gen_range(10_000..2_000_000), bwd_ns: rng.gen_range(10_000..4_000_000) }).collect();
    let groups: Vec<GroupSpec> = (0..12)
        .map(|l| GroupSpec { layers: vec![l], tensor: l as i32, bytes: rng.gen_range(1_000..20_000_000), server: 0, update_ns: 0 })
        .collect();
    let mut spec = TrainingSpec::new(workers, SyncSpec::Allreduce { algorithm: AlgorithmName::Ring }, layers, groups);
    spec.iterations = 3;
    spec.seed = seed;
    spec.jitter = jitter;
    spec.barrier = seed % 2 == 0;
    spec.stream_policy = policy;
    spec.partition_bytes = partition;
    spec.credit_bytes = credit;
    spec
}

#[test]
fn bytescheduler_training_never_deadlocks_and_keeps_the_fifo_credit() {
    // Jitter makes ranks pick partitions at different times (and, under
    // priority, in different orders); every run must finish, and under FIFO
    // no partition starts while its rank already runs `credit` bytes or more.
    for seed in 0..24u64 {
        for policy in [StreamPolicyName::Fifo, StreamPolicyName::Priority] {
            let (partition, credit) = [(2_000_000, 8_000_000), (500_000, 1_000_000), (4_000_000, 4_000_000)][seed as usize % 3];
            let spec = bytescheduler_training(2 + (seed % 4) as u32, policy, partition, credit, 0.3, seed);
            let out = simulate_training(&spec, &net(Fidelity::Flow, 10e9, 5_000), TraceDetail::Collective)
                .unwrap_or_else(|e| panic!("seed {seed} {policy:?}: {e}"));
            let log = &out.log;
            let colls: Vec<usize> = (0..log.len()).filter(|&i| log.kind[i] == ddlsim_core::log::KIND_COLLECTIVE).collect();
            let expected: usize = spec.groups.iter().map(|g| partitions(g.bytes, partition).len()).sum::<usize>() * spec.workers as usize * 3;
            assert_eq!(colls.len(), expected);
            if policy == StreamPolicyName::Fifo {
                // At each instant t a rank starts partitions S, it ran R (started
                // before t, ending after): the last of S started while the others
                // ran, so bytes(R + S) - max(S) < credit (the order within S is not logged).
                for &i in &colls {
                    let (r, t) = (log.rank[i], log.start_ns[i]);
                    let on_rank = colls.iter().filter(|&&j| log.rank[j] == r);
                    let started: Vec<i64> = on_rank.clone().filter(|&&j| log.start_ns[j] == t).map(|&j| log.bytes[j]).collect();
                    let running: i64 = on_rank.filter(|&&j| log.start_ns[j] < t && t < log.end_ns[j]).map(|&j| log.bytes[j]).sum();
                    let before_last = running + started.iter().sum::<i64>() - started.iter().max().unwrap();
                    assert!(before_last < credit as i64, "seed {seed}: rank {r} started a partition at {t} with {before_last} B running (credit {credit})");
                }
            }
        }
    }
}
