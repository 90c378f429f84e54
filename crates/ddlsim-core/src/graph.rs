//! The workload graph: operations on ranks joined by dependencies.
//!
//! This is the engine's whole input. It knows no training algorithm:
//! producers (training lowering, replay of a capture, a user's own code)
//! build it, the executor runs it. An operation is ready when every
//! operation it depends on has ended. Ops that name a stream are run one
//! at a time on it, in the order its [`crate::stream::StreamPolicy`] picks.

pub use crate::algorithm::{Algorithm, LinkCost};
use crate::engine::{Time, MAX_TIME};
pub use crate::idle::{IdleCurve, IdleScaled};

/// What an operation does; decides how the executor runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Occupies its stream for `duration` ns.
    Compute = 0,
    /// A message of `bytes` from `rank` to `peer` (logged as a send row on
    /// the sender and a recv row on the receiver).
    Transfer = 1,
    /// This rank's part in collective `collective` (lowered at run time by
    /// its [`crate::collective::Collective`]).
    Collective = 2,
    /// Zero-duration synchronisation point.
    Barrier = 3,
    /// Zero-duration marker (e.g. an iteration boundary in a capture).
    Marker = 4,
}

impl Kind {
    pub fn from_code(code: u8) -> Option<Kind> {
        Some(match code {
            0 => Kind::Compute,
            1 => Kind::Transfer,
            2 => Kind::Collective,
            3 => Kind::Barrier,
            4 => Kind::Marker,
            _ => return None,
        })
    }
}

/// No stream: the op starts as soon as it is ready.
pub const NO_STREAM: u32 = u32::MAX;

#[derive(Debug, Clone)]
pub struct Op {
    pub kind: Kind,
    /// Index into [`Graph::op_names`] (the log's open `op` vocabulary).
    pub name: u32,
    pub rank: u32,
    /// Receiver of a transfer, -1 otherwise.
    pub peer: i32,
    pub stream: u32,
    pub duration: u64,
    pub bytes: u64,
    /// Scheduling priority: lower runs first under a priority stream policy.
    pub priority: i32,
    /// Network priority band of the op's transfers (0 = highest).
    pub band: u8,
    pub tenant: u32,
    pub iteration: i32,
    pub layer: i32,
    pub tensor: i32,
    pub group: i32,
    pub collective: i64,
    /// This rank's position in the collective's member list.
    pub member: u32,
    pub rpc: i64,
}

impl Op {
    pub fn new(kind: Kind, name: u32, rank: u32) -> Self {
        Op {
            kind,
            name,
            rank,
            peer: -1,
            stream: NO_STREAM,
            duration: 0,
            bytes: 0,
            priority: 0,
            band: 0,
            tenant: 0,
            iteration: -1,
            layer: -1,
            tensor: -1,
            group: -1,
            collective: -1,
            member: 0,
            rpc: -1,
        }
    }
}

/// The collective type written to the log (`coll_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CollectiveType {
    AllReduce = 0,
}

/// One collective instance: which ranks take part and how many bytes each contributes.
#[derive(Debug, Clone)]
pub struct CollectiveSpec {
    pub algorithm: Algorithm,
    pub coll_type: CollectiveType,
    pub members: Vec<u32>,
    pub bytes: u64,
    /// Partition the tensor into messages of at most this many bytes
    /// (ring only, see [`crate::collective::ring`]); 0: one message.
    pub chunk_bytes: u64,
    /// Reduction cost per byte a member combines (MG-WFBP's gamma); 0: free.
    pub gamma_ns_per_byte: f64,
}

/// Which ready op a stream runs next (see [`crate::stream`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    Fifo,
    /// Lowest `priority` first; with `preempt`, a running collective yields
    /// to a more urgent op at its chunk boundaries.
    Priority { preempt: bool },
}

#[derive(Debug, Clone, Copy)]
pub struct StreamSpec {
    pub rank: u32,
    /// Index into [`Graph::stream_names`].
    pub name: u32,
    pub policy: PolicyKind,
    /// ByteScheduler's credit in bytes: while the ops running on the stream
    /// move fewer bytes than this, the next queued op starts too (so the
    /// bytes in flight exceed the credit by less than one op). 0: one op at a time.
    pub credit: u64,
}

/// How a fan's transfers share the network (see [`crate::network::innet`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanKind {
    /// One sender, several receivers: one copy per link of the multicast tree.
    Multicast,
    /// Several senders, one receiver: a switch sums the contributions and
    /// forwards one aggregate.
    Aggregate,
}

