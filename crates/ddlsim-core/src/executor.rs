//! Runs a workload graph on a network model and records the event log.
//!
//! The executor knows no algorithm: compute ops occupy their stream,
//! transfers go to the [`NetworkModel`], collectives are driven by their
//! [`Collective`] state machine, and each stream's [`StreamPolicy`] picks
//! what runs next. Every wait it imposes is written into the log's deps:
//! graph edges, the stream an op queued on (the row whose end freed the
//! stream) and a collective step's causes (the deliveries it waited for
//! and the joins of the members it met), so that each row's start equals
//! the latest end among its deps, or its ready time when it has none.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap as HashMap;

use crate::collective::{joined_op, ready_cause, ready_op, Action, Cause, Collective, NO_CAUSE};
use crate::engine::{later, BucketQueue, Time};
use crate::error::{Error, ErrorKind};
use crate::graph::{FanKind, Graph, Kind, PolicyKind, NO_STREAM};
use crate::log::{try_filled, EventLog, Row, KIND_BARRIER, KIND_COLLECTIVE, KIND_COMPUTE, KIND_MARKER, KIND_RECV, KIND_SEND};
use crate::network::{Delivery, FanEnd, FlowRecord, NetworkModel, Scheduler, TransferRequest};
use crate::stream::{new_policy, Item, Negotiation, QueueKey, StreamPolicy, WaitingMember};

/// How much of the inside of collectives goes into the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceDetail {
    /// Every point-to-point step of every collective (a send and a recv row each).
    Step,
    /// One row per rank per collective; steps are simulated, not logged.
    Collective,
}

pub use crate::engine::MAX_TIME;

/// What a finished run hands back.
pub struct RunOutput {
    pub log: EventLog,
    /// Names of the log's `op` codes: the graph's names, then collective step names.
    pub op_names: Vec<String>,
    /// Events popped from the queue.
    pub events: u64,
    /// Point-to-point transfers simulated (collective steps included).
    pub transfers: u64,
    pub recomputations: u64,
    /// Per rank: payload bytes handed to the network / delivered to it.
    pub bytes_sent: Vec<u64>,
    pub bytes_received: Vec<u64>,
    pub makespan: Time,
    pub flows: Vec<FlowRecord>,
    /// Packet level only: queue samples, per-port counters, totals and
    /// whether queue sampling stopped at its cap.
    pub queues: Vec<crate::network::QueueSample>,
    pub ports: Vec<crate::network::PortRecord>,
    pub packet: Option<(crate::network::packet::Totals, bool)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    OpDone(u32),
    Net(u64),
    /// A fan's copy (multicast) or aggregate reached its receiver: the op of that copy / the fan's first op.
    FanRecv(u32),
    /// An aggregation fan's tree flow starts: every contribution reached the switch.
    FanStart(u32),
    /// A collective member's wake-up (index into `Executor::wakes`).
    Wake(u32),
    /// A transfer op's message reaches its receiver after its transit delay (see [`Graph::transit_delays`]).
    Arrive(u32),
}

impl Event {
    /// The event in one `u128`: the kind in the low word, its argument in
    /// the high one (built in registers and stored as two words; an enum
    /// copied into the queue went through the stack, a 16-byte load of two
    /// narrower stores).
    #[inline(always)]
    fn pack(self) -> u128 {
        let (kind, arg) = match self {
            Event::OpDone(op) => (0, op as u64),
            Event::Net(token) => (1, token),
            Event::FanRecv(op) => (2, op as u64),
            Event::FanStart(f) => (3, f as u64),
            Event::Wake(slot) => (4, slot as u64),
            Event::Arrive(op) => (5, op as u64),
        };
        (arg as u128) << 64 | kind
    }

    #[inline(always)]
    fn unpack(x: u128) -> Event {
        let arg = (x >> 64) as u64;
        match x as u64 {
            1 => Event::Net(arg),
            0 => Event::OpDone(arg as u32),
            2 => Event::FanRecv(arg as u32),
            3 => Event::FanStart(arg as u32),
            4 => Event::Wake(arg as u32),
            _ => Event::Arrive(arg as u32),
        }
    }
}

/// The executor's event queue ([`BucketQueue`] of packed [`Event`]s).
struct Queue(BucketQueue<u128>);

impl Queue {
    #[inline(always)]
    fn push(&mut self, time: Time, event: Event) {
        self.0.push(time, event.pack());
    }
    #[inline(always)]
    fn pop(&mut self) -> Option<(Time, Event)> {
        self.0.pop().map(|(t, x)| (t, Event::unpack(x)))
    }
    #[inline(always)]
    fn peek_time(&self) -> Option<Time> {
        self.0.peek_time()
    }
    /// The next event if it is at `time` (see [`BucketQueue::peek_at`]).
    #[inline(always)]
    fn peek_at(&self, time: Time) -> Option<Event> {
        self.0.peek_at(time).map(Event::unpack)
    }
    /// Pops the event `peek_at` gave (its time is the clock's already).
    #[inline(always)]
    fn pop_peeked(&mut self) {
        self.0.pop_peeked();
    }
    fn processed(&self) -> u64 {
        self.0.processed()
    }
}

/// A collective member reducing until its wake-up.
#[derive(Debug, Clone, Copy)]
struct PendingWake {
    collective: u32,
    member: u32,
    tag: u64,
    bytes: u64,
    start: Time,
    causes: [Cause; 2],
}

/// A collective step in flight: what its delivery needs, stored at its transfer's id.
#[derive(Debug, Clone, Copy, Default)]
struct StepInFlight {
    collective: u32,
    /// Graph op of the sending member.
    op: u32,
    to_rank: u32,
    tag: u64,
    bytes: u64,
}

/// What the rows of a logged step need beyond [`StepInFlight`] (kept at step detail only).
#[derive(Debug, Clone, Copy, Default)]
struct StepRecord {
    step: u32,
    row: i64,
    message: i64,
    ready: Time,
    start: Time,
    /// What it waited for: the collective's causes, and what freed a parked member's stream.
    causes: [Cause; 5],
}

#[derive(Debug, Clone, Copy)]
enum Owner {
    Op(u32),
    /// A collective step (see `Executor::flights`).
    Step,
    /// The tree flow of a fan (multicast or aggregation).
    Fan(u32),
}

/// No fan (see [`crate::graph::FanSpec`]).
const NO_FAN: u32 = u32::MAX;

/// A send a parked collective member wanted to make.
#[derive(Debug, Clone, Copy)]
struct Held {
    collective: u32,
    action: Action,
}

/// An op holding a stream.
struct Running {
    op: u32,
    /// Its bytes, as counted against the stream's credit.
    bytes: u64,
    /// Sends in flight of a collective member (it can be parked only between sends).
    in_flight: u32,
}

struct StreamState {
    policy: Box<dyn StreamPolicy>,
    /// The ops holding the stream: at most one, unless the stream has a credit.
    running: Vec<Running>,
    running_bytes: u64,
}

impl StreamState {
    fn slot(&self, op: u32) -> Option<usize> {
        self.running.iter().position(|r| r.op == op)
    }

    fn holds(&self, op: u32) -> bool {
        self.slot(op).is_some()
    }

    /// Whether the op `op` holds the stream with no send in flight.
    fn idle_between_sends(&self, op: u32) -> bool {
        self.slot(op).is_some_and(|i| self.running[i].in_flight == 0)
    }

    fn sends_changed(&mut self, op: u32, delta: i32) {
        if let Some(i) = self.slot(op) {
            let r = &mut self.running[i];
            r.in_flight = r.in_flight.checked_add_signed(delta).expect("a send was counted before its delivery");
        }
    }

    /// Whether one more op may start now, as the policy says (one at a time, or ByteScheduler's credit).
    fn has_room(&self) -> bool {
        self.policy.has_room(self.running.len(), self.running_bytes)
    }

    fn occupy(&mut self, op: u32, bytes: u64) {
        self.running_bytes += bytes;
        self.running.push(Running { op, bytes, in_flight: 0 });
    }

    /// Frees the slot of `op`; false if it held none.
    fn release(&mut self, op: u32) -> bool {
        let Some(i) = self.slot(op) else { return false };
        let r = self.running.swap_remove(i);
        self.running_bytes -= r.bytes;
        true
    }

    fn running_ops(&self) -> Vec<u32> {
        self.running.iter().map(|r| r.op).collect()
    }
}

struct LiveCollective {
    machine: Machine,
    /// Graph op of each member (u32::MAX until it joins).
    ops: Vec<u32>,
    /// What a [`RingLane`] needs of each member, built at its first delivery (every member joined by then).
    lane: Vec<LaneMember>,
    /// Every member of `lane` is plain (FIFO stream or none).
    lane_plain: bool,
}

/// A live collective's machine: a ring held as itself (its [`RingLane`]
/// calls no trait object), or any machine; everything else sees a `dyn Collective`.
enum Machine {
    Ring(Box<crate::collective::ring::RingMachine>),
    Any(Box<dyn Collective>),
}

impl Machine {
    fn new(machine: Box<dyn Collective>) -> Self {
        match machine.into_ring() {
            Ok(ring) => Machine::Ring(ring),
            Err(machine) => Machine::Any(machine),
        }
    }
}

impl std::ops::Deref for Machine {
    type Target = dyn Collective;
    fn deref(&self) -> &(dyn Collective + 'static) {
        match self {
            Machine::Ring(ring) => &**ring,
            Machine::Any(machine) => &**machine,
        }
    }
}

impl std::ops::DerefMut for Machine {
    fn deref_mut(&mut self) -> &mut (dyn Collective + 'static) {
        match self {
            Machine::Ring(ring) => &mut **ring,
            Machine::Any(machine) => &mut **machine,
        }
    }
}

/// A ring member as its [`RingLane`] sends: its op, rank, band, tenant, and
/// whether its stream is FIFO or none (the lane starts only such sends).
#[derive(Debug, Clone, Copy)]
struct LaneMember {
    op: u32,
    rank: u32,
    tenant: u32,
    band: u8,
    plain: bool,
}

/// The executor's event queue seen by a network model.
struct NetQueue<'a>(&'a mut Queue);

impl Scheduler for NetQueue<'_> {
    fn schedule(&mut self, at: Time, token: u64) {
        self.0.push(at, Event::Net(token));
    }
    fn horizon(&self) -> Time {
        self.0.peek_time().unwrap_or(crate::engine::MAX_TIME)
    }
}

thread_local! {
    static DIRECT_PATHS: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Runs `f` with the executor's direct paths on or off for the runs it
/// starts on this thread: a ring's deliveries through [`RingLane`], and a
/// flow that restarts alone on its links started and delivered without the
/// network model's generic event handling ([`NetworkModel::start_lone`],
/// [`NetworkModel::lone_delivery`]). The outputs are the same either way;
/// the tests compare them, and benchmarks may time both.
#[doc(hidden)]
pub fn with_direct_paths<T>(on: bool, f: impl FnOnce() -> T) -> T {
    let old = DIRECT_PATHS.with(|d| d.replace(on));
    let out = f();
    DIRECT_PATHS.with(|d| d.set(old));
    out
}

/// A ring's delivery handled without a list of actions: the
/// [`crate::collective::ring::RingMachine`] hands each action to the lane as
/// it makes it, and the lane starts each send at once, exactly as
/// `apply_batch` and `send_step` would (the machine's state does not depend
/// on the network's), while no member is parked, the steps are not logged
/// and the sender's stream is FIFO (or none). From the first action it
/// cannot take (a send on another stream policy, a member done: finishing
/// an op may start anything) on, it keeps the actions, in order, for
/// `apply_batch`. The tests `ring_lane_*` compare both paths.
struct RingLane<'a> {
    c: u32,
    now: Time,
    members: &'a [LaneMember],
    /// Every member is plain.
    all_plain: bool,
    network: LaneNet<'a>,
    queue: &'a mut Queue,
    flights: &'a mut Vec<StepInFlight>,
    transfer_owner: &'a mut Vec<Owner>,
    free_transfers: &'a mut Vec<u32>,
    /// The id of the step just delivered, held back from `free_transfers`
    /// (whose top it would be) for the lane's first send.
    spare: Option<u32>,
    bytes_sent: &'a mut [u64],
    next_message: &'a mut i64,
    transfers: &'a mut u64,
    rest: &'a mut Vec<Action>,
    /// Set from the first action kept for `apply_batch` (or the first error) on.
    deferred: bool,
    error: Option<Error>,
}

