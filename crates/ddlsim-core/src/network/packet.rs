//! The packet-level network model: every transfer is a TCP byte stream cut
//! into packets that cross output-queued ports one by one.
//!
//! - **Ports.** Every directed link of the [`Topology`] is an egress port at
//!   its sending end (a host NIC or a switch port) with 1 to 8
//!   strict-priority bands (a flow of band `b` uses band `min(b, bands - 1)`),
//!   a drop-tail limit per band or per port, in packets or bytes, and
//!   optional ECN marking: an ECN-capable packet that arrives at a band
//!   already holding `K` packets or more is marked. The packet on the wire
//!   is not in the queue and is never preempted.
//! - **Wire.** A segment of `len` payload bytes is an IP packet of `len +
//!   40` bytes (`+ 52` with TCP timestamps); Ethernet framing adds 38 byte
//!   times (header, FCS, preamble, inter-frame gap; frames padded to 64
//!   bytes), PPP 2. A port serialises a packet in `ceil(8 bytes 1e12 / bps)`
//!   picoseconds, then the link's propagation delay carries it to the next
//!   port or host.
//! - **Transport.** [`tcp`](super::tcp): NewReno or DCTCP, one connection
//!   per (sender, receiver, band) reused by every message between them (or
//!   one per message); ACKs take the reverse route through the same queues
//!   in the connection's band. A message is delivered when its last byte
//!   arrives in order.
//! - **Design** (after htsim): integer picoseconds; at most one pending
//!   event per port (end of transmission), per link (first packet in
//!   flight), per connection timer; packets from a free list; routes
//!   computed once per pair. The model keeps its own event queue and asks
//!   the engine for a wakeup at its next event, running ahead up to the
//!   engine's next event or its own next delivery.
//! - **Within a host** (ranks sharing a host with an intra-host fabric):
//!   no packets; each rank's intra-host egress and ingress ports are FIFO
//!   servers as at analytic fidelity (a transfer waits for both, holds both
//!   for its size at the fabric's rate, arrives the fabric's latency later).
//! - **Not modelled:** multicast and in-network aggregation (no switch
//!   replication or aggregation over TCP) and spray routing (per-packet
//!   reordering); both are refused.

use std::collections::VecDeque;

use rustc_hash::FxHashMap as HashMap;

use super::config::{Framing, LimitUnit, NetworkSpec, PacketSpec, QueueScope, Transport};
use super::tcp::{Ps, Receiver, Segment, Sender, TcpConfig, NEVER};
use super::{Delivery, FanEnd, FlowRecord, NetworkModel, NetworkStats, Path, PortRecord, QueueSample, Scheduler, Topology, TransferRequest};
use crate::engine::{EventQueue, Time, MAX_TIME};
use crate::error::{Error, ErrorKind};
use crate::graph::FanKind;

const PS_PER_NS: u64 = 1000;

/// Event kinds, in the top byte of an event word (then a 24-bit
/// generation, then a 32-bit index).
const EV_TX: u64 = 0;
const EV_ARRIVE: u64 = 1;
const EV_RTO: u64 = 2;
const EV_DELACK: u64 = 3;
const EV_SAMPLE: u64 = 4;
const EV_LOCAL: u64 = 5;

fn event(kind: u64, generation: u32, index: u32) -> u64 {
    (kind << 56) | ((generation as u64 & 0xff_ffff) << 32) | index as u64
}

#[derive(Debug, Clone, Copy, Default)]
struct Pkt {
    conn: u32,
    generation: u32,
    seq: u64,
    len: u32,
    wire: u32,
    /// Cumulative ACK carried (ACK packets).
    ack: u64,
    hop: u16,
    band: u8,
    is_ack: bool,
    ect: bool,
    ce: bool,
    ece: bool,
}

struct Port {
    /// Serialisation: exact picoseconds per byte, or (num, den) for `ceil(bytes * num / den)`.
    ps_per_byte: Option<u64>,
    ratio: (u128, u128),
    delay: Ps,
    queues: Vec<VecDeque<u32>>,
    q_bytes: Vec<u64>,
    q_packets: Vec<u64>,
    busy: bool,
    current: u32,
    /// Packets on the link: (arrival at the far end, packet).
    pipe: VecDeque<(Ps, u32)>,
    /// A host's NIC: it never drops; a sender waits for room instead
    /// (connections waiting, in order).
    host: bool,
    blocked: VecDeque<u32>,
    node: u32,
    name: String,
    packets: u64,
    bytes: u64,
    drops: u64,
    marks: u64,
    max_packets: u64,
    max_bytes: u64,
    sampled: Vec<(u64, u64)>,
}

