//! Engine time with and without a progress hook, on a training description:
//! `cargo run --release --example hook_overhead -- training.json network.json [runs]`.
use std::time::Instant;

use ddlsim_core::lower::training::build_graph;
use ddlsim_core::{run_graph, run_graph_with_hook, NetworkSpec, TraceDetail, TrainingSpec};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let spec = TrainingSpec::from_json(&std::fs::read_to_string(&args[1]).unwrap()).unwrap();
    let net: NetworkSpec = serde_json::from_str(&std::fs::read_to_string(&args[2]).unwrap()).unwrap();
    let runs: usize = args.get(3).map_or(5, |r| r.parse().unwrap());
    let graph = build_graph(&spec).unwrap();
    let (mut plain, mut hooked) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let t = Instant::now();
        let out = run_graph(&graph, &net, TraceDetail::Step).unwrap();
        plain.push(t.elapsed().as_secs_f64());
        let mut calls = 0u64;
        let mut hook = |_: &ddlsim_core::Progress| {
            calls += 1;
            true
        };
        let t = Instant::now();
        let out2 = run_graph_with_hook(&graph, &net, TraceDetail::Step, Some(&mut hook)).unwrap();
        hooked.push(t.elapsed().as_secs_f64());
        assert_eq!(out.events, out2.events);
        eprintln!("events {} hook calls {}", out.events, calls);
    }
    plain.sort_by(|a, b| a.partial_cmp(b).unwrap());
    hooked.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("median engine s: no hook {:.4}, hook {:.4}", plain[runs / 2], hooked[runs / 2]);
}
