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

// ---------------------------------------------------------------------------
// Helpers: transfers with start times, bands and placement, and their records.

use ddlsim_core::graph::{Kind, Op, NO_STREAM};
use ddlsim_core::network::{FlowRecord, Routing, TopologySpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[derive(Debug, Clone, Copy)]
struct Xfer {
    src: u32,
    dst: u32,
    bytes: u64,
    start: u64,
    band: u8,
}

/// Runs the transfers (each started at its `start` by a compute op of that
/// length) and returns their flow records in transfer order.
fn run_transfers(xfers: &[Xfer], host_of_rank: &[u32], network: &NetworkSpec) -> Vec<FlowRecord> {
    let mut g = Graph::new();
    g.host_of_rank = host_of_rank.to_vec();
    let wait = g.op_name("wait");
    for (i, x) in xfers.iter().enumerate() {
        let mut deps = vec![];
        if x.start > 0 {
            let mut w = Op::new(Kind::Compute, wait, x.src);
            w.duration = x.start;
            w.stream = NO_STREAM;
            deps.push(g.add(w, &[]));
        }
        let mut op = transfer(&mut g, x.src, x.dst, x.bytes);
        op.band = x.band;
        op.tenant = i as u32;
        g.add(op, &deps);
    }
    let mut network = network.clone();
    network.record_flows = true;
    let out = run_graph(&g, &network, TraceDetail::Step).unwrap();
    assert_eq!(out.flows.len(), xfers.len(), "one flow record per transfer");
    let mut flows = out.flows.clone();
    flows.sort_by_key(|f| f.tenant);
    for (f, x) in flows.iter().zip(xfers) {
        assert_eq!((f.src, f.dst, f.bytes, f.band, f.start), (x.src, x.dst, x.bytes, x.band, x.start), "record of {x:?}");
        assert!(f.start <= f.tx_end && f.tx_end <= f.delivered);
    }
    flows
}

fn leaf_spine(bandwidth_bps: f64, latency_ns: u64, hosts_per_leaf: u32, spines: u32, oversubscription: f64, routing: Routing) -> NetworkSpec {
    let mut n = net(Fidelity::Flow, bandwidth_bps, latency_ns);
    n.topology = TopologySpec::LeafSpine { hosts_per_leaf, spines, oversubscription, routing };
    n
}

// ---------------------------------------------------------------------------
// (a) An independent fluid-model oracle.
//
// Written from the semantics alone, per flow (no classes, no components, no
// fast paths): rates are recomputed from scratch at every event by
// strict-priority progressive filling; events are at whole ns; a flow ends
// at the first whole ns at which its remaining bytes reach zero (ceil of the
// crossing, float noise of 1e-9 of its size forgiven) and keeps its share
// until then.

/// SplitMix64 finaliser, as the topology documents for ECMP.
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A route: (link, fraction of the flow's rate it carries) per link.
type Route = Vec<(usize, f64)>;

struct OracleNet {
    caps: Vec<f64>,
    /// per (src host, dst host)
    route: Box<dyn Fn(u32, u32) -> Route>,
}

/// The oracle's network for ranks placed on hosts: a same-host transfer
/// takes the source rank's egress port and the destination rank's ingress
/// port when there is an intra-host bandwidth, else the host's own route
/// (uplink, downlink).
fn oracle_net(spec: &NetworkSpec, placement: &[u32]) -> OracleNet {
    let hosts = placement.iter().max().unwrap() + 1;
    let by_host = oracle_host_net(spec, hosts);
    let Some(ibw) = spec.intra_host_bandwidth_bps else {
        let placement = placement.to_vec();
        return OracleNet { caps: by_host.caps, route: Box::new(move |a, b| (by_host.route)(placement[a as usize], placement[b as usize])) };
    };
    let (base, ranks) = (by_host.caps.len(), placement.len());
    let mut caps = by_host.caps.clone();
    caps.extend(std::iter::repeat_n(ibw / 8e9, 2 * ranks));
    let placement = placement.to_vec();
    let route = move |a: u32, b: u32| {
        let (ha, hb) = (placement[a as usize], placement[b as usize]);
        if ha == hb {
            vec![(base + a as usize, 1.0), (base + ranks + b as usize, 1.0)]
        } else {
            (by_host.route)(ha, hb)
        }
    };
    OracleNet { caps, route: Box::new(route) }
}

fn oracle_host_net(spec: &NetworkSpec, hosts: u32) -> OracleNet {
    let host_cap = spec.bandwidth_bps / 8e9;
    let h = hosts as usize;
    match spec.topology {
        TopologySpec::Star => OracleNet { caps: vec![host_cap; 2 * h], route: Box::new(move |a, b| vec![(a as usize, 1.0), (h + b as usize, 1.0)]) },
        TopologySpec::LeafSpine { hosts_per_leaf, spines, oversubscription, routing } => {
            let leaves = hosts.div_ceil(hosts_per_leaf) as usize;
            let s = spines as usize;
            let fabric = host_cap * hosts_per_leaf as f64 / (spines as f64 * oversubscription);
            let mut caps = vec![host_cap; 2 * h];
            caps.extend(std::iter::repeat_n(fabric, 2 * leaves * s));
            // leaf -> spine: 2h + leaf*s + spine; spine -> leaf: 2h + leaves*s + leaf*s + spine
            let route = move |a: u32, b: u32| {
                let (la, lb) = ((a / hosts_per_leaf) as usize, (b / hosts_per_leaf) as usize);
                let mut r = vec![(a as usize, 1.0), (h + b as usize, 1.0)];
                if la != lb {
                    let up = |sp: usize| 2 * h + la * s + sp;
                    let down = |sp: usize| 2 * h + leaves * s + lb * s + sp;
                    match routing {
                        Routing::Ecmp => {
                            let sp = (splitmix(((a as u64) << 32) | b as u64) % spines as u64) as usize;
                            r.push((up(sp), 1.0));
                            r.push((down(sp), 1.0));
                        }
                        Routing::Spray => {
                            for sp in 0..s {
                                r.push((up(sp), 1.0 / s as f64));
                                r.push((down(sp), 1.0 / s as f64));
                            }
                        }
                    }
                }
                r
            };
            OracleNet { caps, route: Box::new(route) }
        }
    }
}

/// Strict-priority max-min rates of `flows` (route, band), from scratch.
fn oracle_rates(caps: &[f64], flows: &[(Route, u8)]) -> Vec<f64> {
    let mut rem = caps.to_vec();
    let mut rate = vec![0.0; flows.len()];
    let max_band = flows.iter().map(|f| f.1).max().unwrap_or(0);
    for band in 0..=max_band {
        let mut open: Vec<usize> = (0..flows.len()).filter(|&f| flows[f].1 == band).collect();
        while !open.is_empty() {
            // the most constrained link among those the open flows use
            let mut best: Option<(f64, usize)> = None;
            for l in 0..caps.len() {
                let users: f64 = open.iter().map(|&f| flows[f].0.iter().filter(|e| e.0 == l).map(|e| e.1).sum::<f64>()).sum();
                if users > 0.0 {
                    let left = if rem[l] <= caps[l] * 1e-9 { 0.0 } else { rem[l] };
                    let share = left / users;
                    if best.is_none_or(|(s, _)| share < s) {
                        best = Some((share, l));
                    }
                }
            }
            let (share, link) = best.expect("every flow crosses a link");
            let (fixed, still): (Vec<usize>, Vec<usize>) = open.iter().partition(|&&f| flows[f].0.iter().any(|e| e.0 == link));
            for f in fixed {
                rate[f] = share;
                for &(l, frac) in &flows[f].0 {
                    rem[l] -= share * frac;
                }
            }
            open = still;
        }
    }
    rate
}

/// Completion (end of transmission) of each transfer, by the oracle.
fn oracle_completions(xfers: &[Xfer], net: &OracleNet) -> Vec<u64> {
    let n = xfers.len();
    let mut left: Vec<f64> = xfers.iter().map(|x| x.bytes as f64).collect();
    let mut rate = vec![0.0; n];
    let mut due = vec![u64::MAX; n];
    let mut end = vec![u64::MAX; n];
    let mut active: Vec<usize> = Vec::new();
    let mut t = 0u64;
    loop {
        let next_start = (0..n).filter(|&i| end[i] == u64::MAX && !active.contains(&i) && xfers[i].start >= t).map(|i| xfers[i].start).min();
        let next_due = active.iter().map(|&i| due[i]).min();
        let Some(next) = [next_start, next_due].into_iter().flatten().min() else { break };
        for &i in &active {
            left[i] -= rate[i] * (next - t) as f64;
        }
        t = next;
        active.retain(|&i| {
            if due[i] <= t {
                end[i] = t;
                false
            } else {
                true
            }
        });
        for i in 0..n {
            if xfers[i].start == t && end[i] == u64::MAX && !active.contains(&i) {
                active.push(i);
            }
        }
        let flows: Vec<(Route, u8)> = active.iter().map(|&i| ((net.route)(xfers[i].src, xfers[i].dst), xfers[i].band)).collect();
        let r = oracle_rates(&net.caps, &flows);
        for (k, &i) in active.iter().enumerate() {
            rate[i] = r[k];
            due[i] = if r[k] > 0.0 {
                let x = left[i].max(0.0) / r[k];
                let whole = x.floor();
                t + if left[i] - whole * r[k] <= 1e-9 * xfers[i].bytes as f64 { whole as u64 } else { whole as u64 + 1 }
            } else {
                u64::MAX
            };
        }
    }
    end
}

#[test]
fn flow_model_matches_an_independent_fluid_oracle() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed_0005);
    let (mut checked, mut off_by_one, mut shared) = (0, 0, 0);
    for case in 0..200 {
        let (mut spec, hosts) = match case % 3 {
            0 => (net(Fidelity::Flow, [8e9, 10e9, 25e9][rng.gen_range(0..3)], rng.gen_range(0..500)), rng.gen_range(2..7)),
            k => {
                let per_leaf = rng.gen_range(1..4);
                let routing = if k == 1 { Routing::Ecmp } else { Routing::Spray };
                let spec = leaf_spine([8e9, 10e9, 40e9][rng.gen_range(0..3)], rng.gen_range(0..500), per_leaf, rng.gen_range(1..5), [1.0, 1.5, 2.0, 3.0][rng.gen_range(0..4)], routing);
                (spec, rng.gen_range(per_leaf + 1..=3 * per_leaf + 1))
            }
        };
        // every fourth case places 1 to 3 ranks per host, with or without an intra-host fabric
        let per_host = if case % 4 == 3 { rng.gen_range(1..4) } else { 1 };
        if per_host > 1 && rng.gen_bool(0.7) {
            spec.intra_host_bandwidth_bps = Some([16e9, 100e9][rng.gen_range(0..2)]);
            spec.intra_host_latency_ns = rng.gen_range(0..100);
        }
        let placement: Vec<u32> = (0..hosts * per_host).map(|r| r / per_host).collect();
        let ranks = placement.len() as u32;
        let count = rng.gen_range(2..10);
        let xfers: Vec<Xfer> = (0..count)
            .map(|_| {
                let src = rng.gen_range(0..ranks);
                let dst = (src + rng.gen_range(1..ranks)) % ranks;
                let bytes = if rng.gen_bool(0.3) { 1000 * rng.gen_range(1..20) } else { rng.gen_range(1..20_000) };
                Xfer { src, dst, bytes, start: if rng.gen_bool(0.3) { 0 } else { rng.gen_range(0..20_000) }, band: rng.gen_range(0..3) }
            })
            .collect();
        let flows = run_transfers(&xfers, &placement, &spec);
        let oracle = oracle_completions(&xfers, &oracle_net(&spec, &placement));
        // a transfer that took longer than alone on an idle network shared something
        let idle = |x: &Xfer| oracle_completions(&[Xfer { start: 0, ..*x }], &oracle_net(&spec, &placement))[0];
        shared += xfers.iter().zip(&oracle).filter(|(x, &o)| o - x.start > idle(x)).count();
        for (i, (f, &o)) in flows.iter().zip(&oracle).enumerate() {
            let d = f.tx_end.abs_diff(o);
            off_by_one += d as usize;
            assert!(d <= 1, "case {case} ({:?}, {placement:?}) transfer {i} {:?}: model {} oracle {o}\n{xfers:?}", spec.topology, xfers[i], f.tx_end);
            checked += 1;
        }
    }
    eprintln!("{checked} transfers, {shared} slowed by sharing, {off_by_one} off by 1 ns");
    assert!(checked > 800 && shared > checked / 3, "the cases must exercise sharing");
    // Float noise may move a rounding by one ns, rarely; a systematic
    // off-by-one is a bug.
    assert!(off_by_one * 100 <= checked, "{off_by_one} of {checked} off by one ns");
}