impl Port {
    #[inline]
    fn tx_ps(&self, bytes: u32) -> Ps {
        match self.ps_per_byte {
            Some(p) => p * bytes as u64,
            None => {
                let (num, den) = self.ratio;
                ((bytes as u128 * num).div_ceil(den)).min(u64::MAX as u128) as Ps
            }
        }
    }
}

/// One message on a connection: bytes `[start, end)` of its stream.
#[derive(Debug, Clone, Copy)]
struct Msg {
    id: u32,
    end: u64,
    start: u64,
    tx_end: Ps,
    req: TransferRequest,
    start_ns: Time,
    retransmits: u32,
    timeouts: u32,
    drops: u32,
    marks: u32,
}

struct Conn {
    generation: u32,
    band: u8,
    fwd: u32,
    rev: u32,
    sender: Sender,
    receiver: Receiver,
    msgs: VecDeque<Msg>,
    rto_at: Ps,
    delack_at: Ps,
    /// Waiting for room in its NIC's queue.
    blocked: bool,
}

pub(super) struct PacketNet {
    topo: Topology,
    spec: PacketSpec,
    tcp: TcpConfig,
    ports: Vec<Port>,
    pkts: Vec<Pkt>,
    free_pkts: Vec<u32>,
    conns: Vec<Conn>,
    conn_of: HashMap<u64, u32>,
    free_conns: Vec<u32>,
    paths: Vec<Path>,
    path_of: HashMap<u64, u32>,
    queue: EventQueue<u64>,
    /// Engine time of the wakeup asked for last (None once it ran).
    wake_at: Option<Time>,
    /// Deliveries made while the engine was not asking (inside `start`).
    pending: Vec<(Time, Delivery)>,
    record: bool,
    records: Vec<FlowRecord>,
    samples: Vec<QueueSample>,
    truncated: bool,
    /// Whether a queue-sampling event is pending.
    sampling: bool,
    segs: Vec<Segment>,
    /// Intra-host transfers in flight (slot per event index) and free slots;
    /// per link, when its FIFO server is free (intra-host ports only).
    local: Vec<(Delivery, FlowRecord)>,
    free_local: Vec<u32>,
    free_at: Vec<Ps>,
    header: u32,
    totals: Totals,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Totals {
    pub packets_forwarded: u64,
    pub drops: u64,
    pub ecn_marks: u64,
    pub retransmits: u64,
    pub timeouts: u64,
}

fn bad(message: String) -> Error {
    Error::new(ErrorKind::BadInput, message)
}

/// The error for a packet-level run that cannot be timed on the engine's clock.
fn past_clock() -> Error {
    Error::out_of_range(format!("packet-level simulated time would pass {MAX_TIME} ns; sizes or bandwidth are far off"))
}

impl PacketNet {
    pub(super) fn new(topo: Topology, spec: &NetworkSpec) -> Result<Self, Error> {
        let p = spec.packet.unwrap_or_default();
        if !(1..=8).contains(&p.bands) {
            return Err(bad(format!("network.packet.bands = {}: use 1 to 8 strict-priority bands", p.bands)));
        }
        if !(576..=9216).contains(&p.mtu) {
            return Err(bad(format!("network.packet.mtu = {}: use an IP MTU between 576 and 9216 bytes", p.mtu)));
        }
        if p.queue_limit == 0 {
            return Err(bad("network.packet.queue_limit = 0: a port must hold at least one packet".into()));
        }
        if p.initial_window == 0 || p.initial_window > 1000 {
            return Err(bad(format!("network.packet.initial_window = {}: use 1 to 1000 segments", p.initial_window)));
        }
        if p.rto_min_ns == 0 || p.rto_initial_ns == 0 || p.rto_min_ns > 60_000_000_000 || p.rto_initial_ns > 60_000_000_000 {
            return Err(bad("network.packet.rto_min / rto_initial must be between 1 ns and 60 s".into()));
        }
        if p.delayed_ack && (p.delayed_ack_timeout_ns == 0 || p.delayed_ack_timeout_ns > 60_000_000_000) {
            return Err(bad("network.packet.delayed_ack_timeout must be between 1 ns and 60 s".into()));
        }
        if !(p.dctcp_g > 0.0 && p.dctcp_g <= 1.0) {
            return Err(bad(format!("network.packet.dctcp_g = {}: use a gain in (0, 1]", p.dctcp_g)));
        }
        if p.receive_window < 2 * p.mtu as u64 {
            return Err(bad(format!("network.packet.receive_window = {}: at least two segments", p.receive_window)));
        }
        if p.queue_sample_ns == Some(0) {
            return Err(bad("network.packet.queue_sample = 0: give a positive sampling period, or none".into()));
        }
        if p.transport == Transport::Dctcp && p.ecn_threshold.is_none() {
            return Err(bad("network.packet.transport = dctcp needs ecn_threshold (K, in packets; 65 is usual at 10 Gbit/s)".into()));
        }
        if topo.sprays() {
            return Err(bad("network.routing = spray is not modelled at packet level (per-packet spraying reorders TCP segments); use routing = ecmp".into()));
        }
        let header = 40 + if p.tcp_timestamps { 12 } else { 0 };
        let mss = (p.mtu - header) as u64;
        let tcp = TcpConfig {
            mss,
            iw: p.initial_window as u64,
            rto_min: p.rto_min_ns * PS_PER_NS,
            rto_initial: p.rto_initial_ns * PS_PER_NS,
            rwnd: p.receive_window,
            restart_after_idle: p.restart_after_idle,
            dctcp_g: (p.transport == Transport::Dctcp).then_some(p.dctcp_g),
            delayed_ack: p.delayed_ack,
            delayed_ack_timeout: p.delayed_ack_timeout_ns * PS_PER_NS,
        };
        let mut ports = Vec::with_capacity(topo.links.len());
        for (l, link) in topo.links.iter().enumerate() {
            // ps per byte = 8e12 / bps = 8e12 * den / num.
            let (num, den) = match link.bps {
                Some(r) => (8_000_000_000_000u128 * r.den, r.num),
                None => {
                    let bps = link.capacity * 8e9;
                    ((8e12 / bps * 1e6).ceil() as u128, 1_000_000u128)
                }
            };
            let ps_per_byte = (num % den == 0).then(|| (num / den) as u64);
            let (node, name) = topo.link_owner(l as u32);
            let bands = p.bands as usize;
            ports.push(Port {
                ps_per_byte,
                ratio: (num, den),
                delay: link.delay * PS_PER_NS,
                queues: (0..bands).map(|_| VecDeque::new()).collect(),
                q_bytes: vec![0; bands],
                q_packets: vec![0; bands],
                busy: false,
                current: 0,
                pipe: VecDeque::new(),
                host: topo.link_is_nic(l as u32),
                blocked: VecDeque::new(),
                node,
                name,
                packets: 0,
                bytes: 0,
                drops: 0,
                marks: 0,
                max_packets: 0,
                max_bytes: 0,
                sampled: vec![(0, 0); bands],
            });
        }
        let mut net = PacketNet {
            topo,
            spec: p,
            tcp,
            ports,
            pkts: Vec::new(),
            free_pkts: Vec::new(),
            conns: Vec::new(),
            conn_of: HashMap::default(),
            free_conns: Vec::new(),
            paths: Vec::new(),
            path_of: HashMap::default(),
            queue: EventQueue::new(),
            wake_at: None,
            pending: Vec::new(),
            record: spec.record_flows,
            records: Vec::new(),
            samples: Vec::new(),
            truncated: false,
            sampling: false,
            segs: Vec::new(),
            local: Vec::new(),
            free_local: Vec::new(),
            free_at: Vec::new(),
            header,
            totals: Totals::default(),
        };
        net.arm_sampling(0);
        Ok(net)
    }

