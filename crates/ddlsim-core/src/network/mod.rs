//! Network models: they time transfers between ranks.
//!
//! Two models implement [`NetworkModel`] over one [`Topology`] (links,
//! switches, routes; see [`topology`] for intra-host links and ECMP/spray
//! routing):
//! - `analytic`: each link is a FIFO server: a transfer waits until every
//!   link of its route is free (the transfers started before it on those
//!   links have been transmitted), then holds all of them for its size over
//!   the route's bottleneck (with spray, the aggregate spine capacity),
//!   rounded up exactly, and is delivered the route's latency later. No
//!   sharing, no pipelining across links; bands are recorded, not used.
//! - `flow`: strict-priority max-min fair sharing between concurrent flows
//!   (band 0 first; see [`maxmin`] for the exact semantics), recomputed
//!   incrementally per connected component of flows.
//!
//! With `record_flows`, both return one [`FlowRecord`] per transfer from
//! [`NetworkModel::take_flows`], in delivery order.

pub mod config;
pub mod innet;
pub mod maxmin;
pub mod packet;
pub mod tcp;
pub mod tbf_replay;
pub mod tenants;
pub mod topology;

pub use config::{Fidelity, Framing, LimitUnit, NetworkSpec, PacketSpec, QueueScope, Routing, TenantSpec, TopologySpec, Transport};
pub use maxmin::{max_min_fair, max_min_fair_banded, FlowNetwork, FlowStart, Reschedule};
pub use topology::{transmit_ns, transmit_ns_exact, NOISE, Path, Ratio, Switch, SwitchKind, Topology};

use rustc_hash::FxHashMap as HashMap;

pub use innet::FanEnd;

use crate::engine::Time;
use crate::engine::MAX_TIME;
use crate::error::Error;
use crate::graph::FanKind;

pub trait Scheduler {
    fn schedule(&mut self, at: Time, token: u64);
    /// Time of the engine's next event (0 when unknown): a model may run
    /// its own events ahead up to it, since nothing else can happen before.
    fn horizon(&self) -> Time {
        0
    }
}