// ---------------------------------------------------------------------------
// (b) Cross-rack PS incast.
//
// n workers in rack 0 each push B bytes at t = 0 to a server in rack 1.
// Every flow crosses its worker's uplink, the leaf's uplinks to the spines,
// the spines' downlinks to rack 1 and the server's downlink. With spray the
// leaf's uplinks act as one link of aggregate capacity
// U = bandwidth * hosts_per_leaf / oversubscription, whatever the number of
// spines, and all n flows get min(bandwidth, U) / n (no worker uplink binds:
// n flows of one each). They all end after n B / min(bandwidth, U), rounded
// up, and arrive one path latency (2 * latency across racks) later:
//     T = 2 L + ceil(n B 8e9 / min(bw, bw hpl / os)).
// With ECMP each pair is hashed onto one spine of capacity U / S, so flows may
// pile on a spine: T_ecmp >= T.

/// ceil(n B 8e9 / min(bw, bw hpl q / p)) + 2 L for oversubscription p / q.
fn incast_closed_form(n: u64, b: u64, bw: u64, hpl: u64, (p, q): (u64, u64), lat: u64) -> u64 {
    let bits = n as u128 * b as u128 * 8_000_000_000;
    // aggregate uplink binds iff hpl / os < 1 iff hpl q < p
    let tx = if hpl * q < p { (bits * p as u128).div_ceil(bw as u128 * hpl as u128 * q as u128) } else { bits.div_ceil(bw as u128) };
    tx as u64 + 2 * lat
}

