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

use rustc_hash::FxHashMap as HashMap;

use crate::collective::{joined_op, ready_cause, ready_op, Action, Cause, Collective, NO_CAUSE};
use crate::engine::{EventQueue, Time};
use crate::graph::{FanKind, Graph, Kind, PolicyKind, NO_STREAM};
use crate::log::{try_filled, EventLog, Row, KIND_BARRIER, KIND_COLLECTIVE, KIND_COMPUTE, KIND_MARKER, KIND_RECV, KIND_SEND};
use crate::network::{innet, Delivery, FlowRecord, NetworkModel, Scheduler, TransferRequest};
use crate::stream::{new_policy, QueueKey, StreamPolicy};

/// How much of the inside of collectives goes into the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceDetail {
    /// Every point-to-point step of every collective (a send and a recv row each).
    Step,
    /// One row per rank per collective; steps are simulated, not logged.
    Collective,
}

/// Latest simulated time the engine accepts (about 146 years), so that
/// sums of times never overflow.
pub const MAX_TIME: Time = 1 << 62;

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
}

#[derive(Debug, Clone, Copy)]
enum Event {
    OpDone(u32),
    Net(u64),
    /// A fan's copy (multicast) or aggregate reached its receiver: the op of that copy / the fan's first op.
    FanRecv(u32),
    /// An aggregation fan's tree flow starts: every contribution reached the switch.
    FanStart(u32),
    /// A collective member's wake-up (index into `Executor::wakes`).
    Wake(u32),
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

/// A collective step in flight, carried by its transfer slot.
#[derive(Debug, Clone, Copy)]
struct StepInFlight {
    collective: u32,
    tag: u64,
    /// Graph op of the sending member.
    op: u32,
    to_rank: u32,
    step: u32,
    row: i64,
    message: i64,
    bytes: u64,
    ready: Time,
    start: Time,
    /// What it waited for: the collective's causes, and what freed a parked member's stream.
    causes: [Cause; 5],
}

#[derive(Debug, Clone, Copy)]
enum Owner {
    Op(u32),
    Step(u32),
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
    /// ByteScheduler's credit (see [`crate::graph::StreamSpec::credit`]); 0: one op at a time.
    credit: u64,
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

    /// Whether one more op may start now: the stream is free, or (ByteScheduler) credit is left.
    fn has_room(&self) -> bool {
        self.running.is_empty() || self.running_bytes < self.credit
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
    machine: Box<dyn Collective>,
    /// Graph op of each member (u32::MAX until it joins).
    ops: Vec<u32>,
}

/// The executor's event queue seen by a network model.
struct NetQueue<'a>(&'a mut EventQueue<Event>);

impl Scheduler for NetQueue<'_> {
    fn schedule(&mut self, at: Time, token: u64) {
        self.0.push(at, Event::Net(token));
    }
}

const PARKED: u64 = 1 << 63;
const UNSET: Time = Time::MAX;

struct Executor<'g> {
    graph: &'g Graph,
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
    queue: EventQueue<Event>,
    network: Box<dyn NetworkModel>,
    transfer_owner: Vec<Owner>,
    free_transfers: Vec<u32>,
    collectives: Vec<Option<LiveCollective>>,
    detail: TraceDetail,
    step_log: EventLog,
    step_op_names: Vec<u32>,
    /// The `op` of a reduction row (registered only when a collective reduces at a cost).
    reduce_op_name: u32,
    flights: Vec<StepInFlight>,
    free_flights: Vec<u32>,
    /// Pending collective wake-ups, reused through `free_wakes`.
    wakes: Vec<PendingWake>,
    free_wakes: Vec<u32>,
    /// Scratch action lists, reused (issuing may start another collective while a batch is processed).
    action_pool: Vec<Vec<Action>>,
    deliveries: Vec<Delivery>,
    next_row: i64,
    next_message: i64,
    transfers: u64,
    bytes_sent: Vec<u64>,
    bytes_received: Vec<u64>,
    finished_ops: usize,
    /// Queue order of items on streams that tie-break by arrival.
    seq: u64,
    /// Reused buffer for a logged step's causes (no allocation per step).
    cause_scratch: Vec<i64>,
    /// Collectives scheduled by negotiation (a member is queued only once
    /// every member is ready), and how many members are ready so far.
    negotiate: Vec<bool>,
    negotiating: Vec<u32>,
    /// CSR: the member ops of each collective, in member order.
    coll_op_offsets: Vec<u32>,
    coll_ops: Vec<u32>,
    /// Per op: its fan, or [`NO_FAN`]; per fan: members started, and its message.
    fan_of: Vec<u32>,
    fan_started: Vec<u32>,
    fan_message: Vec<i64>,
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
pub fn run(graph: &Graph, network: Box<dyn NetworkModel>, detail: TraceDetail) -> Result<RunOutput, String> {
    run_with_hook(graph, network, detail, None)
}

