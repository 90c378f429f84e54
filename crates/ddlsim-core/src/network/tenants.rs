//! Background tenants: other jobs' traffic on the job's fabric, as
//! open-loop flows between hosts.
//!
//! [`WithTenants`] wraps any [`NetworkModel`]: the job's transfers pass
//! through, and each tenant adds flows of its own to the same model.
//! - **Arrivals.** Every sending host of a tenant has its own Poisson process
//!   of `rate_per_host` flows per second from `start_ns` (exponential gaps,
//!   rounded to the nanosecond), until `stop_ns`, or until the job's last
//!   operation ends when there is none.
//! - **Peers.** With `pairs`, a host sends to one of its listed destinations,
//!   uniformly; without, to a uniformly random other host of `hosts`.
//! - **Sizes.** Inverse transform sampling of the CDF `(b_i, c_i)`: a
//!   uniform `u < c_0` gives `b_0`; otherwise `u` in `[c_(i-1), c_i)` gives
//!   `b_(i-1) + (u - c_(i-1)) / (c_i - c_(i-1)) (b_i - b_(i-1))`, rounded to
//!   the nearest byte (at least 1). Its mean is `c_0 b_0 + sum (c_i -
//!   c_(i-1)) (b_(i-1) + b_i) / 2`.
//! - Every draw of a (tenant, host) comes from its own random stream
//!   ([`crate::rng::Purpose::TenantFlows`]), so adding a tenant or a host
//!   never changes another's flows.
//! - Hosts that run no rank take part through one endpoint each: the model
//!   sees it as rank `ranks + host`.
//! - The run ends when the job has ended and arrivals have stopped; tenant
//!   flows still in flight are reported unfinished (`tx_end` and
//!   `delivered` at `u64::MAX`).
//!
//! Engine tokens: `u64::MAX` is this wrapper's arrival tick; every other
//! token belongs to the wrapped model.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::config::TenantSpec;
use super::packet::Totals;
use super::{Delivery, FanEnd, FlowRecord, NetworkModel, NetworkStats, Path, PortRecord, QueueSample, Scheduler, Topology, TransferRequest};
use crate::engine::{Time, MAX_TIME};
use crate::error::{Error, ErrorKind};
use crate::graph::FanKind;
use crate::rng::{stream, Purpose};

const TICK: u64 = u64::MAX;

/// None marks a tenant flow's unknown end.
const NONE: u64 = u64::MAX;

#[derive(Debug, Clone, Copy)]
enum Owner {
    Free,
    Job(u32),
    Tenant(u32),
}

struct Sender {
    tenant: u32,
    host: u32,
    /// Destination hosts (from pairs, or every other listed host).
    peers: Vec<u32>,
    rng: ChaCha8Rng,
    next: Time,
}

struct TenantFlow {
    tenant_id: u32,
    band: u8,
    src_host: u32,
    dst_host: u32,
    bytes: u64,
    start: Time,
    done: bool,
}

pub(super) struct WithTenants {
    inner: Box<dyn NetworkModel>,
    ranks: u32,
    tenants: Vec<TenantSpec>,
    senders: Vec<Sender>,
    /// (next arrival, sender index), earliest first.
    arrivals: BinaryHeap<Reverse<(Time, u32)>>,
    owners: Vec<Owner>,
    free: Vec<u32>,
    flows: Vec<TenantFlow>,
    tick_at: Option<Time>,
    job_ended: Option<Time>,
    out: Vec<Delivery>,
}

fn bad(message: String) -> Error {
    Error::new(ErrorKind::BadInput, message)
}

