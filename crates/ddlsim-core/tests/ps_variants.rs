//! Parameter-server variants (network-operator paper §9) and the
//! backpropagation-staggering what-if, checked on small scenarios.

mod common;

use ddlsim_core::log::{EventLog, KIND_COMPUTE, KIND_SEND};
use ddlsim_core::lower::training::{ps_pieces, stagger_ns, GroupSpec, Piece};
use ddlsim_core::network::Fidelity;
use ddlsim_core::{simulate_training, RunOutput, TraceDetail, TrainingSpec};

fn spec(extra: &str) -> TrainingSpec {
    common::ps_three_layers(extra)
}

fn run(s: &TrainingSpec) -> RunOutput {
    simulate_training(s, &common::net(Fidelity::Flow, 8e9, 1000), TraceDetail::Step).unwrap()
}

fn op_code(out: &RunOutput, name: &str) -> u32 {
    out.op_names.iter().position(|n| n == name).unwrap_or(usize::MAX) as u32
}

fn rows<'a>(log: &'a EventLog, kind: u8, op: u32) -> impl Iterator<Item = usize> + 'a {
    (0..log.id.len()).filter(move |&i| log.kind[i] == kind && log.op[i] == op)
}

fn conserved(out: &RunOutput) {
    let sent: u64 = out.bytes_sent.iter().sum();
    let received: u64 = out.bytes_received.iter().sum();
    assert_eq!(sent, received);
    assert!(sent > 0);
}

