//! The packet-level model against times derived on paper.

mod common;

use common::*;
use ddlsim_core::graph::Graph;
use ddlsim_core::log::KIND_RECV;
use ddlsim_core::network::{Fidelity, Framing, NetworkSpec, PacketSpec, Transport};
use ddlsim_core::{run_graph, RunOutput, TraceDetail};

fn packet_net(bps: f64, latency_ns: u64, p: PacketSpec) -> NetworkSpec {
    let mut n = net(Fidelity::Packet, bps, latency_ns);
    n.packet = Some(p);
    n.record_flows = true;
    n
}

/// Recv-row end of each transfer op, in op order.
fn recv_ends(out: &RunOutput) -> Vec<u64> {
    let mut ends: Vec<(i64, u64)> = (0..out.log.len()).filter(|&i| out.log.kind[i] == KIND_RECV).map(|i| (out.log.deps_of(i)[0], out.log.end_ns[i] as u64)).collect();
    ends.sort();
    ends.into_iter().map(|(_, e)| e).collect()
}

fn flows(specs: &[(u32, u32, u64, u8)]) -> Graph {
    let mut g = Graph::new();
    for &(src, dst, bytes, priority) in specs {
        let mut op = transfer(&mut g, src, dst, bytes);
        op.band = priority as u8;
        g.add(op, &[]);
    }
    g
}

/// Picoseconds to serialise `wire` bytes at 10 Gbit/s.
const PS_PER_BYTE_10G: u64 = 800;

#[test]
fn one_flow_in_slow_start_matches_the_round_by_round_closed_form() {
    // 10 Gbit/s, 1 ms between hosts (500 us per link), Ethernet, MSS 1460,
    // IW 10, an ACK per segment, no loss. Derivation: a data frame takes
    // T = 1538 B x 800 ps, an ACK A = 84 B x 800 ps (a 58-byte frame padded
    // to 64, plus preamble and gap). Round k's first segment leaves at s_k;
    // its ACK is back at s_k + RTT0 with RTT0 = 2T + 2A + 2L (store and
    // forward at the switch, L = 1 ms), and each ACK releases two segments,
    // so round k + 1 (twice as large) goes out back to back from
    // s_{k+1} = s_k + RTT0 while the window stays below the path's
    // bandwidth-delay product (1280 x T < RTT0 here). With N = 2000
    // segments, rounds 0..6 carry 10 + ... + 640 = 1270 and the last round
    // the remaining 730: the last one reaches the receiver at
    // 7 RTT0 + (730 + 1) T + L.
    let p = PacketSpec::default();
    let n_segments = 2000u64;
    let bytes = n_segments * 1460;
    let out = run_graph(&flows(&[(0, 1, bytes, 0)]), &packet_net(10e9, 1_000_000, p), TraceDetail::Step).unwrap();
    let (t, a, l) = (1538 * PS_PER_BYTE_10G, 84 * PS_PER_BYTE_10G, 1_000_000_000u64);
    let rtt0 = 2 * t + 2 * a + 2 * l;
    let expected_ps = 7 * rtt0 + 731 * t + l;
    assert_eq!(recv_ends(&out), vec![expected_ps.div_ceil(1000)]);
    let totals = out.packet.unwrap().0;
    assert_eq!(totals.drops, 0);
    assert_eq!(totals.retransmits, 0);
    // Every data segment and every ACK crosses two links.
    assert_eq!(totals.packets_forwarded, 2 * n_segments + 2 * n_segments);
}

