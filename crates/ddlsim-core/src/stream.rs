//! Stream policies: which ready operation a busy stream runs next. A
//! stream runs one operation at a time (a GPU's compute stream, a
//! communication stream, a server's CPU); its policy orders the rest.
//!
//! Items are opaque to the policy (the executor queues op ids and parked
//! collective members in them). Besides the order, a policy decides how
//! many ops share the stream ([`StreamPolicy::has_room`]: ByteScheduler's
//! credit, [`Credit`]), how a queued item is ranked ([`StreamPolicy::key`]),
//! whether collectives are negotiated across ranks first ([`Negotiation`])
//! and what a collective member that waits for a join does
//! ([`WaitingMember`]). Adding a policy is a new type here plus one line in
//! [`new_policy`].

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::graph::PolicyKind;

/// How the executor ranks a queued item. Field order is the sort order:
/// urgent items (a parked member of a collective that the other ranks
/// already launched) first, then by priority (lower is more urgent), then
/// a resumed member before fresh ops, then `order`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct QueueKey {
    pub not_urgent: bool,
    pub priority: i32,
    pub not_resumed: bool,
    /// Tie-break: the same on every rank for a collective (its id) under
    /// negotiated scheduling, else the order the items were queued in.
    pub order: u64,
}

/// What the executor knows about an item it queues, for [`StreamPolicy::key`].
#[derive(Debug, Clone, Copy)]
pub struct Item {
    pub op: u32,
    pub priority: i32,
    /// A parked collective member to resume (not a fresh op).
    pub parked: bool,
    /// The op's collective, if it is a member of one.
    pub collective: Option<u64>,
    /// Whether every member of that collective has joined (computed for negotiating policies only).
    pub launched: bool,
}

/// What a running collective member does while it waits for a member that has not joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitingMember {
    /// Keeps the stream (FIFO).
    Keeps,
    /// Yields to a queued item that can go on, or to a more urgent collective.
    YieldsToRunnable,
    /// Yields only to a more urgent collective in the order all ranks share, or to an urgent parked member.
    YieldsToUrgent,
}

pub trait StreamPolicy {
    /// The rank of `item` in the queue (see [`QueueKey`]), asked once as it is queued.
    fn key(&mut self, item: Item) -> QueueKey;
    /// Whether one more op may start while `running` ops that move
    /// `bytes_in_flight` bytes hold the stream. Default: one op at a time.
    fn has_room(&self, running: usize, _bytes_in_flight: u64) -> bool {
        running == 0
    }
    /// Whether a collective is queued on its ranks only once it is ready on all of them (see [`Negotiation`]).
    fn negotiates(&self) -> bool {
        false
    }
    /// What a running member waiting for a join does.
    fn waiting_member(&self) -> WaitingMember;
    /// Queue `item` (an op that became ready while the stream was busy, or a
    /// parked collective member to resume).
    fn push(&mut self, item: u64, key: QueueKey);
    /// The next item to run once the stream is free.
    fn pop(&mut self) -> Option<u64>;
    /// Key of the item `pop` would return.
    fn peek_key(&self) -> Option<QueueKey>;
    /// Priority of the item `pop` would return.
    fn peek_priority(&self) -> Option<i32> {
        self.peek_key().map(|k| k.priority)
    }
    /// Whether a running collective yields to a more urgent op at its chunk boundaries.
    fn preempts(&self) -> bool;
}

/// In the order the ops became ready (resumed or urgent members first, as they were running).
#[derive(Default)]
pub struct Fifo {
    queue: VecDeque<(u64, QueueKey)>,
    arrivals: u64,
}

/// The key of a policy that does not negotiate: by arrival on this stream.
fn arrival_key(arrivals: &mut u64, item: Item) -> QueueKey {
    *arrivals += 1;
    QueueKey { not_urgent: true, priority: item.priority, not_resumed: !item.parked, order: *arrivals }
}

impl StreamPolicy for Fifo {
    fn key(&mut self, item: Item) -> QueueKey {
        arrival_key(&mut self.arrivals, item)
    }
    fn waiting_member(&self) -> WaitingMember {
        WaitingMember::Keeps
    }
    fn push(&mut self, item: u64, key: QueueKey) {
        if !key.not_resumed || !key.not_urgent {
            self.queue.push_front((item, key));
        } else {
            self.queue.push_back((item, key));
        }
    }
    fn pop(&mut self) -> Option<u64> {
        self.queue.pop_front().map(|(item, _)| item)
    }
    fn peek_key(&self) -> Option<QueueKey> {
        self.queue.front().map(|&(_, k)| k)
    }
    fn preempts(&self) -> bool {
        false
    }
}

/// Smallest [`QueueKey`] first: lowest priority value first (the thesis'
/// priority queue: the first layer's gradients first). Without preemption
/// it negotiates collectives as Horovod's coordinator does: a collective is
/// queued on its ranks only once it is ready on all of them, every rank
/// breaks priority ties by collective id, and a member waiting for a join
/// yields to a more urgent collective or to a parked member of a collective
/// the other ranks already launched. With one order on all ranks, the most
/// urgent negotiated collective always gathers all its members, so no
/// order of readiness can deadlock.
pub struct StrictPriority {
    heap: BinaryHeap<Reverse<(QueueKey, u64)>>,
    preempt: bool,
    arrivals: u64,
}