    /// Wire bytes of an IP packet of `ip` bytes.
    #[inline]
    fn wire(&self, ip: u32) -> u32 {
        match self.spec.framing {
            Framing::Ethernet => (ip + 18).max(64) + 20,
            Framing::Ppp => ip + 2,
        }
    }

    fn path_index(&mut self, src: u32, dst: u32) -> u32 {
        let key = self.topo.route_key(src, dst);
        if let Some(&i) = self.path_of.get(&key) {
            return i;
        }
        let path = self.topo.route(src, dst);
        self.paths.push(path);
        let i = self.paths.len() as u32 - 1;
        self.path_of.insert(key, i);
        i
    }

    fn connection(&mut self, req: &TransferRequest) -> u32 {
        let key = ((req.src as u64) << 35) | ((req.dst as u64) << 8) | req.band as u64;
        if !self.spec.connection_per_message {
            if let Some(&c) = self.conn_of.get(&key) {
                return c;
            }
        }
        let (fwd, rev) = (self.path_index(req.src, req.dst), self.path_index(req.dst, req.src));
        let conn = Conn {
            generation: 0,
            band: req.band.min(self.spec.bands - 1),
            fwd,
            rev,
            sender: Sender::new(&self.tcp),
            receiver: Receiver::new(),
            msgs: VecDeque::new(),
            rto_at: NEVER,
            delack_at: NEVER,
            blocked: false,
        };
        let c = match self.free_conns.pop() {
            Some(c) => {
                let generation = self.conns[c as usize].generation.wrapping_add(1) & 0xff_ffff;
                self.conns[c as usize] = Conn { generation, ..conn };
                c
            }
            None => {
                self.conns.push(conn);
                self.conns.len() as u32 - 1
            }
        };
        if !self.spec.connection_per_message {
            self.conn_of.insert(key, c);
        }
        c
    }

