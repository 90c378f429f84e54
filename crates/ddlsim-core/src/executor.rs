//! Runs a workload graph on a network model and records the event log.

use std::collections::VecDeque;

use crate::engine::{EventQueue, Time};
use crate::graph::{Graph, Kind, OpCode, NO_STREAM};
use crate::log::{EventLog, Row};
use crate::network::{Network, Reschedule, Started};
use crate::ring::{Ring, RingAction};
use crate::spec::TraceDetail;

/// What a finished run hands back.
pub struct RunOutput {
    pub log: EventLog,
    /// Events popped from the queue.
    pub events: u64,
    /// Point-to-point transfers simulated (ring steps included).
    pub transfers: u64,
    /// Max-min recomputations (flow model).
    pub recomputations: u64,
    /// Per rank: payload bytes handed to the network / delivered to it.
    pub bytes_sent: Vec<u64>,
    pub bytes_received: Vec<u64>,
    pub makespan: Time,
}

/// A ring step in flight, carried by its delivery event.
#[derive(Debug, Clone, Copy)]
struct StepInFlight {
    collective: u32,
    from: u32,
    step: u32,
    row: i64,
    bytes: u64,
    ready: Time,
    start: Time,
    deps: [i64; 2],
}

/// Who is waiting for a transfer: a graph op, or a ring step (index into
/// the executor's slab of steps in flight, keeping events small).
#[derive(Debug, Clone, Copy)]
enum Owner {
    Op(u32),
    Step(u32),
}

#[derive(Debug, Clone, Copy)]
enum Event {
    OpDone(u32),
    TxDone { class: u32, version: u32 },
    /// Transfer slot delivered, if its generation still matches.
    Delivered { transfer: u32, generation: u32 },
}

/// A transfer in flight. The generation changes when a promised delivery
/// time is withdrawn, which makes the old delivery event stale.
#[derive(Debug, Clone, Copy)]
struct TransferSlot {
    owner: Owner,
    generation: u32,
}

#[derive(Default)]
struct Stream {
    busy: bool,
    waiting: VecDeque<u32>,
}

struct LiveRing {
    ring: Ring,
    /// Graph op of each member (u32::MAX until it joins).
    ops: Vec<u32>,
}

struct Executor<'g> {
    graph: &'g Graph,
    succ_offsets: Vec<u32>,
    succ: Vec<u32>,
    waiting_deps: Vec<u32>,
    ready: Vec<Time>,
    start: Vec<Time>,
    end: Vec<Time>,
    streams: Vec<Stream>,
    queue: EventQueue<Event>,
    network: Network,
    transfers_in_flight: Vec<TransferSlot>,
    free_transfers: Vec<u32>,
    cancelled: Vec<u32>,
    rings: Vec<Option<LiveRing>>,
    resched: Vec<Reschedule>,
    done_flows: Vec<(u32, Time)>,
    detail: TraceDetail,
    step_log: EventLog,
    flights: Vec<StepInFlight>,
    free_flights: Vec<u32>,
    actions: Vec<RingAction>,
    next_row: i64,
    transfers: u64,
    bytes_sent: Vec<u64>,
    bytes_received: Vec<u64>,
    finished_ops: usize,
}

const UNSET: Time = Time::MAX;
const MAX_RING_ACTIONS: usize = 8;

/// Runs `graph` to completion on `network`. A graph that cannot finish
/// (a dependency cycle through streams) is reported in the error.
pub fn try_run(graph: &Graph, network: Network, detail: TraceDetail) -> Result<RunOutput, String> {
    let n = graph.len();
    let (succ_offsets, succ) = graph.successors();
    let ranks = graph.ops.iter().map(|o| o.rank.max(o.peer.max(0) as u32) + 1).max().unwrap_or(0) as usize;
    let mut ex = Executor {
        graph,
        succ_offsets,
        succ,
        waiting_deps: (0..n as u32).map(|i| graph.deps(i).len() as u32).collect(),
        ready: vec![UNSET; n],
        start: vec![UNSET; n],
        end: vec![UNSET; n],
        streams: (0..graph.num_streams).map(|_| Stream::default()).collect(),
        queue: EventQueue::new(),
        network,
        transfers_in_flight: Vec::new(),
        free_transfers: Vec::new(),
        cancelled: Vec::new(),
        rings: (0..graph.collectives.len()).map(|_| None).collect(),
        resched: Vec::new(),
        done_flows: Vec::new(),
        detail,
        step_log: EventLog::new(),
        flights: Vec::new(),
        free_flights: Vec::new(),
        actions: Vec::new(),
        next_row: n as i64,
        transfers: 0,
        bytes_sent: vec![0; ranks],
        bytes_received: vec![0; ranks],
        finished_ops: 0,
    };
    for id in 0..n as u32 {
        if ex.waiting_deps[id as usize] == 0 {
            ex.make_ready(id, 0);
        }
    }
    while let Some((now, event)) = ex.queue.pop() {
        match event {
            Event::OpDone(op) => ex.finish_op(op, now),
            Event::TxDone { class, version } => {
                let mut out = std::mem::take(&mut ex.resched);
                let mut done = std::mem::take(&mut ex.done_flows);
                ex.network.finish(now, class, version, &mut done, &mut out);
                for &(transfer, latency) in &done {
                    let generation = ex.transfers_in_flight[transfer as usize].generation;
                    ex.queue.push(now + latency, Event::Delivered { transfer, generation });
                }
                done.clear();
                ex.done_flows = done;
                ex.schedule(&mut out);
                ex.resched = out;
            }
            Event::Delivered { transfer, generation } => {
                let slot = ex.transfers_in_flight[transfer as usize];
                if slot.generation != generation {
                    continue;
                }
                ex.transfers_in_flight[transfer as usize].generation = generation.wrapping_add(1);
                ex.free_transfers.push(transfer);
                match slot.owner {
                    Owner::Op(op) => {
                        let o = &ex.graph.ops[op as usize];
                        ex.bytes_received[o.peer as usize] += o.bytes;
                        ex.finish_op(op, now);
                    }
                    Owner::Step(flight) => {
                        let s = ex.flights[flight as usize];
                        ex.free_flights.push(flight);
                        ex.step_delivered(s, now);
                    }
                }
            }
        }
    }
    if ex.finished_ops != n {
        let stuck = (0..n).find(|&i| ex.end[i] == UNSET).unwrap_or(0);
        return Err(format!(
            "the workload graph cannot finish: {} of {} operations never ran (first: op {stuck}, {:?} on rank {})",
            n - ex.finished_ops,
            n,
            graph.ops[stuck].code,
            graph.ops[stuck].rank
        ));
    }
    Ok(ex.into_output())
}

