//! Discrete-event core: an integer-nanosecond clock and a queue ordered by
//! (time, insertion sequence), so that simultaneous events run in the order
//! they were scheduled and every run is reproducible bit for bit.

use std::collections::BinaryHeap;

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

/// A queued event; `key` is `time << 64 | seq`, so one integer comparison
/// orders entries by time, then by insertion.
#[derive(Debug)]
struct Entry<E> {
    key: u128,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    #[inline]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Reversed: BinaryHeap is a max-heap, the queue pops the smallest key.
        other.key.cmp(&self.key)
    }
}

/// Min-queue of events keyed by (time, seq).
#[derive(Debug)]
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    next_seq: u64,
    now: Time,
    popped: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    pub fn new() -> Self {
        EventQueue { heap: BinaryHeap::new(), next_seq: 0, now: 0, popped: 0 }
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
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Schedules `event` at absolute `time`; scheduling in the past is a bug.
    pub fn push(&mut self, time: Time, event: E) {
        debug_assert!(time >= self.now, "event scheduled in the past");
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Entry { key: (time as u128) << 64 | seq as u128, event });
    }

    /// Time of the earliest event, without popping it.
    pub fn peek_time(&self) -> Option<Time> {
        self.heap.peek().map(|e| (e.key >> 64) as Time)
    }

    /// Pops the earliest event and advances the clock to it.
    pub fn pop(&mut self) -> Option<(Time, E)> {
        let entry = self.heap.pop()?;
        let time = (entry.key >> 64) as Time;
        self.now = time;
        self.popped += 1;
        Some((time, entry.event))
    }
}

/// Min-queue of events ordered by (time, insertion) like [`EventQueue`],
/// kept as runs: a push at the time of the push just before it appends to
/// that push's run; any other push opens a new run, entered in a heap keyed
/// by (time, sequence of its first event). A run holds consecutive
/// insertions of one time (any push in between would have opened a run of
/// its own), so runs of one time pop in insertion order, and the queue pops
/// exactly what [`EventQueue`] pops. Simultaneous events are the rule in a
/// collective (a ring step's N deliveries land at the same nanosecond and
/// are pushed one after the other), so most pushes append to a vector and
/// most pops read its next entry, with no heap work; with all times
/// distinct it costs about what the heap costs (no map from times to runs).
/// The test below checks it against a sorted reference.
#[derive(Debug)]
pub struct BucketQueue<E> {
    /// Every run not drained yet, keyed by time << 64 | sequence of its first event.
    runs: BinaryHeap<Entry<u32>>,
    buckets: Vec<Bucket<E>>,
    free: Vec<u32>,
    /// Time and run of the last push (NO_BUCKET: opens a run).
    last: (Time, u32),
    next_seq: u64,
    len: usize,
    now: Time,
    popped: u64,
}

#[derive(Debug)]
struct Bucket<E> {
    events: Vec<E>,
    /// Next entry to pop.
    read: usize,
}

const NO_BUCKET: u32 = u32::MAX;