#[test]
fn cross_rack_ps_incast_with_spray_equals_the_closed_form_for_any_spine_count() {
    let (bw, lat) = (10_000_000_000u64, 1_500u64);
    for (n, hpl) in [(4u32, 4u32), (3, 5), (8, 8)] {
        for os in [(1u64, 1u64), (2, 1), (3, 1), (3, 2), (6, 1), (10, 1), (16, 1)] {
            for spines in 1..=8u32 {
                for b in [1_000_000u64, 999_983] {
                    // workers on hosts 0..n (rack 0), the server first in rack 1
                    let xfers: Vec<Xfer> = (0..n).map(|w| Xfer { src: w, dst: n, bytes: b, start: 0, band: 0 }).collect();
                    let mut placement: Vec<u32> = (0..n).collect();
                    placement.push(hpl);
                    let expected = incast_closed_form(n as u64, b, bw, hpl as u64, os, lat);
                    let spray = leaf_spine(bw as f64, lat, hpl, spines, os.0 as f64 / os.1 as f64, Routing::Spray);
                    let flows = run_transfers(&xfers, &placement, &spray);
                    let last = flows.iter().map(|f| f.delivered).max().unwrap();
                    assert_eq!(last, expected, "spray n={n} hpl={hpl} os={os:?} spines={spines} B={b}");
                    let ecmp = leaf_spine(bw as f64, lat, hpl, spines, os.0 as f64 / os.1 as f64, Routing::Ecmp);
                    let last_ecmp = run_transfers(&xfers, &placement, &ecmp).iter().map(|f| f.delivered).max().unwrap();
                    assert!(last_ecmp >= expected, "ecmp n={n} hpl={hpl} os={os:?} spines={spines}: {last_ecmp} < {expected}");
                    if spines == 1 {
                        assert_eq!(last_ecmp, expected, "one spine: ecmp is spray");
                    }
                }
            }
        }
    }
}