impl<'g> Executor<'g> {
    fn make_ready(&mut self, op: u32, now: Time) {
        self.ready[op as usize] = now;
        let stream = self.graph.ops[op as usize].stream;
        if stream == NO_STREAM {
            self.start_op(op, now);
            return;
        }
        let s = &mut self.streams[stream as usize];
        if s.busy {
            s.waiting.push_back(op);
        } else {
            s.busy = true;
            self.start_op(op, now);
        }
    }

    fn start_op(&mut self, id: u32, now: Time) {
        self.start[id as usize] = now;
        let op = &self.graph.ops[id as usize];
        match op.kind {
            Kind::Compute => self.queue.push(now + op.duration, Event::OpDone(id)),
            Kind::Barrier => self.queue.push(now, Event::OpDone(id)),
            Kind::Transfer => {
                let (src, dst, bytes) = (op.rank, op.peer as u32, op.bytes);
                self.start_transfer(now, src, dst, bytes, Owner::Op(id));
            }
            Kind::Collective => self.join_collective(id, now),
        }
    }

    fn start_transfer(&mut self, now: Time, src: u32, dst: u32, bytes: u64, owner: Owner) {
        self.transfers += 1;
        self.bytes_sent[src as usize] += bytes;
        let id = match self.free_transfers.pop() {
            Some(id) => {
                self.transfers_in_flight[id as usize].owner = owner;
                id
            }
            None => {
                self.transfers_in_flight.push(TransferSlot { owner, generation: 0 });
                (self.transfers_in_flight.len() - 1) as u32
            }
        };
        let mut out = std::mem::take(&mut self.resched);
        let mut cancelled = std::mem::take(&mut self.cancelled);
        let started = self.network.start(now, id, src, dst, bytes, &mut out, &mut cancelled);
        for &withdrawn in &cancelled {
            let slot = &mut self.transfers_in_flight[withdrawn as usize];
            slot.generation = slot.generation.wrapping_add(1);
        }
        cancelled.clear();
        self.cancelled = cancelled;
        if let Started::DeliveredAt(t) = started {
            let generation = self.transfers_in_flight[id as usize].generation;
            self.queue.push(t, Event::Delivered { transfer: id, generation });
        }
        self.schedule(&mut out);
        self.resched = out;
    }

    fn schedule(&mut self, out: &mut Vec<Reschedule>) {
        for r in out.drain(..) {
            self.queue.push(r.done_at, Event::TxDone { class: r.class, version: r.version });
        }
    }

    fn finish_op(&mut self, id: u32, now: Time) {
        self.end[id as usize] = now;
        self.finished_ops += 1;
        let stream = self.graph.ops[id as usize].stream;
        if stream != NO_STREAM {
            match self.streams[stream as usize].waiting.pop_front() {
                Some(next) => self.start_op(next, now),
                None => self.streams[stream as usize].busy = false,
            }
        }
        let (a, b) = (self.succ_offsets[id as usize] as usize, self.succ_offsets[id as usize + 1] as usize);
        for k in a..b {
            let s = self.succ[k];
            let w = &mut self.waiting_deps[s as usize];
            *w -= 1;
            if *w == 0 {
                self.make_ready(s, now);
            }
        }
    }

