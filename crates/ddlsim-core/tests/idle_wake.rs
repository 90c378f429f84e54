//! Compute after a wait (`idle`, `lower::idle_wake`): an op after an idle of t on a stream with a known curve
//! takes exactly d r(t) / r(t_c); a training graph scales each worker iteration's forward and backward by the idle
//! before it, and is unchanged without curves. Closed forms derived by hand.

mod common;

use common::*;
use ddlsim_core::graph::{Graph, IdleCurve, IdleScaled, PolicyKind};
use ddlsim_core::log::KIND_COMPUTE;
use ddlsim_core::lower::idle_wake::IdleWake;
use ddlsim_core::lower::training::{GroupSpec, LayerSpec, SyncSpec, TrainingSpec, AlgorithmName};
use ddlsim_core::network::Fidelity;
use ddlsim_core::{run_graph, simulate_training, TraceDetail};

/// r: 1 at 0, 1.5 at 10 us, 2 at 30 us; flat outside.
fn curve() -> IdleCurve {
    IdleCurve { points: vec![(0, 1.0), (10_000, 1.5), (30_000, 2.0)] }
}

/// Stream 0: op A (2 us), then op B released at `release` (its idle: release - 2 us), then op C right after B;
/// B and C scaled by the curve after the idle from A's end to B's start, captured after 20 us.
fn graph(release: u64, scaled: bool) -> Graph {
    let mut g = Graph::new();
    g.host_of_rank = vec![0];
    let s = g.new_stream(0, "compute", PolicyKind::Fifo);
    let a = compute(&mut g, 0, 2_000, s);
    let a = g.add(a, &[]);
    let b = compute(&mut g, 0, 7_000, s);
    let b = g.add_released(b, &[a], release);
    let c = compute(&mut g, 0, 3_500, s);
    let c = g.add(c, &[b]);
    if scaled {
        g.idle_curves.push(curve());
        for op in [b, c] {
            g.idle_scaled.push(IdleScaled { op, curve: 0, after: a, until: b, captured_ns: 20_000 });
        }
    }
    g
}

fn times(g: &Graph) -> Vec<(i64, i64)> {
    let out = run_graph(g, &net(Fidelity::Flow, 1e9, 0), TraceDetail::Collective).unwrap();
    (0..3).map(|id| { let i = row_of(&out.log, id); (out.log.start_ns[i], out.log.end_ns[i]) }).collect()
}

#[test]
fn an_op_after_an_idle_of_t_takes_d_r_t_over_r_tc() {
    // idle 5 us: r = 1.25; captured 20 us: r = 1.75; B 7 us -> 5 us, C 3.5 us -> 2.5 us
    let t = times(&graph(7_000, true));
    assert_eq!(t[1], (7_000, 12_000));
    assert_eq!(t[2], (12_000, 14_500));
    // idle 48 us: flat past the last point, r = 2; 7 us x 2 / 1.75 = 8 us, 3.5 us x 2 / 1.75 = 4 us
    let t = times(&graph(50_000, true));
    assert_eq!(t[1], (50_000, 58_000));
    assert_eq!(t[2], (58_000, 62_000));
    // the captured idle itself (20 us): unchanged
    let t = times(&graph(22_000, true));
    assert_eq!(t[1], (22_000, 29_000));
    assert_eq!(t[2], (29_000, 32_500));
}

#[test]
fn the_curve_is_linear_between_points_and_flat_outside() {
    let c = curve();
    assert_eq!(c.ratio(0), 1.0);
    assert_eq!(c.ratio(5_000), 1.25);
    assert_eq!(c.ratio(20_000), 1.75);
    assert_eq!(c.ratio(1_000_000), 2.0);
    let late = IdleCurve { points: vec![(1_000, 1.2), (2_000, 1.4)] };
    assert_eq!(late.ratio(0), 1.2);
    assert_eq!(late.scale(1_000, 1_500, 2_000), 929); // 1000 x 1.3 / 1.4 = 928.57
}