/// Checks a tenant's description against a fabric of `hosts` hosts.
fn check(t: &TenantSpec, hosts: u32) -> Result<(), Error> {
    let name = format!("tenant {}", t.id);
    if t.id == 0 {
        return Err(bad("tenant ids start at 1 (tenant 0 is the job)".into()));
    }
    if t.band > 7 {
        return Err(bad(format!("{name}: band {} is outside 0..7", t.band)));
    }
    if !(t.rate_per_host.is_finite() && t.rate_per_host > 0.0 && t.rate_per_host < 1e9) {
        return Err(bad(format!("{name}: rate_per_host must be a positive number of flows per second below 1e9, got {}", t.rate_per_host)));
    }
    if t.cdf.len() < 2 {
        return Err(bad(format!("{name}: the size CDF needs at least two points")));
    }
    let mut last = (0.0f64, 0.0f64);
    for (i, &(b, c)) in t.cdf.iter().enumerate() {
        if !(b.is_finite() && b >= 1.0 && b < 1e15) {
            return Err(bad(format!("{name}: CDF point {i}: size {b} must be between 1 byte and 1e15")));
        }
        if !(c.is_finite() && c > 0.0 && c <= 1.0) {
            return Err(bad(format!("{name}: CDF point {i}: cumulative fraction {c} must be in (0, 1]")));
        }
        if i > 0 && (b <= last.0 || c < last.1) {
            return Err(bad(format!("{name}: CDF point {i}: sizes must increase and fractions must not decrease")));
        }
        last = (b, c);
    }
    if last.1 != 1.0 {
        return Err(bad(format!("{name}: the CDF's last cumulative fraction must be 1, got {}", last.1)));
    }
    let check_host = |h: u32| if h < hosts { Ok(()) } else { Err(bad(format!("{name}: host {h} is outside the fabric's {hosts} hosts (set network hosts)"))) };
    if let Some(pairs) = &t.pairs {
        if pairs.is_empty() {
            return Err(bad(format!("{name}: pairs is empty")));
        }
        for &(a, b) in pairs {
            check_host(a)?;
            check_host(b)?;
            if a == b {
                return Err(bad(format!("{name}: pair ({a}, {b}) sends from a host to itself")));
            }
        }
    }
    if let Some(list) = &t.hosts {
        for &h in list {
            check_host(h)?;
        }
    }
    if let Some(stop) = t.stop_ns {
        if stop < t.start_ns {
            return Err(bad(format!("{name}: stop_ns {stop} is before start_ns {}", t.start_ns)));
        }
    }
    if t.start_ns > MAX_TIME {
        return Err(bad(format!("{name}: start_ns is far too large")));
    }
    Ok(())
}

/// A flow size drawn from `cdf` for the uniform `u` in [0, 1).
pub fn sample_size(cdf: &[(f64, f64)], u: f64) -> u64 {
    if u < cdf[0].1 {
        return cdf[0].0.round().max(1.0) as u64;
    }
    for w in cdf.windows(2) {
        let ((b0, c0), (b1, c1)) = (w[0], w[1]);
        if u < c1 && c1 > c0 {
            return (b0 + (u - c0) / (c1 - c0) * (b1 - b0)).round().max(1.0) as u64;
        }
    }
    cdf[cdf.len() - 1].0.round() as u64
}

/// Seconds to the next arrival of a Poisson process of `rate` per second, in whole nanoseconds.
fn gap_ns(rng: &mut ChaCha8Rng, rate: f64) -> Time {
    let u: f64 = rng.gen();
    let gap = -(1.0 - u).ln() / rate * 1e9;
    gap.round().min(MAX_TIME as f64) as Time
}

impl WithTenants {
    /// Wraps `inner`, built over `ranks` job ranks plus one endpoint per host (`ranks + h`).
    pub(super) fn new(inner: Box<dyn NetworkModel>, tenants: &[TenantSpec], ranks: u32, hosts: u32) -> Result<Self, Error> {
        let mut senders = Vec::new();
        for (k, t) in tenants.iter().enumerate() {
            check(t, hosts)?;
            if tenants[..k].iter().any(|o| o.id == t.id) {
                return Err(bad(format!("two tenants share the id {}", t.id)));
            }
            let mut by_host: Vec<(u32, Vec<u32>)> = Vec::new();
            match &t.pairs {
                Some(pairs) => {
                    for &(a, b) in pairs {
                        match by_host.iter_mut().find(|(h, _)| *h == a) {
                            Some((_, peers)) => peers.push(b),
                            None => by_host.push((a, vec![b])),
                        }
                    }
                }
                None => {
                    let list: Vec<u32> = t.hosts.clone().unwrap_or_else(|| (0..hosts).collect());
                    for &h in &list {
                        let peers: Vec<u32> = list.iter().copied().filter(|&o| o != h).collect();
                        if !peers.is_empty() {
                            by_host.push((h, peers));
                        }
                    }
                    if by_host.is_empty() {
                        return Err(bad(format!("tenant {}: needs at least two hosts to send between", t.id)));
                    }
                }
            }
            for (host, peers) in by_host {
                let mut rng = stream(t.seed, Purpose::TenantFlows, host, t.id as i32, 0);
                let first = t.start_ns.saturating_add(gap_ns(&mut rng, t.rate_per_host));
                senders.push(Sender { tenant: k as u32, host, peers, rng, next: first });
            }
        }
        let mut arrivals = BinaryHeap::new();
        for (i, s) in senders.iter().enumerate() {
            arrivals.push(Reverse((s.next, i as u32)));
        }
        Ok(WithTenants {
            inner,
            ranks,
            tenants: tenants.to_vec(),
            senders,
            arrivals,
            owners: Vec::new(),
            free: Vec::new(),
            flows: Vec::new(),
            tick_at: None,
            job_ended: None,
            out: Vec::new(),
        })
    }