impl StreamPolicy for StrictPriority {
    fn key(&mut self, item: Item) -> QueueKey {
        if self.negotiates() {
            let urgent = item.parked && item.collective.is_some() && item.launched;
            let order = item.collective.unwrap_or((1 << 40) + item.op as u64);
            QueueKey { not_urgent: !urgent, priority: item.priority, not_resumed: true, order }
        } else {
            arrival_key(&mut self.arrivals, item)
        }
    }
    fn negotiates(&self) -> bool {
        !self.preempt
    }
    fn waiting_member(&self) -> WaitingMember {
        if self.negotiates() {
            WaitingMember::YieldsToUrgent
        } else {
            WaitingMember::YieldsToRunnable
        }
    }
    fn push(&mut self, item: u64, key: QueueKey) {
        self.heap.push(Reverse((key, item)));
    }
    fn pop(&mut self) -> Option<u64> {
        self.heap.pop().map(|Reverse((_, item))| item)
    }
    fn peek_key(&self) -> Option<QueueKey> {
        self.heap.peek().map(|Reverse((k, _))| *k)
    }
    fn preempts(&self) -> bool {
        self.preempt
    }
}

/// ByteScheduler's credit around another policy: while the ops running on
/// the stream move fewer bytes than `credit`, the next queued op starts too
/// (so the bytes in flight exceed the credit by less than one op).
pub struct Credit<P> {
    pub inner: P,
    pub credit: u64,
}

impl<P: StreamPolicy> StreamPolicy for Credit<P> {
    fn key(&mut self, item: Item) -> QueueKey {
        self.inner.key(item)
    }
    fn has_room(&self, running: usize, bytes_in_flight: u64) -> bool {
        running == 0 || bytes_in_flight < self.credit
    }
    fn negotiates(&self) -> bool {
        self.inner.negotiates()
    }
    fn waiting_member(&self) -> WaitingMember {
        self.inner.waiting_member()
    }
    fn push(&mut self, item: u64, key: QueueKey) {
        self.inner.push(item, key)
    }
    fn pop(&mut self) -> Option<u64> {
        self.inner.pop()
    }
    fn peek_key(&self) -> Option<QueueKey> {
        self.inner.peek_key()
    }
    fn peek_priority(&self) -> Option<i32> {
        self.inner.peek_priority()
    }
    fn preempts(&self) -> bool {
        self.inner.preempts()
    }
}

/// The registry: the policy of a stream of kind `kind` with ByteScheduler's
/// credit `credit` (bytes; 0: one op at a time).
pub fn new_policy(kind: PolicyKind, credit: u64) -> Box<dyn StreamPolicy> {
    match (kind, credit) {
        (PolicyKind::Fifo, 0) => Box::<Fifo>::default(),
        (PolicyKind::Fifo, credit) => Box::new(Credit { inner: Fifo::default(), credit }),
        (PolicyKind::Priority { preempt }, 0) => Box::new(StrictPriority { heap: BinaryHeap::new(), preempt, arrivals: 0 }),
        (PolicyKind::Priority { preempt }, credit) => Box::new(Credit { inner: StrictPriority { heap: BinaryHeap::new(), preempt, arrivals: 0 }, credit }),
    }
}

/// Negotiated scheduling's state: which collectives are negotiated (a
/// member's stream [`StreamPolicy::negotiates`]) and how many of their
/// members are ready so far. A negotiated member is queued only once every
/// member is ready; then all are queued at once.
#[derive(Debug, Default, Clone)]
pub struct Negotiation {
    negotiated: Vec<bool>,
    ready: Vec<u32>,
}

impl Negotiation {
    pub fn new(negotiated: Vec<bool>) -> Self {
        let ready = vec![0; negotiated.len()];
        Negotiation { negotiated, ready }
    }

    /// Adds collectives (a graph grown at run time).
    pub fn extend(&mut self, negotiated: impl IntoIterator<Item = bool>) {
        self.negotiated.extend(negotiated);
        self.ready.resize(self.negotiated.len(), 0);
    }

    pub fn is_negotiated(&self, collective: usize) -> bool {
        self.negotiated[collective]
    }

    /// One more member of `collective` (of `members`) is ready; true once all are.
    pub fn member_ready(&mut self, collective: usize, members: usize) -> bool {
        self.ready[collective] += 1;
        self.ready[collective] as usize >= members
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(priority: i32, order: u64) -> QueueKey {
        QueueKey { not_urgent: true, priority, not_resumed: true, order }
    }

    #[test]
    fn fifo_keeps_ready_order_and_priority_sorts() {
        let mut f = new_policy(PolicyKind::Fifo, 0);
        let mut p = new_policy(PolicyKind::Priority { preempt: false }, 0);
        for (item, prio) in [(1, 5), (2, 1), (3, 3), (4, 1)] {
            f.push(item, key(prio, item));
            p.push(item, key(prio, item));
        }
        assert_eq!(std::iter::from_fn(|| f.pop()).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
        assert_eq!(std::iter::from_fn(|| p.pop()).collect::<Vec<_>>(), vec![2, 4, 3, 1]);
    }

    #[test]
    fn a_resumed_member_goes_before_equal_priority_ops() {
        let mut p = new_policy(PolicyKind::Priority { preempt: true }, 0);
        p.push(1, key(2, 1));
        p.push(9, QueueKey { not_resumed: false, ..key(2, 2) });
        assert_eq!(p.pop(), Some(9));
    }

    #[test]
    fn an_urgent_member_goes_before_any_priority() {
        let mut p = new_policy(PolicyKind::Priority { preempt: false }, 0);
        p.push(1, key(0, 1));
        p.push(7, QueueKey { not_urgent: false, ..key(40, 9) });
        assert_eq!(p.pop(), Some(7));
    }
}