impl crate::collective::ring::RingSink for RingLane<'_> {
    #[inline(always)]
    fn send(&mut self, from: u32, to: u32, bytes: u64, step: u32, meta: impl FnOnce() -> (Time, [Cause; 4])) {
        let tag = (from as u64) << 32 | step as u64;
        let me = self.members[from as usize];
        if self.deferred || !me.plain {
            self.deferred = true;
            let (ready, causes) = meta();
            self.rest.push(Action::Send { from, to, bytes, tag, step, ready, causes });
            return;
        }
        // `send_step` at a detail below step, on a FIFO stream.
        let c = self.c as usize;
        let (op, src, dst) = (me.op, me.rank, self.members[to as usize].rank);
        let (band, tenant) = (me.band, me.tenant);
        let message = *self.next_message;
        *self.next_message += 1;
        *self.transfers += 1;
        self.bytes_sent[src as usize] += bytes;
        let id = match self.spare.take() {
            // Freed by a step: its owner is `Step` already.
            Some(id) => id,
            None => match self.free_transfers.pop() {
                Some(id) => {
                    self.transfer_owner[id as usize] = Owner::Step;
                    id
                }
                None => {
                    self.transfer_owner.push(Owner::Step);
                    (self.transfer_owner.len() - 1) as u32
                }
            },
        };
        if self.flights.len() <= id as usize {
            self.flights.resize(id as usize + 1, StepInFlight::default());
        }
        self.flights[id as usize] = StepInFlight { collective: c as u32, op, to_rank: dst, tag, bytes };
        let req = || TransferRequest { id, message: message as u64, src, dst, bytes, band, tenant };
        let started = match &mut self.network {
            LaneNet::Flow(flow) => match flow.start_lone_parts(self.now, id, src, dst, bytes, band, req) {
                Ok(Some((at, token))) => {
                    self.queue.push(at, Event::Net(token));
                    Ok(())
                }
                Ok(None) => flow.start(self.now, req(), &mut NetQueue(self.queue)),
                Err(e) => Err(e),
            },
            LaneNet::Any(network) => match network.start_lone(self.now, req()) {
                Ok(Some((at, token))) => {
                    self.queue.push(at, Event::Net(token));
                    Ok(())
                }
                Ok(None) => network.start(self.now, req(), &mut NetQueue(self.queue)),
                Err(e) => Err(e),
            },
        };
        if let Err(e) = started {
            self.deferred = true;
            self.error = Some(e);
        }
    }

    #[inline(always)]
    fn done(&mut self, member: u32) {
        self.deferred = true;
        self.rest.push(Action::Done { member });
    }
}

/// A ring's delivery of step `tag` through `lane`, and then each of the
/// ring's next lone deliveries of the same instant, taken from the queue
/// here: the main loop would handle them the same way (no release is due
/// within an instant, no op finished while the lane takes every action, see
/// [`Executor::advance`]). Returns how many events it took from the queue.
#[inline(never)]
fn run_lane(ring: &mut crate::collective::ring::RingMachine, lane: &mut RingLane<'_>, mut tag: u64, bytes_received: &mut [u64]) -> u32 {
    let (c, now) = (lane.c, lane.now);
    let mut drained = 0;
    loop {
        ring.delivered_into(now, tag, lane);
        if let Some(id) = lane.spare.take() {
            lane.free_transfers.push(id);
        }
        if lane.deferred {
            return drained;
        }
        let LaneNet::Flow(flow) = &mut lane.network else { return drained };
        let Some(Event::Net(token)) = lane.queue.peek_at(now) else { return drained };
        let Some(id) = flow.live_delivery(token) else { return drained };
        if !matches!(lane.transfer_owner[id as usize], Owner::Step) {
            return drained;
        }
        let g = lane.flights[id as usize];
        if g.collective != c || !(lane.all_plain || lane.members[(g.tag >> 32) as usize].plain) {
            return drained;
        }
        lane.queue.pop_peeked();
        flow.take_live_delivery(now, id);
        bytes_received[g.to_rank as usize] += g.bytes;
        drained += 1;
        lane.spare = Some(id);
        tag = g.tag;
    }
}

/// The executor's network model: the flow-level model held as itself (its
/// direct paths inlined, no call through the trait object), or any model.
/// Everything else sees a `dyn NetworkModel`.
enum Network {
    Flow(Box<crate::network::Flow>),
    Any(Box<dyn NetworkModel>),
}

impl Network {
    fn new(model: Box<dyn NetworkModel>) -> Self {
        match model.into_flow() {
            Ok(flow) => Network::Flow(flow),
            Err(model) => Network::Any(model),
        }
    }

    /// Where a [`RingLane`] starts its sends.
    #[inline(always)]
    fn lane(&mut self) -> LaneNet<'_> {
        match self {
            Network::Flow(flow) => LaneNet::Flow(flow),
            Network::Any(model) => LaneNet::Any(&mut **model),
        }
    }
}

impl std::ops::Deref for Network {
    type Target = dyn NetworkModel;
    fn deref(&self) -> &(dyn NetworkModel + 'static) {
        match self {
            Network::Flow(flow) => &**flow,
            Network::Any(model) => &**model,
        }
    }
}

impl std::ops::DerefMut for Network {
    fn deref_mut(&mut self) -> &mut (dyn NetworkModel + 'static) {
        match self {
            Network::Flow(flow) => &mut **flow,
            Network::Any(model) => &mut **model,
        }
    }
}

/// The network a [`RingLane`] starts its sends on: the flow-level model
/// itself (its direct paths inlined), or any model through the trait.
enum LaneNet<'a> {
    Flow(&'a mut crate::network::Flow),
    Any(&'a mut dyn NetworkModel),
}

/// The [`LaneMember`]s of collective `c`, whose members all joined (`ops`).
#[cold]
#[inline(never)]
fn lane_members(graph: &Graph, c: usize, ops: &[u32]) -> Vec<LaneMember> {
    let spec = &graph.collectives[c];
    ops.iter()
        .zip(&spec.members)
        .map(|(&op, &rank)| {
            let o = &graph.ops[op as usize];
            let plain = o.stream == NO_STREAM || graph.streams[o.stream as usize].policy == PolicyKind::Fifo;
            LaneMember { op, rank, tenant: o.tenant, band: o.band, plain }
        })
        .collect()
}

const PARKED: u64 = 1 << 63;
const UNSET: Time = Time::MAX;

struct Executor<'g> {
    graph: &'g Graph,
    /// How often (wall clock) a run with a hook calls it ([`PROGRESS_INTERVAL`] unless a test asks for another).
    progress_interval: std::time::Duration,
    succ_offsets: Vec<u32>,
    succ: Vec<u32>,
    waiting_deps: Vec<u32>,
    ready: Vec<Time>,
    start: Vec<Time>,
    end: Vec<Time>,
    /// What freed the stream an op queued on ([`NO_CAUSE`] if it did not queue).
    stream_dep: Vec<Cause>,
    /// Recv row of each transfer op, and when its last byte left the sender.
    recv_row: Vec<i64>,
    tx_end: Vec<Time>,
    message_of: Vec<i64>,
    streams: Vec<StreamState>,
    parked: HashMap<u32, Option<Held>>,
    /// Parked members per collective.
    parked_in: Vec<u32>,
    queue: Queue,
    network: Network,
    transfer_owner: Vec<Owner>,
    free_transfers: Vec<u32>,
    collectives: Vec<Option<LiveCollective>>,
    detail: TraceDetail,
    step_log: EventLog,
    step_op_names: Vec<u32>,
    /// The `op` of a reduction row (registered only when a collective reduces at a cost).
    reduce_op_name: u32,
    /// Per transfer id: the collective step it carries (if it does), and at step detail what its rows need.
    flights: Vec<StepInFlight>,
    step_records: Vec<StepRecord>,
    /// Pending collective wake-ups, reused through `free_wakes`.
    wakes: Vec<PendingWake>,
    free_wakes: Vec<u32>,
    /// Scratch action lists, reused (issuing may start another collective while a batch is processed).
    action_pool: Vec<Vec<Action>>,
    /// A ring lane's actions left for `apply_batch` (see [`RingLane`]), reused.
    lane_rest: Vec<Action>,
    /// The direct paths are taken (see [`with_direct_paths`]).
    direct: bool,
    /// Events a ring lane took from the queue itself since the main loop last looked (its clock countdown).
    drained: u32,
    deliveries: Vec<Delivery>,
    next_row: i64,
    next_message: i64,
    transfers: u64,
    bytes_sent: Vec<u64>,
    bytes_received: Vec<u64>,
    finished_ops: usize,
    /// Reused buffer for a logged step's causes (no allocation per step).
    cause_scratch: Vec<i64>,
    /// Collectives scheduled by negotiation, and their members ready so far (see [`Negotiation`]).
    negotiation: Negotiation,
    /// CSR: the member ops of each collective, in member order.
    coll_op_offsets: Vec<u32>,
    coll_ops: Vec<u32>,
    /// Per op: its fan, or [`NO_FAN`]; per fan: members started, and its message.
    fan_of: Vec<u32>,
    fan_started: Vec<u32>,
    fan_message: Vec<i64>,
    /// Release times still to come, earliest (then lowest op) first; each counts as a dep of its op.
    releases: BinaryHeap<Reverse<(Time, u32)>>,
    /// Per op: its wake-up (see [`Graph::wakeups`]); empty when the graph has none.
    wakeup: Vec<Time>,
    /// Per op: whether it is a continuation (see [`Graph::continuations`]); empty when the graph has none.
    continuation: Vec<bool>,
    /// Per op: its transit delay (see [`Graph::transit_delays`]); empty when the graph has none.
    transit_delay: Vec<Time>,
    /// Per op: its entry in [`Graph::idle_scaled`], or [`NOT_SCALED`]; empty when the graph has none.
    idle_scale: Vec<u32>,
    /// Successors added after the start (a graph grown at run time), per op; empty otherwise.
    extra_succ: Vec<Vec<u32>>,
    /// The `op` vocabulary of the rows the executor makes (graph names, then step names).
    run_names: Vec<String>,
    /// Id of the first row the executor makes beyond the graph's ops.
    row_base: i64,
    /// Time the run has been advanced to (see [`Session::run_until`]).
    clock: Time,
}

/// Where a run stands, as handed to a [`ProgressHook`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Simulated time of the event being processed.
    pub now: Time,
    /// Events popped from the queue so far.
    pub events: u64,
    /// Operations of the graph finished so far, and in all.
    pub ops_done: u64,
    pub ops_total: u64,
}

/// Called now and then while a run goes on (about every
/// [`PROGRESS_INTERVAL`] of wall-clock time); returning `false` stops the
/// run with the error [`INTERRUPTED`].
pub type ProgressHook<'a> = &'a mut dyn FnMut(&Progress) -> bool;

/// The error of a run its progress hook stopped.
pub const INTERRUPTED: &str = "interrupted";

/// How often (wall clock) a run calls its progress hook.
pub const PROGRESS_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);

/// Events between two looks at the clock while a hook is installed.
const CLOCK_EVERY: u32 = 1024;