#[test]
fn a_partial_last_segment_and_ppp_framing() {
    // 25 segments' worth minus 100 bytes on PPP links (2-byte header), 10 us
    // (5 us per link): rounds 10 and 15 (the second round is cut short by
    // the data). Round 1 starts at RTT0 = 2T + 2A + 2L and its last frame
    // is the short one: it leaves the NIC at RTT0 + 14 T + T', and is then
    // forwarded by the switch in T'.
    let p = PacketSpec { framing: Framing::Ppp, ..PacketSpec::default() };
    let bytes = 25 * 1460 - 100;
    let out = run_graph(&flows(&[(0, 1, bytes, 0)]), &packet_net(10e9, 10_000, p), TraceDetail::Step).unwrap();
    let (t, a, tl, l) = (1502 * PS_PER_BYTE_10G, 42 * PS_PER_BYTE_10G, 1402 * PS_PER_BYTE_10G, 10_000_000u64);
    let rtt0 = 2 * t + 2 * a + 2 * l;
    // Round 1 is 15 segments back to back only if the NIC keeps up: 15 T < RTT0.
    assert!(15 * t < rtt0);
    let expected_ps = rtt0 + 15 * t + tl + l;
    assert_eq!(recv_ends(&out), vec![expected_ps.div_ceil(1000)]);
}

#[test]
fn strict_priority_high_band_is_unaffected_by_a_low_band_flow() {
    // Two senders into one receiver: the high band flow's completion time is
    // the same alone and with a low band flow beside it, apart from at most
    // one low-band frame in service when each high frame arrives.
    let p = PacketSpec::default();
    let spec = packet_net(10e9, 10_000, p);
    let bytes = 2_000_000;
    let alone = recv_ends(&run_graph(&flows(&[(0, 2, bytes, 0)]), &spec, TraceDetail::Step).unwrap())[0];
    let out = run_graph(&flows(&[(0, 2, bytes, 0), (1, 2, bytes, 5)]), &spec, TraceDetail::Step).unwrap();
    let both = recv_ends(&out);
    let frame_ns = (1538 * PS_PER_BYTE_10G).div_ceil(1000);
    eprintln!("high band {} vs alone {alone}, frame {frame_ns}", both[0]);
    assert!(both[0] >= alone && both[0] <= alone + frame_ns, "high band {} vs alone {alone}", both[0]);
    assert!(both[1] > both[0]);
}

#[test]
fn overflowing_band_drops_and_the_sender_recovers_every_byte() {
    // 8 senders into one port holding 20 packets: drops, retransmissions,
    // and every message still delivered whole.
    let p = PacketSpec { queue_limit: 20, rto_min_ns: 1_000_000, ..PacketSpec::default() };
    let specs: Vec<_> = (1..9).map(|s| (s, 0, 500_000u64, 0)).collect();
    let out = run_graph(&flows(&specs), &packet_net(10e9, 10_000, p), TraceDetail::Step).unwrap();
    let totals = out.packet.unwrap().0;
    assert!(totals.drops > 0 && totals.retransmits > 0, "{totals:?}");
    assert_eq!(out.flows.len(), 8);
    assert!(out.flows.iter().all(|f| f.bytes == 500_000));
    assert_eq!(out.bytes_received[0], 8 * 500_000);
    let dropped: u64 = out.flows.iter().map(|f| f.drops as u64).sum();
    assert!(dropped <= totals.drops);
}

#[test]
fn dctcp_holds_the_queue_near_k_where_newreno_fills_the_buffer() {
    let base = PacketSpec { queue_limit: 300, rto_min_ns: 1_000_000, queue_sample_ns: Some(10_000), ..PacketSpec::default() };
    let dctcp = PacketSpec { transport: Transport::Dctcp, ecn_threshold: Some(65), ..base };
    let specs: Vec<_> = (1..5).map(|s| (s, 0, 20_000_000u64, 0)).collect();
    let mean_queue = |p: PacketSpec| {
        let out = run_graph(&flows(&specs), &packet_net(10e9, 10_000, p), TraceDetail::Step).unwrap();
        let port = 1u32; // the switch's port towards host 0
        let q: Vec<u64> = out.queues.iter().filter(|s| s.port == port).map(|s| s.packets).collect();
        let peak = out.ports[port as usize].max_packets;
        (q.iter().sum::<u64>() as f64 / q.len().max(1) as f64, peak, out.packet.unwrap().0)
    };
    let (reno_mean, reno_peak, reno) = mean_queue(base);
    let (dctcp_mean, _, d) = mean_queue(dctcp);
    assert!(reno.drops > 0 && reno_peak >= 299, "newreno fills the buffer: {reno:?} peak {reno_peak}");
    assert!(d.ecn_marks > 0 && d.drops == 0, "{d:?}");
    assert!(dctcp_mean < 2.0 * 65.0 && reno_mean > dctcp_mean, "dctcp mean {dctcp_mean}, newreno mean {reno_mean}");
}