impl<E: Copy> Default for BucketQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E: Copy> BucketQueue<E> {
    pub fn new() -> Self {
        BucketQueue { runs: BinaryHeap::new(), buckets: Vec::new(), free: Vec::new(), last: (0, NO_BUCKET), next_seq: 0, len: 0, now: 0, popped: 0 }
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
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Schedules `event` at absolute `time`, after every event already queued at that time.
    #[inline(always)]
    pub fn push(&mut self, time: Time, event: E) {
        debug_assert!(time >= self.now, "event scheduled in the past");
        self.len += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        if self.last.1 != NO_BUCKET && self.last.0 == time {
            self.buckets[self.last.1 as usize].events.push(event);
            return;
        }
        self.open_run(time, seq, event);
    }

    #[inline(never)]
    fn open_run(&mut self, time: Time, seq: u64, event: E) {
        let b = match self.free.pop() {
            Some(b) => b,
            None => {
                self.buckets.push(Bucket { events: Vec::new(), read: 0 });
                (self.buckets.len() - 1) as u32
            }
        };
        self.buckets[b as usize].events.push(event);
        self.runs.push(Entry { key: (time as u128) << 64 | seq as u128, event: b });
        self.last = (time, b);
    }

    /// Time of the earliest event, without popping it.
    #[inline]
    pub fn peek_time(&self) -> Option<Time> {
        self.runs.peek().map(|r| (r.key >> 64) as Time)
    }

    /// Pops the earliest event and advances the clock to it.
    #[inline]
    pub fn pop(&mut self) -> Option<(Time, E)> {
        let &Entry { key, event: b } = self.runs.peek()?;
        let time = (key >> 64) as Time;
        let bucket = &mut self.buckets[b as usize];
        let event = bucket.events[bucket.read];
        bucket.read += 1;
        if bucket.read == bucket.events.len() {
            self.retire(b);
        }
        self.len -= 1;
        self.now = time;
        self.popped += 1;
        Some((time, event))
    }

    /// The earliest event if it is at `time`, without popping it (a
    /// caller that handles a run of events of one instant in a loop of its
    /// own looks at the next one with it, then takes it with [`Self::pop_peeked`]).
    #[inline(always)]
    pub fn peek_at(&self, time: Time) -> Option<E> {
        let r = self.runs.peek()?;
        if (r.key >> 64) as Time != time {
            return None;
        }
        let bucket = &self.buckets[r.event as usize];
        Some(bucket.events[bucket.read])
    }

    /// Pops the event [`Self::peek_at`] just gave (there is one).
    #[inline(always)]
    pub fn pop_peeked(&mut self) {
        let b = self.runs.peek().expect("an event was peeked").event;
        let bucket = &mut self.buckets[b as usize];
        bucket.read += 1;
        if bucket.read == bucket.events.len() {
            self.retire(b);
        }
        self.len -= 1;
        self.popped += 1;
    }

    /// Run `b` (at the heap's top) is drained: back to the free list.
    #[inline(never)]
    fn retire(&mut self, b: u32) {
        self.runs.pop();
        let bucket = &mut self.buckets[b as usize];
        bucket.events.clear();
        bucket.read = 0;
        self.free.push(b);
        if self.last.1 == b {
            self.last = (0, NO_BUCKET);
        }
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
    fn bucket_queue_pops_like_the_heap_queue_under_random_interleavings() {
        // Seeded pushes and pops, many at equal times (as a collective's
        // steps make them); the oracle is a sorted map keyed by (time, seq),
        // and the heap-ordered EventQueue run alongside.
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..60 {
            let mut q = BucketQueue::new();
            let mut heap = EventQueue::new();
            let mut reference = std::collections::BTreeMap::new();
            let mut seq = 0u64;
            let spread = 1 + round as u64 % 9;
            for _ in 0..3_000 {
                if next() % 3 != 0 || reference.is_empty() {
                    let time = q.now() + next() % spread;
                    q.push(time, seq);
                    heap.push(time, seq);
                    reference.insert((time, seq), seq);
                    seq += 1;
                } else {
                    let (&(t, s), _) = reference.iter().next().unwrap();
                    reference.remove(&(t, s));
                    // `peek_at` gives the head only at the head's own time.
                    assert_eq!(q.peek_at(q.now()), (t == q.now()).then_some(s));
                    assert_eq!(q.peek_at(t), Some(s));
                    if t == q.now() && next() % 2 == 0 {
                        // Taken at the clock's time, as a ring lane takes it.
                        q.pop_peeked();
                    } else {
                        assert_eq!(q.pop(), Some((t, s)));
                    }
                    assert_eq!(heap.pop(), Some((t, s)));
                }
                assert_eq!(q.len(), reference.len());
                assert_eq!(heap.len(), reference.len());
                assert_eq!(q.peek_time(), reference.keys().next().map(|&(t, _)| t));
                assert_eq!(heap.peek_time(), reference.keys().next().map(|&(t, _)| t));
            }
            while let Some((&(t, s), _)) = reference.iter().next() {
                reference.remove(&(t, s));
                assert_eq!(q.pop(), Some((t, s)));
                assert_eq!(heap.pop(), Some((t, s)));
            }
            assert!(q.pop().is_none() && q.is_empty() && heap.pop().is_none());
            assert_eq!(q.processed(), seq);
        }
    }
}