#[test]
fn ecmp_collisions_cost_what_the_hash_predicts() {
    // 2 workers -> server across racks, 4 spines, oversubscription 4 so a
    // spine link carries bw * hpl / (S os) = bw / 8: both pushes on one spine
    // take twice as long as on two.
    let (bw, lat, b) = (8_000_000_000u64, 0, 100_000u64);
    let spine = |a: u64, d: u64| splitmix((a << 32) | d) % 4;
    let spec = leaf_spine(bw as f64, lat, 2, 4, 4.0, Routing::Ecmp);
    let xfers = [Xfer { src: 0, dst: 2, bytes: b, start: 0, band: 0 }, Xfer { src: 1, dst: 2, bytes: b, start: 0, band: 0 }];
    let last = run_transfers(&xfers, &[0, 1, 2], &spec).iter().map(|f| f.tx_end).max().unwrap();
    let per_spine_ns = b * 8; // b bytes at 1/8 B/ns
    let expected = if spine(0, 2) == spine(1, 2) { 2 * per_spine_ns } else { per_spine_ns };
    assert_eq!(last, expected);
}

// ---------------------------------------------------------------------------
// (c) Priority bands.

#[test]
fn a_high_priority_flow_is_unaffected_by_a_low_priority_one() {
    // Star at 10 Gbit/s (1.25 B/ns). Low: host 1 -> 2, 2.5 MB from t = 0
    // (2 ms alone). High: host 0 -> 2, 1 MB from t = 1000 (0.8 ms alone).
    let lat = 700;
    let spec = net(Fidelity::Flow, 10e9, lat);
    let high = Xfer { src: 0, dst: 2, bytes: 1_000_000, start: 1_000, band: 0 };
    let low = Xfer { src: 1, dst: 2, bytes: 2_500_000, start: 0, band: 1 };
    let alone = run_transfers(&[high], &[0, 1, 2], &spec)[0];
    assert_eq!(alone.tx_end, 1_000 + 800_000);
    let both = run_transfers(&[high, low], &[0, 1, 2], &spec);
    assert_eq!((both[0].tx_end, both[0].delivered), (alone.tx_end, alone.delivered), "high priority as if alone");
    // Low is paused for all of high's 0.8 ms and then resumes.
    assert_eq!(both[1].tx_end, 2_000_000 + 800_000);
    // In one band they would have shared the downlink.
    let same = run_transfers(&[Xfer { band: 1, ..high }, low], &[0, 1, 2], &spec);
    assert!(same[0].tx_end > alone.tx_end);
    // The reverse order of arrival (high first) gives the same.
    let late_low = Xfer { start: 2_000, ..low };
    let both = run_transfers(&[high, late_low], &[0, 1, 2], &spec);
    assert_eq!(both[0].tx_end, alone.tx_end);
    assert_eq!(both[1].tx_end, 801_000 + 2_000_000);
}

