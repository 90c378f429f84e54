//! Collectives: one state machine per collective instance, told when a
//! member joins and when one of its transfers is delivered, answering with
//! the transfers to start next or that a member is done. The executor has
//! no algorithm-specific code; adding an algorithm is a new file here plus
//! one line in [`Algorithm`] and [`new_collective_with`] (and its closed
//! form in [`closed_form::finish_offsets`]). docs/allreduce-algorithms.md
//! lists the schedules and their idle-network costs.

pub mod binary_tree;
pub mod butterfly;
pub mod closed_form;
pub mod direct;
mod exchange;
pub mod halving_doubling;
pub mod hierarchical_ring;
pub mod recursive_doubling;
pub mod ring;

pub use crate::algorithm::Algorithm;
use crate::algorithm::LinkCost;
use crate::engine::Time;
use crate::graph::CollectiveSpec;
pub use exchange::{Exchange, Plan, Stage};

/// What made an action possible: a row of the event log (`>= 0`), the join
/// of a member ([`join_cause`]), or nothing ([`NO_CAUSE`]).
pub type Cause = i64;
pub const NO_CAUSE: Cause = -1;

/// The cause standing for "collective op `op` joined"; the executor expands
/// it into whatever made that op start.
pub fn join_cause(op: u32) -> Cause {
    -(op as i64) - 2
}

const READY_BASE: i64 = 1 << 33;

/// The op of a [`join_cause`], if `cause` is one.
pub fn joined_op(cause: Cause) -> Option<u32> {
    (cause <= -2 && cause > -2 - READY_BASE).then(|| (-cause - 2) as u32)
}

/// The cause standing for "op `op` became ready": its graph dependencies only.
pub fn ready_cause(op: u32) -> Cause {
    -(op as i64) - 2 - READY_BASE
}

/// The op of a [`ready_cause`], if `cause` is one.
pub fn ready_op(cause: Cause) -> Option<u32> {
    (cause <= -2 - READY_BASE).then(|| (-cause - 2 - READY_BASE) as u32)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Member `from` sends `bytes` to member `to`. `tag` identifies the
    /// transfer in [`Collective::delivered`]; `ready` is when the sender's
    /// own prerequisites were met (the start may be later, e.g. rendezvous).
    Send { from: u32, to: u32, bytes: u64, tag: u64, step: u32, ready: Time, causes: [Cause; 4] },
    /// Member has sent and received everything: its part is over.
    Done { member: u32 },
    /// Member's part will be over at `at` (closed-form mode: nothing goes
    /// through the network; the member's schedule sends `sent` and receives
    /// `received` bytes, which the executor counts).
    DoneAt { member: u32, at: Time, sent: u64, received: u64 },
    /// Member reduces `bytes` it received until `at`, having waited for
    /// `causes`; then call [`Collective::woke`] with `member` and `tag`.
    Wake { member: u32, at: Time, tag: u64, bytes: u64, causes: [Cause; 2] },
}

/// Any sized machine as a trait object (lets [`Collective::into_ring`]
/// hand back a machine that is not a ring).
#[doc(hidden)]
pub trait IntoDynCollective {
    fn into_dyn(self: Box<Self>) -> Box<dyn Collective>;
}

impl<T: Collective + 'static> IntoDynCollective for T {
    fn into_dyn(self: Box<Self>) -> Box<dyn Collective> {
        self
    }
}

pub trait Collective: IntoDynCollective {
    /// Member `member` joined at `now`; `cause` stands for its join.
    fn join(&mut self, now: Time, member: u32, cause: Cause, out: &mut Vec<Action>);
    /// The transfer `tag` was delivered at `now`; `cause` is its recv row.
    fn delivered(&mut self, now: Time, tag: u64, cause: Cause, out: &mut Vec<Action>);
    /// The wake-up a [`Action::Wake`] asked for is due; `cause` is the row of the reduction.
    fn woke(&mut self, _now: Time, _member: u32, _tag: u64, _cause: Cause, _out: &mut Vec<Action>) {
        unreachable!("this collective asks for no wake-up")
    }
    /// The machine as a [`ring::RingMachine`], for the executor's direct path.
    fn as_ring(&mut self) -> Option<&mut ring::RingMachine> {
        None
    }
    /// The machine as a [`ring::RingMachine`] itself, or back as it was (the
    /// executor keeps a ring apart: its direct path calls no trait object).
    fn into_ring(self: Box<Self>) -> Result<Box<ring::RingMachine>, Box<dyn Collective>> {
        Err(self.into_dyn())
    }
    /// True once every member is done. It turns true only in a call that
    /// outputs a [`Action::Done`] or [`Action::DoneAt`] (the executor asks only then).
    fn complete(&self) -> bool;
    /// True if the member has joined but the collective cannot start until others join.
    fn waits_for_a_join(&self, member: u32) -> bool;
    /// Members that have joined so far.
    fn joined(&self) -> u32;
    /// True if `member` is between messages (has sent nothing of its current
    /// one): where P3-style preemption may take its stream. Default: never
    /// inside a collective.
    fn at_message_boundary(&self, _member: u32) -> bool {
        false
    }
    /// True if a send of `step` is the first of a message (see [`Collective::at_message_boundary`]).
    fn starts_message(&self, step: u32) -> bool {
        step == 0
    }
}

