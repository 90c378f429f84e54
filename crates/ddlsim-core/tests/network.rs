//! Network models against closed forms and an independent fluid-model oracle.

mod common;

use common::*;
use ddlsim_core::graph::Graph;
use ddlsim_core::log::KIND_RECV;
use ddlsim_core::network::{Fidelity, NetworkSpec};
use ddlsim_core::{run_graph, TraceDetail};

/// Recv-row end of each transfer op, in op order.
fn recv_ends(g: &Graph, network: &NetworkSpec) -> Vec<u64> {
    let out = run_graph(g, network, TraceDetail::Step).unwrap();
    let mut ends: Vec<(i64, u64)> = (0..out.log.len())
        .filter(|&i| out.log.kind[i] == KIND_RECV)
        .map(|i| (out.log.deps_of(i)[0], out.log.end_ns[i] as u64))
        .collect();
    ends.sort();
    ends.into_iter().map(|(_, e)| e).collect()
}

/// ceil(bytes * 8e9 / bps) computed on paper, for integral bps.
fn ceil_tx(bytes: u64, bps: u64) -> u64 {
    (bytes as u128 * 8_000_000_000).div_ceil(bps as u128) as u64
}

#[test]
fn near_equal_flows_of_one_route_finish_at_their_own_times() {
    // Two flows 0 -> 1 of 100 MB and 100 MB + 100 B at 10 Gbit/s (1.25 B/ns):
    // 0.625 B/ns each until the first ends at 160 ms; the second then has
    // 100 B left at 1.25 B/ns: 80 ns more.
    for fidelity in [Fidelity::Flow] {
        let mut g = Graph::new();
        for bytes in [100_000_000u64, 100_000_100] {
            let op = transfer(&mut g, 0, 1, bytes);
            g.add(op, &[]);
        }
        assert_eq!(recv_ends(&g, &net(fidelity, 10e9, 0)), vec![160_000_000, 160_000_080]);
    }
}

#[test]
fn transmit_time_rounds_up_for_every_size() {
    let mut sizes: Vec<u64> = vec![1, 2, 3, 7, 999, 1000, 1001, 1_048_577];
    let mut b = 10u64;
    while b <= 100_000_000_000 {
        sizes.extend([b - 1, b, b + 1, b + 3]);
        b *= 10;
    }
    for bps in [10_000_000_000u64, 3_000_000_000, 7_000_000_000, 25_000_000_000, 1_000_000_007] {
        for fidelity in [Fidelity::Analytic, Fidelity::Flow] {
            for &bytes in &sizes {
                let mut g = Graph::new();
                let op = transfer(&mut g, 0, 1, bytes);
                g.add(op, &[]);
                let got = recv_ends(&g, &net(fidelity, bps as f64, 5))[0];
                assert_eq!(got, ceil_tx(bytes, bps) + 5, "{fidelity:?} {bytes} B at {bps} bit/s");
            }
        }
    }
}