#[test]
fn a_low_priority_flow_gets_what_the_high_band_leaves() {
    // Leaf-spine, 2 hosts per leaf, 1 spine, oversubscription 4: the fabric
    // link carries 2 * 1.25 / 4 = 0.625 B/ns. High: host 0 -> host 2 across
    // racks, held to 0.625 B/ns by the fabric. Low: host 3 -> host 2 in rack
    // 1 gets the 0.625 B/ns high leaves on host 2's downlink.
    let spec = leaf_spine(10e9, 0, 2, 1, 4.0, Routing::Ecmp);
    let high = Xfer { src: 0, dst: 2, bytes: 2_000_000, start: 0, band: 0 };
    let low = Xfer { src: 3, dst: 2, bytes: 500_000, start: 0, band: 2 };
    let r = run_transfers(&[high, low], &[0, 1, 2, 3], &spec);
    assert_eq!(r[0].tx_end, 3_200_000); // 2 MB at 0.625 B/ns
    assert_eq!(r[1].tx_end, 800_000); // 0.5 MB at 0.625 B/ns
    // and a middle band in between takes its share first
    let mid = Xfer { src: 1, dst: 2, bytes: 250_000, start: 0, band: 1 };
    let r = run_transfers(&[high, low, mid], &[0, 1, 2, 3], &spec);
    assert_eq!(r[0].tx_end, 3_200_000);
    // mid is cross-rack too: it gets nothing of the saturated fabric link
    // until high is done, then 0.625 B/ns
    assert_eq!(r[2].tx_end, 3_200_000 + 400_000);
    assert_eq!(r[1].tx_end, 800_000);
}

