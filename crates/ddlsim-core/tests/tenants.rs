//! Background tenants against closed forms and their own definition.

mod common;

use common::*;
use ddlsim_core::graph::Graph;
use ddlsim_core::network::{Fidelity, NetworkSpec, TenantSpec};
use ddlsim_core::{run_graph, RunOutput, TraceDetail};

fn tenant(id: u32, cdf: Vec<(f64, f64)>, rate: f64, stop_ns: Option<u64>) -> TenantSpec {
    TenantSpec { id, band: 0, seed: 7, cdf, rate_per_host: rate, pairs: None, hosts: None, start_ns: 0, stop_ns }
}

fn with(fidelity: Fidelity, hosts: u32, tenants: Vec<TenantSpec>) -> NetworkSpec {
    let mut n = net(fidelity, 10e9, 10_000);
    n.hosts = Some(hosts);
    n.tenants = tenants;
    n.record_flows = true;
    n
}

fn background(out: &RunOutput) -> Vec<&ddlsim_core::network::FlowRecord> {
    out.flows.iter().filter(|f| f.tenant > 0).collect()
}

/// A job of one 2-rank ring all-reduce of `bytes` on hosts 0 and 1.
fn job(bytes: u64) -> Graph {
    use ddlsim_core::collective::Algorithm;
    let mut g = Graph::new();
    allreduce(&mut g, Algorithm::Ring, &[0, 1], bytes, &[], &[]);
    g
}

#[test]
fn poisson_arrivals_count_and_mean_size() {
    // 8 hosts, no job, 200 flows/s per host for 5 s: 8000 flows expected;
    // a Poisson count is within 4 standard deviations (sqrt(8000) ~ 89).
    // Sizes from a 3-point CDF whose mean is 0.5 x 100 + 0.25 x 150 + 0.25 x 600 = 237.5 bytes
    // (first point, then each segment's midpoint times its mass).
    let cdf = vec![(100.0, 0.5), (200.0, 0.75), (1000.0, 1.0)];
    let out = run_graph(&Graph::new(), &with(Fidelity::Flow, 8, vec![tenant(1, cdf, 200.0, Some(5_000_000_000))]), TraceDetail::Step).unwrap();
    let flows = background(&out);
    let n = flows.len() as f64;
    assert!((n - 8000.0).abs() < 4.0 * 8000f64.sqrt(), "{n} flows");
    let mean = flows.iter().map(|f| f.bytes as f64).sum::<f64>() / n;
    // The mean's standard error: sd of the sizes (about 260 B) / sqrt(n), ~3 B.
    assert!((mean - 237.5).abs() < 12.0, "mean size {mean}");
    assert!(flows.iter().all(|f| f.src_host != f.dst_host && f.src_host < 8 && f.dst_host < 8 && f.src == u32::MAX));
    assert!(flows.iter().all(|f| f.start < 5_000_000_000));
}

#[test]
fn lone_tenant_flows_take_their_closed_form_time() {
    // One size (1 MB), hosts 2 -> 3 that run no rank, one flow per second:
    // flows never overlap, so each takes latency + 1 MB at 10 Gbit/s = 10 us + 800 us.
    let mut t = tenant(1, vec![(1_000_000.0, 1.0), (1_000_001.0, 1.0)], 1.0, Some(5_000_000_000));
    t.pairs = Some(vec![(2, 3)]);
    let out = run_graph(&Graph::new(), &with(Fidelity::Flow, 4, vec![t]), TraceDetail::Step).unwrap();
    let flows = background(&out);
    assert!(flows.len() >= 2);
    for f in flows {
        assert_eq!((f.src_host, f.dst_host, f.bytes), (2, 3, 1_000_000));
        assert_eq!(f.delivered - f.start, 810_000);
    }
}