    fn join_collective(&mut self, id: u32, now: Time) {
        let op = &self.graph.ops[id as usize];
        let c = op.collective as usize;
        let member = op.member;
        let spec = &self.graph.collectives[c];
        let live = self.rings[c].get_or_insert_with(|| LiveRing {
            ring: Ring::new(spec.members.len() as u32, spec.bytes),
            ops: vec![u32::MAX; spec.members.len()],
        });
        live.ops[member as usize] = id;
        let mut actions = std::mem::take(&mut self.actions);
        live.ring.join(now, member, &mut actions);
        self.apply_ring_actions(c, &mut actions, now);
        self.actions = actions;
    }

    fn step_delivered(&mut self, s: StepInFlight, now: Time) {
        let c = s.collective as usize;
        let spec = &self.graph.collectives[c];
        let n = spec.members.len() as u32;
        let from_rank = spec.members[s.from as usize];
        let to = (s.from + 1) % n;
        let to_rank = spec.members[to as usize];
        self.bytes_received[to_rank as usize] += s.bytes;
        let live = self.rings[c].as_mut().expect("ring live while steps fly");
        live.ring.recv_row[to as usize] = s.row;
        if self.detail == TraceDetail::Step {
            let graph_op = &self.graph.ops[live.ops[s.from as usize] as usize];
            let row = Row {
                id: s.row,
                iteration: graph_op.iteration,
                rank: from_rank as i32,
                kind: Kind::Transfer,
                op: OpCode::RingStep,
                layer: graph_op.layer,
                tensor: graph_op.tensor,
                peer: to_rank as i32,
                bytes: s.bytes as i64,
                priority: graph_op.priority,
                collective: c as i64,
                step: s.step as i32,
                rpc: -1,
                ready: s.ready,
                start: s.start,
                end: now,
            };
            self.step_log.push(row, s.deps.into_iter().filter(|&d| d >= 0));
        }
        let mut actions = std::mem::take(&mut self.actions);
        live.ring.delivered(now, s.from, &mut actions);
        self.apply_ring_actions(c, &mut actions, now);
        self.actions = actions;
    }

    fn apply_ring_actions(&mut self, c: usize, actions: &mut Vec<RingAction>, now: Time) {
        // Copy the batch out (a ring call yields at most four actions):
        // finishing an op may start another collective, which needs the
        // scratch vector.
        let n = actions.len();
        assert!(n <= MAX_RING_ACTIONS, "ring produced {n} actions at once");
        let mut batch = [RingAction::Done { member: 0 }; MAX_RING_ACTIONS];
        batch[..n].copy_from_slice(actions);
        actions.clear();
        for &action in &batch[..n] {
            match action {
                RingAction::Send { from, step, bytes, ready } => {
                    let spec = &self.graph.collectives[c];
                    let n = spec.members.len() as u32;
                    let (src, dst) = (spec.members[from as usize], spec.members[((from + 1) % n) as usize]);
                    let live = self.rings[c].as_mut().expect("ring live");
                    // A step depends on what it waited for: step 0 on what made its
                    // collective ready (the collective itself ends after its steps).
                    let deps = if step == 0 {
                        let op = live.ops[from as usize];
                        [self.graph.deps(op).first().map_or(-1, |&d| d as i64), -1]
                    } else {
                        [live.ring.recv_row[from as usize], live.ring.send_row[from as usize]]
                    };
                    let row = self.next_row;
                    self.next_row += 1;
                    live.ring.send_row[from as usize] = row;
                    let flight = StepInFlight { collective: c as u32, from, step, row, bytes, ready, start: now, deps };
                    let slot = match self.free_flights.pop() {
                        Some(slot) => {
                            self.flights[slot as usize] = flight;
                            slot
                        }
                        None => {
                            self.flights.push(flight);
                            (self.flights.len() - 1) as u32
                        }
                    };
                    self.start_transfer(now, src, dst, bytes, Owner::Step(slot));
                }
                RingAction::Done { member } => {
                    let op = self.rings[c].as_ref().expect("ring live").ops[member as usize];
                    self.finish_op(op, now);
                }
            }
        }
        if self.rings[c].as_ref().is_some_and(|live| live.ring.complete()) {
            self.rings[c] = None;
        }
    }

    fn into_output(self) -> RunOutput {
        let g = self.graph;
        let mut log = EventLog::new();
        for (i, op) in g.ops.iter().enumerate() {
            let row = Row {
                id: i as i64,
                iteration: op.iteration,
                rank: op.rank as i32,
                kind: op.kind,
                op: op.code,
                layer: op.layer,
                tensor: op.tensor,
                peer: op.peer,
                bytes: op.bytes as i64,
                priority: op.priority,
                collective: op.collective,
                step: -1,
                rpc: op.rpc,
                ready: self.ready[i],
                start: self.start[i],
                end: self.end[i],
            };
            log.push(row, g.deps(i as u32).iter().map(|&d| d as i64));
        }
        log.append(self.step_log);
        let makespan = self.end.iter().copied().max().unwrap_or(0);
        RunOutput {
            log,
            events: self.queue.processed(),
            transfers: self.transfers,
            recomputations: self.network.recomputations(),
            bytes_sent: self.bytes_sent,
            bytes_received: self.bytes_received,
            makespan,
        }
    }
}