// ---------------------------------------------------------------------------
// (d) Intra-host links.

#[test]
fn same_host_transfers_use_the_intra_host_link_and_others_share_the_nic() {
    let (bw, lat, ibw, ilat) = (10_000_000_000u64, 2_000u64, 900_000_000_000u64, 300u64);
    let mut spec = net(Fidelity::Flow, bw as f64, lat);
    spec.intra_host_bandwidth_bps = Some(ibw as f64);
    spec.intra_host_latency_ns = ilat;
    let hosts = [0, 0, 0, 1];
    let b = 12_345_679u64;
    for fidelity in [Fidelity::Flow, Fidelity::Analytic] {
        spec.fidelity = fidelity;
        // 0 -> 1 on the host and 0 -> 3 off it, at once: nothing shared.
        let r = run_transfers(&[Xfer { src: 0, dst: 1, bytes: b, start: 0, band: 0 }, Xfer { src: 0, dst: 3, bytes: b, start: 0, band: 0 }], &hosts, &spec);
        assert_eq!(r[0].delivered, ceil_tx(b, ibw) + ilat, "{fidelity:?} intra");
        assert_eq!(r[1].delivered, ceil_tx(b, bw) + lat, "{fidelity:?} inter");
    }
    spec.fidelity = Fidelity::Flow;
    // Two ranks of host 0 send off the host at once: they share its NIC.
    let r = run_transfers(&[Xfer { src: 0, dst: 3, bytes: b, start: 0, band: 0 }, Xfer { src: 1, dst: 3, bytes: b, start: 0, band: 0 }], &hosts, &spec);
    assert!(r.iter().all(|f| f.delivered == ceil_tx(2 * b, bw) + lat));
    // Two ranks send to a third on their host: they share its ingress port;
    // two disjoint pairs on one host do not share anything.
    let r = run_transfers(&[Xfer { src: 0, dst: 2, bytes: b, start: 0, band: 0 }, Xfer { src: 1, dst: 2, bytes: b, start: 0, band: 0 }], &hosts, &spec);
    assert!(r.iter().all(|f| f.delivered == ceil_tx(2 * b, ibw) + ilat));
    let r = run_transfers(&[Xfer { src: 0, dst: 1, bytes: b, start: 0, band: 0 }, Xfer { src: 2, dst: 0, bytes: b, start: 0, band: 0 }], &hosts, &spec);
    assert!(r.iter().all(|f| f.delivered == ceil_tx(b, ibw) + ilat));
}

#[test]
fn without_an_intra_host_bandwidth_same_host_transfers_hairpin_through_the_nic() {
    let (bw, lat) = (10_000_000_000u64, 2_000u64);
    let spec = net(Fidelity::Flow, bw as f64, lat);
    let hosts = [0, 0, 1];
    let b = 1_000_001u64;
    let r = run_transfers(&[Xfer { src: 0, dst: 1, bytes: b, start: 0, band: 0 }], &hosts, &spec);
    assert_eq!(r[0].delivered, ceil_tx(b, bw) + lat);
    // ... and share the host's uplink with its traffic to other hosts.
    let r = run_transfers(&[Xfer { src: 0, dst: 1, bytes: b, start: 0, band: 0 }, Xfer { src: 1, dst: 2, bytes: b, start: 0, band: 0 }], &hosts, &spec);
    assert!(r.iter().all(|f| f.delivered == ceil_tx(2 * b, bw) + lat), "{r:?}");
}