/// [`run`] that calls `hook` about every [`PROGRESS_INTERVAL`] (checked
/// every [`CLOCK_EVERY`] events) and stops with the error [`INTERRUPTED`]
/// when it returns `false`. Without a hook the loop never reads the clock.
pub fn run_with_hook(graph: &Graph, network: Box<dyn NetworkModel>, detail: TraceDetail, mut hook: Option<ProgressHook<'_>>) -> Result<RunOutput, String> {
    graph.check()?;
    let n = graph.len();
    let (succ_offsets, succ) = graph.successors();
    let ranks = graph.ranks() as usize;
    let mut op_names = graph.op_names.clone();
    let step_op_names = crate::collective::Algorithm::NAMES
        .iter()
        .enumerate()
        .map(|(code, _)| {
            let name = crate::collective::Algorithm::from_code(code as u8).expect("listed").step_op();
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
    let (coll_op_offsets, coll_ops) = collective_members(graph);
    let negotiate = (0..graph.collectives.len())
        .map(|c| {
            coll_ops[coll_op_offsets[c] as usize..coll_op_offsets[c + 1] as usize].iter().any(|&op| {
                let stream = graph.ops.get(op as usize).map_or(NO_STREAM, |o| o.stream);
                stream != NO_STREAM && graph.streams[stream as usize].policy == NEGOTIATED
            })
        })
        .collect();
    let mut ex = Executor {
        graph,
        succ_offsets,
        succ,
        waiting_deps: {
            let mut w = try_filled(n, 0u32, "operation table")?;
            for (i, d) in w.iter_mut().enumerate() {
                *d = graph.deps(i as u32).len() as u32;
            }
            w
        },
        ready: try_filled(n, UNSET, "operation table")?,
        start: try_filled(n, UNSET, "operation table")?,
        end: try_filled(n, UNSET, "operation table")?,
        stream_dep: try_filled(n, -1, "operation table")?,
        recv_row: try_filled(n, -1, "operation table")?,
        tx_end: try_filled(n, 0, "operation table")?,
        message_of: try_filled(n, -1, "operation table")?,
        streams: graph.streams.iter().map(|s| StreamState { policy: new_policy(s.policy), running: Vec::new(), running_bytes: 0, credit: s.credit }).collect(),
        parked: HashMap::default(),
        parked_in: vec![0; graph.collectives.len()],
        queue: EventQueue::new(),
        network,
        transfer_owner: Vec::new(),
        free_transfers: Vec::new(),
        collectives: (0..graph.collectives.len()).map(|_| None).collect(),
        detail,
        step_log: EventLog::new(),
        step_op_names,
        reduce_op_name,
        flights: Vec::new(),
        free_flights: Vec::new(),
        wakes: Vec::new(),
        free_wakes: Vec::new(),
        action_pool: Vec::new(),
        deliveries: Vec::new(),
        next_row: n as i64,
        next_message: 0,
        transfers: 0,
        bytes_sent: vec![0; ranks],
        bytes_received: vec![0; ranks],
        finished_ops: 0,
        seq: 0,
        cause_scratch: Vec::new(),
        negotiate,
        negotiating: vec![0; graph.collectives.len()],
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
    };
    for id in 0..n as u32 {
        if ex.waiting_deps[id as usize] == 0 {
            ex.make_ready(id, 0)?;
        }
    }
    // Countdown to the next look at the clock; u32::MAX (never reached) without a hook.
    let mut countdown: u32 = if hook.is_some() { CLOCK_EVERY } else { u32::MAX };
    let mut last_call = std::time::Instant::now();
    while let Some((now, event)) = ex.queue.pop() {
        countdown -= 1;
        if countdown == 0 {
            countdown = CLOCK_EVERY;
            if let Some(hook) = hook.as_mut() {
                if last_call.elapsed() >= PROGRESS_INTERVAL {
                    let progress = Progress { now, events: ex.queue.processed(), ops_done: ex.finished_ops as u64, ops_total: n as u64 };
                    if !hook(&progress) {
                        return Err(INTERRUPTED.to_string());
                    }
                    last_call = std::time::Instant::now();
                }
            }
        }
        if now > MAX_TIME {
            return Err(format!("simulated time would pass {MAX_TIME} ns (about 146 years); the scenario's durations or sizes are far too large"));
        }
        match event {
            Event::OpDone(op) => ex.finish_op(op, now)?,
            Event::FanRecv(op) => ex.fan_received(op, now)?,
            Event::FanStart(f) => ex.launch_fan(f as usize, now)?,
            Event::Wake(slot) => ex.wake(slot, now)?,
            Event::Net(token) => {
                let mut delivered = std::mem::take(&mut ex.deliveries);
                ex.network.on_event(now, token, &mut NetQueue(&mut ex.queue), &mut delivered)?;
                for d in delivered.drain(..) {
                    ex.delivered(d, now)?;
                }
                ex.deliveries = delivered;
            }
        }
    }
    if ex.finished_ops != n {
        if std::env::var_os("DDLSIM_DEBUG_STUCK").is_some() {
            for (i, st) in ex.streams.iter().enumerate() {
                let cur: Vec<_> = st
                    .running
                    .iter()
                    .map(|r| (r.op, graph.ops[r.op as usize].collective, graph.ops[r.op as usize].priority, r.in_flight))
                    .collect();
                eprintln!("stream {i} rank {} running {cur:?} queued {:?}", graph.streams[i].rank, st.policy.peek_priority());
            }
            eprintln!(
                "parked {:?}",
                ex.parked.keys().map(|&o| (o, graph.ops[o as usize].collective, graph.ops[o as usize].rank)).collect::<Vec<_>>()
            );
        }
        let stuck = (0..n).find(|&i| ex.end[i] == UNSET).unwrap_or(0);
        let op = &graph.ops[stuck];
        return Err(format!(
            "the workload graph cannot finish: {} of {} operations never ran (first: op {stuck}, {} on rank {}); \
             look for a dependency cycle or a collective member that never joins",
            n - ex.finished_ops,
            n,
            graph.op_names[op.name as usize],
            op.rank
        ));
    }
    ex.into_output(op_names)
}

/// Priority streams without preemption schedule collectives as Horovod's
/// coordinator does: a collective is queued on its ranks only once it is
/// ready on all of them, every rank breaks priority ties by collective id,
/// and a member waiting for a join yields to a more urgent collective or to
/// a parked member of a collective the other ranks already launched. With
/// one order on all ranks, the most urgent negotiated collective always
/// gathers all its members, so no order of readiness can deadlock.
const NEGOTIATED: PolicyKind = PolicyKind::Priority { preempt: false };

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

fn later(now: Time, by: u64) -> Result<Time, String> {
    now.checked_add(by).filter(|&t| t <= MAX_TIME).ok_or_else(|| format!("simulated time would overflow: {now} ns + {by} ns is beyond {MAX_TIME} ns"))
}

impl<'g> Executor<'g> {
    fn make_ready(&mut self, op: u32, now: Time) -> Result<(), String> {
        self.ready[op as usize] = now;
        let o = &self.graph.ops[op as usize];
        if o.stream == NO_STREAM {
            return self.start_op(op, now);
        }
        if o.kind == Kind::Collective && self.negotiate[o.collective as usize] {
            let c = o.collective as usize;
            self.negotiating[c] += 1;
            let (a, b) = (self.coll_op_offsets[c] as usize, self.coll_op_offsets[c + 1] as usize);
            if (self.negotiating[c] as usize) < b - a {
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
    fn enqueue(&mut self, op: u32, now: Time, arrival: Cause) -> Result<(), String> {
        let s = self.graph.ops[op as usize].stream as usize;
        let st = &self.streams[s];
        if st.running.is_empty() || (st.has_room() && st.policy.peek_key().is_none()) {
            self.streams[s].occupy(op, self.graph.ops[op as usize].bytes);
            self.stream_dep[op as usize] = arrival;
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
    fn reconsider_running(&mut self, s: usize, now: Time, release: Cause) -> Result<(), String> {
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
    fn fill(&mut self, s: usize, now: Time, release: Cause) -> Result<(), String> {
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
        if self.graph.streams[s].policy == NEGOTIATED {
            let collective = o.kind == Kind::Collective;
            let urgent = parked && collective && self.launched(o.collective as usize);
            let order = if collective { o.collective as u64 } else { (1 << 40) + op as u64 };
            QueueKey { not_urgent: !urgent, priority: o.priority, not_resumed: true, order }
        } else {
            self.seq += 1;
            QueueKey { not_urgent: true, priority: o.priority, not_resumed: !parked, order: self.seq }
        }
    }

    fn queue_item(&mut self, s: usize, item: u64) {
        let key = self.key_of(s, item);
        self.streams[s].policy.push(item, key);
    }

    /// Under a priority policy, ranks may pick their collectives in different
    /// orders; a member whose next send waits for a member that has not
    /// joined yet (nothing sent in between) yields its stream to the next
    /// queued op, and resumes later, so that no such order deadlocks.
    fn maybe_yield(&mut self, s: usize, op: u32, now: Time, release: Cause) -> Result<(), String> {
        match self.graph.streams[s].policy {
            PolicyKind::Fifo => return Ok(()),
            NEGOTIATED => return self.maybe_yield_negotiated(s, op, now, release),
            PolicyKind::Priority { .. } => {}
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
    fn maybe_yield_negotiated(&mut self, s: usize, op: u32, now: Time, release: Cause) -> Result<(), String> {
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
    fn maybe_preempt_idle(&mut self, s: usize, running: u32, now: Time, release: Cause) -> Result<(), String> {
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
    fn run_next(&mut self, s: usize, now: Time, release: Cause) -> Result<(), String> {
        if let Some(item) = self.streams[s].policy.pop() {
            self.run_item(s, item, now, release)?;
        }
        self.fill(s, now, release)
    }

    fn run_item(&mut self, s: usize, item: u64, now: Time, release: Cause) -> Result<(), String> {
        let op = (item & !PARKED) as u32;
        self.streams[s].occupy(op, self.graph.ops[op as usize].bytes);
        if item & PARKED != 0 {
            let held = self.parked.remove(&op).expect("a parked member is in the parked map");
            self.parked_in[self.graph.ops[op as usize].collective as usize] -= 1;
            match held {
                // Resumed: the held send also waited for what freed the stream.
                Some(Held { collective, action }) => self.issue(collective as usize, action, now, release)?,
                None => self.maybe_yield(s, op, now, release)?,
            }
            return Ok(());
        }
        // An op that runs because it arrived waited for nothing but its own deps.
        self.stream_dep[op as usize] = if release == ready_cause(op) { NO_CAUSE } else { release };
        self.start_op(op, now)
    }

    fn start_op(&mut self, id: u32, now: Time) -> Result<(), String> {
        self.start[id as usize] = now;
        let op = &self.graph.ops[id as usize];
        match op.kind {
            Kind::Compute => {
                let t = later(now, op.duration)?;
                self.queue.push(t, Event::OpDone(id));
            }
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

    fn new_message(&mut self) -> i64 {
        self.next_message += 1;
        self.next_message - 1
    }

    #[allow(clippy::too_many_arguments)]
    fn start_transfer(&mut self, now: Time, src: u32, dst: u32, bytes: u64, band: u8, tenant: u32, message: i64, owner: Owner) -> Result<(), String> {
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
    fn start_fan_member(&mut self, id: u32, now: Time) -> Result<(), String> {
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
        if fan.kind == FanKind::Aggregate {
            // The switch sums as soon as every contribution's first bytes reached it.
            let mut at = now;
            for &m in &fan.ops {
                let o = &g.ops[m as usize];
                let (to_switch, _) = innet::split_latency(self.network.topology(), o.rank, o.peer as u32);
                at = at.max(later(self.start[m as usize], to_switch)?);
            }
            if at > now {
                self.queue.push(at, Event::FanStart(f as u32));
                return Ok(());
            }
        }
        self.launch_fan(f, now)
    }

    fn launch_fan(&mut self, f: usize, now: Time) -> Result<(), String> {
        let g = self.graph;
        let fan = &g.fans[f];
        let message = self.fan_message[f];
        let lead = &g.ops[fan.ops[0] as usize];
        let (bytes, band, tenant) = (lead.bytes, lead.band, lead.tenant);
        let topo = self.network.topology();
        // The tree's latency: to the nearest receiver (a multicast; the others
        // get theirs later, see `fan_transmitted`), from the switch (an aggregate).
        let (mut path, src, dst, latency) = match fan.kind {
            FanKind::Multicast => {
                let dsts: Vec<u32> = fan.ops.iter().map(|&o| g.ops[o as usize].peer as u32).collect();
                self.bytes_sent[lead.rank as usize] += bytes;
                let nearest = dsts.iter().map(|&d| innet::route_latency(topo, lead.rank, d)).min().unwrap_or(0);
                (innet::multicast_tree(topo, lead.rank, &dsts), lead.rank, dsts[0], nearest)
            }
            FanKind::Aggregate => {
                let srcs: Vec<u32> = fan.ops.iter().map(|&o| g.ops[o as usize].rank).collect();
                let path = innet::aggregation_tree(topo, &srcs, lead.peer as u32);
                let from_switch = srcs.iter().map(|&s| innet::split_latency(topo, s, lead.peer as u32).1).max().unwrap_or(0);
                for &s in &srcs {
                    self.bytes_sent[s as usize] += bytes;
                }
                (path, srcs[0], lead.peer as u32, from_switch)
            }
        };
        path.latency = latency;
        self.transfers += 1;
        let tid = self.new_transfer(Owner::Fan(f as u32));
        let req = TransferRequest { id: tid, message: message as u64, src, dst, bytes, band, tenant };
        self.network.start_on(now, req, &path, &mut NetQueue(&mut self.queue))
    }

    /// A fan's tree flow was delivered (`now`: its transmission ended at
    /// `tx_end`, plus the tree's latency): the receiver has the aggregate now;
    /// each multicast receiver gets its copy its route's latency after `tx_end`.
    fn fan_transmitted(&mut self, f: u32, tx_end: Time, now: Time) -> Result<(), String> {
        let g = self.graph;
        let fan = &g.fans[f as usize];
        for &op in &fan.ops {
            self.tx_end[op as usize] = tx_end;
        }
        match fan.kind {
            FanKind::Aggregate => self.fan_received(fan.ops[0], now),
            FanKind::Multicast => {
                for &op in &fan.ops {
                    let o = &g.ops[op as usize];
                    let at = later(tx_end, innet::route_latency(self.network.topology(), o.rank, o.peer as u32))?;
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

    fn fan_received(&mut self, op: u32, now: Time) -> Result<(), String> {
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

    fn delivered(&mut self, d: Delivery, now: Time) -> Result<(), String> {
        self.free_transfers.push(d.id);
        match self.transfer_owner[d.id as usize] {
            Owner::Op(op) => {
                let o = &self.graph.ops[op as usize];
                self.bytes_received[o.peer as usize] += o.bytes;
                self.tx_end[op as usize] = d.tx_end;
                self.recv_row[op as usize] = self.new_row();
                self.finish_op(op, now)
            }
            Owner::Fan(f) => self.fan_transmitted(f, d.tx_end, now),
            Owner::Step(flight) => {
                let f = self.flights[flight as usize];
                self.free_flights.push(flight);
                self.bytes_received[f.to_rank as usize] += f.bytes;
                self.step_delivered(f, d.tx_end, now)
            }
        }
    }

    fn new_row(&mut self) -> i64 {
        self.next_row += 1;
        self.next_row - 1
    }

    fn finish_op(&mut self, id: u32, now: Time) -> Result<(), String> {
        self.end[id as usize] = now;
        self.finished_ops += 1;
        let op = &self.graph.ops[id as usize];
        let stream = op.stream;
        if stream != NO_STREAM && self.streams[stream as usize].release(id) {
            // A transfer holds its stream until delivery: its recv row frees it.
            let release = if op.kind == Kind::Transfer { self.recv_row[id as usize] } else { id as i64 };
            self.fill(stream as usize, now, release)?;
        }
        let (a, b) = (self.succ_offsets[id as usize] as usize, self.succ_offsets[id as usize + 1] as usize);
        for k in a..b {
            let s = self.succ[k];
            let w = &mut self.waiting_deps[s as usize];
            *w -= 1;
            if *w == 0 {
                self.make_ready(s, now)?;
            }
        }
        Ok(())
    }

    fn join_collective(&mut self, id: u32, now: Time) -> Result<(), String> {
        let op = &self.graph.ops[id as usize];
        let c = op.collective as usize;
        let member = op.member;
        let spec = &self.graph.collectives[c];
        let track = self.detail == TraceDetail::Step;
        let live = self.collectives[c].get_or_insert_with(|| LiveCollective {
            machine: crate::collective::new_collective_for(spec, self.graph, track),
            ops: vec![u32::MAX; spec.members.len()],
        });
        if live.ops[member as usize] != u32::MAX {
            return Err(format!("collective {c}: member {member} joined twice (ops {} and {id})", live.ops[member as usize]));
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
                if launched && self.graph.streams[s].policy == NEGOTIATED {
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

    fn step_delivered(&mut self, f: StepInFlight, tx_end: Time, now: Time) -> Result<(), String> {
        let c = f.collective as usize;
        let from_op = &self.graph.ops[f.op as usize];
        let stream = from_op.stream;
        if stream != NO_STREAM {
            self.streams[stream as usize].sends_changed(f.op, -1);
        }
        let mut recv_row = NO_CAUSE;
        if self.detail == TraceDetail::Step {
            self.step_log.try_make_room(2, 64)?;
            recv_row = self.new_row();
            let send = Row {
                id: f.row,
                iteration: from_op.iteration,
                rank: from_op.rank as i32,
                kind: KIND_SEND,
                op: self.step_op_names[self.graph.collectives[c].algorithm as usize],
                layer: from_op.layer,
                tensor: from_op.tensor,
                group: from_op.group,
                peer: f.to_rank as i32,
                message: f.message,
                bytes: f.bytes as i64,
                priority: from_op.priority,
                tenant: from_op.tenant as i32,
                collective: c as i64,
                step: f.step as i32,
                rpc: -1,
                stream: stream_index(stream),
                ready: f.ready,
                start: f.start,
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
            self.push_step_row(send, &f.causes)?;
            self.step_log.push(recv, [f.row]);
        }
        let live = self.collectives[c].as_mut().expect("collective live while steps fly");
        let mut actions = self.action_pool.pop().unwrap_or_default();
        live.machine.delivered(now, f.tag, recv_row, &mut actions);
        self.apply(c, actions, now, recv_row)?;
        // The sender may now be idle between sends: a chunk boundary (a FIFO stream neither preempts nor yields).
        if stream != NO_STREAM && self.graph.streams[stream as usize].policy != PolicyKind::Fifo {
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
    fn push_step_row(&mut self, row: Row, causes: &[Cause]) -> Result<(), String> {
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
    fn apply(&mut self, c: usize, mut actions: Vec<Action>, now: Time, trigger: Cause) -> Result<(), String> {
        let result = self.apply_batch(c, &actions, now, trigger);
        actions.clear();
        self.action_pool.push(actions);
        result
    }

    fn apply_batch(&mut self, c: usize, batch: &[Action], now: Time, trigger: Cause) -> Result<(), String> {
        for &action in batch {
            let member = match action {
                Action::Send { from, .. } => from,
                Action::Done { member } | Action::DoneAt { member, .. } | Action::Wake { member, .. } => member,
            };
            let op = self.collectives[c].as_ref().expect("collective live").ops[member as usize];
            if let Some(held) = if self.parked.is_empty() { None } else { self.parked.get_mut(&op) } {
                match action {
                    Action::Send { .. } => {
                        debug_assert!(held.is_none(), "a parked member holds one send at most");
                        *held = Some(Held { collective: c as u32, action });
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
            match action {
                Action::Send { .. } => {
                    let o = &self.graph.ops[op as usize];
                    let s = o.stream;
                    if s != NO_STREAM {
                        let st = &self.streams[s as usize];
                        let Action::Send { step, .. } = action else { unreachable!() };
                        // A FIFO stream never preempts: no boundary to look for.
                        let at_boundary = preempts(self.graph.streams[s as usize].policy)
                            && (!self.graph.preempt_at_messages
                                || self.collectives[c].as_ref().is_some_and(|live| live.machine.starts_message(step)));
                        if at_boundary && st.policy.peek_priority().is_some_and(|p| p < o.priority) {
                            self.park(s as usize, op, Some(Held { collective: c as u32, action }));
                            self.run_next(s as usize, now, trigger)?;
                            continue;
                        }
                    }
                    self.issue(c, action, now, NO_CAUSE)?;
                }
                Action::Done { .. } => self.finish_op(op, now)?,
                Action::DoneAt { at, sent, received, .. } => {
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
        if self.collectives[c].as_ref().is_some_and(|live| live.machine.complete()) {
            self.collectives[c] = None;
        }
        Ok(())
    }

    /// A collective member's wake-up is due (it finished reducing).
    fn wake(&mut self, slot: u32, now: Time) -> Result<(), String> {
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

    fn issue(&mut self, c: usize, action: Action, now: Time, resumed_after: Cause) -> Result<(), String> {
        let Action::Send { from, to, bytes, tag, step, ready, causes } = action else {
            return Ok(());
        };
        let live = self.collectives[c].as_ref().expect("collective live");
        let op = live.ops[from as usize];
        let spec = &self.graph.collectives[c];
        let (src, dst) = (spec.members[from as usize], spec.members[to as usize]);
        let o = &self.graph.ops[op as usize];
        let (band, tenant, stream) = (o.band, o.tenant, o.stream);
        if stream != NO_STREAM {
            self.streams[stream as usize].sends_changed(op, 1);
        }
        let row = if self.detail == TraceDetail::Step { self.new_row() } else { -1 };
        let message = self.new_message();
        let [a, b, rendezvous_a, rendezvous_b] = causes;
        let causes = [a, b, rendezvous_a, rendezvous_b, resumed_after];
        let flight = StepInFlight { collective: c as u32, tag, op, to_rank: dst, step, row, message, bytes, ready, start: now, causes };
        let slot = store_in_slot(&mut self.flights, &mut self.free_flights, flight);
        self.start_transfer(now, src, dst, bytes, band, tenant, message, Owner::Step(slot))
    }

    fn into_output(mut self, op_names: Vec<String>) -> Result<RunOutput, String> {
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