    fn alloc(&mut self, owner: Owner) -> u32 {
        match self.free.pop() {
            Some(id) => {
                self.owners[id as usize] = owner;
                id
            }
            None => {
                self.owners.push(owner);
                self.owners.len() as u32 - 1
            }
        }
    }

    /// When arrivals stop: the earliest of the tenant's stop and, without one, the job's end.
    fn stop_of(&self, tenant: usize) -> Option<Time> {
        match self.tenants[tenant].stop_ns {
            Some(t) => Some(t),
            None => self.job_ended,
        }
    }

    fn arrivals_over(&self, now: Time) -> bool {
        (0..self.tenants.len()).all(|k| self.stop_of(k).is_some_and(|s| s <= now))
    }

    /// Starts every arrival due by `now` and asks for the next tick.
    fn arrive(&mut self, now: Time, sched: &mut dyn Scheduler) -> Result<(), Error> {
        while let Some(&Reverse((t, i))) = self.arrivals.peek() {
            if t > now {
                break;
            }
            self.arrivals.pop();
            let s = &mut self.senders[i as usize];
            let k = s.tenant as usize;
            if self.tenants[k].stop_ns.is_some_and(|stop| t >= stop) || self.job_ended.is_some_and(|end| self.tenants[k].stop_ns.is_none() && t >= end) {
                continue;
            }
            let spec = &self.tenants[k];
            let (id_of, band, rate) = (spec.id, spec.band, spec.rate_per_host);
            let dst = s.peers[s.rng.gen_range(0..s.peers.len())];
            let bytes = sample_size(&spec.cdf, s.rng.gen::<f64>());
            let src = s.host;
            s.next = t.saturating_add(gap_ns(&mut s.rng, rate));
            let next = s.next;
            self.arrivals.push(Reverse((next, i)));
            let flow = self.flows.len() as u32;
            self.flows.push(TenantFlow { tenant_id: id_of, band, src_host: src, dst_host: dst, bytes, start: now, done: false });
            let id = self.alloc(Owner::Tenant(flow));
            let req = TransferRequest { id, message: NONE, src: self.ranks + src, dst: self.ranks + dst, bytes, band, tenant: id_of };
            self.inner.start(now, req, sched)?;
        }
        self.schedule_tick(now, sched);
        Ok(())
    }

    fn schedule_tick(&mut self, now: Time, sched: &mut dyn Scheduler) {
        if let Some(&Reverse((t, _))) = self.arrivals.peek() {
            let t = t.max(now);
            if t <= MAX_TIME && self.tick_at.is_none_or(|w| t < w || w < now) {
                self.tick_at = Some(t);
                sched.schedule(t, TICK);
            }
        }
    }

    /// Hands the job's deliveries in `self.out` to `out` under the executor's ids.
    fn translate(&mut self, out: &mut Vec<Delivery>) {
        for d in self.out.drain(..) {
            match self.owners[d.id as usize] {
                Owner::Job(id) => out.push(Delivery { id, tx_end: d.tx_end }),
                Owner::Tenant(f) => self.flows[f as usize].done = true,
                Owner::Free => {}
            }
            self.owners[d.id as usize] = Owner::Free;
            self.free.push(d.id);
        }
    }
}

