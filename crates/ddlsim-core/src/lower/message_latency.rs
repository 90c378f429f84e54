//! Per-message transport time taken from measured iterations (parameter server).
//!
//! A PS capture's RPC messages do not all take the same time beyond their
//! bytes: on a host whose processes wait for cores, one message reaches its
//! receiver's queue in 0.4 ms and the next in 6 ms. A replay that gives every
//! message the mean keeps the sum of the transport times but loses what a
//! synchronous iteration waits for: the latest of the messages in flight
//! together, which is later than their mean.
//!
//! `iterations` holds, per measured iteration, what each message took beyond
//! the route's latency (the route's latency is the samples' common base).
//! The simulated iterations take the measured ones in turn: iteration `first`
//! takes the first, the next one the second, and so on, starting over after
//! the last (iteration i takes row (i - first) mod n; a replay of a capture
//! gives its first counted iteration, so each simulated iteration takes the
//! captured iteration of its number). Every rank's messages of a simulated
//! iteration take that measured iteration's times, so messages that were slow
//! together (all waiting for the same cores) stay slow together. With `keys` (the measured messages'
//! sending rank, op name and tensor), a message takes the time of the message
//! with its key in the iteration taken, message for message; a message
//! without one there (another worker count, another grouping), and every
//! message where `keys` is empty, draws uniformly over that iteration's times
//! from a random stream of its own ([`Purpose::MessageLatency`], keyed by
//! sending rank, iteration and rpc id). Every point-to-point PS message (a transfer op with an rpc id) is
//! delivered that much later than the network delivers it. Messages of one
//! connection may overtake each other, as the capture's did (TensorPipe
//! moves them on several threads). Empty (the default): nothing is added, and
//! the graph is the one built without this part.

use std::collections::HashMap;

use rand::Rng;
use serde::Deserialize;

use crate::engine::Time;
use crate::graph::{Graph, Kind};
use crate::rng::{stream, Purpose};

/// The most one time may add (about 11.6 days): larger is a unit mistake.
const MAX_SAMPLE_NS: u64 = 1_000_000_000_000_000;

/// A measured message: its sending rank, op name (e.g. `push_request`) and tensor.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq, Hash)]
pub struct MessageKey(pub u32, pub String, pub i32);

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MessageLatency {
    /// The measured messages, in the order of each iteration's times; empty: the times are plain samples.
    #[serde(default)]
    pub keys: Vec<MessageKey>,
    /// Per measured iteration: each message's time beyond the route's latency, ns (None: that message was not
    /// measured in that iteration); empty: none.
    #[serde(default)]
    pub iterations: Vec<Vec<Option<u64>>>,
    /// The simulated iteration that takes the first measured one (see the module docs).
    #[serde(default)]
    pub first: i32,
}

impl MessageLatency {
    pub fn is_empty(&self) -> bool {
        self.iterations.is_empty()
    }

    /// Times only for a plain parameter server, one per key in each iteration, each of a plausible size
    /// (`servers`: 0 for all-reduce).
    pub fn validate(&self, servers: u32, in_network: bool) -> Result<(), String> {
        if self.is_empty() {
            return if self.keys.is_empty() { Ok(()) } else { Err("message_latency has keys but no iterations".into()) };
        }
        if servers == 0 {
            return Err("message_latency times a parameter server's RPC messages; the all-reduce strategy sends none".into());
        }
        if in_network {
            return Err("message_latency is modelled for the plain parameter server's point-to-point messages, not in-network fans".into());
        }
        for (i, row) in self.iterations.iter().enumerate() {
            if !self.keys.is_empty() && row.len() != self.keys.len() {
                return Err(format!("message_latency.iterations[{i}] has {} times for {} keys", row.len(), self.keys.len()));
            }
            if row.iter().all(Option::is_none) {
                return Err(format!("message_latency.iterations[{i}] holds no time"));
            }
            if let Some(s) = row.iter().flatten().find(|&&s| s > MAX_SAMPLE_NS) {
                return Err(format!("message_latency.iterations[{i}] holds {s} ns; give each message's extra transport time in ns, at most {MAX_SAMPLE_NS}"));
            }
        }
        Ok(())
    }