#[test]
fn split_pieces_balance_bytes_within_one_byte_and_keep_the_update_time() {
    let mut s = spec(r#", "ps_split": true"#);
    s.sync = ddlsim_core::lower::training::SyncSpec::Ps { servers: 3 };
    let g = GroupSpec { layers: vec![0], tensor: 0, bytes: 1001, server: 0, update_ns: 300 };
    let p = ps_pieces(&s, &g);
    assert_eq!(p.iter().map(|x| (x.server, x.bytes)).collect::<Vec<_>>(), vec![(0, 334), (1, 334), (2, 333)]);
    assert_eq!(p.iter().map(|x| x.update_ns).sum::<u64>(), 300);
    // Message pipelining cuts each share.
    s.chunk_bytes = 100;
    let p = ps_pieces(&s, &g);
    assert_eq!(p.len(), 12);
    assert!(p.iter().all(|x| x.bytes <= 100));
    assert_eq!(p.iter().map(|x| x.bytes).sum::<u64>(), 1001);
    assert_eq!(p.iter().map(|x| x.update_ns).sum::<u64>(), 300);
    // A tensor smaller than the server count has no empty shares.
    let tiny = GroupSpec { layers: vec![0], tensor: 0, bytes: 2, server: 0, update_ns: 1 };
    s.chunk_bytes = 0;
    assert_eq!(ps_pieces(&s, &tiny), vec![Piece { server: 0, bytes: 1, update_ns: 0 }, Piece { server: 1, bytes: 1, update_ns: 1 }]);
}

#[test]
fn split_placement_sends_every_server_its_share() {
    let out = run(&spec(r#", "ps_split": true"#));
    conserved(&out);
    let log = &out.log;
    let push = op_code(&out, "push_request");
    let mut per_server = [0i64; 2];
    for i in rows(log, KIND_SEND, push).filter(|&i| log.iteration[i] == 0) {
        per_server[(log.peer[i] - 3) as usize] += log.bytes[i];
    }
    // 3 workers x (500 + 4000 + 32) bytes to each server.
    assert_eq!(per_server, [3 * 4532, 3 * 4532]);
}

fn pull_order(out: &RunOutput, iteration: i32) -> Vec<(i32, i32, i32)> {
    let log = &out.log;
    let pull = op_code(out, "pull_response");
    let mut sends: Vec<(i64, i32, i32, i32)> = rows(log, KIND_SEND, pull)
        .filter(|&i| log.iteration[i] == iteration && log.rank[i] == 3)
        .map(|i| (log.start_ns[i], log.layer[i], log.peer[i], log.tensor[i]))
        .collect();
    sends.sort();
    sends.into_iter().map(|(_, l, p, t)| (l, p, t)).collect()
}

#[test]
fn round_robin_and_block_distribution_order_is_visible_in_the_log() {
    // Server 0 owns tensors 0 and 2; after the barrier it sends in model order.
    let rr = run(&spec(r#", "distribution": "round_robin""#));
    let block = run(&spec(r#", "distribution": "block""#));
    conserved(&rr);
    conserved(&block);
    assert_eq!(pull_order(&rr, 0), vec![(0, 0, 0), (0, 1, 0), (0, 2, 0), (2, 0, 2), (2, 1, 2), (2, 2, 2)]);
    assert_eq!(pull_order(&block, 0), vec![(0, 0, 0), (2, 0, 2), (0, 1, 0), (2, 1, 2), (0, 2, 0), (2, 2, 2)]);
    // One send at a time per server: each starts after the previous one ended.
    for out in [&rr, &block] {
        let log = &out.log;
        let pull = op_code(out, "pull_response");
        let mut spans: Vec<(i64, i64)> =
            rows(log, KIND_SEND, pull).filter(|&i| log.rank[i] == 3 && log.iteration[i] == 1).map(|i| (log.start_ns[i], log.end_ns[i])).collect();
        spans.sort();
        assert!(spans.windows(2).all(|w| w[1].0 >= w[0].1));
    }
}

/// End of the recv row of each pull response to `worker` in `iteration`, by layer.
fn arrivals(out: &RunOutput, worker: i32, iteration: i32) -> Vec<(i32, i64)> {
    let log = &out.log;
    let pull = op_code(out, "pull_response");
    (0..log.id.len())
        .filter(|&i| log.kind[i] == ddlsim_core::log::KIND_RECV && log.op[i] == pull && log.rank[i] == worker && log.iteration[i] == iteration)
        .map(|i| (log.layer[i], log.end_ns[i]))
        .collect()
}

#[test]
fn without_barrier_servers_forward_at_once_and_forward_pipelines_per_layer() {
    for extra in [r#", "barrier": false"#, r#", "distribution": "round_robin""#, r#", "barrier": false, "distribution": "block""#] {
        let out = run(&spec(extra));
        conserved(&out);
        let log = &out.log;
        let fwd = op_code(&out, "forward");
        for w in 0..3 {
            let got = arrivals(&out, w, 0);
            assert_eq!(got.len(), 3);
            for i in rows(log, KIND_COMPUTE, fwd).filter(|&i| log.rank[i] == w && log.iteration[i] == 1) {
                let l = log.layer[i];
                let arrived = got.iter().filter(|a| a.0 == l).map(|a| a.1).max().unwrap();
                assert!(log.start_ns[i] >= arrived, "{extra}: layer {l} forward before its parameters");
            }
            // Layer 0's forward does not wait for layer 2's parameters when they come later.
            let first = rows(log, KIND_COMPUTE, fwd).find(|&i| log.rank[i] == w && log.iteration[i] == 1 && log.layer[i] == 0).unwrap();
            let l0 = got.iter().filter(|a| a.0 == 0).map(|a| a.1).max().unwrap();
            let l2 = got.iter().filter(|a| a.0 == 2).map(|a| a.1).max().unwrap();
            if l2 > l0 {
                assert!(log.start_ns[first] < l2, "{extra}: forward of layer 0 waited for layer 2");
            }
        }
    }
    // Without a barrier, the update of tensor 2 (ready first) is answered before tensor 0's update even started.
    let out = run(&spec(r#", "barrier": false"#));
    let log = &out.log;
    let upd = op_code(&out, "update");
    let pull = op_code(&out, "pull_response");
    let update_start_t0 = rows(log, KIND_COMPUTE, upd).find(|&i| log.iteration[i] == 0 && log.tensor[i] == 0).map(|i| log.start_ns[i]).unwrap();
    let first_pull_t2 = rows(log, KIND_SEND, pull).filter(|&i| log.iteration[i] == 0 && log.tensor[i] == 2).map(|i| log.start_ns[i]).min().unwrap();
    assert!(first_pull_t2 < update_start_t0);
}

#[test]
fn message_pipelining_splits_ps_transfers_and_conserves_bytes() {
    let out = run(&spec(r#", "chunk_bytes": 1000, "barrier": false"#));
    conserved(&out);
    let log = &out.log;
    let push = op_code(&out, "push_request");
    let sends: Vec<usize> = rows(log, KIND_SEND, push).filter(|&i| log.iteration[i] == 0 && log.rank[i] == 0).collect();
    // 1000 -> 1 message, 8000 -> 8, 64 -> 1
    assert_eq!(sends.len(), 10);
    assert!(sends.iter().all(|&i| log.bytes[i] <= 1000));
    assert_eq!(sends.iter().map(|&i| log.bytes[i]).sum::<i64>(), 9064);
}

/// Start of worker w's first forward op in each iteration.
fn iteration_starts(out: &RunOutput, w: i32) -> Vec<i64> {
    let log = &out.log;
    let fwd = op_code(out, "forward");
    let mut v: Vec<(i32, i64)> =
        rows(log, KIND_COMPUTE, fwd).filter(|&i| log.rank[i] == w && log.layer[i] == 0).map(|i| (log.iteration[i], log.start_ns[i])).collect();
    v.sort();
    v.into_iter().map(|x| x.1).collect()
}

#[test]
fn asynchronous_ps_never_waits_beyond_the_staleness_bound() {
    // Worker 2 is slow: a fixed stagger of 1 ms x rank before every backward.
    let slow = r#", "stagger_ns": 1000000"#;
    let six = |extra: &str| {
        let mut s = spec(extra);
        s.iterations = 6;
        s
    };
    let unbounded = run(&six(&format!("{slow}, \"asynchronous\": true")));
    conserved(&unbounded);
    let log = &unbounded.log;
    let upd = op_code(&unbounded, "update");
    // Asynchronous: one update per worker per message, each after that worker's push only.
    assert_eq!(rows(log, KIND_COMPUTE, upd).count(), 6 * 3 * 3);
    // Worker 0 finishes all 6 iterations before the slow worker 2 finishes its 2nd.
    let w0 = iteration_starts(&unbounded, 0);
    let w2 = iteration_starts(&unbounded, 2);
    assert!(w0[5] < w2[2], "worker 0 {w0:?} worker 2 {w2:?}");
    for s in [0u32, 1, 2] {
        let out = run(&six(&format!("{slow}, \"asynchronous\": true, \"staleness\": {s}")));
        conserved(&out);
        let log = &out.log;
        // Last update end of every worker per iteration.
        let mut done = vec![0i64; 6];
        for i in rows(log, KIND_COMPUTE, upd) {
            let it = log.iteration[i] as usize;
            done[it] = done[it].max(log.end_ns[i]);
        }
        for w in 0..3 {
            for (it, &start) in iteration_starts(&out, w).iter().enumerate() {
                if it > s as usize {
                    assert!(start >= done[it - s as usize - 1], "s={s} w={w} it={it}: ran ahead of the bound");
                }
            }
        }
        // The bound binds: worker 0 now waits for the slow worker.
        let w0 = iteration_starts(&out, 0);
        assert!(w0[5] > iteration_starts(&unbounded, 0)[5]);
    }
}

#[test]
fn stagger_delays_each_workers_backprop_by_exactly_its_skew() {
    let base = run(&spec(""));
    let fixed = run(&spec(r#", "stagger_ns": 5000"#));
    conserved(&fixed);
    let first_bwd = |out: &RunOutput, w: i32| {
        let log = &out.log;
        let b = op_code(out, "backward");
        rows(log, KIND_COMPUTE, b).find(|&i| log.rank[i] == w && log.iteration[i] == 0 && log.layer[i] == 2).map(|i| log.start_ns[i]).unwrap()
    };
    for w in 0..3 {
        assert_eq!(first_bwd(&fixed, w) - first_bwd(&base, w), 5000 * w as i64);
    }
    // Random skew: its own RNG stream, so the jitter draws do not change.
    let jit = run(&spec(r#", "jitter": 0.2"#));
    let both = run(&spec(r#", "jitter": 0.2, "stagger_ns": 5000, "stagger": "random""#));
    let durations = |out: &RunOutput, name: &str| {
        let log = &out.log;
        let c = op_code(out, name);
        rows(log, KIND_COMPUTE, c).map(|i| (log.rank[i], log.iteration[i], log.layer[i], log.end_ns[i] - log.start_ns[i])).collect::<Vec<_>>()
    };
    let mut a = durations(&jit, "forward");
    let mut b = durations(&both, "forward");
    a.sort();
    b.sort();
    assert_eq!(a, b);
    let s = spec(r#", "jitter": 0.2, "stagger_ns": 5000, "stagger": "random""#);
    let skews: Vec<u64> = (0..3).flat_map(|w| (0..3).map(move |it| (w, it))).map(|(w, it)| stagger_ns(&s, w, it)).collect();
    assert!(skews.iter().all(|&x| x <= 5000));
    assert!(skews.windows(2).any(|w| w[0] != w[1]));
    let st = op_code(&both, "stagger");
    let mut logged: Vec<(i32, i32, i64)> =
        rows(&both.log, KIND_COMPUTE, st).map(|i| (both.log.rank[i], both.log.iteration[i], both.log.end_ns[i] - both.log.start_ns[i])).collect();
    logged.sort();
    let want: Vec<(i32, i32, i64)> =
        (0..3).flat_map(|w| (0..3).map(move |it| (w, it))).map(|(w, it)| (w as i32, it, stagger_ns(&s, w, it) as i64)).filter(|x| x.2 > 0).collect();
    assert_eq!(logged, want);
}

#[test]
fn same_seed_gives_an_identical_log() {
    let extra = r#", "jitter": 0.3, "stagger_ns": 4000, "stagger": "random", "ps_split": true, "chunk_bytes": 700, "distribution": "block""#;
    let a = run(&spec(extra));
    let b = run(&spec(extra));
    assert_eq!(a.log.start_ns, b.log.start_ns);
    assert_eq!(a.log.end_ns, b.log.end_ns);
    assert_eq!(a.log.deps, b.log.deps);
    assert_eq!(a.makespan, b.makespan);
    let async_extra = r#", "jitter": 0.3, "asynchronous": true, "staleness": 1"#;
    assert_eq!(run(&spec(async_extra)).log.end_ns, run(&spec(async_extra)).log.end_ns);
}

#[test]
fn ps_variants_are_refused_where_they_do_not_apply() {
    assert!(ddlsim_core::lower::training::build_graph(&spec(r#", "staleness": 1"#)).is_err());
    assert!(ddlsim_core::lower::training::build_graph(&spec(r#", "asynchronous": true, "distribution": "block""#)).is_err());
}