    fn alloc(&mut self, p: Pkt) -> u32 {
        match self.free_pkts.pop() {
            Some(i) => {
                self.pkts[i as usize] = p;
                i
            }
            None => {
                self.pkts.push(p);
                self.pkts.len() as u32 - 1
            }
        }
    }

    /// The message of connection `c` holding stream byte `seq`.
    fn msg_at(&mut self, c: u32, seq: u64) -> Option<&mut Msg> {
        self.conns[c as usize].msgs.iter_mut().find(|m| seq < m.end && seq >= m.start)
    }

    /// Room for new packets of `band` in NIC port `port`'s queue (unbounded for a switch port).
    fn room(&self, port: u32, band: u8) -> u64 {
        let pt = &self.ports[port as usize];
        if !pt.host {
            return u64::MAX;
        }
        let (packets, bytes) = match self.spec.queue_scope {
            QueueScope::Band => (pt.q_packets[band as usize], pt.q_bytes[band as usize]),
            QueueScope::Port => (pt.q_packets.iter().sum(), pt.q_bytes.iter().sum()),
        };
        let free = match self.spec.queue_limit_unit {
            LimitUnit::Packets => self.spec.queue_limit.saturating_sub(packets),
            LimitUnit::Bytes => self.spec.queue_limit.saturating_sub(bytes) / self.wire(self.spec.mtu) as u64,
        };
        free + u64::from(!pt.busy)
    }

    /// Lets connection `c` send what its window and its NIC's room allow,
    /// after any retransmission already in `self.segs`.
    fn pump(&mut self, c: u32, now: Ps) {
        let conn = &self.conns[c as usize];
        let first = self.paths[conn.fwd as usize].links()[0];
        let budget = self.room(first, conn.band);
        let conn = &mut self.conns[c as usize];
        let stopped = conn.sender.send(&self.tcp, now, &mut self.segs, budget);
        if stopped && !conn.blocked {
            conn.blocked = true;
            self.ports[first as usize].blocked.push_back(c);
        }
        self.transmit(c, now);
    }

    /// Sends the sender's new segments (in `self.segs`) of connection `c`.
    fn transmit(&mut self, c: u32, now: Ps) {
        let segs = std::mem::take(&mut self.segs);
        let conn = &self.conns[c as usize];
        let (generation, band, first) = (conn.generation, conn.band, self.paths[conn.fwd as usize].links()[0]);
        let ect = self.tcp.dctcp_g.is_some();
        for s in &segs {
            if s.retransmission {
                self.totals.retransmits += 1;
                if let Some(m) = self.msg_at(c, s.seq) {
                    m.retransmits += 1;
                }
            }
            let wire = self.wire(s.len as u32 + self.header);
            let p = self.alloc(Pkt { conn: c, generation, seq: s.seq, len: s.len as u32, wire, ack: 0, hop: 0, band, is_ack: false, ect, ce: false, ece: false });
            self.enqueue(first, p, now);
        }
        self.segs = segs;
        self.segs.clear();
        self.arm_rto(c);
    }

    fn arm_rto(&mut self, c: u32) {
        let conn = &mut self.conns[c as usize];
        let d = conn.sender.rto_deadline;
        if d != NEVER && (conn.rto_at == NEVER || d < conn.rto_at) {
            conn.rto_at = d;
            let ev = event(EV_RTO, conn.generation, c);
            self.queue.push(d, ev);
        }
    }

    fn send_ack(&mut self, c: u32, ack: u64, ece: bool, now: Ps) {
        let conn = &self.conns[c as usize];
        let (generation, band, first) = (conn.generation, conn.band, self.paths[conn.rev as usize].links()[0]);
        let wire = self.wire(self.header);
        let p = self.alloc(Pkt { conn: c, generation, seq: 0, len: 0, wire, ack, hop: 0, band, is_ack: true, ect: false, ce: false, ece });
        self.enqueue(first, p, now);
    }

