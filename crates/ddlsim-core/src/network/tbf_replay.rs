//! The queueing a capture's shaped links put on its own messages, re-run on
//! the capture's own send times (python/ddlsim/simulation/tbf_queue.py says
//! what for; docs/validation.md, "PS from a link that bound", why this model).
//!
//! Each host has an up link (what it sends) and a down link (what it
//! receives), each a tbf qdisc of one rate with a token bucket. The model is
//! fluid, as the flow fidelity is:
//! - each (sender, receiver) pair is one connection that sends its messages
//!   in order: a message starts when the pair's previous one is delivered;
//! - the connections share each link max-min fairly ([`max_min_fair`]);
//! - a message that starts on an idle connection passes at once as many
//!   bytes as both of its links' buckets hold and takes them from both; a
//!   bucket refills at the rate less what its link carries, up to its size,
//!   and is full before the first message.

use std::collections::{BTreeMap, VecDeque};

use rustc_hash::FxHashMap as HashMap;

use super::maxmin::max_min_fair;
use crate::error::{Error, ErrorKind};

/// Bytes left below which a message counts as delivered: float rounding, not a byte.
const DONE_BYTES: f64 = 1e-3;

/// Each message's time on its links (ns: its delivery through its sender's up
/// link and its receiver's down link, less its send time). Messages sent at
/// the same time are taken in the order given. `wire_bytes`: what each
/// message puts on the wire; `rate_bps` and `bucket_bytes`: every link's.
pub fn tbf_transit(
    sent_ns: &[i64],
    sender: &[i64],
    receiver: &[i64],
    wire_bytes: &[f64],
    rate_bps: f64,
    bucket_bytes: f64,
) -> Result<Vec<f64>, Error> {
    let n = sent_ns.len();
    let bad = |m: String| Err(Error::new(ErrorKind::BadInput, m));
    if sender.len() != n || receiver.len() != n || wire_bytes.len() != n {
        return bad("tbf_transit: sent_ns, sender, receiver and wire_bytes differ in length".into());
    }
    if !(rate_bps > 0.0 && rate_bps.is_finite() && bucket_bytes > 0.0 && bucket_bytes.is_finite()) {
        return bad(format!("tbf_transit: rate {rate_bps} bit/s and bucket {bucket_bytes} bytes must be above 0"));
    }
    if (0..n).any(|i| !(wire_bytes[i] >= 0.0 && wire_bytes[i].is_finite()) || sender[i] == receiver[i]) {
        return bad("tbf_transit: a message has a negative or non-finite size, or goes to its own sender".into());
    }
    let Some(&t0) = sent_ns.iter().min() else { return Ok(Vec::new()) };
    // from the first send: float ns keep their precision there
    let at: Vec<f64> = sent_ns.iter().map(|&t| (i128::from(t) - i128::from(t0)) as f64).collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| sent_ns[i]); // stable: ties in the order given
    let mut s = State { per_ns: rate_bps / 8e9, bucket: bucket_bytes, size: wire_bytes, ..State::default() };
    s.out = vec![f64::NAN; n];
    let (mut k, mut now) = (0usize, 0.0f64);
    while k < n || !s.queues.is_empty() {
        let pairs: Vec<(usize, usize)> = s.queues.keys().copied().collect();
        let routes: Vec<Vec<u32>> = pairs.iter().map(|&(a, b)| vec![(2 * a) as u32, (2 * b + 1) as u32]).collect();
        let rates = max_min_fair(&vec![s.per_ns; s.tokens.len()], &routes);
        let arrival = if k < n { at[order[k]] } else { f64::INFINITY };
        let mut first: Option<(usize, f64)> = None; // the connection whose message finishes first, and when
        for (j, pair) in pairs.iter().enumerate() {
            let finish = now + s.queues[pair][0].1 / rates[j];
            if first.map_or(true, |(_, f)| finish < f) {
                first = Some((j, finish));
            }
        }
        let step = (arrival.min(first.map_or(f64::INFINITY, |(_, f)| f)) - now).max(0.0);
        let mut carried = vec![0.0; s.tokens.len()];
        for (j, pair) in pairs.iter().enumerate() {
            let head = &mut s.queues.get_mut(pair).expect("an active connection").front_mut().expect("a head message").1;
            *head = match first {
                Some((f, finish)) if f == j && finish <= arrival => 0.0,
                _ => *head - rates[j] * step,
            };
            carried[2 * pair.0] += rates[j];
            carried[2 * pair.1 + 1] += rates[j];
        }
        for (tokens, used) in s.tokens.iter_mut().zip(&carried) {
            *tokens = (*tokens + (s.per_ns - used).max(0.0) * step).min(s.bucket);
        }
        now += step;
        for pair in pairs {
            // deliveries, each starting the connection's next message
            let q = s.queues.get_mut(&pair).expect("an active connection");
            if q[0].1 <= DONE_BYTES {
                let (i, _) = q.pop_front().expect("a head message");
                s.out[i] = now;
                s.advance(pair, now);
            }
        }
        while k < n && at[order[k]] <= now {
            // arrivals
            let i = order[k];
            k += 1;
            let pair = (s.host(sender[i]), s.host(receiver[i]));
            let idle = !s.queues.contains_key(&pair);
            s.queues.entry(pair).or_default().push_back((i, wire_bytes[i]));
            if idle {
                s.advance(pair, now);
            }
        }
    }
    Ok(s.out.iter().zip(&at).map(|(done, sent)| done - sent).collect())
}

