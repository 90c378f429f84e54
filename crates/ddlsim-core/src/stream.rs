//! Stream policies: which ready operation a busy stream runs next. A
//! stream runs one operation at a time (a GPU's compute stream, a
//! communication stream, a server's CPU); its policy orders the rest.
//!
//! Items are opaque to the policy (the executor queues op ids and parked
//! collective members in them). Adding a policy is a new type here plus
//! one line in [`new_policy`].

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

pub trait StreamPolicy {
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
}

impl StreamPolicy for Fifo {
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
/// priority queue: the first layer's gradients first).
pub struct StrictPriority {
    heap: BinaryHeap<Reverse<(QueueKey, u64)>>,
    preempt: bool,
}

impl StreamPolicy for StrictPriority {
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

/// The registry.
pub fn new_policy(kind: PolicyKind) -> Box<dyn StreamPolicy> {
    match kind {
        PolicyKind::Fifo => Box::<Fifo>::default(),
        PolicyKind::Priority { preempt } => Box::new(StrictPriority { heap: BinaryHeap::new(), preempt }),
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
        let mut f = new_policy(PolicyKind::Fifo);
        let mut p = new_policy(PolicyKind::Priority { preempt: false });
        for (item, prio) in [(1, 5), (2, 1), (3, 3), (4, 1)] {
            f.push(item, key(prio, item));
            p.push(item, key(prio, item));
        }
        assert_eq!(std::iter::from_fn(|| f.pop()).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
        assert_eq!(std::iter::from_fn(|| p.pop()).collect::<Vec<_>>(), vec![2, 4, 3, 1]);
    }

    #[test]
    fn a_resumed_member_goes_before_equal_priority_ops() {
        let mut p = new_policy(PolicyKind::Priority { preempt: true });
        p.push(1, key(2, 1));
        p.push(9, QueueKey { not_resumed: false, ..key(2, 2) });
        assert_eq!(p.pop(), Some(9));
    }

    #[test]
    fn an_urgent_member_goes_before_any_priority() {
        let mut p = new_policy(PolicyKind::Priority { preempt: false });
        p.push(1, key(0, 1));
        p.push(7, QueueKey { not_urgent: false, ..key(40, 9) });
        assert_eq!(p.pop(), Some(7));
    }
}