// ---------------------------------------------------------------------------
// Flow records.

#[test]
fn both_models_record_one_flow_per_transfer_only_when_asked() {
    for fidelity in [Fidelity::Flow, Fidelity::Analytic] {
        let xfers = [Xfer { src: 0, dst: 1, bytes: 5_000, start: 10, band: 2 }, Xfer { src: 1, dst: 0, bytes: 7, start: 0, band: 0 }];
        let spec = net(fidelity, 8e9, 100);
        let r = run_transfers(&xfers, &[0, 1], &spec);
        assert_eq!((r[0].tx_end, r[0].delivered), (5_010, 5_110));
        assert_eq!((r[1].tx_end, r[1].delivered), (7, 107));
        assert_ne!(r[0].message, r[1].message);
        let mut g = Graph::new();
        let op = transfer(&mut g, 0, 1, 10);
        g.add(op, &[]);
        assert!(run_graph(&g, &spec, TraceDetail::Step).unwrap().flows.is_empty(), "record_flows is off by default");
    }
}

#[test]
fn a_transfer_past_the_clock_is_an_error_not_a_panic() {
    for fidelity in [Fidelity::Flow, Fidelity::Analytic] {
        let mut g = Graph::new();
        let op = transfer(&mut g, 0, 1, u64::MAX);
        g.add(op, &[]);
        let err = run_graph(&g, &net(fidelity, 1.0, 0), TraceDetail::Step).err().expect("refused");
        assert!(err.contains("146 years"), "{fidelity:?}: {err}");
        assert_eq!(err.kind, ddlsim_core::ErrorKind::OutOfRange, "{fidelity:?}: a transfer past the clock is the input's numbers, not a bug");
    }
}

#[test]
fn the_model_exposes_switches_and_routes_name_them() {
    use ddlsim_core::network::{build_network, SwitchKind};
    let spec = leaf_spine(10e9, 1000, 2, 3, 1.0, Routing::Spray);
    let model = build_network(&spec, &[0, 1, 2, 3]).unwrap();
    let topo = model.topology();
    let kinds: Vec<SwitchKind> = topo.switches().iter().map(|s| s.kind).collect();
    assert_eq!(kinds, [SwitchKind::Leaf, SwitchKind::Leaf, SwitchKind::Spine, SwitchKind::Spine, SwitchKind::Spine]);
    assert_eq!(topo.route(0, 3).switches(), &[0, 2, 3, 4, 1]);
    assert_eq!(topo.route(0, 1).switches(), &[0]);
    // every link of the route attaches to a switch the route crosses
    for &l in topo.route(0, 3).links() {
        assert!(topo.route(0, 3).switches().iter().any(|&s| topo.switches()[s as usize].links.contains(&l)));
    }
}

#[test]
fn analytic_cross_rack_time_uses_the_route_bottleneck() {
    // One transfer across racks, alone: with spray its bottleneck is
    // min(bw, bw hpl / os) (the leaf's aggregate uplink); with ECMP one spine
    // link, min(bw, bw hpl / (S os)). Latency 2 L either way.
    let (bw, lat, b, hpl) = (10_000_000_000u64, 800u64, 3_000_001u64, 4u32);
    for spines in [1u32, 2, 3, 5] {
        for (p, q) in [(1u64, 1u64), (2, 1), (8, 1), (3, 2)] {
            for routing in [Routing::Spray, Routing::Ecmp] {
                let mut spec = leaf_spine(bw as f64, lat, hpl, spines, p as f64 / q as f64, routing);
                spec.fidelity = Fidelity::Analytic;
                let r = run_transfers(&[Xfer { src: 0, dst: 1, bytes: b, start: 0, band: 0 }], &[0, hpl], &spec);
                // bottleneck in bit/s = bw * hpl * q / (p * s) with s = 1 (spray) or S (ecmp), capped at bw
                let s = if routing == Routing::Spray { 1 } else { spines as u64 };
                let (num, den) = (bw as u128 * hpl as u128 * q as u128, p as u128 * s as u128);
                let bits = b as u128 * 8_000_000_000;
                let tx = if num < bw as u128 * den { (bits * den).div_ceil(num) } else { bits.div_ceil(bw as u128) };
                assert_eq!(r[0].delivered, tx as u64 + 2 * lat, "{routing:?} S={spines} os={p}/{q}");
            }
        }
    }
}