    fn enqueue(&mut self, port: u32, p: u32, now: Ps) {
        let pk = self.pkts[p as usize];
        let band = pk.band as usize;
        let spec = &self.spec;
        let pt = &mut self.ports[port as usize];
        if !pt.busy {
            pt.busy = true;
            pt.current = p;
            let done = now + pt.tx_ps(pk.wire);
            self.queue.push(done, event(EV_TX, 0, port));
            return;
        }
        let host = pt.host;
        let held = if host { 0 } else { match (spec.queue_scope, spec.queue_limit_unit) {
            (QueueScope::Band, LimitUnit::Packets) => pt.q_packets[band] + 1,
            (QueueScope::Band, LimitUnit::Bytes) => pt.q_bytes[band] + pk.wire as u64,
            (QueueScope::Port, LimitUnit::Packets) => pt.q_packets.iter().sum::<u64>() + 1,
            (QueueScope::Port, LimitUnit::Bytes) => pt.q_bytes.iter().sum::<u64>() + pk.wire as u64,
        } };
        if held > spec.queue_limit {
            pt.drops += 1;
            self.totals.drops += 1;
            self.free_pkts.push(p);
            if !pk.is_ack && self.conns[pk.conn as usize].generation == pk.generation {
                if let Some(m) = self.msg_at(pk.conn, pk.seq) {
                    m.drops += 1;
                }
            }
            return;
        }
        if pk.ect && !host {
            if let Some(k) = spec.ecn_threshold {
                if pt.q_packets[band] >= k as u64 {
                    self.pkts[p as usize].ce = true;
                    pt.marks += 1;
                    self.totals.ecn_marks += 1;
                    if self.conns[pk.conn as usize].generation == pk.generation {
                        if let Some(m) = self.msg_at(pk.conn, pk.seq) {
                            m.marks += 1;
                        }
                    }
                }
            }
        }
        let pt = &mut self.ports[port as usize];
        pt.queues[band].push_back(p);
        pt.q_packets[band] += 1;
        pt.q_bytes[band] += pk.wire as u64;
        let (packets, bytes): (u64, u64) = (pt.q_packets.iter().sum(), pt.q_bytes.iter().sum());
        pt.max_packets = pt.max_packets.max(packets);
        pt.max_bytes = pt.max_bytes.max(bytes);
    }

    /// Port `port` finished serialising its packet at `now`.
    fn tx_done(&mut self, port: u32, now: Ps) {
        let pt = &mut self.ports[port as usize];
        let p = pt.current;
        let pk = self.pkts[p as usize];
        pt.packets += 1;
        pt.bytes += pk.wire as u64;
        self.totals.packets_forwarded += 1;
        let arrive = now + pt.delay;
        pt.pipe.push_back((arrive, p));
        if pt.pipe.len() == 1 {
            self.queue.push(arrive, event(EV_ARRIVE, 0, port));
        }
        // Next packet, highest band first.
        let next = pt.queues.iter().position(|q| !q.is_empty());
        match next {
            Some(b) => {
                let q = pt.queues[b].pop_front().unwrap_or(0);
                let wire = self.pkts[q as usize].wire;
                pt.q_packets[b] -= 1;
                pt.q_bytes[b] -= wire as u64;
                pt.current = q;
                let done = now + pt.tx_ps(wire);
                self.queue.push(done, event(EV_TX, 0, port));
            }
            None => pt.busy = false,
        }
        if pt.host {
            if let Some(c) = pt.blocked.pop_front() {
                self.conns[c as usize].blocked = false;
                self.pump(c, now);
            }
        }
        if !pk.is_ack && pk.hop == 0 {
            // The last byte of a message left its sender (again).
            let c = &mut self.conns[pk.conn as usize];
            if c.generation == pk.generation {
                let end = pk.seq + pk.len as u64;
                for m in c.msgs.iter_mut() {
                    if m.end > end {
                        break;
                    }
                    if m.end > pk.seq {
                        m.tx_end = now;
                    }
                }
            }
        }
    }

    /// The first packet on link `port` reaches the far end at `now`.
    fn arrive(&mut self, port: u32, now: Ps, out: &mut Vec<Delivery>) -> bool {
        let pt = &mut self.ports[port as usize];
        let Some((_, p)) = pt.pipe.pop_front() else { return false };
        if let Some(&(t, _)) = pt.pipe.front() {
            self.queue.push(t, event(EV_ARRIVE, 0, port));
        }
        let pk = &mut self.pkts[p as usize];
        pk.hop += 1;
        let pk = *pk;
        let conn = &self.conns[pk.conn as usize];
        let stale = conn.generation != pk.generation;
        let next = self.paths[if pk.is_ack { conn.rev } else { conn.fwd } as usize].links().get(pk.hop as usize).copied();
        if let (false, Some(next)) = (stale, next) {
            self.enqueue(next, p, now);
            return false;
        }
        self.free_pkts.push(p);
        if stale {
            return false;
        }
        if pk.is_ack {
            let c = pk.conn;
            let conn = &mut self.conns[c as usize];
            conn.sender.on_ack(&self.tcp, now, pk.ack, pk.ece, &mut self.segs);
            self.pump(c, now);
            self.maybe_recycle(c);
            false
        } else {
            self.receive(pk, now, out)
        }
    }

