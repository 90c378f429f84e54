//! Discrete-event core: an integer-nanosecond clock and a queue ordered by
//! (time, insertion sequence), so that simultaneous events run in the order
//! they were scheduled and every run is reproducible bit for bit.

use crate::error::Error;

/// Simulated time in nanoseconds.
pub type Time = u64;

/// Latest simulated time the engine accepts (about 146 years), so that
/// sums of times never overflow.
pub const MAX_TIME: Time = 1 << 62;

/// `now + by`, refused past [`MAX_TIME`].
pub fn later(now: Time, by: u64) -> Result<Time, Error> {
    now.checked_add(by).filter(|&t| t <= MAX_TIME).ok_or_else(|| Error::out_of_range(format!("simulated time would overflow: {now} ns + {by} ns is beyond {MAX_TIME} ns")))
}

/// Children per node of the queue's heap: a 4-ary heap is half as deep as a
/// binary one, and a node's children sit next to each other in memory.
const ARITY: usize = 4;

/// Min-queue of events keyed by (time, seq): an implicit 4-ary min-heap over
/// `key = time << 64 | seq` (one integer comparison orders entries by time,
/// then by insertion; keys are unique, so the pop order is fully determined).
/// Keys and events live in parallel vectors, so that the sifts compare keys
/// packed four to a cache line and move an event only when it moves.
#[derive(Debug)]
pub struct EventQueue<E> {
    keys: Vec<u128>,
    events: Vec<E>,
    next_seq: u64,
    now: Time,
    popped: u64,
}

impl<E: Copy> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E: Copy> EventQueue<E> {
    pub fn new() -> Self {
        EventQueue { keys: Vec::new(), events: Vec::new(), next_seq: 0, now: 0, popped: 0 }
    }

    /// Current simulated time (time of the last popped event).
    pub fn now(&self) -> Time {
        self.now
    }

    /// Number of events popped so far.
    pub fn processed(&self) -> u64 {
        self.popped
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Schedules `event` at absolute `time`; scheduling in the past is a bug.
    #[inline]
    pub fn push(&mut self, time: Time, event: E) {
        debug_assert!(time >= self.now, "event scheduled in the past");
        let seq = self.next_seq;
        self.next_seq += 1;
        let key = (time as u128) << 64 | seq as u128;
        let mut i = self.keys.len();
        self.keys.push(key);
        self.events.push(event);
        // Sift up: parents with a larger key move down into the hole.
        while i > 0 {
            let parent = (i - 1) / ARITY;
            let pk = self.keys[parent];
            if pk <= key {
                break;
            }
            self.keys[i] = pk;
            self.events[i] = self.events[parent];
            i = parent;
        }
        self.keys[i] = key;
        self.events[i] = event;
    }

    /// Time of the earliest event, without popping it.
    #[inline]
    pub fn peek_time(&self) -> Option<Time> {
        self.keys.first().map(|&k| (k >> 64) as Time)
    }

    /// Pops the earliest event and advances the clock to it.
    #[inline]
    pub fn pop(&mut self) -> Option<(Time, E)> {
        let top_key = *self.keys.first()?;
        let top = self.events[0];
        let last_key = self.keys.pop().expect("non-empty");
        let last = self.events.pop().expect("non-empty");
        let n = self.keys.len();
        if n > 0 {
            // Sift the last entry down from the root: the smallest child moves up into the hole.
            let keys = &mut self.keys[..n];
            let events = &mut self.events[..n];
            let mut i = 0;
            loop {
                let first = ARITY * i + 1;
                if first >= n {
                    break;
                }
                let mut m = first;
                let mut mk = keys[first];
                if first + ARITY <= n {
                    for j in first + 1..first + ARITY {
                        let k = keys[j];
                        if k < mk {
                            mk = k;
                            m = j;
                        }
                    }
                } else {
                    for (j, &k) in keys.iter().enumerate().take(n).skip(first + 1) {
                        if k < mk {
                            mk = k;
                            m = j;
                        }
                    }
                }
                if mk >= last_key {
                    break;
                }
                keys[i] = mk;
                events[i] = events[m];
                i = m;
            }
            keys[i] = last_key;
            events[i] = last;
        }
        let time = (top_key >> 64) as Time;
        self.now = time;
        self.popped += 1;
        Some((time, top))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_time_order() {
        let mut q = EventQueue::new();
        q.push(30, "c");
        q.push(10, "a");
        q.push(20, "b");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, vec![(10, "a"), (20, "b"), (30, "c")]);
        assert_eq!(q.now(), 30);
        assert_eq!(q.processed(), 3);
    }

    #[test]
    fn simultaneous_events_keep_insertion_order() {
        let mut q = EventQueue::new();
        for i in 0..100u32 {
            q.push(5, i);
        }
        q.push(1, 1000);
        assert_eq!(q.pop(), Some((1, 1000)));
        for i in 0..100u32 {
            assert_eq!(q.pop(), Some((5, i)));
        }
        assert!(q.pop().is_none());
    }

    #[test]
    fn events_pushed_while_running_are_ordered_after_equal_time_ones() {
        let mut q = EventQueue::new();
        q.push(10, 1);
        q.push(10, 2);
        let (t, e) = q.pop().unwrap();
        assert_eq!((t, e), (10, 1));
        q.push(10, 3);
        assert_eq!(q.pop(), Some((10, 2)));
        assert_eq!(q.pop(), Some((10, 3)));
    }

    #[test]
    fn matches_a_sorted_reference_under_random_interleavings() {
        // Seeded pushes and pops interleaved; the reference is a sorted map keyed by (time, seq).
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..50 {
            let mut q = EventQueue::new();
            let mut reference = std::collections::BTreeMap::new();
            let mut seq = 0u64;
            for _ in 0..2_000 {
                if next() % 3 != 0 || reference.is_empty() {
                    // Times never go back: at or after the last popped time, often equal.
                    let time = q.now() + next() % (1 + round as u64 % 7);
                    q.push(time, seq);
                    reference.insert((time, seq), seq);
                    seq += 1;
                } else {
                    let (&(t, s), _) = reference.iter().next().unwrap();
                    reference.remove(&(t, s));
                    assert_eq!(q.pop(), Some((t, s)));
                }
                assert_eq!(q.len(), reference.len());
                assert_eq!(q.peek_time(), reference.keys().next().map(|&(t, _)| t));
            }
            while let Some((&(t, s), _)) = reference.iter().next() {
                reference.remove(&(t, s));
                assert_eq!(q.pop(), Some((t, s)));
            }
            assert!(q.pop().is_none());
        }
    }
}