#[test]
fn same_seed_same_log() {
    let p = PacketSpec { queue_limit: 30, rto_min_ns: 1_000_000, ..PacketSpec::default() };
    let specs: Vec<_> = (1..6).map(|s| (s, 0, 300_000u64, (s % 3) as u8)).collect();
    let a = run_graph(&flows(&specs), &packet_net(10e9, 10_000, p), TraceDetail::Step).unwrap();
    let b = run_graph(&flows(&specs), &packet_net(10e9, 10_000, p), TraceDetail::Step).unwrap();
    assert_eq!(a.log.end_ns, b.log.end_ns);
    assert_eq!(format!("{:?}", a.flows), format!("{:?}", b.flows));
}

/// (share, utilisation) of two equal long flows into one port: the share is
/// the bytes the later flow had delivered when the first finished, over its
/// size (the rest it sent alone at line rate); utilisation is the wire bytes
/// of both over the port's capacity up to the last delivery.
fn two_long_flows(p: PacketSpec) -> (f64, f64) {
    let b = 200_000_000u64;
    let out = run_graph(&flows(&[(1, 0, b, 0), (2, 0, b, 0)]), &packet_net(10e9, 10_000, p), TraceDetail::Step).unwrap();
    let e = recv_ends(&out);
    let (t1, t2) = (e[0].min(e[1]) as f64, e[0].max(e[1]) as f64);
    let wire = b as f64 * 1538.0 / 1460.0;
    let rate = 1.25; // bytes per ns at 10 Gbit/s
    ((wire - (t2 - t1) * rate) / wire, 2.0 * wire / rate / t2)
}

#[test]
fn two_long_flows_share_a_bottleneck_equally_and_keep_it_busy() {
    // NewReno through a 100-packet port (data-centre RTO of 1 ms) and DCTCP
    // with K = 20: within 3% of equal shares, the port busy 98% of the time.
    let reno = PacketSpec { queue_limit: 100, rto_min_ns: 1_000_000, ..PacketSpec::default() };
    let dctcp = PacketSpec { transport: Transport::Dctcp, ecn_threshold: Some(20), ..reno };
    for (name, p) in [("newreno", reno), ("dctcp", dctcp)] {
        let (share, util) = two_long_flows(p);
        assert!(share > 0.97 && util > 0.98, "{name}: share {share:.4}, utilisation {util:.4}");
    }
}