    fn receive(&mut self, pk: Pkt, now: Ps, out: &mut Vec<Delivery>) -> bool {
        let c = pk.conn;
        let conn = &mut self.conns[c as usize];
        let plan = conn.receiver.on_data(&self.tcp, now, pk.seq, pk.len as u64, pk.ce);
        let rcv_nxt = conn.receiver.rcv_nxt;
        let mut delivered = false;
        while conn.msgs.front().is_some_and(|m| m.end <= rcv_nxt) {
            let Some(m) = conn.msgs.pop_front() else { break };
            let at_ns = now.div_ceil(PS_PER_NS);
            let tx_end = m.tx_end.div_ceil(PS_PER_NS).min(at_ns);
            out.push(Delivery { id: m.id, tx_end });
            delivered = true;
            if self.record {
                self.records.push(FlowRecord {
                    message: m.req.message,
                    src: m.req.src,
                    dst: m.req.dst,
                    bytes: m.req.bytes,
                    band: m.req.band,
                    tenant: m.req.tenant,
                    start: m.start_ns,
                    tx_end,
                    delivered: at_ns,
                    retransmits: m.retransmits,
                    timeouts: m.timeouts,
                    drops: m.drops,
                    ecn_marks: m.marks,
                    ..FlowRecord::default()
                });
            }
        }
        for k in 0..plan.count as usize {
            let (ack, ece) = plan.acks[k];
            self.send_ack(c, ack, ece, now);
        }
        if plan.timer != NEVER {
            let conn = &mut self.conns[c as usize];
            if conn.delack_at == NEVER || plan.timer < conn.delack_at {
                conn.delack_at = plan.timer;
                self.queue.push(plan.timer, event(EV_DELACK, conn.generation, c));
            }
        }
        delivered
    }

    fn maybe_recycle(&mut self, c: u32) {
        if !self.spec.connection_per_message {
            return;
        }
        let conn = &self.conns[c as usize];
        if conn.msgs.is_empty() && conn.sender.snd_una == conn.sender.app_end && conn.receiver.delack_deadline == NEVER {
            let conn = &mut self.conns[c as usize];
            conn.generation = conn.generation.wrapping_add(1) & 0xff_ffff;
            conn.rto_at = NEVER;
            conn.delack_at = NEVER;
            self.free_conns.push(c);
        }
    }

    fn on_rto(&mut self, c: u32, generation: u32, now: Ps) {
        let conn = &mut self.conns[c as usize];
        if conn.generation != generation || conn.rto_at != now {
            return;
        }
        conn.rto_at = NEVER;
        let d = conn.sender.rto_deadline;
        if d == NEVER {
            return;
        }
        if d > now {
            self.arm_rto(c);
            return;
        }
        let una = conn.sender.snd_una;
        conn.sender.on_timeout(&self.tcp, now, &mut self.segs);
        self.totals.timeouts += 1;
        if let Some(m) = self.msg_at(c, una) {
            m.timeouts += 1;
        }
        self.pump(c, now);
    }

    fn on_delack(&mut self, c: u32, generation: u32, now: Ps) {
        let conn = &mut self.conns[c as usize];
        if conn.generation != generation || conn.delack_at != now {
            return;
        }
        conn.delack_at = NEVER;
        if let Some((ack, ece)) = conn.receiver.on_delack(now) {
            self.send_ack(c, ack, ece, now);
        } else if conn.receiver.delack_deadline != NEVER {
            let d = conn.receiver.delack_deadline;
            conn.delack_at = d;
            self.queue.push(d, event(EV_DELACK, generation, c));
        }
        self.maybe_recycle(c);
    }

    /// Samples queues at the next multiple of the period after `now`, if sampling and not armed.
    fn arm_sampling(&mut self, now: Ps) {
        if let Some(period) = self.spec.queue_sample_ns {
            if !self.sampling && !self.truncated {
                let period = period * PS_PER_NS;
                self.sampling = true;
                self.queue.push((now / period + 1) * period, event(EV_SAMPLE, 0, 0));
            }
        }
    }