    /// The measured iteration (its row) simulated iteration `iteration` takes its times from.
    pub fn row_of(&self, iteration: i32) -> usize {
        (iteration as i64 - self.first as i64).rem_euclid(self.iterations.len() as i64) as usize
    }

    /// A uniform draw over measured iteration `j`'s times for the message of `rpc` that `rank` sends in `iteration`.
    fn any_of(&self, j: usize, seed: u64, rank: u32, iteration: i32, rpc: i64) -> Time {
        let times: Vec<u64> = self.iterations[j].iter().flatten().copied().collect();
        times[stream(seed, Purpose::MessageLatency, rank, iteration, 1 + rpc as u64).gen_range(0..times.len())]
    }

    /// Gives every transfer op of `g` with an rpc id its time ([`Graph::transit_delays`]; a time of 0 adds nothing).
    pub fn attach(&self, g: &mut Graph, seed: u64) {
        if self.is_empty() {
            return;
        }
        let index: HashMap<(u32, &str, i32), usize> =
            self.keys.iter().enumerate().map(|(k, MessageKey(rank, op, tensor))| ((*rank, op.as_str(), *tensor), k)).collect();
        let mut delays = Vec::new();
        for (id, op) in g.ops.iter().enumerate() {
            if op.kind != Kind::Transfer || op.rpc < 0 {
                continue;
            }
            let j = self.row_of(op.iteration);
            let own = index.get(&(op.rank, g.op_names[op.name as usize].as_str(), op.tensor)).and_then(|&k| self.iterations[j][k]);
            let d = own.unwrap_or_else(|| self.any_of(j, seed, op.rank, op.iteration, op.rpc));
            if d > 0 {
                delays.push((id as u32, d));
            }
        }
        g.transit_delays.extend(delays);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Op;

    fn key(rank: u32, op: &str, tensor: i32) -> MessageKey {
        MessageKey(rank, op.to_string(), tensor)
    }

    #[test]
    fn simulated_iterations_take_the_measured_ones_in_turn_from_first() {
        let m = MessageLatency { keys: vec![], iterations: vec![vec![Some(1)]; 3], first: 1 };
        let rows: Vec<usize> = (-2..8).map(|it| m.row_of(it)).collect();
        assert_eq!(rows, vec![0, 1, 2, 0, 1, 2, 0, 1, 2, 0]); // iterations -2..7: iteration 1 takes row 0
    }

    /// A graph of one push per (worker, tensor) in each of `iterations` iterations, rpc ids counting up.
    fn pushes(workers: u32, tensors: i32, iterations: i32) -> Graph {
        let mut g = Graph::new();
        let push = g.op_name("push_request");
        let mut rpc = 0;
        for it in 0..iterations {
            for w in 0..workers {
                for t in 0..tensors {
                    g.add(Op { peer: workers as i32, rpc, tensor: t, iteration: it, ..Op::new(Kind::Transfer, push, w) }, &[]);
                    rpc += 1;
                }
            }
        }
        g
    }

    #[test]
    fn a_keyed_message_takes_its_own_time_of_the_drawn_iteration_in_every_rank() {
        // two measured iterations, times that name the iteration (1000s) and the message
        let keys = vec![key(0, "push_request", 0), key(0, "push_request", 1), key(1, "push_request", 0), key(1, "push_request", 1)];
        let m = MessageLatency { keys: keys.clone(), iterations: vec![vec![Some(1000), Some(1001), Some(1002), Some(1003)], vec![Some(2000), Some(2001), Some(2002), Some(2003)]], first: 0 };
        let mut g = pushes(2, 2, 20);
        m.attach(&mut g, 3);
        assert_eq!(g.transit_delays.len(), g.len());
        for &(id, d) in &g.transit_delays {
            let op = &g.ops[id as usize];
            // even iterations take the first measured one, odd the second
            let j = (op.iteration % 2) as u64;
            assert_eq!(d, 1000 * (j + 1) + 2 * op.rank as u64 + op.tensor as u64, "op {id}");
        }
    }

    #[test]
    fn a_message_without_its_key_draws_among_the_drawn_iterations_times() {
        let m = MessageLatency { keys: vec![key(0, "push_request", 0)], iterations: vec![vec![Some(10)], vec![Some(20)]], first: 0 };
        let mut g = pushes(3, 2, 30); // ranks 1-2 and tensor 1 are not measured
        m.attach(&mut g, 5);
        for &(id, d) in &g.transit_delays {
            assert_eq!(d, [10, 20][(g.ops[id as usize].iteration % 2) as usize]);
        }
        // without keys, every message draws on its own from the drawn iteration's times
        let m = MessageLatency { keys: vec![], iterations: vec![vec![Some(1), Some(2), None, Some(3)]], first: 0 };
        let mut g = pushes(2, 50, 4);
        m.attach(&mut g, 5);
        let mut seen = [0usize; 4];
        g.transit_delays.iter().for_each(|&(_, d)| seen[d as usize] += 1);
        assert_eq!(seen[0], 0);
        // binomial(400, 1/3): sd = 9.4; 5 sd either side
        assert!(seen[1..].iter().all(|&n| (n as i64 - 133).abs() < 47), "{seen:?}");
    }

    #[test]
    fn only_messages_with_an_rpc_get_a_delay_and_a_zero_time_adds_none() {
        let mut g = Graph::new();
        let name = g.op_name("x");
        let mut t = Op::new(Kind::Transfer, name, 0);
        t.peer = 1;
        let plain = g.add(t.clone(), &[]);
        t.rpc = 3;
        let rpc = g.add(t, &[]);
        g.add(Op::new(Kind::Compute, name, 0), &[]);
        MessageLatency { keys: vec![], iterations: vec![vec![Some(5)]], first: 0 }.attach(&mut g, 1);
        assert_eq!(g.transit_delays, vec![(rpc, 5)]);
        assert!(plain != rpc);
        let mut h = pushes(1, 1, 1);
        MessageLatency { keys: vec![], iterations: vec![vec![Some(0)]], first: 0 }.attach(&mut h, 1);
        assert!(h.transit_delays.is_empty());
    }

    #[test]
    fn times_are_refused_for_all_reduce_in_network_fans_bad_rows_and_absurd_sizes() {
        let m = MessageLatency { keys: vec![], iterations: vec![vec![Some(1)]], first: 0 };
        assert!(m.validate(1, false).is_ok());
        assert!(m.validate(0, false).unwrap_err().contains("all-reduce"));
        assert!(m.validate(1, true).unwrap_err().contains("in-network"));
        let big = MessageLatency { keys: vec![], iterations: vec![vec![Some(u64::MAX)]], first: 0 };
        assert!(big.validate(1, false).unwrap_err().contains("iterations[0]"));
        let short = MessageLatency { keys: vec![key(0, "push_request", 0), key(0, "push_request", 1)], iterations: vec![vec![Some(1)]], first: 0 };
        assert!(short.validate(1, false).unwrap_err().contains("1 times for 2 keys"));
        let none = MessageLatency { keys: vec![], iterations: vec![vec![None]], first: 0 };
        assert!(none.validate(1, false).unwrap_err().contains("no time"));
        let keys_only = MessageLatency { keys: vec![key(0, "push_request", 0)], iterations: vec![], first: 0 };
        assert!(keys_only.validate(1, false).unwrap_err().contains("no iterations"));
        assert!(MessageLatency::default().validate(0, true).is_ok());
    }
}