/// Transfer ops that travel as one in-network operation: a multicast (same
/// sender, distinct receivers) or an aggregation (distinct senders, same
/// receiver), all of the same size, on no stream. The first op leads: it
/// holds the multicast's send row / the aggregate's recv row in the log.
#[derive(Debug, Clone)]
pub struct FanSpec {
    pub kind: FanKind,
    pub ops: Vec<u32>,
}

/// Ops plus dependencies in compressed-sparse-row form, the collectives,
/// streams and the rank -> host map.
#[derive(Debug, Default, Clone)]
pub struct Graph {
    pub ops: Vec<Op>,
    dep_offsets: Vec<u32>,
    dep_ids: Vec<u32>,
    pub collectives: Vec<CollectiveSpec>,
    pub streams: Vec<StreamSpec>,
    /// Host of each rank; ranks without an entry are on a host of their own.
    pub host_of_rank: Vec<u32>,
    pub op_names: Vec<String>,
    pub stream_names: Vec<String>,
    /// Closed-form collective mode: every collective is one event per member
    /// at this cost (see [`crate::collective::closed_form`]); None: step by step.
    pub closed_form: Option<LinkCost>,
    /// In-network operations (multicast, aggregation) over transfer ops.
    pub fans: Vec<FanSpec>,
    /// Preemptive streams yield only where a collective member starts a message
    /// (P3's slice boundaries), not at every step.
    pub preempt_at_messages: bool,
    /// Release times: (op, t) makes the op not ready before t (a job or a
    /// background flow that arrives at t), whatever its dependencies.
    pub releases: Vec<(u32, Time)>,
    /// Wake-ups: (op, w) makes a compute op that becomes ready while its
    /// stream is idle (nothing running) start w ns later, holding the stream
    /// from the moment it was ready; one that finds the stream busy waits its
    /// turn as before and starts as the stream frees (a thread that must be
    /// woken to take work it was blocked waiting for: a PS worker's training
    /// loop taking a response, [`crate::lower::client_cost`]).
    pub wakeups: Vec<(u32, Time)>,
    /// Continuations: an op listed here that becomes ready when an op on its
    /// own stream ends (that op its last dependency) starts there at once,
    /// ahead of the ops queued on the stream: the thread that ran the op goes
    /// on with it (a PS server's update, run by the processing thread right
    /// after the push that completes it, `capture/ps_server.py`). Otherwise
    /// it queues as any op does.
    pub continuations: Vec<u32>,
    /// Transit delays: (op, d) delivers a transfer op d ns later than the
    /// network delivers its message (its own transport time beyond the
    /// route's latency, [`crate::lower::message_latency`]); its recv row and
    /// what depends on it follow then. The link is free from the network's
    /// delivery on.
    pub transit_delays: Vec<(u32, Time)>,
    /// Compute after a wait (see [`crate::idle`]): curves of the ratio to no
    /// wait by idle length, and the ops scaled by one; both empty: none.
    pub idle_curves: Vec<IdleCurve>,
    pub idle_scaled: Vec<IdleScaled>,
    /// Rank classes (closed form): each worker of the graph stands for its
    /// class (see [`crate::lower::classes`]); None: every rank is its own.
    pub rank_classes: Option<Box<RankClasses>>,
}

/// A graph with nothing in it (what a paused run points at while its own graph grows).
pub(crate) static EMPTY: Graph = Graph {
    ops: Vec::new(),
    dep_offsets: Vec::new(),
    dep_ids: Vec::new(),
    collectives: Vec::new(),
    streams: Vec::new(),
    host_of_rank: Vec::new(),
    op_names: Vec::new(),
    stream_names: Vec::new(),
    closed_form: None,
    fans: Vec::new(),
    preempt_at_messages: false,
    releases: Vec::new(),
    wakeups: Vec::new(),
    continuations: Vec::new(),
    transit_delays: Vec::new(),
    idle_curves: Vec::new(),
    idle_scaled: Vec::new(),
    rank_classes: None,
};

impl Graph {
    pub fn new() -> Self {
        Graph { dep_offsets: vec![0], ..Default::default() }
    }

    /// Builds a graph from columns (the binding's path); checks every index.
    #[allow(clippy::too_many_arguments)]
    pub fn from_parts(
        ops: Vec<Op>,
        dep_offsets: Vec<u32>,
        dep_ids: Vec<u32>,
        collectives: Vec<CollectiveSpec>,
        streams: Vec<StreamSpec>,
        host_of_rank: Vec<u32>,
        op_names: Vec<String>,
        stream_names: Vec<String>,
    ) -> Result<Self, String> {
        let g = Graph { ops, dep_offsets, dep_ids, collectives, streams, host_of_rank, op_names, stream_names, closed_form: None, fans: Vec::new(), preempt_at_messages: false, releases: Vec::new(), wakeups: Vec::new(), continuations: Vec::new(), transit_delays: Vec::new(), idle_curves: Vec::new(), idle_scaled: Vec::new(), rank_classes: None };
        g.check()?;
        Ok(g)
    }