    /// A transfer between ranks of one host: FIFO intra-host ports, no packets.
    fn start_local(&mut self, now: Time, now_ps: Ps, req: TransferRequest) -> Result<(), Error> {
        if self.free_at.is_empty() {
            self.free_at = vec![0; self.ports.len()];
        }
        let path = self.topo.route(req.src, req.dst);
        let begin = path.links().iter().fold(now_ps, |t, &l| t.max(self.free_at[l as usize]));
        let first = &self.ports[path.links()[0] as usize];
        let tx = match first.ps_per_byte {
            Some(p) => p.checked_mul(req.bytes),
            None => u64::try_from((req.bytes as u128 * first.ratio.0).div_ceil(first.ratio.1)).ok(),
        };
        let tx_end = tx.and_then(|tx| begin.checked_add(tx)).ok_or_else(past_clock)?;
        for &l in path.links() {
            self.free_at[l as usize] = tx_end;
        }
        let arrive = tx_end.checked_add(path.latency * PS_PER_NS).filter(|&t| t / PS_PER_NS <= MAX_TIME).ok_or_else(past_clock)?;
        let record = FlowRecord { message: req.message, src: req.src, dst: req.dst, bytes: req.bytes, band: req.band, tenant: req.tenant, start: now, tx_end: tx_end.div_ceil(PS_PER_NS), delivered: arrive.div_ceil(PS_PER_NS), ..FlowRecord::default() };
        let entry = (Delivery { id: req.id, tx_end: record.tx_end }, record);
        let slot = match self.free_local.pop() {
            Some(i) => {
                self.local[i as usize] = entry;
                i
            }
            None => {
                self.local.push(entry);
                self.local.len() as u32 - 1
            }
        };
        self.queue.push(arrive, event(EV_LOCAL, 0, slot));
        Ok(())
    }

    fn sample(&mut self, now: Ps) {
        self.sampling = false;
        let Some(period) = self.spec.queue_sample_ns else { return };
        let t = now / PS_PER_NS;
        for (l, pt) in self.ports.iter_mut().enumerate() {
            for b in 0..pt.queues.len() {
                let cur = (pt.q_bytes[b], pt.q_packets[b]);
                if cur != pt.sampled[b] {
                    if self.samples.len() as u64 >= self.spec.queue_sample_cap {
                        self.truncated = true;
                        return;
                    }
                    pt.sampled[b] = cur;
                    self.samples.push(QueueSample { time: t, node: pt.node, port: l as u32, band: b as u8, bytes: cur.0, packets: cur.1 });
                }
            }
        }
        // Keep sampling while anything can still change.
        let moving = self.ports.iter().any(|p| p.busy || !p.pipe.is_empty())
            || self.conns.iter().any(|c| !c.msgs.is_empty() || c.sender.snd_una < c.sender.snd_max);
        if moving {
            self.sampling = true;
            self.queue.push(now + period * PS_PER_NS, event(EV_SAMPLE, 0, 0));
        }
    }

    /// Runs internal events strictly before `limit` ps (and at it, with
    /// `inclusive`), stopping after the first that delivers a message when
    /// `stop_on_delivery`. Returns the time of the last event run.
    fn run_until(&mut self, limit: Ps, inclusive: bool, stop_on_delivery: bool, out: &mut Vec<Delivery>) -> Result<(), Error> {
        while let Some(t) = self.queue.peek_time() {
            if t > limit || (t == limit && !inclusive) {
                break;
            }
            let Some((t, ev)) = self.queue.pop() else { break };
            if t / PS_PER_NS >= MAX_TIME {
                return Err(past_clock());
            }
            let (kind, generation, index) = (ev >> 56, ((ev >> 32) & 0xff_ffff) as u32, ev as u32);
            let delivered = match kind {
                EV_TX => {
                    self.tx_done(index, t);
                    false
                }
                EV_ARRIVE => self.arrive(index, t, out),
                EV_RTO => {
                    self.on_rto(index, generation, t);
                    false
                }
                EV_DELACK => {
                    self.on_delack(index, generation, t);
                    false
                }
                EV_LOCAL => {
                    let (delivery, record) = self.local[index as usize];
                    self.free_local.push(index);
                    out.push(delivery);
                    if self.record {
                        self.records.push(record);
                    }
                    true
                }
                _ => {
                    self.sample(t);
                    false
                }
            };
            if delivered && stop_on_delivery {
                break;
            }
        }
        Ok(())
    }

    /// Asks the engine to come back at the next internal event (or now, for pending deliveries).
    fn wake(&mut self, now: Time, sched: &mut dyn Scheduler) {
        let due = self.pending.iter().map(|&(t, _)| t).min();
        let next = self.queue.peek_time().map(|t| t.div_ceil(PS_PER_NS).max(now));
        let next = match (due, next) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(t) = next {
            if self.wake_at.is_none_or(|w| t < w) {
                self.wake_at = Some(t);
                sched.schedule(t, 0);
            }
        }
    }
}

impl NetworkModel for PacketNet {
    fn topology(&self) -> &Topology {
        &self.topo
    }