#[test]
fn a_tenant_on_the_jobs_links_slows_the_job_and_another_tenant_changes_nothing_of_the_first() {
    // Traffic into host 1 (2 x 150 flows/s of 1.75 MB on average: 42% of its
    // downlink) slows the ring, which receives there too.
    let mut heavy = tenant(1, vec![(1_000_000.0, 0.5), (4_000_000.0, 1.0)], 150.0, None);
    heavy.pairs = Some(vec![(2, 1), (3, 1)]);
    let alone = run_graph(&job(100_000_000), &with(Fidelity::Flow, 4, vec![]), TraceDetail::Step).unwrap();
    let shared = run_graph(&job(100_000_000), &with(Fidelity::Flow, 4, vec![heavy.clone()]), TraceDetail::Step).unwrap();
    assert!(shared.makespan > alone.makespan, "{} vs {}", shared.makespan, alone.makespan);
    // Arrivals stop when the job ends: none starts after it.
    assert!(background(&shared).iter().all(|f| f.start < shared.makespan));
    // A second tenant on other hosts: the first tenant's arrivals, peers and sizes are the same.
    let mut other = tenant(2, vec![(1000.0, 0.5), (2000.0, 1.0)], 500.0, None);
    other.hosts = Some(vec![0, 2]);
    other.seed = 99;
    let both = run_graph(&job(100_000_000), &with(Fidelity::Flow, 4, vec![heavy, other]), TraceDetail::Step).unwrap();
    let key = |out: &RunOutput| {
        let mut v: Vec<_> = out.flows.iter().filter(|f| f.tenant == 1).map(|f| (f.start, f.src_host, f.dst_host, f.bytes)).collect();
        v.sort();
        v
    };
    let (a, b) = (key(&shared), key(&both));
    let common = a.len().min(b.len()) - 5;
    assert_eq!(a[..common], b[..common]);
    assert!(both.flows.iter().any(|f| f.tenant == 2));
}

#[test]
fn flows_in_flight_when_the_job_ends_are_reported_unfinished() {
    // A 10 GB tenant flow cannot finish during a 1 MB all-reduce.
    let mut big = tenant(1, vec![(1e10, 1.0), (1e10 + 1.0, 1.0)], 1e6, None);
    big.pairs = Some(vec![(2, 3)]);
    let out = run_graph(&job(1_000_000), &with(Fidelity::Packet, 4, vec![big]), TraceDetail::Step).unwrap();
    let flows = background(&out);
    assert!(!flows.is_empty() && flows.iter().all(|f| f.delivered == u64::MAX && f.tx_end == u64::MAX));
    assert!(out.flows.iter().any(|f| f.tenant == 0));
}

#[test]
fn tenants_run_at_packet_level_and_repeat_exactly() {
    let mut t = tenant(1, vec![(10_000.0, 0.5), (3_000_000.0, 1.0)], 3000.0, Some(20_000_000));
    t.band = 1;
    let spec = with(Fidelity::Packet, 6, vec![t]);
    let a = run_graph(&job(20_000_000), &spec, TraceDetail::Step).unwrap();
    let b = run_graph(&job(20_000_000), &spec, TraceDetail::Step).unwrap();
    assert_eq!(format!("{:?}", a.flows), format!("{:?}", b.flows));
    assert!(background(&a).iter().filter(|f| f.delivered != u64::MAX).count() > 10);
    assert!(a.packet.unwrap().0.packets_forwarded > 0);
}

#[test]
fn bad_tenants_are_refused_with_a_reason() {
    let cases: Vec<(TenantSpec, &str)> = vec![
        (tenant(0, vec![(1.0, 0.5), (2.0, 1.0)], 1.0, None), "tenant ids start at 1"),
        (tenant(1, vec![(1.0, 0.5)], 1.0, None), "at least two points"),
        (tenant(1, vec![(2.0, 0.5), (1.0, 1.0)], 1.0, None), "sizes must increase"),
        (tenant(1, vec![(1.0, 0.5), (2.0, 0.9)], 1.0, None), "must be 1"),
        (tenant(1, vec![(1.0, 0.5), (2.0, 1.0)], 0.0, None), "rate_per_host"),
        (TenantSpec { pairs: Some(vec![(1, 9)]), ..tenant(1, vec![(1.0, 0.5), (2.0, 1.0)], 1.0, None) }, "outside the fabric"),
    ];
    for (t, words) in cases {
        let err = run_graph(&Graph::new(), &with(Fidelity::Flow, 4, vec![t]), TraceDetail::Step).err().unwrap();
        assert!(err.to_string().contains(words), "{err} lacks {words:?}");
    }
}