#[test]
fn incast_collapses_as_senders_grow_and_a_fine_rto_recovers_it() {
    // A 1 MB block split over N senders into one 64-packet port
    // (Phanishayee et al.'s fixed-block incast): no timeouts for 8 and 16
    // senders, then timeouts that grow with N; with Linux's 200 ms minimum
    // RTO goodput collapses below 5% of the 8-sender goodput, and a 1 ms
    // minimum RTO (Vasudevan et al.) gives back more than ten times that.
    let run = |n: u32, rto: u64| {
        let p = PacketSpec { queue_limit: 64, rto_min_ns: rto, ..PacketSpec::default() };
        let specs: Vec<_> = (1..=n).map(|s| (s, 0, 1_000_000 / n as u64, 0)).collect();
        let out = run_graph(&flows(&specs), &packet_net(10e9, 10_000, p), TraceDetail::Step).unwrap();
        let end = *recv_ends(&out).iter().max().unwrap();
        (8e6 / end as f64, out.packet.unwrap().0.timeouts)
    };
    let (good8, t8) = run(8, 200_000_000);
    let (_, t16) = run(16, 200_000_000);
    assert_eq!((t8, t16), (0, 0));
    let mut last = 0;
    for n in [32, 48, 64] {
        let (good, timeouts) = run(n, 200_000_000);
        let (fine, _) = run(n, 1_000_000);
        assert!(timeouts > last, "{n} senders: {timeouts} timeouts after {last}");
        assert!(good < 0.05 * good8 && fine > 10.0 * good, "{n} senders: goodput {good:.3} (8 senders {good8:.3}), fine RTO {fine:.3}");
        last = timeouts;
    }
}

#[test]
fn multicast_and_spray_are_refused_with_a_reason() {
    use ddlsim_core::network::{Routing, TopologySpec};
    let mut spec = packet_net(10e9, 1000, PacketSpec::default());
    spec.topology = TopologySpec::LeafSpine { hosts_per_leaf: 2, spines: 2, oversubscription: 1.0, routing: Routing::Spray };
    let err = run_graph(&flows(&[(0, 3, 1000, 0)]), &spec, TraceDetail::Step).err().unwrap();
    assert!(err.to_string().contains("spray"), "{err}");
    let dctcp_without_k = packet_net(10e9, 1000, PacketSpec { transport: Transport::Dctcp, ..PacketSpec::default() });
    let err = run_graph(&flows(&[(0, 1, 1000, 0)]), &dctcp_without_k, TraceDetail::Step).err().unwrap();
    assert!(err.to_string().contains("ecn_threshold"), "{err}");
}

#[test]
fn leaf_spine_crossing_flows_complete_with_every_byte() {
    use ddlsim_core::network::{Routing, TopologySpec};
    // Four hosts per leaf, two spines, 2:1 oversubscribed: eight cross-leaf
    // flows squeeze through the spine links and every byte still arrives.
    let mut spec = packet_net(10e9, 2000, PacketSpec { queue_limit: 50, rto_min_ns: 1_000_000, ..PacketSpec::default() });
    spec.topology = TopologySpec::LeafSpine { hosts_per_leaf: 4, spines: 2, oversubscription: 2.0, routing: Routing::Ecmp };
    let specs: Vec<_> = (0..4).flat_map(|h| [(h, 4 + h, 3_000_000u64, 0), (4 + h, (h + 1) % 4, 3_000_000, 1)]).collect();
    let out = run_graph(&flows(&specs), &spec, TraceDetail::Step).unwrap();
    assert_eq!(out.flows.len(), 8);
    assert_eq!(out.bytes_received.iter().sum::<u64>(), 8 * 3_000_000);
    // A leaf's uplinks (20 Gbit/s in all) carry 4 x 3 MB of frames: no faster than that.
    let min_ns = (4.0 * 3_000_000.0 * 1538.0 / 1460.0 / 2.5) as u64;
    assert!(*recv_ends(&out).iter().max().unwrap() >= min_ns);
    assert!(out.ports.iter().any(|p| p.name.starts_with("leaf 0 -> spine")));
}