#[derive(Debug, Clone, Copy)]
pub struct TransferRequest {
    pub id: u32,
    pub message: u64,
    pub src: u32,
    pub dst: u32,
    pub bytes: u64,
    pub band: u8,
    pub tenant: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    pub id: u32,
    pub tx_end: Time,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct NetworkStats {
    pub recomputations: u64,
    pub flows: u64,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct FlowRecord {
    pub message: u64,
    pub src: u32,
    pub dst: u32,
    pub bytes: u64,
    pub band: u8,
    pub tenant: u32,
    pub start: Time,
    pub tx_end: Time,
    pub delivered: Time,
    /// Packet level only (zero otherwise): segments of this message
    /// retransmitted, timeouts while it was first unacknowledged, its
    /// packets dropped and ECN-marked.
    pub retransmits: u32,
    pub timeouts: u32,
    pub drops: u32,
    pub ecn_marks: u32,
    /// Hosts of a background tenant's flow (its `src` and `dst` are
    /// `u32::MAX`); zero for the job's flows, whose ranks say where they are.
    pub src_host: u32,
    pub dst_host: u32,
}

/// A queue's occupancy at a sampling time (packet level).
#[derive(Debug, Clone, Copy)]
pub struct QueueSample {
    pub time: Time,
    pub node: u32,
    pub port: u32,
    pub band: u8,
    pub bytes: u64,
    pub packets: u64,
}

/// An egress port's counters over a run (packet level).
#[derive(Debug, Clone)]
pub struct PortRecord {
    pub port: u32,
    pub node: u32,
    pub name: String,
    pub packets: u64,
    pub bytes: u64,
    pub drops: u64,
    pub ecn_marks: u64,
    pub max_packets: u64,
    pub max_bytes: u64,
}

/// Any sized model as a trait object (implemented for every model; lets
/// [`NetworkModel::into_flow`] hand back a model that is not [`Flow`]).
#[doc(hidden)]
pub trait IntoDynNetwork {
    fn into_dyn(self: Box<Self>) -> Box<dyn NetworkModel>;
}

impl<T: NetworkModel + 'static> IntoDynNetwork for T {
    fn into_dyn(self: Box<Self>) -> Box<dyn NetworkModel> {
        self
    }
}

pub trait NetworkModel: IntoDynNetwork {
    /// The topology the model routes over (switches, links, routes).
    fn topology(&self) -> &Topology;
    fn start(&mut self, now: Time, req: TransferRequest, sched: &mut dyn Scheduler) -> Result<(), Error>;
    /// Starts a transfer over an explicit path instead of `req`'s route (a
    /// multicast or aggregation tree, see [`innet`]); delivered `path.latency`
    /// after its transmission ends.
    fn start_on(&mut self, now: Time, req: TransferRequest, path: &Path, sched: &mut dyn Scheduler) -> Result<(), Error>;
    fn on_event(&mut self, now: Time, token: u64, sched: &mut dyn Scheduler, out: &mut Vec<Delivery>) -> Result<(), Error>;
    /// When a fan (an in-network multicast or aggregation whose transfers
    /// `ends` have all started by `now`) may start its tree flow. The default
    /// times the tree flows of [`innet`]; a model that times fans otherwise
    /// (e.g. packet by packet) overrides this, [`NetworkModel::start_fan`]
    /// and [`NetworkModel::fan_arrivals`] together.
    fn fan_ready(&self, kind: FanKind, ends: &[FanEnd], now: Time) -> Result<Time, Error> {
        innet::fan_ready(self.topology(), kind, ends, now)
    }
    /// Starts a fan's transmission as transfer `req` (delivered once, as any transfer).
    fn start_fan(&mut self, now: Time, req: TransferRequest, kind: FanKind, ends: &[FanEnd], sched: &mut dyn Scheduler) -> Result<(), Error> {
        let path = innet::fan_path(self.topology(), kind, ends);
        self.start_on(now, req, &path, sched)
    }
    /// When each receiver of the fan has its copy (one entry per end, in
    /// order), the fan's transfer having ended transmitting at `tx_end` and
    /// been delivered at `delivered`.
    fn fan_arrivals(&self, kind: FanKind, ends: &[FanEnd], tx_end: Time, delivered: Time, out: &mut Vec<Time>) -> Result<(), Error> {
        innet::fan_arrivals(self.topology(), kind, ends, tx_end, delivered, out)
    }
    /// Starts `req` as [`NetworkModel::start`] would when that would only
    /// schedule its delivery (a flow restarting alone on its links): returns
    /// the event `(time, token)` for the caller to schedule, having changed
    /// exactly what `start` changes. `None`: nothing was changed, call `start`.
    #[inline]
    fn start_lone(&mut self, _now: Time, _req: TransferRequest) -> Result<Option<(Time, u64)>, Error> {
        Ok(None)
    }
    /// Handles event `token` as [`NetworkModel::on_event`] would when that
    /// only delivers one transfer or none (a direct end of a lone flow, or
    /// a stale one): `Some(delivery)` or `Some(None)`. `None`: nothing was
    /// changed, call `on_event`.
    #[inline]
    fn lone_delivery(&mut self, _now: Time, _token: u64) -> Option<Option<Delivery>> {
        None
    }
    /// The flow-level model itself (`None` for every other model), so that
    /// the executor's direct paths call its `start_lone` and `lone_delivery`
    /// inlined instead of through the trait object.
    #[doc(hidden)]
    #[inline]
    fn as_flow(&mut self) -> Option<&mut Flow> {
        None
    }
    /// The model as the flow-level model itself, or back as it was: the
    /// executor keeps a flow model apart so that its direct paths need no
    /// call through the trait object at all.
    #[doc(hidden)]
    fn into_flow(self: Box<Self>) -> Result<Box<Flow>, Box<dyn NetworkModel>> {
        Err(self.into_dyn())
    }
    fn stats(&self) -> NetworkStats;
    fn take_flows(&mut self) -> Vec<FlowRecord>;
    /// Queue occupancy samples (packet level; empty otherwise).
    fn take_queues(&mut self) -> Vec<QueueSample> {
        Vec::new()
    }
    /// Per egress port counters (packet level; empty otherwise).
    fn ports(&self) -> Vec<PortRecord> {
        Vec::new()
    }
    /// Packet-level totals and whether queue sampling hit its cap (None below packet level).
    fn packet_totals(&self) -> Option<(packet::Totals, bool)> {
        None
    }
    /// Called once before the run, for a model that starts traffic of its own.
    fn attach(&mut self, _now: Time, _sched: &mut dyn Scheduler) {}
    /// The job's last operation ended at `now`.
    fn job_ended(&mut self, _now: Time) {}
    /// Whether what is left is only background traffic that ends the run
    /// (asked once the job has ended).
    fn background_only(&self, _now: Time) -> bool {
        false
    }
}

pub fn build_network(spec: &NetworkSpec, host_of_rank: &[u32]) -> Result<Box<dyn NetworkModel>, Error> {
    if spec.tenants.is_empty() && spec.hosts.is_none() {
        return build_model(spec, host_of_rank);
    }
    // One endpoint per host (rank `ranks + h`) for traffic of hosts, not ranks.
    let used = host_of_rank.iter().copied().max().map_or(0, |h| h + 1);
    let hosts = spec.hosts.unwrap_or(used);
    if hosts < used {
        return Err(Error::new(crate::error::ErrorKind::BadInput, format!("network hosts = {hosts}, but the ranks are placed on {used} hosts")));
    }
    let ranks = host_of_rank.len() as u32;
    let extended: Vec<u32> = host_of_rank.iter().copied().chain(0..hosts).collect();
    let inner = build_model(spec, &extended)?;
    Ok(Box::new(tenants::WithTenants::new(inner, &spec.tenants, ranks, hosts)?))
}

fn build_model(spec: &NetworkSpec, host_of_rank: &[u32]) -> Result<Box<dyn NetworkModel>, Error> {
    let topo = Topology::new(spec, host_of_rank)?;
    let common = Common::new(spec.record_flows);
    Ok(match spec.fidelity {
        Fidelity::Analytic => Box::new(Analytic::new(topo, common)),
        Fidelity::Flow => Box::new(Flow { net: FlowNetwork::new(topo), common, out: Vec::new(), cancelled: Vec::new(), done: Vec::new() }),
        Fidelity::Packet => Box::new(packet::PacketNet::new(topo, spec)?),
    })
}

/// Per transfer slot: delivery generation and end of transmission.
#[derive(Clone, Copy, Default)]
struct Slot {
    generation: u32,
    tx_end: Time,
}

struct Common {
    record: bool,
    slots: Vec<Slot>,
    /// Per transfer slot, with `record` only: its request and start.
    requests: Vec<(TransferRequest, Time)>,
    records: Vec<FlowRecord>,
    recorded: u64,
}

impl Common {
    fn new(record: bool) -> Self {
        Common { record, slots: Vec::new(), requests: Vec::new(), records: Vec::new(), recorded: 0 }
    }