    fn start(&mut self, now: Time, req: TransferRequest, sched: &mut dyn Scheduler) -> Result<(), Error> {
        if req.src >= self.topo.ranks() || req.dst >= self.topo.ranks() || req.src == req.dst {
            return Err(Error::internal(format!("internal error, please report: transfer {} -> {} outside the {} placed ranks", req.src, req.dst, self.topo.ranks())));
        }
        let now_ps = now.checked_mul(PS_PER_NS).ok_or_else(past_clock)?;
        let mut early = Vec::new();
        self.run_until(now_ps, false, false, &mut early)?;
        self.pending.extend(early.into_iter().map(|d| (now, d)));
        if self.topo.intra_host(req.src, req.dst) {
            self.start_local(now, now_ps, req)?;
            self.wake(now, sched);
            return Ok(());
        }
        self.arm_sampling(now_ps);
        let c = self.connection(&req);
        let conn = &mut self.conns[c as usize];
        let start = conn.sender.app_end;
        conn.sender.push(&self.tcp, now_ps, req.bytes);
        let end = conn.sender.app_end;
        conn.msgs.push_back(Msg {
            id: req.id,
            end,
            start,
            tx_end: now_ps,
            req,
            start_ns: now,
            retransmits: 0,
            timeouts: 0,
            drops: 0,
            marks: 0,
        });
        if req.bytes == 0 {
            // Nothing to carry: delivered at once (after earlier messages of the connection).
            if conn.msgs.len() == 1 && conn.receiver.rcv_nxt >= end {
                conn.msgs.pop_back();
                self.pending.push((now, Delivery { id: req.id, tx_end: now }));
                if self.record {
                    self.records.push(FlowRecord { message: req.message, src: req.src, dst: req.dst, bytes: 0, band: req.band, tenant: req.tenant, start: now, tx_end: now, delivered: now, ..FlowRecord::default() });
                }
            }
        } else {
            self.pump(c, now_ps);
        }
        self.wake(now, sched);
        Ok(())
    }

    fn start_on(&mut self, _now: Time, _req: TransferRequest, _path: &Path, _sched: &mut dyn Scheduler) -> Result<(), Error> {
        Err(refuse_fans())
    }

    fn fan_ready(&self, _kind: FanKind, _ends: &[FanEnd], _now: Time) -> Result<Time, Error> {
        Err(refuse_fans())
    }

    fn start_fan(&mut self, _now: Time, _req: TransferRequest, _kind: FanKind, _ends: &[FanEnd], _sched: &mut dyn Scheduler) -> Result<(), Error> {
        Err(refuse_fans())
    }

    fn on_event(&mut self, now: Time, _token: u64, sched: &mut dyn Scheduler, out: &mut Vec<Delivery>) -> Result<(), Error> {
        if self.wake_at.is_some_and(|w| w <= now) {
            self.wake_at = None;
        }
        if !self.pending.is_empty() {
            out.extend(self.pending.iter().filter(|(t, _)| *t <= now).map(|&(_, d)| d));
            self.pending.retain(|(t, _)| *t > now);
        }
        let now_ps = now.checked_mul(PS_PER_NS).ok_or_else(past_clock)?;
        self.run_until(now_ps, true, false, out)?;
        if out.is_empty() && self.pending.is_empty() {
            // Run ahead up to the engine's next event, stopping at a delivery.
            let horizon = sched.horizon();
            if horizon > now {
                let mut ahead = Vec::new();
                self.run_until(horizon.saturating_mul(PS_PER_NS), false, true, &mut ahead)?;
                if !ahead.is_empty() {
                    let t = self.queue.now().div_ceil(PS_PER_NS);
                    self.pending.extend(ahead.into_iter().map(|d| (t, d)));
                }
            }
        }
        self.wake(now, sched);
        Ok(())
    }

    fn stats(&self) -> NetworkStats {
        NetworkStats { recomputations: 0, flows: self.records.len() as u64 }
    }

    fn take_flows(&mut self) -> Vec<FlowRecord> {
        std::mem::take(&mut self.records)
    }

    fn take_queues(&mut self) -> Vec<QueueSample> {
        std::mem::take(&mut self.samples)
    }

    fn ports(&self) -> Vec<PortRecord> {
        self.ports
            .iter()
            .enumerate()
            .take(self.topo.network_links() as usize)
            .map(|(l, p)| PortRecord {
                port: l as u32,
                node: p.node,
                name: p.name.clone(),
                packets: p.packets,
                bytes: p.bytes,
                drops: p.drops,
                ecn_marks: p.marks,
                max_packets: p.max_packets,
                max_bytes: p.max_bytes,
            })
            .collect()
    }

    fn packet_totals(&self) -> Option<(Totals, bool)> {
        Some((self.totals, self.truncated))
    }
}

fn refuse_fans() -> Error {
    bad("multicast and in-network aggregation are not modelled at packet level (TCP has no switch replication or aggregation); use fidelity flow or analytic for these strategies".into())
}