    /// Interns an op name, returning its index.
    pub fn op_name(&mut self, name: &str) -> u32 {
        match self.op_names.iter().position(|n| n == name) {
            Some(i) => i as u32,
            None => {
                self.op_names.push(name.to_string());
                (self.op_names.len() - 1) as u32
            }
        }
    }

    /// Adds an op depending on `deps` (ids of ops added earlier); returns its id.
    pub fn add(&mut self, op: Op, deps: &[u32]) -> u32 {
        let id = self.ops.len() as u32;
        debug_assert!(deps.iter().all(|&d| d < id), "dependencies must be added first");
        self.ops.push(op);
        self.dep_ids.extend_from_slice(deps);
        self.dep_offsets.push(self.dep_ids.len() as u32);
        id
    }

    /// [`Graph::add`] of an op that is not ready before `release` (ns), whatever its deps.
    pub fn add_released(&mut self, op: Op, deps: &[u32], release: Time) -> u32 {
        let id = self.add(op, deps);
        self.releases.push((id, release));
        id
    }

    /// [`Graph::add`] of a compute op on a stream that starts `wakeup` ns after it became ready when it finds its
    /// stream idle (see [`Graph::wakeups`]); a zero wake-up adds the op alone.
    pub fn add_woken(&mut self, op: Op, deps: &[u32], wakeup: Time) -> u32 {
        let id = self.add(op, deps);
        if wakeup > 0 {
            self.wakeups.push((id, wakeup));
        }
        id
    }

    pub fn add_collective(&mut self, spec: CollectiveSpec) -> i64 {
        self.collectives.push(spec);
        (self.collectives.len() - 1) as i64
    }

