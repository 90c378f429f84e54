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

pub trait StreamPolicy {
    /// Queue `item` (an op that became ready while the stream was busy, or a
    /// parked collective member to resume, marked by `resumed`).
    fn push(&mut self, item: u64, priority: i32, resumed: bool);
    /// The next item to run once the stream is free.
    fn pop(&mut self) -> Option<u64>;
    /// Priority of the item `pop` would return.
    fn peek_priority(&self) -> Option<i32>;
    /// Whether a running collective yields to a more urgent op at its chunk boundaries.
    fn preempts(&self) -> bool;
}

/// In the order the ops became ready (resumed members first, as they were running).
#[derive(Default)]
pub struct Fifo {
    queue: VecDeque<(u64, i32)>,
}

impl StreamPolicy for Fifo {
    fn push(&mut self, item: u64, priority: i32, resumed: bool) {
        if resumed {
            self.queue.push_front((item, priority));
        } else {
            self.queue.push_back((item, priority));
        }
    }
    fn pop(&mut self) -> Option<u64> {
        self.queue.pop_front().map(|(item, _)| item)
    }
    fn peek_priority(&self) -> Option<i32> {
        self.queue.front().map(|&(_, p)| p)
    }
    fn preempts(&self) -> bool {
        false
    }
}

/// Lowest priority value first (the thesis' priority queue: the first
/// layer's gradients first); at equal priority a resumed member first, then
/// in ready order.
pub struct StrictPriority {
    heap: BinaryHeap<Reverse<(i32, bool, u64, u64)>>,
    seq: u64,
    preempt: bool,
}

impl StreamPolicy for StrictPriority {
    fn push(&mut self, item: u64, priority: i32, resumed: bool) {
        self.seq += 1;
        self.heap.push(Reverse((priority, !resumed, self.seq, item)));
    }
    fn pop(&mut self) -> Option<u64> {
        self.heap.pop().map(|Reverse((_, _, _, item))| item)
    }
    fn peek_priority(&self) -> Option<i32> {
        self.heap.peek().map(|Reverse((p, _, _, _))| *p)
    }
    fn preempts(&self) -> bool {
        self.preempt
    }
}

/// The registry.
pub fn new_policy(kind: PolicyKind) -> Box<dyn StreamPolicy> {
    match kind {
        PolicyKind::Fifo => Box::<Fifo>::default(),
        PolicyKind::Priority { preempt } => Box::new(StrictPriority { heap: BinaryHeap::new(), seq: 0, preempt }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_keeps_ready_order_and_priority_sorts() {
        let mut f = new_policy(PolicyKind::Fifo);
        let mut p = new_policy(PolicyKind::Priority { preempt: false });
        for (item, prio) in [(1, 5), (2, 1), (3, 3), (4, 1)] {
            f.push(item, prio, false);
            p.push(item, prio, false);
        }
        assert_eq!(std::iter::from_fn(|| f.pop()).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
        assert_eq!(std::iter::from_fn(|| p.pop()).collect::<Vec<_>>(), vec![2, 4, 3, 1]);
    }

    #[test]
    fn a_resumed_member_goes_before_equal_priority_ops() {
        let mut p = new_policy(PolicyKind::Priority { preempt: true });
        p.push(1, 2, false);
        p.push(9, 2, true);
        assert_eq!(p.pop(), Some(9));
    }
}