/// Runs `graph` to completion on `network`. A graph that cannot finish
/// (a dependency cycle, a member that never joins its collective) or a
/// time beyond [`MAX_TIME`] is reported in the error.
pub fn run(graph: &Graph, network: Box<dyn NetworkModel>, detail: TraceDetail) -> Result<RunOutput, Error> {
    run_with_hook(graph, network, detail, None)
}

/// [`run`] that calls `hook` about every [`PROGRESS_INTERVAL`] (checked
/// every [`CLOCK_EVERY`] events) and stops with the error [`INTERRUPTED`]
/// when it returns `false`. Without a hook the loop never reads the clock.
pub fn run_with_hook(graph: &Graph, network: Box<dyn NetworkModel>, detail: TraceDetail, hook: Option<ProgressHook<'_>>) -> Result<RunOutput, Error> {
    run_with_hook_every(graph, network, detail, hook, PROGRESS_INTERVAL)
}

/// [`run_with_hook`] with the hook called about every `interval` of wall-clock time instead of
/// [`PROGRESS_INTERVAL`] (still at most once per [`CLOCK_EVERY`] events): `Duration::ZERO` calls it at every look,
/// whatever the machine's speed, which makes a test of the hook independent of the wall clock.
pub fn run_with_hook_every(
    graph: &Graph,
    network: Box<dyn NetworkModel>,
    detail: TraceDetail,
    mut hook: Option<ProgressHook<'_>>,
    interval: std::time::Duration,
) -> Result<RunOutput, Error> {
    let mut ex = Executor::new(graph, network, detail, None)?;
    ex.progress_interval = interval;
    ex.advance(Time::MAX, &mut hook)?;
    ex.finish()
}

/// The op names of the rows a run of `graph` makes: the graph's, then each
/// algorithm's step name (its code per algorithm), then `reduce` when a
/// collective reduces at a cost (its code, else u32::MAX).
fn run_names(graph: &Graph) -> (Vec<String>, Vec<u32>, u32) {
    let mut op_names = graph.op_names.clone();
    let step_op_names = crate::graph::Algorithm::NAMES
        .iter()
        .enumerate()
        .map(|(code, _)| {
            let name = crate::graph::Algorithm::from_code(code as u8).expect("listed").step_op();
            match op_names.iter().position(|n| n == name) {
                Some(i) => i as u32,
                None => {
                    op_names.push(name.to_string());
                    (op_names.len() - 1) as u32
                }
            }
        })
        .collect();
    let reduce_op_name = if graph.collectives.iter().any(|c| c.gamma_ns_per_byte > 0.0) {
        op_names.push("reduce".to_string());
        (op_names.len() - 1) as u32
    } else {
        u32::MAX
    };
    (op_names, step_op_names, reduce_op_name)
}

/// Rows made by a run that may grow are numbered from here until it ends (then from the graph's final size).
const GROWING_ROW_BASE: i64 = 1 << 40;

impl<'g> Executor<'g> {
    /// A run of `graph` with every op whose deps are met made ready (at 0).
    /// `row_base`: id of the first row beyond the graph's ops (None: the graph's size).
    fn new(graph: &'g Graph, network: Box<dyn NetworkModel>, detail: TraceDetail, row_base: Option<i64>) -> Result<Self, Error> {
        graph.check()?;
        let n = graph.len();
        let (succ_offsets, succ) = graph.successors();
        let ranks = graph.ranks() as usize;
        let (run_names, step_op_names, reduce_op_name) = run_names(graph);
        let (coll_op_offsets, coll_ops) = collective_members(graph);
        let streams: Vec<StreamState> =
            graph.streams.iter().map(|s| StreamState { policy: new_policy(s.policy, s.credit), running: Vec::new(), running_bytes: 0 }).collect();
        let negotiation = Negotiation::new(
            (0..graph.collectives.len())
                .map(|c| {
                    coll_ops[coll_op_offsets[c] as usize..coll_op_offsets[c + 1] as usize].iter().any(|&op| {
                        let stream = graph.ops.get(op as usize).map_or(NO_STREAM, |o| o.stream);
                        stream != NO_STREAM && streams[stream as usize].policy.negotiates()
                    })
                })
                .collect(),
        );
        let mut waiting_deps = try_filled(n, 0u32, "operation table")?;
        for (i, d) in waiting_deps.iter_mut().enumerate() {
            *d = graph.deps(i as u32).len() as u32;
        }
        let mut releases = BinaryHeap::new();
        for &(op, t) in &graph.releases {
            waiting_deps[op as usize] += 1;
            releases.push(Reverse((t, op)));
        }
        let row_base = row_base.unwrap_or(n as i64);
        let mut ex = Executor {
            graph,
            progress_interval: PROGRESS_INTERVAL,
            succ_offsets,
            succ,
            waiting_deps,
            ready: try_filled(n, UNSET, "operation table")?,
            start: try_filled(n, UNSET, "operation table")?,
            end: try_filled(n, UNSET, "operation table")?,
            stream_dep: try_filled(n, -1, "operation table")?,
            recv_row: try_filled(n, -1, "operation table")?,
            tx_end: try_filled(n, 0, "operation table")?,
            message_of: try_filled(n, -1, "operation table")?,
            streams,
            parked: HashMap::default(),
            parked_in: vec![0; graph.collectives.len()],
            queue: Queue(BucketQueue::new()),
            network: Network::new(network),
            transfer_owner: Vec::new(),
            free_transfers: Vec::new(),
            collectives: (0..graph.collectives.len()).map(|_| None).collect(),
            detail,
            step_log: EventLog::new(),
            step_op_names,
            reduce_op_name,
            flights: Vec::new(),
            step_records: Vec::new(),
            wakes: Vec::new(),
            free_wakes: Vec::new(),
            action_pool: Vec::new(),
            lane_rest: Vec::new(),
            direct: DIRECT_PATHS.with(|d| d.get()),
            drained: 0,
            deliveries: Vec::new(),
            next_row: row_base,
            next_message: 0,
            transfers: 0,
            bytes_sent: vec![0; ranks],
            bytes_received: vec![0; ranks],
            finished_ops: 0,
            cause_scratch: Vec::new(),
            negotiation,
            coll_op_offsets,
            coll_ops,
            fan_of: {
                let mut fan_of = vec![NO_FAN; n];
                for (f, fan) in graph.fans.iter().enumerate() {
                    for &op in &fan.ops {
                        fan_of[op as usize] = f as u32;
                    }
                }
                fan_of
            },
            fan_started: vec![0; graph.fans.len()],
            fan_message: vec![-1; graph.fans.len()],
            releases,
            wakeup: per_op(graph, &graph.wakeups),
            continuation: continuations(graph),
            transit_delay: per_op(graph, &graph.transit_delays),
            idle_scale: idle_scales(graph),
            extra_succ: Vec::new(),
            run_names,
            row_base,
            clock: 0,
        };
        ex.network.attach(0, &mut NetQueue(&mut ex.queue));
        if n == 0 {
            ex.network.job_ended(0);
        }
        for id in 0..n as u32 {
            if ex.waiting_deps[id as usize] == 0 {
                ex.make_ready(id, 0)?;
            }
        }
        Ok(ex)
    }