    #[inline(always)]
    fn check(&self, req: &TransferRequest, ranks: u32) -> Result<(), Error> {
        if req.src >= ranks || req.dst >= ranks {
            return Err(Self::outside(req, ranks));
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn outside(req: &TransferRequest, ranks: u32) -> Error {
        Error::internal(format!("internal error, please report: transfer {} -> {} outside the {ranks} placed ranks", req.src, req.dst))
    }

    #[inline(always)]
    fn begin(&mut self, now: Time, req: TransferRequest) -> &mut Slot {
        let id = req.id as usize;
        if self.slots.len() <= id {
            self.slots.resize(id + 1, Slot::default());
        }
        if self.record {
            self.remember(now, req);
        }
        &mut self.slots[id]
    }

    #[cold]
    fn remember(&mut self, now: Time, req: TransferRequest) {
        let id = req.id as usize;
        if self.requests.len() <= id {
            self.requests.resize(id + 1, (req, now));
        }
        self.requests[id] = (req, now);
    }

    #[inline]
    fn deliver(&mut self, id: u32, now: Time, out: &mut Vec<Delivery>) {
        let tx_end = self.slots[id as usize].tx_end;
        out.push(Delivery { id, tx_end });
        if self.record {
            self.write_record(id, tx_end, now);
        }
    }

    #[cold]
    fn write_record(&mut self, id: u32, tx_end: Time, now: Time) {
        let (r, start) = self.requests[id as usize];
        self.recorded += 1;
        self.records.push(FlowRecord {
            message: r.message,
            src: r.src,
            dst: r.dst,
            bytes: r.bytes,
            band: r.band,
            tenant: r.tenant,
            start,
            tx_end,
            delivered: now,
            ..FlowRecord::default()
        });
    }
}

/// The error for a transfer that cannot end on the engine's clock.
#[cold]
#[inline(never)]
pub(crate) fn too_long(bytes: u64) -> Error {
    Error::out_of_range(format!("a transfer of {bytes} bytes would end after {MAX_TIME} ns (about 146 years); sizes or bandwidth are far off"))
}

#[inline]
fn at(now: Time, dt: Time) -> Result<Time, Error> {
    match now.checked_add(dt) {
        Some(t) if t <= MAX_TIME => Ok(t),
        _ => Err(past_the_clock()),
    }
}

#[cold]
#[inline(never)]
fn past_the_clock() -> Error {
    Error::out_of_range(format!("simulated time would pass {MAX_TIME} ns (about 146 years); sizes, latencies or bandwidth are far off"))
}

/// Links as FIFO servers: a transfer starts when every link of its route is
/// free, holds them for its size over the route's bottleneck, and arrives
/// the route's latency after that.
struct Analytic {
    topo: Topology,
    ranks: u32,
    /// Per link: when the last transfer reserved on it ends its transmission.
    free_at: Vec<Time>,
    /// Route key -> index into `routes`.
    route_index: HashMap<u64, u32>,
    /// Each route met so far, its links at `links[first..first + len]`.
    routes: Vec<Route>,
    links: Vec<u32>,
    scratch: Path,
    common: Common,
    /// Per sender rank: the receiver and route index of its last transfer
    /// (a collective's member sends to the same peer step after step), so
    /// most transfers skip the route map.
    last_route: Vec<(u32, u32)>,
}

/// A route as the analytic model uses it: its links (in `Analytic::links`),
/// latency, and its transmission time of the last size it carried (a
/// collective sends the same chunk size again and again; the time is a pure
/// function of the route and the size, so the memo changes nothing).
struct Route {
    path: Path,
    first: u32,
    len: u32,
    last_bytes: u64,
    last_tx: Time,
}

impl Analytic {
    fn new(topo: Topology, common: Common) -> Self {
        let ranks = topo.ranks();
        let last_route = vec![(u32::MAX, 0); ranks as usize];
        let free_at = vec![0; topo.links.len()];
        Analytic {
            topo,
            ranks,
            free_at,
            route_index: HashMap::default(),
            routes: Vec::new(),
            links: Vec::new(),
            scratch: Path::default(),
            common,
            last_route,
        }
    }

    /// Index into `routes` of the route from `src` to `dst` (both checked ranks).
    #[inline]
    fn route(&mut self, src: u32, dst: u32) -> usize {
        let (last_dst, last) = self.last_route[src as usize];
        if last_dst == dst {
            return last as usize;
        }
        self.route_slow(src, dst)
    }

    #[cold]
    #[inline(never)]
    fn route_slow(&mut self, src: u32, dst: u32) -> usize {
        let key = self.topo.route_key(src, dst);
        let index = match self.route_index.get(&key) {
            Some(&i) => i,
            None => {
                self.topo.route_into(src, dst, &mut self.scratch);
                let first = self.links.len() as u32;
                self.links.extend_from_slice(self.scratch.links());
                let len = self.scratch.links().len() as u32;
                // 0 bytes take 0 ns: a true first entry of the memo.
                self.routes.push(Route { path: self.scratch.clone(), first, len, last_bytes: 0, last_tx: 0 });
                let i = self.routes.len() as u32 - 1;
                self.route_index.insert(key, i);
                i
            }
        };
        self.last_route[src as usize] = (dst, index);
        index as usize
    }
}

impl NetworkModel for Analytic {
    fn topology(&self) -> &Topology {
        &self.topo
    }
    #[inline]
    fn start(&mut self, now: Time, req: TransferRequest, sched: &mut dyn Scheduler) -> Result<(), Error> {
        if req.src >= self.ranks || req.dst >= self.ranks {
            return self.common.check(&req, self.ranks);
        }
        let r = self.route(req.src, req.dst);
        let route = &mut self.routes[r];
        if route.last_bytes != req.bytes {
            route.last_tx = route.path.transmit_ns(req.bytes).ok_or_else(|| too_long(req.bytes))?;
            route.last_bytes = req.bytes;
        }
        let links = &self.links[route.first as usize..(route.first + route.len) as usize];
        let (begin, tx_end) = reserve_links(&mut self.free_at, links, now, route.last_tx, req.bytes)?;
        let delivered = at(tx_end, route.path.latency)?;
        self.common.begin(begin, req).tx_end = tx_end;
        sched.schedule(delivered, req.id as u64);
        Ok(())
    }
    fn start_on(&mut self, now: Time, req: TransferRequest, path: &Path, sched: &mut dyn Scheduler) -> Result<(), Error> {
        self.common.check(&req, self.topo.ranks())?;
        let (begin, tx_end) = reserve(&mut self.free_at, path, now, req.bytes)?;
        let delivered = at(tx_end, path.latency)?;
        self.common.begin(begin, req).tx_end = tx_end;
        sched.schedule(delivered, req.id as u64);
        Ok(())
    }
    fn on_event(&mut self, now: Time, token: u64, _s: &mut dyn Scheduler, out: &mut Vec<Delivery>) -> Result<(), Error> {
        self.common.deliver(token as u32, now, out);
        Ok(())
    }
    fn stats(&self) -> NetworkStats {
        NetworkStats { recomputations: 0, flows: self.common.recorded }
    }
    fn take_flows(&mut self) -> Vec<FlowRecord> {
        std::mem::take(&mut self.common.records)
    }
}

/// FIFO links: `bytes` over `path`, asked for at `now`, start when every link
/// of the path is free and hold all of them until their transmission ends.
/// Returns (start, end of transmission).
#[inline]
fn reserve(free_at: &mut [Time], path: &Path, now: Time, bytes: u64) -> Result<(Time, Time), Error> {
    let tx = path.transmit_ns(bytes).ok_or_else(|| too_long(bytes))?;
    reserve_links(free_at, path.links(), now, tx, bytes)
}

/// [`reserve`] of a transmission of `tx` ns (`bytes` long) over `links`.
#[inline(always)]
fn reserve_links(free_at: &mut [Time], links: &[u32], now: Time, tx: Time, bytes: u64) -> Result<(Time, Time), Error> {
    let begin = links.iter().fold(now, |t, &l| t.max(free_at[l as usize]));
    let tx_end = match begin.checked_add(tx) {
        Some(t) if t <= MAX_TIME => t,
        _ => return Err(too_long(bytes)),
    };
    for &l in links {
        free_at[l as usize] = tx_end;
    }
    Ok((begin, tx_end))
}

const DELIVER: u64 = 1 << 63;

/// Strict-priority max-min flows ([`FlowNetwork`]). Tokens: a delivery is
/// `DELIVER | generation << 32 | transfer id` (a cancelled direct end is
/// stale through the generation); a class completion is `version << 32 | class`.
#[doc(hidden)]
pub struct Flow {
    net: FlowNetwork,
    common: Common,
    out: Vec<Reschedule>,
    cancelled: Vec<u32>,
    done: Vec<(u32, Time)>,
}

impl Flow {
    #[inline]
    fn flush(&mut self, sched: &mut dyn Scheduler) {
        if self.out.is_empty() {
            return;
        }
        for r in self.out.drain(..) {
            sched.schedule(r.done_at, ((r.version as u64) << 32) | r.class as u64);
        }
    }

    fn delivery_token(generation: u32, id: u32) -> u64 {
        DELIVER | ((generation as u64 & 0x7fff_ffff) << 32) | id as u64
    }
}

impl NetworkModel for Flow {
    fn topology(&self) -> &Topology {
        self.net.topology()
    }
    fn start(&mut self, now: Time, req: TransferRequest, sched: &mut dyn Scheduler) -> Result<(), Error> {
        self.common.check(&req, self.net.topology().ranks())?;
        self.common.begin(now, req);
        let started = self.net.start(now, req.id, req.src, req.dst, req.bytes, req.band, &mut self.out, &mut self.cancelled)?;
        self.started(req, started, sched)
    }
    fn start_on(&mut self, now: Time, req: TransferRequest, path: &Path, sched: &mut dyn Scheduler) -> Result<(), Error> {
        self.common.check(&req, self.net.topology().ranks())?;
        self.common.begin(now, req);
        let started = self.net.start_on(now, req.id, path, req.bytes, req.band, &mut self.out, &mut self.cancelled)?;
        self.started(req, started, sched)
    }
    fn on_event(&mut self, now: Time, token: u64, sched: &mut dyn Scheduler, out: &mut Vec<Delivery>) -> Result<(), Error> {
        self.on_event_flow(now, token, sched, out)
    }
    #[inline]
    fn as_flow(&mut self) -> Option<&mut Flow> {
        Some(self)
    }
    fn into_flow(self: Box<Self>) -> Result<Box<Flow>, Box<dyn NetworkModel>> {
        Ok(self)
    }
    /// `on_event`'s branch for a delivery token.
    #[inline(always)]
    fn lone_delivery(&mut self, now: Time, token: u64) -> Option<Option<Delivery>> {
        if token & DELIVER == 0 {
            return None;
        }
        let id = (token & 0xffff_ffff) as u32;
        let generation = ((token >> 32) & 0x7fff_ffff) as u32;
        let slot = &mut self.common.slots[id as usize];
        if slot.generation & 0x7fff_ffff != generation {
            return Some(None);
        }
        slot.generation = slot.generation.wrapping_add(1);
        let tx_end = slot.tx_end;
        if self.common.record {
            self.common.write_record(id, tx_end, now);
        }
        Some(Some(Delivery { id, tx_end }))
    }
    /// `start` through [`FlowNetwork::restart_lone_class`]: no class
    /// resolved, nothing cancelled, no reschedule (`out` and `cancelled`
    /// are empty between calls), one delivery scheduled.
    #[inline(always)]
    fn start_lone(&mut self, now: Time, req: TransferRequest) -> Result<Option<(Time, u64)>, Error> {
        self.start_lone_parts(now, req.id, req.src, req.dst, req.bytes, req.band, || req)
    }
    fn stats(&self) -> NetworkStats {
        NetworkStats { recomputations: self.net.recomputations(), flows: self.common.recorded }
    }
    fn take_flows(&mut self) -> Vec<FlowRecord> {
        std::mem::take(&mut self.common.records)
    }
}

impl Flow {
    /// [`NetworkModel::start_lone`] of the request `req` would build, built
    /// only where it is needed (flows recorded).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn start_lone_parts(&mut self, now: Time, id: u32, src: u32, dst: u32, bytes: u64, band: u8, req: impl FnOnce() -> TransferRequest) -> Result<Option<(Time, u64)>, Error> {
        let Some(class) = self.net.lone_restartable(now, src, dst, band) else { return Ok(None) };
        debug_assert!(self.out.is_empty() && self.cancelled.is_empty());
        // No `check`: the class was the sender's last, to the same receiver, so both were checked then.
        debug_assert!(src < self.net.topology().ranks() && dst < self.net.topology().ranks());
        // `Common::begin`.
        if self.common.slots.len() <= id as usize {
            self.common.slots.resize(id as usize + 1, Slot::default());
        }
        if self.common.record {
            self.common.remember(now, req());
        }
        let (tx_end, latency) = self.net.restart_lone_class(now, class, id, bytes)?;
        let delivered = at(tx_end, latency)?;
        let slot = &mut self.common.slots[id as usize];
        slot.tx_end = tx_end;
        Ok(Some((delivered, Self::delivery_token(slot.generation, id))))
    }

    /// The transfer a token delivers if [`NetworkModel::lone_delivery`]
    /// would deliver it now (a delivery token, not stale); looks only.
    #[inline(always)]
    pub(crate) fn live_delivery(&self, token: u64) -> Option<u32> {
        if token & DELIVER == 0 {
            return None;
        }
        let id = (token & 0xffff_ffff) as u32;
        let generation = ((token >> 32) & 0x7fff_ffff) as u32;
        (self.common.slots[id as usize].generation & 0x7fff_ffff == generation).then_some(id)
    }

    /// [`NetworkModel::lone_delivery`] of a token [`Flow::live_delivery`] took.
    #[inline(always)]
    pub(crate) fn take_live_delivery(&mut self, now: Time, id: u32) {
        let slot = &mut self.common.slots[id as usize];
        slot.generation = slot.generation.wrapping_add(1);
        if self.common.record {
            let tx_end = slot.tx_end;
            self.common.write_record(id, tx_end, now);
        }
    }

    #[inline(always)]
    fn started(&mut self, req: TransferRequest, started: FlowStart, sched: &mut dyn Scheduler) -> Result<(), Error> {
        if !self.cancelled.is_empty() {
            for &c in &self.cancelled {
                let slot = &mut self.common.slots[c as usize];
                slot.generation = slot.generation.wrapping_add(1);
            }
            self.cancelled.clear();
        }
        if let FlowStart::Lone { tx_end, latency } = started {
            let delivered = at(tx_end, latency)?;
            let slot = &mut self.common.slots[req.id as usize];
            slot.tx_end = tx_end;
            sched.schedule(delivered, Self::delivery_token(slot.generation, req.id));
        }
        self.flush(sched);
        Ok(())
    }
    fn on_event_flow(&mut self, now: Time, token: u64, sched: &mut dyn Scheduler, out: &mut Vec<Delivery>) -> Result<(), Error> {
        if token & DELIVER != 0 {
            let id = (token & 0xffff_ffff) as u32;
            let generation = ((token >> 32) & 0x7fff_ffff) as u32;
            let slot = &mut self.common.slots[id as usize];
            if slot.generation & 0x7fff_ffff != generation {
                return Ok(());
            }
            slot.generation = slot.generation.wrapping_add(1);
            self.common.deliver(id, now, out);
            return Ok(());
        }
        let (class, version) = ((token & 0xffff_ffff) as u32, (token >> 32) as u32);
        self.net.finish(now, class, version, &mut self.done, &mut self.out);
        for i in 0..self.done.len() {
            let (id, latency) = self.done[i];
            let delivered = at(now, latency)?;
            let slot = &mut self.common.slots[id as usize];
            slot.tx_end = now;
            sched.schedule(delivered, Self::delivery_token(slot.generation, id));
        }
        self.done.clear();
        self.flush(sched);
        Ok(())
    }
}