#[test]
fn ring_allreduce_on_an_idle_star_costs_headers_acks_and_slow_start_over_flow_level() {
    // 4 ranks, 10 Gbit/s, L = 10 us, 4 x 400 MSS bytes: each of the 2(N-1) = 6
    // steps moves a chunk of n = 400 full segments from every rank to its
    // successor. Flow level: 6 (L + c / B). Packet level, derived per step:
    // - at least n T + T + L (n frames through the sender's NIC, the last
    //   one store-and-forwarded by the switch, then propagation);
    // - at most that plus 2 n A (the NIC also carries the ACKs of the
    //   chunk it receives: n of this step's and at most n left from the
    //   step before, ahead of this step's data in the FIFO band), plus, on
    //   the first step only, slow start: the window doubles from 10 segments
    //   each RTT0 = 2T + 2A + 2L until it covers the path (2 rounds here,
    //   10 + 20 < BDP = RTT0 / T, then 40 > BDP), at most 3 RTT0.
    use ddlsim_core::collective::Algorithm;
    let (n_ranks, segs) = (4u32, 400u64);
    let chunk = segs * 1460;
    let mut g = Graph::new();
    allreduce(&mut g, Algorithm::Ring, &(0..n_ranks).collect::<Vec<_>>(), chunk * n_ranks as u64, &[], &[]);
    let l_ps = 10_000_000u64;
    let packet = run_graph(&g, &packet_net(10e9, 10_000, PacketSpec::default()), TraceDetail::Step).unwrap().makespan;
    let flow = run_graph(&g, &net(Fidelity::Flow, 10e9, 10_000), TraceDetail::Step).unwrap().makespan;
    let steps = 2 * (n_ranks as u64 - 1);
    assert_eq!(flow, steps * (10_000 + (chunk * 8).div_ceil(10)));
    let (t, a) = (1538 * PS_PER_BYTE_10G, 84 * PS_PER_BYTE_10G);
    let rtt0 = 2 * t + 2 * a + 2 * l_ps;
    let low = steps * (segs * t + t + l_ps);
    let high = low + steps * 2 * segs * a + 3 * rtt0;
    let packet_ps = packet * 1000;
    assert!(packet_ps >= low && packet_ps <= high + 1000, "packet {packet} ns outside [{}, {}] ns (flow {flow} ns)", low / 1000, high / 1000);
}

#[test]
fn connections_reused_restart_after_idle_or_open_per_message() {
    // Two 1 MB messages 0 -> 1, the second 10 ms after the first arrived
    // (idle far longer than the 1 ms RTO). A new connection per message, or
    // a reused one restarting slow start after idle, times the second
    // exactly as the first; a reused one without the restart keeps its
    // grown window and is faster.
    let fcts = |p: PacketSpec| {
        let mut g = Graph::new();
        let first = transfer(&mut g, 0, 1, 1_000_000);
        let a = g.add(first, &[]);
        let wait = compute(&mut g, 0, 10_000_000, ddlsim_core::graph::NO_STREAM);
        let w = g.add(wait, &[a]);
        let second = transfer(&mut g, 0, 1, 1_000_000);
        g.add(second, &[w]);
        let out = run_graph(&g, &packet_net(10e9, 10_000, p), TraceDetail::Step).unwrap();
        let f = &out.flows;
        (f[0].delivered - f[0].start, f[1].delivered - f[1].start)
    };
    let base = PacketSpec { rto_min_ns: 1_000_000, ..PacketSpec::default() };
    let (one, two) = fcts(PacketSpec { connection_per_message: true, ..base });
    assert_eq!(one, two);
    let (one, two) = fcts(base);
    assert_eq!(one, two);
    let (one, two) = fcts(PacketSpec { restart_after_idle: false, ..base });
    assert!(two < one, "{two} !< {one}");
}

#[test]
fn delayed_acks_halve_the_acks_of_even_rounds() {
    // 2000 segments in slow-start rounds of 10, 20, ..., 640 and a last one
    // of 730: every round is even, so with an ACK every second segment
    // there are exactly 1000 ACKs, each crossing two links.
    let p = PacketSpec { delayed_ack: true, ..PacketSpec::default() };
    let out = run_graph(&flows(&[(0, 1, 2000 * 1460, 0)]), &packet_net(10e9, 1_000_000, p), TraceDetail::Step).unwrap();
    assert_eq!(out.packet.unwrap().0.packets_forwarded, 2 * 2000 + 2 * 1000);
}