    /// Processes every event and release before `limit` (all of them with
    /// `Time::MAX`), releases before the events of their instant.
    fn advance(&mut self, limit: Time, hook: &mut Option<ProgressHook<'_>>) -> Result<(), Error> {
        // Countdown to the next look at the clock; u32::MAX (never reached) without a hook.
        let mut countdown: u32 = if hook.is_some() { CLOCK_EVERY } else { u32::MAX };
        let mut last_call = std::time::Instant::now();
        loop {
            if !self.releases.is_empty() {
                self.due_releases(limit)?;
            }
            match self.queue.peek_time() {
                // Time::MAX: every event (a saturated time past the clock limit too, refused below).
                Some(t) if t < limit || limit == Time::MAX => {}
                _ => break,
            }
            let Some((now, event)) = self.queue.pop() else { break };
            countdown -= 1;
            if countdown == 0 {
                countdown = CLOCK_EVERY;
                if let Some(hook) = hook.as_mut() {
                    if last_call.elapsed() >= self.progress_interval {
                        let progress = Progress { now, events: self.queue.processed(), ops_done: self.finished_ops as u64, ops_total: self.graph.len() as u64 };
                        if !hook(&progress) {
                            return Err(Error::new(ErrorKind::Interrupted, INTERRUPTED));
                        }
                        last_call = std::time::Instant::now();
                    }
                }
            }
            if now > MAX_TIME {
                return Err(Error::out_of_range(format!(
                    "simulated time would pass {MAX_TIME} ns (about 146 years); the scenario's durations or sizes are far too large"
                )));
            }
            match event {
                Event::OpDone(op) => self.finish_op(op, now)?,
                Event::FanRecv(op) => self.fan_received(op, now)?,
                Event::FanStart(f) => self.launch_fan(f as usize, now)?,
                Event::Wake(slot) => self.wake(slot, now)?,
                Event::Arrive(op) => self.arrived(op, now)?,
                Event::Net(token) => {
                    let lone = match self.direct {
                        false => None,
                        true => match &mut self.network {
                            Network::Flow(flow) => flow.lone_delivery(now, token),
                            Network::Any(model) => model.lone_delivery(now, token),
                        },
                    };
                    if let Some(delivery) = lone {
                        if let Some(d) = delivery {
                            self.delivered(d, now)?;
                            if self.drained != 0 {
                                countdown = countdown.saturating_sub(std::mem::take(&mut self.drained)).max(1);
                            }
                        }
                        if self.finished_ops == self.graph.len() && self.network.background_only(now) {
                            break;
                        }
                        continue;
                    }
                    let mut delivered = std::mem::take(&mut self.deliveries);
                    self.network.on_event(now, token, &mut NetQueue(&mut self.queue), &mut delivered)?;
                    for d in delivered.drain(..) {
                        self.delivered_out_of_line(d, now)?;
                    }
                    self.deliveries = delivered;
                    if self.finished_ops == self.graph.len() && self.network.background_only(now) {
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// Releases due no later than the next event (and before `limit`), one at a time.
    fn due_releases(&mut self, limit: Time) -> Result<(), Error> {
        while let Some(&Reverse((t, op))) = self.releases.peek() {
            if t >= limit || self.queue.peek_time().is_some_and(|e| e < t) {
                break;
            }
            self.releases.pop();
            let w = &mut self.waiting_deps[op as usize];
            *w -= 1;
            if *w == 0 {
                self.make_ready(op, t)?;
            }
        }
        Ok(())
    }

    /// The log, once every event was processed; a graph that did not finish is an error.
    fn finish(mut self) -> Result<RunOutput, Error> {
        let graph = self.graph;
        let n = graph.len();
        if self.finished_ops != n {
            if std::env::var_os("DDLSIM_DEBUG_STUCK").is_some() {
                for (i, st) in self.streams.iter().enumerate() {
                    let cur: Vec<_> = st
                        .running
                        .iter()
                        .map(|r| (r.op, graph.ops[r.op as usize].collective, graph.ops[r.op as usize].priority, r.in_flight))
                        .collect();
                    eprintln!("stream {i} rank {} running {cur:?} queued {:?}", graph.streams[i].rank, st.policy.peek_priority());
                }
                eprintln!(
                    "parked {:?}",
                    self.parked.keys().map(|&o| (o, graph.ops[o as usize].collective, graph.ops[o as usize].rank)).collect::<Vec<_>>()
                );
            }
            let stuck = (0..n).find(|&i| self.end[i] == UNSET).unwrap_or(0);
            let op = &graph.ops[stuck];
            return Err(Error::new(
                ErrorKind::Stuck,
                format!(
                    "the workload graph cannot finish: {} of {} operations never ran (first: op {stuck}, {} on rank {}); \
                     look for a dependency cycle or a collective member that never joins",
                    n - self.finished_ops,
                    n,
                    graph.op_names[op.name as usize],
                    op.rank
                ),
            ));
        }
        let (names, _, _) = run_names(graph);
        if names != self.run_names {
            // The graph's names grew during the run: step rows get the codes a whole run would give them.
            let code: Vec<u32> = self.run_names.iter().map(|name| names.iter().position(|n| n == name).expect("every run name is a final name") as u32).collect();
            for op in self.step_log.op.iter_mut() {
                *op = code[*op as usize];
            }
        }
        if self.row_base != n as i64 {
            self.renumber_rows(n as i64);
        }
        self.into_output(names)
    }

    /// Rows made past the graph's ops were numbered from `row_base`: from `first` instead.
    fn renumber_rows(&mut self, first: i64) {
        let (base, shift) = (self.row_base, first - self.row_base);
        let map = |id: &mut i64| {
            if *id >= base {
                *id += shift;
            }
        };
        self.step_log.id.iter_mut().for_each(map);
        self.step_log.deps.iter_mut().for_each(map);
        self.recv_row.iter_mut().for_each(map);
        self.stream_dep.iter_mut().for_each(map);
        self.row_base = first;
    }
}

/// A graph's (op, time) list (its wake-ups, [`Graph::wakeups`], or transit delays, [`Graph::transit_delays`]) as
/// each op's time by op id, 0 for the ops it does not name; empty when the list is.
fn per_op(graph: &Graph, entries: &[(u32, Time)]) -> Vec<Time> {
    if entries.is_empty() {
        return Vec::new();
    }
    let mut out = vec![0; graph.len()];
    for &(op, t) in entries {
        out[op as usize] = t;
    }
    out
}

/// No idle scaling (see [`Graph::idle_scaled`]).
const NOT_SCALED: u32 = u32::MAX;

/// Each op's entry in [`Graph::idle_scaled`] ([`NOT_SCALED`] for none), by op id; empty when the graph has none.
fn idle_scales(graph: &Graph) -> Vec<u32> {
    if graph.idle_scaled.is_empty() {
        return Vec::new();
    }
    let mut out = vec![NOT_SCALED; graph.len()];
    for (k, s) in graph.idle_scaled.iter().enumerate() {
        out[s.op as usize] = k as u32;
    }
    out
}

/// Whether each op is a continuation (see [`Graph::continuations`]), by op id; empty when the graph has none.
fn continuations(graph: &Graph) -> Vec<bool> {
    if graph.continuations.is_empty() {
        return Vec::new();
    }
    let mut out = vec![false; graph.len()];
    for &op in &graph.continuations {
        out[op as usize] = true;
    }
    out
}

/// CSR of each collective's member ops, in member order.
fn collective_members(graph: &Graph) -> (Vec<u32>, Vec<u32>) {
    let mut offsets = vec![0u32; graph.collectives.len() + 1];
    for (c, spec) in graph.collectives.iter().enumerate() {
        offsets[c + 1] = offsets[c] + spec.members.len() as u32;
    }
    let mut ops = vec![u32::MAX; offsets[graph.collectives.len()] as usize];
    for (i, op) in graph.ops.iter().enumerate() {
        if op.kind == Kind::Collective {
            ops[(offsets[op.collective as usize] + op.member) as usize] = i as u32;
        }
    }
    (offsets, ops)
}


impl<'g> Executor<'g> {
    fn make_ready(&mut self, op: u32, now: Time) -> Result<(), Error> {
        self.ready[op as usize] = now;
        let o = &self.graph.ops[op as usize];
        if o.stream == NO_STREAM {
            return self.start_op(op, now);
        }
        if o.kind == Kind::Collective && self.negotiation.is_negotiated(o.collective as usize) {
            let c = o.collective as usize;
            let (a, b) = (self.coll_op_offsets[c] as usize, self.coll_op_offsets[c + 1] as usize);
            if !self.negotiation.member_ready(c, b - a) {
                return Ok(());
            }
            // Ready everywhere: every rank queues it now, having waited for this last member.
            let arrival = ready_cause(op);
            for k in a..b {
                let member = self.coll_ops[k];
                self.enqueue(member, now, if member == op { NO_CAUSE } else { arrival })?;
            }
            return Ok(());
        }
        self.enqueue(op, now, NO_CAUSE)
    }

    /// Puts a ready op on its stream; `arrival` is what it waited for beyond its own deps.
    fn enqueue(&mut self, op: u32, now: Time, arrival: Cause) -> Result<(), Error> {
        let s = self.graph.ops[op as usize].stream as usize;
        let st = &self.streams[s];
        if st.running.is_empty() || (st.has_room() && st.policy.peek_key().is_none()) {
            let wakeup = if st.running.is_empty() { self.wakeup.get(op as usize).copied().unwrap_or(0) } else { 0 };
            self.streams[s].occupy(op, self.graph.ops[op as usize].bytes);
            self.stream_dep[op as usize] = arrival;
            if wakeup > 0 {
                // An idle stream is woken first: it holds the op from now and runs it `wakeup` later.
                return self.start_compute(op, later(now, wakeup)?);
            }
            return self.start_op(op, now);
        }
        self.queue_item(s, op as u64);
        // Whatever runs now instead of a running member waited for this op to arrive.
        let arrival = if arrival == NO_CAUSE { ready_cause(op) } else { arrival };
        self.fill(s, now, arrival)?;
        self.reconsider_running(s, now, arrival)
    }

    /// Something arrived on busy stream `s`: each running collective member
    /// idle between sends may be preempted or yield to it.
    fn reconsider_running(&mut self, s: usize, now: Time, release: Cause) -> Result<(), Error> {
        for running in self.streams[s].running_ops() {
            if self.streams[s].holds(running) {
                self.maybe_preempt_idle(s, running, now, release)?;
            }
            if self.streams[s].holds(running) {
                self.maybe_yield(s, running, now, release)?;
            }
        }
        Ok(())
    }

    /// Starts queued items while the stream has room (ByteScheduler's credit loop; one item on a plain stream).
    fn fill(&mut self, s: usize, now: Time, release: Cause) -> Result<(), Error> {
        while self.streams[s].has_room() {
            let Some(item) = self.streams[s].policy.pop() else { break };
            self.run_item(s, item, now, release)?;
        }
        Ok(())
    }

    fn launched(&self, c: usize) -> bool {
        self.collectives[c].as_ref().is_some_and(|live| live.machine.joined() as usize == self.graph.collectives[c].members.len())
    }

    fn key_of(&mut self, s: usize, item: u64) -> QueueKey {
        let op = (item & !PARKED) as u32;
        let o = &self.graph.ops[op as usize];
        let parked = item & PARKED != 0;
        let collective = (o.kind == Kind::Collective).then_some(o.collective as u64);
        let launched = parked && collective.is_some() && self.streams[s].policy.negotiates() && self.launched(o.collective as usize);
        self.streams[s].policy.key(Item { op, priority: o.priority, parked, collective, launched })
    }

    fn queue_item(&mut self, s: usize, item: u64) {
        let key = self.key_of(s, item);
        self.streams[s].policy.push(item, key);
    }

    /// Under a priority policy, ranks may pick their collectives in different
    /// orders; a member whose next send waits for a member that has not
    /// joined yet (nothing sent in between) yields its stream to the next
    /// queued op, and resumes later, so that no such order deadlocks.
    fn maybe_yield(&mut self, s: usize, op: u32, now: Time, release: Cause) -> Result<(), Error> {
        match self.streams[s].policy.waiting_member() {
            WaitingMember::Keeps => return Ok(()),
            WaitingMember::YieldsToUrgent => return self.maybe_yield_negotiated(s, op, now, release),
            WaitingMember::YieldsToRunnable => {}
        }
        let st = &self.streams[s];
        let o = &self.graph.ops[op as usize];
        if o.kind != Kind::Collective || !st.idle_between_sends(op) || st.policy.peek_priority().is_none() {
            return Ok(());
        }
        if !self.waits_for_a_join(op) {
            return Ok(());
        }
        // Yield only to an item that can go on (a launched member, an op that
        // is no collective, a collective this join launches) or to a more
        // urgent collective, so that waiting members never swap forever and
        // all ranks drift to the most urgent waiting collective.
        let priority = o.priority;
        let mut skipped = Vec::new();
        let mut found = None;
        while let Some(item) = self.streams[s].policy.pop() {
            if !self.can_take_over(item, priority) {
                skipped.push(item);
            } else {
                found = Some(item);
                break;
            }
        }
        for item in skipped {
            self.queue_item(s, item);
        }
        let Some(next) = found else { return Ok(()) };
        self.park(s, op, None);
        self.run_item(s, next, now, release)
    }

    /// A member waiting for a join yields to a more urgent collective (in
    /// the order all ranks share) or to an urgent parked member.
    fn maybe_yield_negotiated(&mut self, s: usize, op: u32, now: Time, release: Cause) -> Result<(), Error> {
        let st = &self.streams[s];
        let o = &self.graph.ops[op as usize];
        if o.kind != Kind::Collective || !st.idle_between_sends(op) || !self.waits_for_a_join(op) {
            return Ok(());
        }
        let Some(head) = st.policy.peek_key() else {
            return Ok(());
        };
        if head.not_urgent && (head.priority, head.order) >= (o.priority, o.collective as u64) {
            return Ok(());
        }
        self.park(s, op, None);
        self.run_next(s, now, release)
    }

    fn can_take_over(&self, item: u64, priority: i32) -> bool {
        let op = (item & !PARKED) as u32;
        let o = &self.graph.ops[op as usize];
        if item & PARKED != 0 {
            // Under P3-style preemption, resuming a less urgent member at a message boundary
            // would commit this rank to a whole message the other ranks are not going to run now.
            if self.graph.preempt_at_messages && o.priority > priority && self.parked_at_message_boundary(op) {
                return false;
            }
            return !self.waits_for_a_join(op);
        }
        if o.kind != Kind::Collective || o.priority < priority {
            return true;
        }
        let members = self.graph.collectives[o.collective as usize].members.len() as u32;
        let joined = self.collectives[o.collective as usize].as_ref().map_or(0, |live| live.machine.joined());
        joined + 1 == members
    }

    /// True if parked collective member `op` has sent nothing of its current message.
    fn parked_at_message_boundary(&self, op: u32) -> bool {
        let o = &self.graph.ops[op as usize];
        let Some(live) = self.collectives[o.collective as usize].as_ref() else { return false };
        match self.parked.get(&op) {
            Some(Some(Held { action: Action::Send { step, .. }, .. })) => live.machine.starts_message(*step),
            _ => live.machine.at_message_boundary(o.member),
        }
    }

    /// True if collective op `op`'s member waits for a member that has not joined.
    fn waits_for_a_join(&self, op: u32) -> bool {
        let o = &self.graph.ops[op as usize];
        o.kind == Kind::Collective && self.collectives[o.collective as usize].as_ref().is_some_and(|live| live.machine.waits_for_a_join(o.member))
    }

    /// A more urgent op arrived while the stream's collective member waits
    /// between sends: park the member and run the op.
    fn maybe_preempt_idle(&mut self, s: usize, running: u32, now: Time, release: Cause) -> Result<(), Error> {
        let st = &self.streams[s];
        if !st.policy.preempts() || !st.idle_between_sends(running) || self.graph.ops[running as usize].kind != Kind::Collective {
            return Ok(());
        }
        let o = &self.graph.ops[running as usize];
        if self.graph.preempt_at_messages
            && !self.collectives[o.collective as usize].as_ref().is_some_and(|live| live.machine.at_message_boundary(o.member))
        {
            return Ok(());
        }
        if st.policy.peek_priority().is_some_and(|p| p < o.priority) {
            self.park(s, running, None);
            self.run_next(s, now, release)?;
        }
        Ok(())
    }

    fn park(&mut self, s: usize, op: u32, held: Option<Held>) {
        self.parked.insert(op, held);
        self.parked_in[self.graph.ops[op as usize].collective as usize] += 1;
        self.streams[s].release(op);
        self.queue_item(s, PARKED | op as u64);
    }

    /// A member was parked for what the policy picks next (`release` is what
    /// freed its slot): start or resume that item in the member's place,
    /// credit or not, then fill what room is left.
    fn run_next(&mut self, s: usize, now: Time, release: Cause) -> Result<(), Error> {
        if let Some(item) = self.streams[s].policy.pop() {
            self.run_item(s, item, now, release)?;
        }
        self.fill(s, now, release)
    }

    fn run_item(&mut self, s: usize, item: u64, now: Time, release: Cause) -> Result<(), Error> {
        let op = (item & !PARKED) as u32;
        self.streams[s].occupy(op, self.graph.ops[op as usize].bytes);
        if item & PARKED != 0 {
            let held = self.parked.remove(&op).expect("a parked member is in the parked map");
            self.parked_in[self.graph.ops[op as usize].collective as usize] -= 1;
            match held {
                // Resumed: the held send also waited for what freed the stream.
                Some(Held { collective, action }) => self.issue(collective as usize, &action, now, release)?,
                None => self.maybe_yield(s, op, now, release)?,
            }
            return Ok(());
        }
        // An op that runs because it arrived waited for nothing but its own deps.
        self.stream_dep[op as usize] = if release == ready_cause(op) { NO_CAUSE } else { release };
        self.start_op(op, now)
    }

    fn start_op(&mut self, id: u32, now: Time) -> Result<(), Error> {
        self.start[id as usize] = now;
        let op = &self.graph.ops[id as usize];
        match op.kind {
            Kind::Compute => self.start_compute(id, now)?,
            Kind::Barrier | Kind::Marker => self.queue.push(now, Event::OpDone(id)),
            Kind::Transfer if self.fan_of[id as usize] != NO_FAN => self.start_fan_member(id, now)?,
            Kind::Transfer => {
                let message = self.new_message();
                self.message_of[id as usize] = message;
                let (src, dst, bytes, band, tenant) = (op.rank, op.peer as u32, op.bytes, op.band, op.tenant);
                self.start_transfer(now, src, dst, bytes, band, tenant, message, Owner::Op(id))?;
            }
            Kind::Collective => self.join_collective(id, now)?,
        }
        Ok(())
    }

    /// Starts compute op `id` at `at` (now, or after its stream's wake-up): it ends `duration` later.
    fn start_compute(&mut self, id: u32, at: Time) -> Result<(), Error> {
        self.start[id as usize] = at;
        let mut duration = self.graph.ops[id as usize].duration;
        if let Some(&k) = self.idle_scale.get(id as usize) {
            if k != NOT_SCALED {
                duration = self.after_idle(k, duration)?;
            }
        }
        let t = later(at, duration)?;
        self.queue.push(t, Event::OpDone(id));
        Ok(())
    }

    /// `duration` of the op of idle scaling `k` (see [`crate::idle`]), after the idle its stream had this run.
    fn after_idle(&self, k: u32, duration: Time) -> Result<Time, Error> {
        let s = self.graph.idle_scaled[k as usize];
        let (end, start) = (self.end[s.after as usize], self.start[s.until as usize]);
        if end == UNSET || start == UNSET {
            return Err(format!("op {}: its idle runs from the end of op {} to the start of op {}, which had not both \
                                happened when it started", s.op, s.after, s.until).into());
        }
        Ok(self.graph.idle_curves[s.curve as usize].scale(duration, start.saturating_sub(end), s.captured_ns))
    }

    fn new_message(&mut self) -> i64 {
        self.next_message += 1;
        self.next_message - 1
    }

    #[allow(clippy::too_many_arguments)]
    fn start_transfer(&mut self, now: Time, src: u32, dst: u32, bytes: u64, band: u8, tenant: u32, message: i64, owner: Owner) -> Result<(), Error> {
        self.transfers += 1;
        self.bytes_sent[src as usize] += bytes;
        let id = self.new_transfer(owner);
        let req = TransferRequest { id, message: message as u64, src, dst, bytes, band, tenant };
        self.network.start(now, req, &mut NetQueue(&mut self.queue))
    }

    fn new_transfer(&mut self, owner: Owner) -> u32 {
        match self.free_transfers.pop() {
            Some(id) => {
                self.transfer_owner[id as usize] = owner;
                id
            }
            None => {
                self.transfer_owner.push(owner);
                (self.transfer_owner.len() - 1) as u32
            }
        }
    }

    /// A fan member starts; once all have, the fan's tree flow starts (see
    /// [`crate::network::innet`]). Members share the fan's message id.
    fn start_fan_member(&mut self, id: u32, now: Time) -> Result<(), Error> {
        let g = self.graph;
        let f = self.fan_of[id as usize] as usize;
        if self.fan_message[f] < 0 {
            self.fan_message[f] = self.new_message();
        }
        let message = self.fan_message[f];
        self.message_of[id as usize] = message;
        self.fan_started[f] += 1;
        let fan = &g.fans[f];
        if (self.fan_started[f] as usize) < fan.ops.len() {
            return Ok(());
        }
        // The network says when the fan's tree flow may start (an aggregation: once every contribution reached the switch).
        let ends = self.fan_ends(f);
        let at = self.network.fan_ready(fan.kind, &ends, now)?;
        if at > now {
            self.queue.push(at, Event::FanStart(f as u32));
            return Ok(());
        }
        self.launch_fan(f, now)
    }

    /// Sender, receiver and start of each op of fan `f`.
    fn fan_ends(&self, f: usize) -> Vec<FanEnd> {
        let g = self.graph;
        g.fans[f]
            .ops
            .iter()
            .map(|&m| {
                let o = &g.ops[m as usize];
                FanEnd { src: o.rank, dst: o.peer as u32, start: self.start[m as usize] }
            })
            .collect()
    }

    fn launch_fan(&mut self, f: usize, now: Time) -> Result<(), Error> {
        let g = self.graph;
        let fan = &g.fans[f];
        let message = self.fan_message[f];
        let lead = &g.ops[fan.ops[0] as usize];
        let (bytes, band, tenant) = (lead.bytes, lead.band, lead.tenant);
        let ends = self.fan_ends(f);
        // A multicast's sender sends once; each contribution of an aggregate is sent.
        match fan.kind {
            FanKind::Multicast => self.bytes_sent[lead.rank as usize] += bytes,
            FanKind::Aggregate => {
                for e in &ends {
                    self.bytes_sent[e.src as usize] += bytes;
                }
            }
        }
        self.transfers += 1;
        let tid = self.new_transfer(Owner::Fan(f as u32));
        let req = TransferRequest { id: tid, message: message as u64, src: ends[0].src, dst: ends[0].dst, bytes, band, tenant };
        self.network.start_fan(now, req, fan.kind, &ends, &mut NetQueue(&mut self.queue))
    }

    /// A fan's tree flow was delivered (`now`: its transmission ended at
    /// `tx_end`, plus the tree's latency): each receiver has its copy (the
    /// aggregate) when the network says (see [`NetworkModel::fan_arrivals`]).
    fn fan_transmitted(&mut self, f: u32, tx_end: Time, now: Time) -> Result<(), Error> {
        let g = self.graph;
        let fan = &g.fans[f as usize];
        for &op in &fan.ops {
            self.tx_end[op as usize] = tx_end;
        }
        let ends = self.fan_ends(f as usize);
        let mut arrivals = Vec::with_capacity(ends.len());
        self.network.fan_arrivals(fan.kind, &ends, tx_end, now, &mut arrivals)?;
        match fan.kind {
            FanKind::Aggregate => self.fan_received(fan.ops[0], now),
            FanKind::Multicast => {
                for (&op, &at) in fan.ops.iter().zip(&arrivals) {
                    if at == now {
                        self.fan_received(op, now)?;
                    } else {
                        self.queue.push(at.max(now), Event::FanRecv(op));
                    }
                }
                Ok(())
            }
        }
    }

    fn fan_received(&mut self, op: u32, now: Time) -> Result<(), Error> {
        let g = self.graph;
        let fan = &g.fans[self.fan_of[op as usize] as usize];
        match fan.kind {
            FanKind::Multicast => {
                let o = &g.ops[op as usize];
                self.bytes_received[o.peer as usize] += o.bytes;
                self.recv_row[op as usize] = self.new_row();
                self.finish_op(op, now)
            }
            FanKind::Aggregate => {
                // One recv row for the aggregate; every contribution counts as received.
                let row = self.new_row();
                for &m in &fan.ops {
                    let o = &g.ops[m as usize];
                    self.bytes_received[o.peer as usize] += o.bytes;
                    self.recv_row[m as usize] = row;
                }
                for &m in &fan.ops {
                    self.finish_op(m, now)?;
                }
                Ok(())
            }
        }
    }

    /// [`Executor::delivered`] for the network's general event path (the lone one has it inlined).
    #[inline(never)]
    fn delivered_out_of_line(&mut self, d: Delivery, now: Time) -> Result<(), Error> {
        self.delivered(d, now)
    }

    #[inline(always)]
    fn delivered(&mut self, d: Delivery, now: Time) -> Result<(), Error> {
        match self.transfer_owner[d.id as usize] {
            Owner::Op(op) => {
                self.free_transfers.push(d.id);
                let o = &self.graph.ops[op as usize];
                self.bytes_received[o.peer as usize] += o.bytes;
                self.tx_end[op as usize] = d.tx_end;
                if let Some(&delay) = self.transit_delay.get(op as usize) {
                    if delay > 0 {
                        // its own transport time beyond the route's: it reaches the receiver later
                        self.queue.push(later(now, delay)?, Event::Arrive(op));
                        return Ok(());
                    }
                }
                self.arrived(op, now)
            }
            Owner::Fan(f) => {
                self.free_transfers.push(d.id);
                self.fan_transmitted(f, d.tx_end, now)
            }
            Owner::Step => {
                // `step_delivered` frees the id (a ring lane first offers it to its sends).
                let f = self.flights[d.id as usize];
                self.bytes_received[f.to_rank as usize] += f.bytes;
                self.step_delivered(f, d.id, d.tx_end, now)
            }
        }
    }

    /// Transfer op `op`'s message reached its receiver: its recv row, and the op ends.
    fn arrived(&mut self, op: u32, now: Time) -> Result<(), Error> {
        self.recv_row[op as usize] = self.new_row();
        self.finish_op(op, now)
    }

    fn new_row(&mut self) -> i64 {
        self.next_row += 1;
        self.next_row - 1
    }

    fn finish_op(&mut self, id: u32, now: Time) -> Result<(), Error> {
        self.end[id as usize] = now;
        self.finished_ops += 1;
        if self.finished_ops == self.graph.len() {
            self.network.job_ended(now);
        }
        let op = &self.graph.ops[id as usize];
        let stream = op.stream;
        let (a, b) = (self.succ_offsets[id as usize] as usize, self.succ_offsets[id as usize + 1] as usize);
        // A continuation this op readies on its own stream runs next there, before the queued ops.
        let mut next = u32::MAX;
        if !self.continuation.is_empty() && stream != NO_STREAM {
            next = self.succ[a..b]
                .iter()
                .copied()
                .find(|&s| self.continuation[s as usize] && self.waiting_deps[s as usize] == 1 && self.graph.ops[s as usize].stream == stream)
                .unwrap_or(u32::MAX);
        }
        if stream != NO_STREAM && self.streams[stream as usize].release(id) {
            if next != u32::MAX {
                self.waiting_deps[next as usize] = 0;
                self.make_ready(next, now)?;
            }
            // A transfer holds its stream until delivery: its recv row frees it.
            let release = if op.kind == Kind::Transfer { self.recv_row[id as usize] } else { id as i64 };
            self.fill(stream as usize, now, release)?;
        } else {
            next = u32::MAX;
        }
        for k in a..b {
            let s = self.succ[k];
            if s == next {
                continue;
            }
            let w = &mut self.waiting_deps[s as usize];
            *w -= 1;
            if *w == 0 {
                self.make_ready(s, now)?;
            }
        }
        if !self.extra_succ.is_empty() {
            // Successors appended while the run went on (each op ends once: the list is done with).
            for s in std::mem::take(&mut self.extra_succ[id as usize]) {
                let w = &mut self.waiting_deps[s as usize];
                *w -= 1;
                if *w == 0 {
                    self.make_ready(s, now)?;
                }
            }
        }
        Ok(())
    }

    fn join_collective(&mut self, id: u32, now: Time) -> Result<(), Error> {
        let op = &self.graph.ops[id as usize];
        let c = op.collective as usize;
        let member = op.member;
        let spec = &self.graph.collectives[c];
        let track = self.detail == TraceDetail::Step;
        let live = self.collectives[c].get_or_insert_with(|| LiveCollective {
            machine: Machine::new(crate::collective::new_collective_for(
                spec,
                &match &self.graph.rank_classes {
                    Some(classes) => classes.params(spec, &self.graph.host_of_rank),
                    None => crate::collective::Params::for_spec(spec, &self.graph.host_of_rank),
                },
                self.graph.closed_form.as_ref(),
                track,
            )),
            ops: vec![u32::MAX; spec.members.len()],
            lane: Vec::new(),
            lane_plain: false,
        });
        if live.ops[member as usize] != u32::MAX {
            return Err(format!("collective {c}: member {member} joined twice (ops {} and {id})", live.ops[member as usize]).into());
        }
        live.ops[member as usize] = id;
        let cause = crate::collective::join_cause(id);
        let mut actions = self.action_pool.pop().unwrap_or_default();
        live.machine.join(now, member, cause, &mut actions);
        self.apply(c, actions, now, cause)?;
        let stream = self.graph.ops[id as usize].stream;
        if stream != NO_STREAM && self.streams[stream as usize].holds(id) {
            self.maybe_yield(stream as usize, id, now, cause)?;
        }
        if self.parked_in[c] > 0 {
            // Members parked while waiting for this one may run again: their streams reconsider.
            let members: Vec<u32> = match &self.collectives[c] {
                Some(live) => live.ops.iter().copied().filter(|op| self.parked.contains_key(op)).collect(),
                None => Vec::new(),
            };
            let launched = self.launched(c);
            for op in members {
                let s = self.graph.ops[op as usize].stream as usize;
                if launched && self.streams[s].policy.negotiates() {
                    // Launched elsewhere: its parked member now goes first on its stream.
                    self.unpark_item(op);
                    self.queue_item(s, PARKED | op as u64);
                }
                self.fill(s, now, cause)?;
                self.reconsider_running(s, now, cause)?;
            }
        }
        Ok(())
    }

    /// Collective step `f` (carried by transfer `id`, not reused yet) was delivered.
    #[inline(always)]
    fn step_delivered(&mut self, f: StepInFlight, id: u32, tx_end: Time, now: Time) -> Result<(), Error> {
        let c = f.collective as usize;
        let recv_row = NO_CAUSE;
        if self.direct && self.detail != TraceDetail::Step && self.parked.is_empty() {
            let LiveCollective { machine, ops, lane, lane_plain } = self.collectives[c].as_mut().expect("collective live while steps fly");
            if let Machine::Ring(ring) = machine {
                if lane.is_empty() {
                    *lane = lane_members(self.graph, c, ops);
                    *lane_plain = lane.iter().all(|m| m.plain);
                }
                // Sends in flight are counted for the policies that look at them (a FIFO stream neither preempts nor yields).
                if !lane[(f.tag >> 32) as usize].plain {
                    self.free_transfers.push(id);
                    return self.step_delivered_general(f, id, tx_end, now);
                }
                // The ring's sends go straight to the network as the machine makes them (see `RingLane`).
                let mut lane = RingLane {
                    c: c as u32,
                    now,
                    members: lane,
                    all_plain: *lane_plain,
                    network: self.network.lane(),
                    queue: &mut self.queue,
                    flights: &mut self.flights,
                    transfer_owner: &mut self.transfer_owner,
                    free_transfers: &mut self.free_transfers,
                    spare: Some(id),
                    bytes_sent: &mut self.bytes_sent,
                    next_message: &mut self.next_message,
                    transfers: &mut self.transfers,
                    rest: &mut self.lane_rest,
                    deferred: false,
                    error: None,
                };
                self.drained += run_lane(ring, &mut lane, f.tag, &mut self.bytes_received);
                if let Some(e) = lane.error {
                    return Err(e);
                }
                if self.lane_rest.is_empty() {
                    return Ok(());
                }
                let rest = std::mem::take(&mut self.lane_rest);
                let result = self.apply_batch(c, &rest, now, recv_row);
                self.lane_rest = rest;
                self.lane_rest.clear();
                return result;
            }
        }
        self.free_transfers.push(id);
        self.step_delivered_general(f, id, tx_end, now)
    }

    /// [`Executor::step_delivered`] through the machine's list of actions.
    #[inline(never)]
    fn step_delivered_general(&mut self, f: StepInFlight, id: u32, tx_end: Time, now: Time) -> Result<(), Error> {
        let c = f.collective as usize;
        let from_op = &self.graph.ops[f.op as usize];
        let stream = from_op.stream;
        // Sends in flight are counted for the policies that look at them (a FIFO stream neither preempts nor yields).
        let counted = stream != NO_STREAM && self.graph.streams[stream as usize].policy != PolicyKind::Fifo;
        if counted {
            self.streams[stream as usize].sends_changed(f.op, -1);
        }
        let mut recv_row = NO_CAUSE;
        if self.detail == TraceDetail::Step {
            let r = self.step_records[id as usize];
            self.step_log.try_make_room(2, 64)?;
            recv_row = self.new_row();
            let send = Row {
                id: r.row,
                iteration: from_op.iteration,
                rank: from_op.rank as i32,
                kind: KIND_SEND,
                op: self.step_op_names[self.graph.collectives[c].algorithm as usize],
                layer: from_op.layer,
                tensor: from_op.tensor,
                group: from_op.group,
                peer: f.to_rank as i32,
                message: r.message,
                bytes: f.bytes as i64,
                priority: from_op.priority,
                tenant: from_op.tenant as i32,
                collective: c as i64,
                step: r.step as i32,
                rpc: -1,
                stream: stream_index(stream),
                ready: r.ready,
                start: r.start,
                end: tx_end,
            };
            let recv = Row {
                id: recv_row,
                rank: f.to_rank as i32,
                kind: KIND_RECV,
                peer: from_op.rank as i32,
                stream: -1,
                ready: tx_end,
                start: tx_end,
                end: now,
                ..send
            };
            self.push_step_row(send, &r.causes)?;
            self.step_log.push(recv, [r.row]);
        }
        let live = self.collectives[c].as_mut().expect("collective live while steps fly");
        let mut actions = self.action_pool.pop().unwrap_or_default();
        live.machine.delivered(now, f.tag, recv_row, &mut actions);
        self.apply(c, actions, now, recv_row)?;
        // The sender may now be idle between sends: a chunk boundary (a FIFO stream neither preempts nor yields).
        if counted {
            if self.streams[stream as usize].idle_between_sends(f.op) {
                self.maybe_preempt_idle(stream as usize, f.op, now, recv_row)?;
            }
            if self.streams[stream as usize].idle_between_sends(f.op) {
                self.maybe_yield(stream as usize, f.op, now, recv_row)?;
            }
        }
        Ok(())
    }

    /// Logs a step-level row whose deps are `causes` expanded (joins into what made the op start), sorted, unique.
    fn push_step_row(&mut self, row: Row, causes: &[Cause]) -> Result<(), Error> {
        let mut deps = std::mem::take(&mut self.cause_scratch);
        deps.clear();
        for &cause in causes {
            self.expand_cause(cause, &mut deps);
        }
        deps.sort_unstable();
        deps.dedup();
        let room = self.step_log.try_make_room(2, deps.len() + 1);
        if room.is_ok() {
            self.step_log.push(row, deps.iter().copied());
        }
        self.cause_scratch = deps;
        room
    }

    /// A row id as is; a join as the recorded deps of the joining op.
    fn expand_cause(&self, cause: Cause, out: &mut Vec<i64>) {
        if cause >= 0 {
            out.push(cause);
        } else if let Some(op) = joined_op(cause) {
            self.op_deps(op, out);
        } else if let Some(op) = ready_op(cause) {
            self.graph_deps(op, out);
        }
    }

    /// Recorded deps of an op's row: graph edges and the stream it queued on.
    fn op_deps(&self, op: u32, out: &mut Vec<i64>) {
        self.graph_deps(op, out);
        self.expand_cause(self.stream_dep[op as usize], out);
    }

    /// Graph edges as row ids (a transfer dep stands for its recv row).
    fn graph_deps(&self, op: u32, out: &mut Vec<i64>) {
        for &d in self.graph.deps(op) {
            let d = d as usize;
            out.push(if self.graph.ops[d].kind == Kind::Transfer { self.recv_row[d] } else { d as i64 });
        }
    }

    /// Carries out a collective's actions; `trigger` is the event that produced them.
    #[inline(always)]
    fn apply(&mut self, c: usize, mut actions: Vec<Action>, now: Time, trigger: Cause) -> Result<(), Error> {
        let result = self.apply_batch(c, &actions, now, trigger);
        actions.clear();
        self.action_pool.push(actions);
        result
    }

    fn apply_batch(&mut self, c: usize, batch: &[Action], now: Time, trigger: Cause) -> Result<(), Error> {
        // A collective completes only in a call that says a member is done.
        let mut done = false;
        for action in batch {
            let member = match *action {
                Action::Send { from, .. } => from,
                Action::Done { member } | Action::DoneAt { member, .. } | Action::Wake { member, .. } => member,
            };
            let op = self.collectives[c].as_ref().expect("collective live").ops[member as usize];
            if let Some(held) = if self.parked.is_empty() { None } else { self.parked.get_mut(&op) } {
                match action {
                    Action::Send { .. } => {
                        debug_assert!(held.is_none(), "a parked member holds one send at most");
                        *held = Some(Held { collective: c as u32, action: *action });
                        continue;
                    }
                    Action::Wake { .. } => {}
                    Action::Done { .. } | Action::DoneAt { .. } => {
                        // Finished by receipts while parked: no longer waiting to resume.
                        self.parked.remove(&op);
                        self.parked_in[c] -= 1;
                        self.unpark_item(op);
                    }
                }
            }
            match *action {
                Action::Send { step, .. } => {
                    let o = &self.graph.ops[op as usize];
                    let s = o.stream;
                    if s != NO_STREAM {
                        let st = &self.streams[s as usize];
                        // A FIFO stream never preempts: no boundary to look for.
                        let at_boundary = preempts(self.graph.streams[s as usize].policy)
                            && (!self.graph.preempt_at_messages
                                || self.collectives[c].as_ref().is_some_and(|live| live.machine.starts_message(step)));
                        if at_boundary && st.policy.peek_priority().is_some_and(|p| p < o.priority) {
                            self.park(s as usize, op, Some(Held { collective: c as u32, action: *action }));
                            self.run_next(s as usize, now, trigger)?;
                            continue;
                        }
                    }
                    self.send_step(c, op, action, now, NO_CAUSE)?;
                }
                Action::Done { .. } => {
                    done = true;
                    self.finish_op(op, now)?
                }
                Action::DoneAt { at, sent, received, .. } => {
                    done = true;
                    // Closed-form mode: the member's schedule's bytes, counted as the steps would be.
                    let rank = self.graph.ops[op as usize].rank as usize;
                    self.bytes_sent[rank] += sent;
                    self.bytes_received[rank] += received;
                    self.queue.push(at, Event::OpDone(op))
                }
                Action::Wake { at, tag, bytes, causes, .. } => {
                    let wake = PendingWake { collective: c as u32, member, tag, bytes, start: now, causes };
                    let slot = store_in_slot(&mut self.wakes, &mut self.free_wakes, wake);
                    self.queue.push(at, Event::Wake(slot));
                }
            }
        }
        if done && self.collectives[c].as_ref().is_some_and(|live| live.machine.complete()) {
            self.collectives[c] = None;
        }
        Ok(())
    }

    /// A collective member's wake-up is due (it finished reducing).
    fn wake(&mut self, slot: u32, now: Time) -> Result<(), Error> {
        let w = self.wakes[slot as usize];
        self.free_wakes.push(slot);
        let c = w.collective as usize;
        let op = self.collectives[c].as_ref().expect("a collective waiting for a wake-up is live").ops[w.member as usize];
        let mut row = NO_CAUSE;
        if self.detail == TraceDetail::Step {
            // The reduction, as a compute row on the member's rank: the next step waits for it.
            self.step_log.try_make_room(1, 64)?;
            row = self.new_row();
            let o = &self.graph.ops[op as usize];
            let reduce = Row {
                id: row,
                iteration: o.iteration,
                rank: o.rank as i32,
                kind: KIND_COMPUTE,
                op: self.reduce_op_name,
                layer: o.layer,
                tensor: o.tensor,
                group: o.group,
                peer: -1,
                message: -1,
                bytes: w.bytes as i64,
                priority: o.priority,
                tenant: o.tenant as i32,
                collective: c as i64,
                step: -1,
                rpc: -1,
                stream: stream_index(o.stream),
                ready: w.start,
                start: w.start,
                end: now,
            };
            self.push_step_row(reduce, &w.causes)?;
        }
        let mut actions = self.action_pool.pop().unwrap_or_default();
        self.collectives[c].as_mut().expect("live").machine.woke(now, w.member, w.tag, row, &mut actions);
        self.apply(c, actions, now, row)
    }

    /// Drops a parked member's resume entry from its stream's queue.
    fn unpark_item(&mut self, op: u32) {
        let s = self.graph.ops[op as usize].stream as usize;
        let mut kept = Vec::new();
        while let Some(item) = self.streams[s].policy.pop() {
            if item != PARKED | op as u64 {
                kept.push(item);
            }
        }
        for item in kept {
            self.queue_item(s, item);
        }
    }

    fn issue(&mut self, c: usize, action: &Action, now: Time, resumed_after: Cause) -> Result<(), Error> {
        let Action::Send { from, .. } = *action else {
            return Ok(());
        };
        let op = self.collectives[c].as_ref().expect("collective live").ops[from as usize];
        self.send_step(c, op, action, now, resumed_after)
    }

    /// Starts the transfer of collective `c`'s send `action` by its member op `op`.
    #[inline(always)]
    fn send_step(&mut self, c: usize, op: u32, action: &Action, now: Time, resumed_after: Cause) -> Result<(), Error> {
        let Action::Send { from, to, bytes, tag, step, ready, causes } = *action else {
            return Ok(());
        };
        let spec = &self.graph.collectives[c];
        let (src, dst) = (spec.members[from as usize], spec.members[to as usize]);
        let o = &self.graph.ops[op as usize];
        let (band, tenant, stream) = (o.band, o.tenant, o.stream);
        if stream != NO_STREAM && self.graph.streams[stream as usize].policy != PolicyKind::Fifo {
            self.streams[stream as usize].sends_changed(op, 1);
        }
        let message = self.new_message();
        let flight = StepInFlight { collective: c as u32, op, to_rank: dst, tag, bytes };
        self.transfers += 1;
        self.bytes_sent[src as usize] += bytes;
        let id = self.new_transfer(Owner::Step);
        if self.flights.len() <= id as usize {
            self.flights.resize(id as usize + 1, StepInFlight::default());
        }
        self.flights[id as usize] = flight;
        if self.detail == TraceDetail::Step {
            let row = self.new_row();
            let [a, b, rendezvous_a, rendezvous_b] = causes;
            let causes = [a, b, rendezvous_a, rendezvous_b, resumed_after];
            if self.step_records.len() <= id as usize {
                self.step_records.resize(id as usize + 1, StepRecord::default());
            }
            self.step_records[id as usize] = StepRecord { step, row, message, ready, start: now, causes };
        }
        let req = TransferRequest { id, message: message as u64, src, dst, bytes, band, tenant };
        match if self.direct { self.network.start_lone(now, req)? } else { None } {
            Some((at, token)) => {
                self.queue.push(at, Event::Net(token));
                Ok(())
            }
            None => self.network.start(now, req, &mut NetQueue(&mut self.queue)),
        }
    }

    fn into_output(mut self, op_names: Vec<String>) -> Result<RunOutput, Error> {
        let g = self.graph;
        // The graph's rows go after the logged steps (ids, not positions, identify rows): no copy of the steps.
        let mut log = std::mem::take(&mut self.step_log);
        // Every op's row and a transfer's recv row (exactly, no doubling); deps: the graph's edges and a
        // stream cause each; more room is made (fallibly) if rows need more.
        let transfers = g.ops.iter().filter(|o| o.kind == Kind::Transfer).count();
        log.try_reserve_exact(g.ops.len() + transfers, g.dep_ids().len() + g.ops.len() + transfers)?;
        let mut deps = Vec::new();
        for (i, op) in g.ops.iter().enumerate() {
            let kind = match op.kind {
                Kind::Compute => KIND_COMPUTE,
                Kind::Transfer => KIND_SEND,
                Kind::Collective => KIND_COLLECTIVE,
                Kind::Barrier => KIND_BARRIER,
                Kind::Marker => KIND_MARKER,
            };
            let row = Row {
                id: i as i64,
                iteration: op.iteration,
                rank: op.rank as i32,
                kind,
                op: op.name,
                layer: op.layer,
                tensor: op.tensor,
                group: op.group,
                peer: op.peer,
                message: self.message_of[i],
                bytes: op.bytes as i64,
                priority: op.priority,
                tenant: op.tenant as i32,
                collective: op.collective,
                step: -1,
                rpc: op.rpc,
                stream: stream_index(op.stream),
                ready: self.ready[i],
                start: self.start[i],
                end: if op.kind == Kind::Transfer { self.tx_end[i] } else { self.end[i] },
            };
            deps.clear();
            self.op_deps(i as u32, &mut deps);
            if !g.fans.is_empty() {
                // Several contributions of one aggregate share its recv row.
                deps.sort_unstable();
                deps.dedup();
            }
            let fan = self.fan_of[i];
            let fan_ops = if fan == NO_FAN { 0 } else { g.fans[fan as usize].ops.len() };
            log.try_make_room(2, deps.len() + fan_ops + 1)?;
            let (recv_id, tx_end, end) = (self.recv_row[i], self.tx_end[i], self.end[i]);
            let fan_recv = |row: Row| Row {
                id: recv_id,
                rank: op.peer,
                kind: KIND_RECV,
                peer: op.rank as i32,
                stream: -1,
                ready: tx_end,
                start: tx_end,
                end,
                ..row
            };
            let lead = if fan == NO_FAN { None } else { Some((g.fans[fan as usize].kind, g.fans[fan as usize].ops[0] == i as u32)) };
            match lead {
                // A multicast has one send row (its first op's); each copy has its recv row.
                Some((FanKind::Multicast, false)) => {
                    let recv = fan_recv(row);
                    log.push(recv, [g.fans[fan as usize].ops[0] as i64]);
                    continue;
                }
                // An aggregate has a send row per contribution and one recv row (its first op's).
                Some((FanKind::Aggregate, is_lead)) => {
                    log.push(row, deps.iter().copied());
                    if is_lead {
                        let recv = fan_recv(row);
                        log.push(recv, g.fans[fan as usize].ops.iter().map(|&m| m as i64));
                    }
                    continue;
                }
                _ => {}
            }
            log.push(row, deps.iter().copied());
            if op.kind == Kind::Transfer {
                let recv = Row {
                    id: self.recv_row[i],
                    rank: op.peer,
                    kind: KIND_RECV,
                    peer: op.rank as i32,
                    stream: -1,
                    ready: self.tx_end[i],
                    start: self.tx_end[i],
                    end: self.end[i],
                    ..row
                };
                log.push(recv, [i as i64]);
            }
        }
        let makespan = self.end.iter().copied().max().unwrap_or(0);
        let mut network = self.network;
        Ok(RunOutput {
            log,
            op_names,
            events: self.queue.processed(),
            transfers: self.transfers,
            recomputations: network.stats().recomputations,
            bytes_sent: self.bytes_sent,
            bytes_received: self.bytes_received,
            makespan,
            flows: network.take_flows(),
            queues: network.take_queues(),
            ports: network.ports(),
            packet: network.packet_totals(),
        })
    }
}

/// Whether a stream of this policy preempts (what its [`StreamPolicy::preempts`] says, without the call).
#[inline]
fn preempts(policy: PolicyKind) -> bool {
    matches!(policy, PolicyKind::Priority { preempt: true })
}

fn stream_index(stream: u32) -> i32 {
    if stream == NO_STREAM {
        -1
    } else {
        stream as i32
    }
}

/// Puts `item` in a free slot of `items` (reusing one from `free` if there is one); returns its index.
fn store_in_slot<T>(items: &mut Vec<T>, free: &mut Vec<u32>, item: T) -> u32 {
    match free.pop() {
        Some(slot) => {
            items[slot as usize] = item;
            slot
        }
        None => {
            items.push(item);
            (items.len() - 1) as u32
        }
    }
}

/// A run whose graph grows while it goes on: ops (a job, a background
/// flow) are appended with release times at the instant the run has
/// reached, with deps on ops of any age. A session that is only advanced
/// and appended to logs exactly what one [`run`] of the final graph logs
/// when every appended op's release is at or after the instant it was
/// appended at (`tests/growth.rs`).
///
/// The ranks are fixed when the session starts (the network is built for
/// them): list every rank in `host_of_rank`, or let the first graph name them.
pub struct Session {
    graph: Graph,
    /// The paused run, pointing at an empty graph between calls (it borrows `graph` while it runs).
    paused: Option<Executor<'static>>,
    ranks: u32,
}

/// What may be added to a growing graph (see [`Session::append`]).
pub struct Growth<'a> {
    graph: &'a mut Graph,
}

impl Growth<'_> {
    /// Interns an op name (see [`Graph::op_name`]).
    pub fn op_name(&mut self, name: &str) -> u32 {
        self.graph.op_name(name)
    }
    /// Adds an op that depends on `deps` (earlier ops, of any age) and is not ready before `release`.
    pub fn add(&mut self, op: Op, deps: &[u32], release: Time) -> u32 {
        self.graph.add_released(op, deps, release)
    }
    /// Adds an op with no release time: ready as soon as its deps are met (at the earliest, now).
    pub fn add_now(&mut self, op: Op, deps: &[u32]) -> u32 {
        self.graph.add(op, deps)
    }
    pub fn add_collective(&mut self, spec: crate::graph::CollectiveSpec) -> i64 {
        self.graph.add_collective(spec)
    }
    pub fn new_stream(&mut self, rank: u32, name: &str, policy: crate::graph::PolicyKind) -> u32 {
        self.graph.new_stream(rank, name, policy)
    }
    /// Adds a fan over ops added in this same growth.
    pub fn add_fan(&mut self, fan: crate::graph::FanSpec) {
        self.graph.fans.push(fan)
    }
    /// The graph so far (read only).
    pub fn graph(&self) -> &Graph {
        self.graph
    }
}

use crate::graph::Op;

impl Session {
    /// Starts a run of `graph` on `network` (built for `graph`'s ranks).
    pub fn new(graph: Graph, network: Box<dyn NetworkModel>, detail: TraceDetail) -> Result<Session, Error> {
        let ranks = graph.ranks();
        let ex = Executor::new(&graph, network, detail, Some(GROWING_ROW_BASE))?.rebind(&crate::graph::EMPTY);
        Ok(Session { graph, paused: Some(ex), ranks })
    }

    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The instant the run has been advanced to.
    pub fn now(&self) -> Time {
        self.paused.as_ref().map_or(0, |ex| ex.clock)
    }

    /// Processes every event and release before `t` (the run stands at `t` afterwards).
    pub fn run_until(&mut self, t: Time) -> Result<(), Error> {
        let mut ex = self.paused.take().expect("a session is paused between calls").rebind(&self.graph);
        if t < ex.clock {
            let clock = ex.clock;
            self.paused = Some(ex.rebind(&crate::graph::EMPTY));
            return Err(format!("the run already stands at {clock} ns; it cannot go back to {t} ns").into());
        }
        let result = ex.advance(t, &mut None);
        ex.clock = t;
        self.paused = Some(ex.rebind(&crate::graph::EMPTY));
        result
    }

    /// Appends to the graph what `grow` adds, at the instant the run stands at:
    /// each new op is ready once its deps ended and its release time (if any) came.
    pub fn append<T>(&mut self, grow: impl FnOnce(&mut Growth<'_>) -> T) -> Result<T, Error> {
        let ex = self.paused.take().expect("a session is paused between calls");
        let old = (self.graph.len(), self.graph.collectives.len(), self.graph.streams.len(), self.graph.fans.len(), self.graph.releases.len());
        let hosts = self.graph.host_of_rank.clone();
        let out = grow(&mut Growth { graph: &mut self.graph });
        let mut ex = ex.rebind(&self.graph);
        let checked = self.graph.check().map_err(Error::from).and_then(|()| {
            if self.graph.ranks() > self.ranks || self.graph.host_of_rank != hosts {
                return Err(Error::from(format!(
                    "appended ops name ranks beyond the {} the run started with; list every rank in host_of_rank up front",
                    self.ranks
                )));
            }
            if let Some(f) = self.graph.fans[old.3..].iter().position(|fan| fan.ops.iter().any(|&op| (op as usize) < old.0)) {
                return Err(format!("appended fan {} names an op that was there before", old.3 + f).into());
            }
            if let Some(&(op, t)) = self.graph.releases[old.4..].iter().find(|&&(_, t)| t < ex.clock) {
                return Err(format!("appended op {op} is released at {t} ns, before the instant the run stands at ({} ns)", ex.clock).into());
            }
            Ok(())
        });
        let result = checked.and_then(|()| ex.grow(old.0, old.1, old.2, old.3, old.4));
        self.paused = Some(ex.rebind(&crate::graph::EMPTY));
        result.map(|()| out)
    }

    /// Runs to the end and returns the log (as [`run`] of the final graph would).
    pub fn finish(mut self) -> Result<RunOutput, Error> {
        let mut ex = self.paused.take().expect("a session is paused between calls").rebind(&self.graph);
        ex.advance(Time::MAX, &mut None)?;
        ex.finish()
    }
}

impl<'g> Executor<'g> {
    /// Takes in what was appended to the graph since it had `ops` ops,
    /// `colls` collectives, `streams` streams, `fans` fans and `releases` release times.
    fn grow(&mut self, ops: usize, colls: usize, streams: usize, fans: usize, releases: usize) -> Result<(), Error> {
        let g = self.graph;
        let n = g.len();
        for s in &g.streams[streams..] {
            self.streams.push(StreamState { policy: new_policy(s.policy, s.credit), running: Vec::new(), running_bytes: 0 });
        }
        // Collectives: their member CSR, state and negotiation.
        let mut coll_ops: Vec<Vec<u32>> = (0..g.collectives.len())
            .map(|c| if c < colls { self.coll_ops[self.coll_op_offsets[c] as usize..self.coll_op_offsets[c + 1] as usize].to_vec() } else { vec![u32::MAX; g.collectives[c].members.len()] })
            .collect();
        for (i, op) in g.ops.iter().enumerate().skip(ops) {
            if op.kind == Kind::Collective {
                coll_ops[op.collective as usize][op.member as usize] = i as u32;
            }
        }
        self.coll_op_offsets = std::iter::once(0).chain(coll_ops.iter().scan(0u32, |acc, m| {
            *acc += m.len() as u32;
            Some(*acc)
        })).collect();
        self.coll_ops = coll_ops.concat();
        self.parked_in.resize(g.collectives.len(), 0);
        self.collectives.resize_with(g.collectives.len(), || None);
        let negotiated: Vec<bool> = (colls..g.collectives.len())
            .map(|c| {
                self.coll_ops[self.coll_op_offsets[c] as usize..self.coll_op_offsets[c + 1] as usize].iter().any(|&op| {
                    let stream = g.ops.get(op as usize).map_or(NO_STREAM, |o| o.stream);
                    stream != NO_STREAM && self.streams[stream as usize].policy.negotiates()
                })
            })
            .collect();
        self.negotiation.extend(negotiated);
        if self.reduce_op_name == u32::MAX && g.collectives[colls..].iter().any(|c| c.gamma_ns_per_byte > 0.0) {
            self.run_names.push("reduce".to_string());
            self.reduce_op_name = (self.run_names.len() - 1) as u32;
        }
        // Per-op state; the CSR successors end at the old ops.
        self.ready.resize(n, UNSET);
        self.start.resize(n, UNSET);
        self.end.resize(n, UNSET);
        self.stream_dep.resize(n, NO_CAUSE);
        self.recv_row.resize(n, -1);
        self.tx_end.resize(n, 0);
        self.message_of.resize(n, -1);
        self.fan_of.resize(n, NO_FAN);
        self.wakeup = per_op(g, &g.wakeups);
        self.continuation = continuations(g);
        self.transit_delay = per_op(g, &g.transit_delays);
        self.idle_scale = idle_scales(g);
        let last = *self.succ_offsets.last().expect("CSR has a first entry");
        self.succ_offsets.resize(n + 1, last);
        self.extra_succ.resize_with(n, Vec::new);
        self.waiting_deps.resize(n, 0);
        for id in ops..n {
            for &d in g.deps(id as u32) {
                if self.end[d as usize] == UNSET {
                    self.waiting_deps[id] += 1;
                    self.extra_succ[d as usize].push(id as u32);
                }
            }
        }
        for (f, fan) in g.fans.iter().enumerate().skip(fans) {
            for &op in &fan.ops {
                self.fan_of[op as usize] = f as u32;
            }
        }
        self.fan_started.resize(g.fans.len(), 0);
        self.fan_message.resize(g.fans.len(), -1);
        for &(op, t) in &g.releases[releases..] {
            self.waiting_deps[op as usize] += 1;
            self.releases.push(Reverse((t, op)));
        }
        let now = self.clock;
        for id in ops..n {
            if self.waiting_deps[id] == 0 {
                self.make_ready(id as u32, now)?;
            }
        }
        Ok(())
    }

    /// The same run, reading `graph` (the one it ran on, grown, or an empty stand-in while paused).
    fn rebind<'h>(self, graph: &'h Graph) -> Executor<'h> {
        let Executor {
            graph: _,
            progress_interval,
            succ_offsets,
            succ,
            waiting_deps,
            ready,
            start,
            end,
            stream_dep,
            recv_row,
            tx_end,
            message_of,
            streams,
            parked,
            parked_in,
            queue,
            network,
            transfer_owner,
            free_transfers,
            collectives,
            detail,
            step_log,
            step_op_names,
            reduce_op_name,
            flights,
            step_records,
            wakes,
            free_wakes,
            action_pool,
            lane_rest,
            direct,
            drained,
            deliveries,
            next_row,
            next_message,
            transfers,
            bytes_sent,
            bytes_received,
            finished_ops,
            cause_scratch,
            negotiation,
            coll_op_offsets,
            coll_ops,
            fan_of,
            fan_started,
            fan_message,
            releases,
            wakeup,
            continuation,
            transit_delay,
            idle_scale,
            extra_succ,
            run_names,
            row_base,
            clock,
        } = self;
        Executor {
            graph,
            progress_interval,
            succ_offsets,
            succ,
            waiting_deps,
            ready,
            start,
            end,
            stream_dep,
            recv_row,
            tx_end,
            message_of,
            streams,
            parked,
            parked_in,
            queue,
            network,
            transfer_owner,
            free_transfers,
            collectives,
            detail,
            step_log,
            step_op_names,
            reduce_op_name,
            flights,
            step_records,
            wakes,
            free_wakes,
            action_pool,
            lane_rest,
            direct,
            drained,
            deliveries,
            next_row,
            next_message,
            transfers,
            bytes_sent,
            bytes_received,
            finished_ops,
            cause_scratch,
            negotiation,
            coll_op_offsets,
            coll_ops,
            fan_of,
            fan_started,
            fan_message,
            releases,
            wakeup,
            continuation,
            transit_delay,
            idle_scale,
            extra_succ,
            run_names,
            row_base,
            clock,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{with_direct_paths, Event, Executor, TraceDetail};

    /// The ring lane hands the delivered step's transfer id to its first
    /// send instead of the free list (whose top it would be): the ids taken
    /// and the free list left at the end must be the general path's (an id
    /// kept back, pushed late or lost would change them). Rings of several
    /// sizes, uneven chunks, several tensors at once, with the lane's
    /// actions left for `apply_batch` at every ring's end.
    #[test]
    fn the_ring_lane_takes_the_general_paths_transfer_ids() {
        use crate::lower::training::{AlgorithmName, GroupSpec, LayerSpec, SyncSpec, TrainingSpec};
        use crate::network::{Fidelity, NetworkSpec};
        for workers in [2u32, 3, 5, 8] {
            let layers: Vec<LayerSpec> = (0..4).map(|i| LayerSpec { fwd_ns: 1000 * i, bwd_ns: 3000 + 700 * i }).collect();
            let groups: Vec<GroupSpec> =
                (0..6u32).map(|t| GroupSpec { layers: vec![t % 4], tensor: t as i32, bytes: 1000 + 333 * t as u64, server: 0, update_ns: 0 }).collect();
            let spec = TrainingSpec { seed: 1, ..TrainingSpec::new(workers, SyncSpec::Allreduce { algorithm: AlgorithmName::Ring }, layers, groups) };
            for fidelity in [Fidelity::Flow, Fidelity::Analytic] {
                let net = NetworkSpec::star(fidelity, 10e9, 10_000);
                let graph = crate::training_graph(&spec, &net).expect("graph");
                let ids = |direct: bool| {
                    with_direct_paths(direct, || {
                        let model = crate::network::build_network(&net, &graph.hosts()).expect("network");
                        let mut ex = Executor::new(&graph, model, TraceDetail::Collective, None).expect("executor");
                        ex.advance(crate::engine::Time::MAX, &mut None).expect("run");
                        assert_eq!(ex.finished_ops, graph.len());
                        (ex.transfer_owner.len(), ex.free_transfers.clone(), ex.transfers)
                    })
                };
                let (direct, general) = (ids(true), ids(false));
                assert!(direct.2 > 0);
                assert_eq!(direct, general, "{workers} workers, {fidelity:?}");
            }
        }
    }

    #[test]
    fn a_packed_event_unpacks_to_itself() {
        for x in [0u32, 1, 2, 0x7fff_ffff, u32::MAX] {
            for e in [Event::OpDone(x), Event::FanRecv(x), Event::FanStart(x), Event::Wake(x), Event::Arrive(x), Event::Net(x as u64), Event::Net((x as u64) << 32 | 5), Event::Net(u64::MAX)] {
                assert_eq!(Event::unpack(e.pack()), e);
            }
        }
    }
}