#[test]
fn analytic_links_serve_transfers_one_after_another() {
    // Incast: N senders push M bytes each to rank 0 at t = 0 at 8 Gbit/s
    // (1 B/ns). Rank 0's downlink carries them one after the other, in the
    // order they were started: the k-th arrives at k M + latency, the last
    // at N M + latency (the flow model's closed form for the last one too).
    let (m, lat) = (1_000_000u64, 700u64);
    for n in [1u64, 2, 5, 8] {
        let mut g = Graph::new();
        for s in 1..=n {
            let op = transfer(&mut g, s as u32, 0, m);
            g.add(op, &[]);
        }
        let expected: Vec<u64> = (1..=n).map(|k| k * m + lat).collect();
        assert_eq!(recv_ends(&g, &net(Fidelity::Analytic, 8e9, lat)), expected, "incast of {n}");
        assert_eq!(*recv_ends(&g, &net(Fidelity::Flow, 8e9, lat)).last().unwrap(), n * m + lat, "flow, incast of {n}");
    }
    // One sender, three receivers: its uplink serialises them the same way.
    let mut g = Graph::new();
    for d in 1..=3u32 {
        let op = transfer(&mut g, 0, d, m);
        g.add(op, &[]);
    }
    assert_eq!(recv_ends(&g, &net(Fidelity::Analytic, 8e9, lat)), vec![m + lat, 2 * m + lat, 3 * m + lat]);
    // Disjoint links do not wait for each other: 0 -> 1 and 2 -> 3 both take M + latency.
    let mut g = Graph::new();
    for (s, d) in [(0u32, 1u32), (2, 3)] {
        let op = transfer(&mut g, s, d, m);
        g.add(op, &[]);
    }
    assert_eq!(recv_ends(&g, &net(Fidelity::Analytic, 8e9, lat)), vec![m + lat, m + lat]);
}

#[test]
fn back_to_back_transfers_of_repeated_and_changing_sizes_on_one_route_take_their_own_times() {
    // The models reuse the transmission time last computed for a route (a
    // class at flow level) and a size: a chain 0 -> 1, each transfer waiting
    // for the previous one, with sizes that repeat, alternate, go to 0 and
    // back, must still end at prev + ceil(bytes * 8e9 / bps) + latency each.
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let pool = [0u64, 1, 999, 1000, 1001, 4_000_000, 4_000_001, 123_456_789];
    let sizes: Vec<u64> = (0..200).map(|i| if i % 5 == 0 { pool[i % pool.len()] } else { pool[(next() % pool.len() as u64) as usize] }).collect();
    let (bps, latency) = (7_000_000_000u64, 11);
    for fidelity in [Fidelity::Analytic, Fidelity::Flow] {
        let mut g = Graph::new();
        let mut prev = None;
        for &bytes in &sizes {
            let op = transfer(&mut g, 0, 1, bytes);
            prev = Some(g.add(op, prev.as_slice()));
        }
        let mut expected = Vec::new();
        let mut t = 0;
        for &bytes in &sizes {
            t += ceil_tx(bytes, bps) + latency;
            expected.push(t);
        }
        assert_eq!(recv_ends(&g, &net(fidelity, bps as f64, latency)), expected, "{fidelity:?}");
    }
}
