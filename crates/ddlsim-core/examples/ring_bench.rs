//! Engine timing of one ResNet-50 ring iteration on the flow-level star
//! (the Python benchmark's case without Python): one group per tensor,
//! 10 Gbit/s, 10 us.
//!
//!     cargo run --release -p ddlsim-core --example ring_bench -- [workers] [reps] [flow|analytic]

use std::time::Instant;

use ddlsim_core::lower::training::{AlgorithmName, GroupSpec, LayerSpec, SyncSpec, TrainingSpec};
use ddlsim_core::network::{Fidelity, NetworkSpec};
use ddlsim_core::{simulate_training, TraceDetail};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let workers: u32 = args.get(1).map_or(256, |a| a.parse().expect("workers"));
    let reps: u32 = args.get(2).map_or(3, |a| a.parse().expect("reps"));
    let fidelity = match args.get(3).map_or("flow", |a| a.as_str()) {
        "flow" => Fidelity::Flow,
        "analytic" => Fidelity::Analytic,
        other => panic!("fidelity must be flow or analytic, got {other}"),
    };
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../python/ddlsim/data/models/resnet50.json");
    let model: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).expect("model file")).expect("json");
    let mut layers = Vec::new();
    let mut groups = Vec::new();
    let mut tensor = 0;
    for (i, l) in model["layers"].as_array().expect("layers").iter().enumerate() {
        // 10 TFLOP/s
        let fwd = l["fwd_flops"].as_f64().unwrap_or(0.0) / 1e4;
        let bwd = l["bwd_flops"].as_f64().unwrap_or(0.0) / 1e4;
        layers.push(LayerSpec { fwd_ns: fwd as u64, bwd_ns: bwd as u64 });
        for t in l["tensors"].as_array().into_iter().flatten() {
            let bytes = t["elements"].as_u64().expect("elements") * 4;
            groups.push(GroupSpec { layers: vec![i as u32], tensor, bytes, server: 0, update_ns: 0 });
            tensor += 1;
        }
    }
    let spec = TrainingSpec { seed: 1, ..TrainingSpec::new(workers, SyncSpec::Allreduce { algorithm: AlgorithmName::Ring }, layers, groups) };
    let net = NetworkSpec::star(fidelity, 10e9, 10_000);
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let t0 = Instant::now();
        let out = simulate_training(&spec, &net, TraceDetail::Collective).expect("run");
        let dt = t0.elapsed().as_secs_f64();
        best = best.min(dt);
        println!("workers {workers}: {dt:.3} s, makespan {} ns, events {}, transfers {}, recomputations {}", out.makespan, out.events, out.transfers, out.recomputations);
    }
    println!("best {best:.3} s");
}