#[derive(Default)]
struct State<'a> {
    per_ns: f64,
    bucket: f64,
    size: &'a [f64],
    hosts: HashMap<i64, usize>,
    /// Per link (host h: 2h up, 2h + 1 down), the bytes in its bucket.
    tokens: Vec<f64>,
    /// Per connection (sender, receiver host), its messages in order: (message, bytes left).
    queues: BTreeMap<(usize, usize), VecDeque<(usize, f64)>>,
    out: Vec<f64>,
}

impl State<'_> {
    /// The dense index of `host`; a new host's two buckets start full.
    fn host(&mut self, host: i64) -> usize {
        let next = self.hosts.len();
        let h = *self.hosts.entry(host).or_insert(next);
        if h == next {
            self.tokens.extend([self.bucket, self.bucket]);
        }
        h
    }

    /// The connection's head message starts: its burst passes at once, and
    /// while that delivers it whole, the next one starts; a connection left
    /// without messages is idle (removed).
    fn advance(&mut self, pair: (usize, usize), now: f64) {
        let (up, down) = (2 * pair.0, 2 * pair.1 + 1);
        let q = self.queues.get_mut(&pair).expect("an active connection");
        while let Some(&(i, _)) = q.front() {
            let burst = self.tokens[up].min(self.tokens[down]).min(self.size[i]);
            self.tokens[up] -= burst;
            self.tokens[down] -= burst;
            if self.size[i] - burst > 0.0 {
                q[0].1 = self.size[i] - burst;
                return;
            }
            self.out[i] = now;
            q.pop_front();
        }
        self.queues.remove(&pair);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: f64 = 100e6;
    const B: f64 = 65_536.0;
    const PER_NS: f64 = R / 8e9;

    fn close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= 1e-6 * w.abs().max(1.0), "{got:?} against {want:?}");
        }
    }

    #[test]
    fn a_message_alone_passes_its_bucket_at_once_and_the_rest_at_the_rate() {
        close(&tbf_transit(&[5], &[0], &[1], &[50_000.0], R, B).unwrap(), &[0.0]);
        close(&tbf_transit(&[5], &[0], &[1], &[200_000.0], R, B).unwrap(), &[(200_000.0 - B) / PER_NS]);
    }

    #[test]
    fn two_senders_share_one_down_link_and_one_connection_keeps_its_order() {
        let w = 200_000.0;
        let shared = tbf_transit(&[0, 0], &[0, 1], &[2, 2], &[w, w], R, B).unwrap();
        close(&shared, &[2.0 * (w - B) / PER_NS, (2.0 * w - B) / PER_NS]);
        let in_order = tbf_transit(&[0, 0], &[0, 0], &[1, 1], &[100_000.0, 30_000.0], R, B).unwrap();
        close(&in_order, &[(100_000.0 - B) / PER_NS, (130_000.0 - B) / PER_NS]);
    }

    #[test]
    fn bad_input_is_refused() {
        for bad in [
            tbf_transit(&[0], &[0], &[1], &[1.0], 0.0, B),
            tbf_transit(&[0], &[1], &[1], &[1.0], R, B),
            tbf_transit(&[0], &[0], &[1], &[-1.0], R, B),
            tbf_transit(&[0, 1], &[0], &[1], &[1.0], R, B),
        ] {
            assert_eq!(bad.unwrap_err().kind, ErrorKind::BadInput);
        }
        assert!(tbf_transit(&[], &[], &[], &[], R, B).unwrap().is_empty());
    }
}