fn refusal(g: &Graph) -> String {
    match g.check() {
        Err(e) => e,
        Ok(()) => panic!("accepted"),
    }
}

#[test]
fn bad_idle_scalings_are_refused() {
    let mut g = graph(7_000, true);
    g.idle_curves[0].points[1].0 = 0;
    assert!(refusal(&g).contains("strictly ascending"));
    let mut g = graph(7_000, true);
    g.idle_scaled[0].curve = 3;
    assert!(refusal(&g).contains("does not exist"));
    let mut g = graph(7_000, true);
    g.idle_scaled[0].until = 2; // after the op itself
    assert!(refusal(&g).contains("in that"));
    let mut g = graph(7_000, true);
    g.idle_scaled.push(g.idle_scaled[0]);
    assert!(refusal(&g).contains("two idle scalings"));
}

/// Two workers, one layer (forward f, backward b), one all-reduce of `bytes`, `iterations`.
fn ring(idle: IdleWake) -> TrainingSpec {
    let layers = vec![LayerSpec { fwd_ns: 3_000, bwd_ns: 5_000 }];
    let groups = vec![GroupSpec { layers: vec![0], tensor: 0, bytes: 1_000_000, server: 0, update_ns: 0 }];
    TrainingSpec { iterations: 3, idle_wake: idle, ..TrainingSpec::new(2, SyncSpec::Allreduce { algorithm: AlgorithmName::Ring }, layers, groups) }
}

#[test]
fn a_training_iteration_after_the_all_reduce_wait_is_scaled_by_that_wait() {
    // 1 MB ring all-reduce of 2 ranks at 1 Gbit/s, no latency: 2 steps of 500 kB = 2 x 4 ms = 8 ms; the compute
    // stream idles from the backward's end to the all-reduce's end: 8 ms. Curves: forward 1 -> 2 over 0-16 ms
    // (r(8 ms) = 1.5), backward 3 flat; captured after 4 ms: forward r = 1.25, backward 3.
    let idle = IdleWake {
        curves: vec![vec![(0, 1.0), (16_000_000, 2.0)], vec![(0, 3.0)]],
        layers: vec![[0, 1]],
        captured_ns: 4_000_000,
    };
    let network = net(Fidelity::Analytic, 1e9, 0);
    let plain = simulate_training(&ring(IdleWake::default()), &network, TraceDetail::Collective).unwrap();
    let out = simulate_training(&ring(idle), &network, TraceDetail::Collective).unwrap();
    let compute: Vec<usize> = (0..out.log.len()).filter(|&i| out.log.kind[i] == KIND_COMPUTE).collect();
    let mut checked = 0;
    for &i in &compute {
        let d = out.log.end_ns[i] - out.log.start_ns[i];
        let forward = out.op_names[out.log.op[i] as usize] == "forward";
        let want = match (out.log.iteration[i], forward) {
            (0, true) => 3_000,
            (0, false) => 5_000,
            (_, true) => 3_600, // 3 us x 1.5 / 1.25
            (_, false) => 5_000, // 5 us x 3 / 3
        };
        assert_eq!(d, want, "row {i}");
        checked += 1;
    }
    assert_eq!(checked, 12);
    // the idle before iteration 1: backward ends at 8 us, all-reduce 8 ms; iteration 1's forward then starts
    let i = compute.iter().copied().find(|&i| out.log.iteration[i] == 1 && out.log.rank[i] == 0).unwrap();
    assert_eq!(out.log.start_ns[i], 8_000 + 8_000_000);
    // unscaled: every forward 3 us
    assert!((0..plain.log.len()).filter(|&i| plain.log.kind[i] == KIND_COMPUTE)
        .all(|i| plain.log.end_ns[i] - plain.log.start_ns[i] == if plain.op_names[plain.log.op[i] as usize] == "forward" { 3_000 } else { 5_000 }));
}