    pub fn new_stream(&mut self, rank: u32, name: &str, policy: PolicyKind) -> u32 {
        let name = match self.stream_names.iter().position(|n| n == name) {
            Some(i) => i as u32,
            None => {
                self.stream_names.push(name.to_string());
                (self.stream_names.len() - 1) as u32
            }
        };
        self.streams.push(StreamSpec { rank, name, policy, credit: 0 });
        (self.streams.len() - 1) as u32
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn deps(&self, id: u32) -> &[u32] {
        let i = id as usize;
        &self.dep_ids[self.dep_offsets[i] as usize..self.dep_offsets[i + 1] as usize]
    }

    pub fn dep_offsets(&self) -> &[u32] {
        &self.dep_offsets
    }

    pub fn dep_ids(&self) -> &[u32] {
        &self.dep_ids
    }

    /// Number of ranks: one more than the highest rank any op or collective names.
    pub fn ranks(&self) -> u32 {
        let ops = self.ops.iter().map(|o| o.rank.max(o.peer.max(0) as u32) + 1).max().unwrap_or(0);
        let coll = self.collectives.iter().flat_map(|c| c.members.iter()).map(|&m| m + 1).max().unwrap_or(0);
        ops.max(coll).max(self.host_of_rank.len() as u32)
    }

    /// The host of every rank (a rank without a given host gets its own).
    pub fn hosts(&self) -> Vec<u32> {
        let ranks = self.ranks() as usize;
        let mut hosts = self.host_of_rank.clone();
        let mut next = hosts.iter().copied().max().map_or(0, |h| h + 1);
        while hosts.len() < ranks {
            hosts.push(next);
            next += 1;
        }
        hosts
    }

    /// Successor lists (CSR): for each op, the ops that depend on it.
    pub fn successors(&self) -> (Vec<u32>, Vec<u32>) {
        let n = self.ops.len();
        let mut counts = vec![0u32; n + 1];
        for &d in &self.dep_ids {
            counts[d as usize + 1] += 1;
        }
        for i in 0..n {
            counts[i + 1] += counts[i];
        }
        let mut fill = counts.clone();
        let mut succ = vec![0u32; self.dep_ids.len()];
        for id in 0..n as u32 {
            for &d in self.deps(id) {
                succ[fill[d as usize] as usize] = id;
                fill[d as usize] += 1;
            }
        }
        (counts, succ)
    }

    /// Checks every cross-reference, so the executor can index without fear.
    pub fn check(&self) -> Result<(), String> {
        let n = self.ops.len();
        if self.dep_offsets.len() != n + 1 || self.dep_offsets[0] != 0 {
            return Err(format!("dep_offsets must have {} entries starting at 0", n + 1));
        }
        if self.dep_offsets.windows(2).any(|w| w[0] > w[1]) || *self.dep_offsets.last().unwrap() as usize != self.dep_ids.len() {
            return Err("dep_offsets must be non-decreasing and end at the number of deps".into());
        }
        if let Some(&d) = self.dep_ids.iter().find(|&&d| d as usize >= n) {
            return Err(format!("a dependency names op {d}, but the graph has {n} ops"));
        }
        for (i, op) in self.ops.iter().enumerate() {
            if op.name as usize >= self.op_names.len() {
                return Err(format!("op {i}: name index {} has no entry in op_names", op.name));
            }
            if op.stream != NO_STREAM && op.stream as usize >= self.streams.len() {
                return Err(format!("op {i}: stream {} does not exist", op.stream));
            }
            match op.kind {
                Kind::Transfer => {
                    if op.peer < 0 || op.peer as u32 == op.rank {
                        return Err(format!("op {i}: a transfer needs a peer other than its rank, got {}", op.peer));
                    }
                }
                Kind::Collective => {
                    let Some(c) = self.collectives.get(op.collective.max(0) as usize).filter(|_| op.collective >= 0) else {
                        return Err(format!("op {i}: collective {} does not exist", op.collective));
                    };
                    if c.members.get(op.member as usize) != Some(&op.rank) {
                        return Err(format!("op {i}: rank {} is not member {} of collective {}", op.rank, op.member, op.collective));
                    }
                }
                _ => {}
            }
        }
        for (c, spec) in self.collectives.iter().enumerate() {
            if spec.members.is_empty() {
                return Err(format!("collective {c} has no members"));
            }
            let mut seen = spec.members.clone();
            seen.sort_unstable();
            seen.dedup();
            if seen.len() != spec.members.len() {
                return Err(format!("collective {c} lists a rank twice"));
            }
        }
        for (s, spec) in self.streams.iter().enumerate() {
            if spec.name as usize >= self.stream_names.len() {
                return Err(format!("stream {s}: name index {} has no entry in stream_names", spec.name));
            }
        }
        self.check_fans()?;
        let mut released = vec![false; n];
        for &(op, t) in &self.releases {
            if op as usize >= n {
                return Err(format!("a release time names op {op}, but the graph has {n} ops"));
            }
            if std::mem::replace(&mut released[op as usize], true) {
                return Err(format!("op {op} has two release times"));
            }
            if t > MAX_TIME {
                return Err(format!("op {op}: release time {t} ns is past the engine's clock ({MAX_TIME} ns)"));
            }
        }
        for &op in &self.continuations {
            let Some(o) = self.ops.get(op as usize) else {
                return Err(format!("a continuation names op {op}, but the graph has {n} ops"));
            };
            if o.stream == NO_STREAM {
                return Err(format!("op {op}: a continuation applies to an op on a stream"));
            }
        }
        let mut woken = vec![false; n];
        for &(op, w) in &self.wakeups {
            let Some(o) = self.ops.get(op as usize) else {
                return Err(format!("a wake-up names op {op}, but the graph has {n} ops"));
            };
            if o.kind != Kind::Compute || o.stream == NO_STREAM {
                return Err(format!("op {op}: a wake-up applies to a compute op on a stream"));
            }
            if std::mem::replace(&mut woken[op as usize], true) {
                return Err(format!("op {op} has two wake-ups"));
            }
            if w > MAX_TIME {
                return Err(format!("op {op}: wake-up {w} ns is past the engine's clock ({MAX_TIME} ns)"));
            }
        }
        let mut delayed = vec![false; if self.transit_delays.is_empty() { 0 } else { n }];
        for &(op, d) in &self.transit_delays {
            let Some(o) = self.ops.get(op as usize) else {
                return Err(format!("a transit delay names op {op}, but the graph has {n} ops"));
            };
            if o.kind != Kind::Transfer {
                return Err(format!("op {op}: a transit delay applies to a transfer op"));
            }
            if std::mem::replace(&mut delayed[op as usize], true) {
                return Err(format!("op {op} has two transit delays"));
            }
            if d > MAX_TIME {
                return Err(format!("op {op}: transit delay {d} ns is past the engine's clock ({MAX_TIME} ns)"));
            }
        }
        if let Some(&op) = self.fans.iter().flat_map(|f| f.ops.iter()).find(|&&op| delayed.get(op as usize) == Some(&true)) {
            return Err(format!("op {op}: a transit delay applies to a point-to-point transfer, not a fan's"));
        }
        self.check_idle_scaled()
    }

    /// Idle curves well formed; each scaled op a compute op on a stream, scaled once, by a curve that exists, after
    /// an idle between two ops of its stream that come before it (`until` may be the op itself).
    fn check_idle_scaled(&self) -> Result<(), String> {
        for (c, curve) in self.idle_curves.iter().enumerate() {
            curve.check().map_err(|e| format!("idle curve {c}: {e}"))?;
        }
        let n = self.ops.len();
        let mut scaled = vec![false; if self.idle_scaled.is_empty() { 0 } else { n }];
        for s in &self.idle_scaled {
            let Some(o) = self.ops.get(s.op as usize) else {
                return Err(format!("an idle scaling names op {}, but the graph has {n} ops", s.op));
            };
            if o.kind != Kind::Compute || o.stream == NO_STREAM {
                return Err(format!("op {}: an idle scaling applies to a compute op on a stream", s.op));
            }
            if s.curve as usize >= self.idle_curves.len() {
                return Err(format!("op {}: idle curve {} does not exist ({} curves)", s.op, s.curve, self.idle_curves.len()));
            }
            if s.after >= s.until || s.until > s.op || self.ops[s.after as usize].stream != o.stream
                || self.ops[s.until as usize].stream != o.stream {
                return Err(format!("op {}: its idle runs from op {} to op {}, which must be ops of its stream in that \
                                    order, the second no later than it", s.op, s.after, s.until));
            }
            if s.captured_ns > MAX_TIME {
                return Err(format!("op {}: captured idle {} ns is past the engine's clock", s.op, s.captured_ns));
            }
            if std::mem::replace(&mut scaled[s.op as usize], true) {
                return Err(format!("op {} has two idle scalings", s.op));
            }
        }
        Ok(())
    }

    /// Fans: transfer ops on no stream, each in one fan at most, one size;
    /// a multicast's ops share their sender, an aggregation's their receiver.
    fn check_fans(&self) -> Result<(), String> {
        let mut in_fan = vec![false; self.ops.len()];
        for (f, fan) in self.fans.iter().enumerate() {
            let Some(&lead) = fan.ops.first() else {
                return Err(format!("fan {f} has no ops"));
            };
            let lead = self.ops.get(lead as usize).ok_or_else(|| format!("fan {f} names op {lead}, which does not exist"))?;
            let mut ends = Vec::with_capacity(fan.ops.len());
            for &i in &fan.ops {
                let Some(op) = self.ops.get(i as usize) else {
                    return Err(format!("fan {f} names op {i}, which does not exist"));
                };
                if op.kind != Kind::Transfer || op.stream != NO_STREAM {
                    return Err(format!("fan {f}: op {i} is not a transfer on no stream"));
                }
                if std::mem::replace(&mut in_fan[i as usize], true) {
                    return Err(format!("op {i} is in two fans"));
                }
                if op.bytes != lead.bytes {
                    return Err(format!("fan {f}: op {i} has {} bytes, the first op {}", op.bytes, lead.bytes));
                }
                let (same, other) = match fan.kind {
                    FanKind::Multicast => (op.rank == lead.rank, op.peer),
                    FanKind::Aggregate => (op.peer == lead.peer, op.rank as i32),
                };
                if !same {
                    let end = if fan.kind == FanKind::Multicast { "sender" } else { "receiver" };
                    return Err(format!("fan {f}: op {i} does not share the first op's {end}"));
                }
                ends.push(other);
            }
            ends.sort_unstable();
            ends.dedup();
            if ends.len() != fan.ops.len() {
                return Err(format!("fan {f} names a rank twice"));
            }
        }
        Ok(())
    }
}

/// The classes of a run's workers (closed form; built and used by [`crate::lower::classes`]).
#[derive(Debug, Clone, Default)]
pub struct RankClasses {
    /// Workers of the full run.
    pub workers: u32,
    /// Class of each worker (classes are numbered by their lowest rank).
    pub class_of: Vec<u32>,
    /// Each class's representative (its lowest rank) and size.
    pub representatives: Vec<u32>,
    pub sizes: Vec<u32>,
    /// Per op of the class graph: its id in the per-rank graph (filled by the lowering).
    pub full_id: Vec<u64>,
    /// Id distance between the same op of ranks r and r + 1 in the per-rank
    /// graph: compute ops, collective ops (a barrier is one op for all).
    pub compute_stride: u64,
    pub collective_stride: u64,
}