impl NetworkModel for WithTenants {
    fn topology(&self) -> &Topology {
        self.inner.topology()
    }
    fn start(&mut self, now: Time, req: TransferRequest, sched: &mut dyn Scheduler) -> Result<(), Error> {
        let id = self.alloc(Owner::Job(req.id));
        self.inner.start(now, TransferRequest { id, ..req }, sched)
    }
    fn start_on(&mut self, now: Time, req: TransferRequest, path: &Path, sched: &mut dyn Scheduler) -> Result<(), Error> {
        let id = self.alloc(Owner::Job(req.id));
        self.inner.start_on(now, TransferRequest { id, ..req }, path, sched)
    }
    fn fan_ready(&self, kind: FanKind, ends: &[FanEnd], now: Time) -> Result<Time, Error> {
        self.inner.fan_ready(kind, ends, now)
    }
    fn start_fan(&mut self, now: Time, req: TransferRequest, kind: FanKind, ends: &[FanEnd], sched: &mut dyn Scheduler) -> Result<(), Error> {
        let id = self.alloc(Owner::Job(req.id));
        self.inner.start_fan(now, TransferRequest { id, ..req }, kind, ends, sched)
    }
    fn fan_arrivals(&self, kind: FanKind, ends: &[FanEnd], tx_end: Time, delivered: Time, out: &mut Vec<Time>) -> Result<(), Error> {
        self.inner.fan_arrivals(kind, ends, tx_end, delivered, out)
    }
    fn on_event(&mut self, now: Time, token: u64, sched: &mut dyn Scheduler, out: &mut Vec<Delivery>) -> Result<(), Error> {
        if token == TICK {
            if self.tick_at.is_some_and(|w| w <= now) {
                self.tick_at = None;
            }
            return self.arrive(now, sched);
        }
        let mut inner_out = std::mem::take(&mut self.out);
        self.inner.on_event(now, token, sched, &mut inner_out)?;
        self.out = inner_out;
        self.translate(out);
        Ok(())
    }
    fn attach(&mut self, now: Time, sched: &mut dyn Scheduler) {
        self.schedule_tick(now, sched);
    }
    fn job_ended(&mut self, now: Time) {
        self.job_ended = Some(now);
    }
    fn background_only(&self, now: Time) -> bool {
        self.job_ended.is_some() && self.arrivals_over(now)
    }
    fn stats(&self) -> NetworkStats {
        self.inner.stats()
    }
    fn take_flows(&mut self) -> Vec<FlowRecord> {
        let mut records = self.inner.take_flows();
        for r in records.iter_mut() {
            if r.src >= self.ranks {
                (r.src_host, r.dst_host) = (r.src - self.ranks, r.dst - self.ranks);
                (r.src, r.dst, r.message) = (u32::MAX, u32::MAX, NONE);
            }
        }
        for f in self.flows.iter().filter(|f| !f.done) {
            records.push(FlowRecord {
                message: NONE,
                src: u32::MAX,
                dst: u32::MAX,
                bytes: f.bytes,
                band: f.band,
                tenant: f.tenant_id,
                start: f.start,
                tx_end: NONE,
                delivered: NONE,
                src_host: f.src_host,
                dst_host: f.dst_host,
                ..FlowRecord::default()
            });
        }
        records
    }
    fn take_queues(&mut self) -> Vec<QueueSample> {
        self.inner.take_queues()
    }
    fn ports(&self) -> Vec<PortRecord> {
        self.inner.ports()
    }
    fn packet_totals(&self) -> Option<(Totals, bool)> {
        self.inner.packet_totals()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_interpolated_cdf() {
        let cdf = [(100.0, 0.5), (200.0, 0.75), (1000.0, 1.0)];
        assert_eq!(sample_size(&cdf, 0.0), 100);
        assert_eq!(sample_size(&cdf, 0.4999), 100);
        assert_eq!(sample_size(&cdf, 0.5), 100);
        assert_eq!(sample_size(&cdf, 0.625), 150);
        assert_eq!(sample_size(&cdf, 0.875), 600);
        assert_eq!(sample_size(&cdf, 0.999_999_9), 1000);
    }
}