/// The registry: a fresh state machine for an all-reduce of `bytes` over
/// `members` ranks, with the default parameters (no partitioning, every
/// member on a host of its own). With `track_causes` its sends name the
/// log rows they waited for (needed only when steps are logged).
pub fn new_collective(algorithm: Algorithm, members: u32, bytes: u64, track_causes: bool) -> Box<dyn Collective> {
    new_collective_with(algorithm, members, bytes, &Params::default(), track_causes)
}

/// What some algorithms need beyond (members, bytes).
#[derive(Debug, Clone, Default)]
pub struct Params {
    /// Ring: partition the tensor into messages of at most this many bytes (0: one message).
    pub chunk_bytes: u64,
    /// Host of each member (hierarchical ring); empty: one host per member.
    pub hosts: Vec<u32>,
    /// Reduction cost per byte a member combines (MG-WFBP Table II's gamma); 0: free.
    pub gamma_ns_per_byte: f64,
    /// Rank classes (closed form only; see [`crate::lower::classes`]): the
    /// collective has this many members, of which member m stands at
    /// `members[m]`; 0: the members are the whole collective.
    pub full_members: u32,
}

/// What a graph's collective needs beyond its spec: the rank -> host map
/// (hierarchical ring) as [`Params`].
impl Params {
    pub fn for_spec(spec: &CollectiveSpec, host_of_rank: &[u32]) -> Params {
        let mut params = Params { chunk_bytes: spec.chunk_bytes, hosts: Vec::new(), gamma_ns_per_byte: spec.gamma_ns_per_byte, full_members: 0 };
        if spec.algorithm == Algorithm::HierarchicalRing {
            // Ranks without an entry are on a host of their own (numbered past every listed host).
            let listed = host_of_rank.iter().copied().max().map_or(0, |h| h + 1);
            params.hosts = spec.members.iter().map(|&r| host_of_rank.get(r as usize).copied().unwrap_or(listed + r)).collect();
        }
        params
    }
}

/// The registry for a graph's collective: its spec and parameters (see
/// [`Params::for_spec`]). With a closed-form cost, the collective is one
/// event per member (see [`closed_form`]).
pub fn new_collective_for(spec: &CollectiveSpec, params: &Params, closed_form: Option<&LinkCost>, track_causes: bool) -> Box<dyn Collective> {
    if let Some(cost) = closed_form {
        if params.full_members > 0 {
            // One member per rank class: each finishes at the offset of its place in the whole
            // collective (`params.hosts`: the whole collective's). Bytes are counted for every
            // rank after the run (`lower::classes::expand_output`).
            let mut full = params.clone();
            full.full_members = 0;
            let offsets = closed_form::finish_offsets(spec.algorithm, params.full_members, spec.bytes, &full, cost);
            return Box::new(closed_form::ClosedForm::new(spec.members.iter().map(|&m| offsets[m as usize]).collect()));
        }
        let n = spec.members.len() as u32;
        let offsets = closed_form::finish_offsets(spec.algorithm, n, spec.bytes, params, cost);
        let bytes = closed_form::member_bytes(spec.algorithm, n, spec.bytes, params);
        return Box::new(closed_form::ClosedForm::new(offsets).with_bytes(bytes));
    }
    new_collective_with(spec.algorithm, spec.members.len() as u32, spec.bytes, params, track_causes)
}

/// One line per algorithm.
pub fn new_collective_with(algorithm: Algorithm, members: u32, bytes: u64, params: &Params, track_causes: bool) -> Box<dyn Collective> {
    let gamma = params.gamma_ns_per_byte;
    let boxed = |plan: Box<dyn PlanBox>| plan.into_collective(track_causes, gamma);
    let n = members;
    match algorithm {
        // Without logged steps or a reduction cost, the ring's own machine (the same actions, faster).
        Algorithm::Ring if !track_causes && gamma.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) => Box::new(ring::RingMachine::new(ring::RingPlan::partitioned(n, bytes, params.chunk_bytes))),
        Algorithm::Ring => boxed(Box::new(ring::RingPlan::partitioned(n, bytes, params.chunk_bytes))),
        Algorithm::HalvingDoubling => boxed(Box::new(halving_doubling::HalvingDoublingPlan::new(n, bytes))),
        Algorithm::RecursiveDoubling => boxed(Box::new(recursive_doubling::RecursiveDoublingPlan::new(n, bytes))),
        Algorithm::BinaryTree => boxed(Box::new(binary_tree::TreePlan::new(n, bytes, binary_tree::Shape::InOrder))),
        Algorithm::DoubleBinaryTree => Box::new(binary_tree::double_binary_tree(n, bytes, track_causes, gamma)),
        Algorithm::Direct => boxed(Box::new(direct::DirectPlan::new(n, bytes))),
        Algorithm::Butterfly => boxed(Box::new(butterfly::ButterflyPlan::new(n, bytes))),
        Algorithm::HierarchicalRing => boxed(Box::new(hierarchical_ring::HierarchicalRingPlan::new(bytes, &params.hosts, n))),
    }
}

/// A plan that becomes its exchange machine (lets the registry box plans of different types).
trait PlanBox {
    fn into_collective(self: Box<Self>, track_causes: bool, gamma_ns_per_byte: f64) -> Box<dyn Collective>;
}

impl<P: Plan + 'static> PlanBox for P {
    fn into_collective(self: Box<Self>, track_causes: bool, gamma_ns_per_byte: f64) -> Box<dyn Collective> {
        let exchange = Exchange::new(*self).with_gamma(gamma_ns_per_byte);
        Box::new(if track_causes { exchange.tracking_causes() } else { exchange })
    }
}
