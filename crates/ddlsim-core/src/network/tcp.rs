//! TCP for the packet model: a NewReno or DCTCP sender and a receiver, as
//! state machines over byte sequence numbers and picosecond times. They
//! know nothing of packets or queues: the sender says which segments to
//! transmit, the receiver which acknowledgements to return; the packet
//! model carries both.
//!
//! The sender (RFC 5681, RFC 6582 NewReno, RFC 6298 timers, RFC 8257 DCTCP):
//! - window in bytes; initial window `iw` segments; slow start grows it by
//!   the bytes each ACK acknowledges, congestion avoidance by one MSS per
//!   window of bytes acknowledged (Linux's per-packet counting in bytes);
//! - three duplicate ACKs: fast retransmit, `ssthresh = max(flight / 2,
//!   2 MSS)`, `cwnd = ssthresh + 3 MSS`, inflation by one MSS per further
//!   duplicate; a partial ACK retransmits the next hole and deflates; a
//!   full ACK (at or past `recover`) ends recovery with `cwnd = ssthresh`;
//! - retransmission timeout: `ssthresh = max(flight / 2, 2 MSS)`, `cwnd` one
//!   MSS, resend from the first unacknowledged byte (go-back-N), the timer
//!   doubled (at most 60 s); Karn's rule for RTT samples; `RTO = max(rto_min,
//!   SRTT + 4 RTTVAR)`;
//! - no SACK, no Nagle (TCP_NODELAY, as gloo and NCCL set it), an unlimited
//!   send buffer (the application hands over whole messages);
//! - idle restart (optional): new data on a connection with nothing in
//!   flight and no transmission for longer than the RTO restarts from
//!   `min(cwnd, iw)` (RFC 5681 section 4.1);
//! - DCTCP: packets are ECN-capable; `alpha <- (1 - g) alpha + g F` once per
//!   window of data (F: the fraction of acknowledged bytes whose ACK echoed
//!   a mark), and at most once per window a mark cuts `cwnd` to
//!   `max(cwnd (1 - alpha / 2), 2 MSS)`; losses are handled as NewReno.
//!
//! The receiver acknowledges cumulatively, keeps out-of-order data, ACKs at
//! once on out-of-order or hole-filling segments, and otherwise either every
//! segment or (delayed ACKs) every second segment or after a timeout. With
//! DCTCP, each ACK echoes the mark of the segment it acknowledges; a change
//! of mark sends any held ACK first (RFC 8257 section 3.2).

/// Picoseconds.
pub type Ps = u64;

pub const NEVER: Ps = u64::MAX;

const MAX_RTO: Ps = 60_000_000_000_000;

#[derive(Debug, Clone, Copy)]
pub struct TcpConfig {
    pub mss: u64,
    pub iw: u64,
    pub rto_min: Ps,
    pub rto_initial: Ps,
    pub rwnd: u64,
    pub restart_after_idle: bool,
    /// DCTCP's gain `g`, or None for NewReno.
    pub dctcp_g: Option<f64>,
    pub delayed_ack: bool,
    pub delayed_ack_timeout: Ps,
}

/// A segment the sender wants on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub seq: u64,
    pub len: u64,
    pub retransmission: bool,
}

#[derive(Debug, Clone)]
pub struct Sender {
    /// First unacknowledged byte, next byte to send, highest byte sent, end of the application's data.
    pub snd_una: u64,
    pub snd_nxt: u64,
    pub snd_max: u64,
    pub app_end: u64,
    pub cwnd: u64,
    pub ssthresh: u64,
    ca_acked: u64,
    dupacks: u32,
    recover: u64,
    in_recovery: bool,
    srtt: Option<(Ps, Ps)>,
    rto: Ps,
    timing: Option<(u64, Ps)>,
    last_send: Ps,
    /// When the retransmission timer fires, [`NEVER`] if stopped.
    pub rto_deadline: Ps,
    alpha: f64,
    alpha_end: u64,
    acked_in_window: u64,
    marked_in_window: u64,
    cut_end: u64,
    pub timeouts: u64,
    pub retransmits: u64,
    /// Whether the last attempt to send stopped at the window (RFC 7661's
    /// test for growing it: an application- or NIC-limited flow does not).
    cwnd_limited: bool,
}

impl Sender {
    pub fn new(cfg: &TcpConfig) -> Self {
        Sender {
            snd_una: 0,
            snd_nxt: 0,
            snd_max: 0,
            app_end: 0,
            cwnd: cfg.iw * cfg.mss,
            ssthresh: u64::MAX,
            ca_acked: 0,
            dupacks: 0,
            recover: 0,
            in_recovery: false,
            srtt: None,
            rto: cfg.rto_initial,
            timing: None,
            last_send: 0,
            rto_deadline: NEVER,
            alpha: 1.0,
            alpha_end: 0,
            acked_in_window: 0,
            marked_in_window: 0,
            cut_end: 0,
            timeouts: 0,
            retransmits: 0,
            cwnd_limited: false,
        }
    }

    fn flight(&self) -> u64 {
        self.snd_max - self.snd_una
    }

    /// The application appends `bytes` to the stream at `now`.
    pub fn push(&mut self, cfg: &TcpConfig, now: Ps, bytes: u64) {
        if cfg.restart_after_idle && self.snd_una == self.snd_max && self.snd_max > 0 && now.saturating_sub(self.last_send) > self.rto {
            self.cwnd = self.cwnd.min(cfg.iw * cfg.mss);
        }
        self.app_end += bytes;
    }

    /// Segments the window allows now, at most `budget` of them (the room
    /// in the host's NIC queue). Returns whether the budget stopped it.
    pub fn send(&mut self, cfg: &TcpConfig, now: Ps, out: &mut Vec<Segment>, mut budget: u64) -> bool {
        let wnd = self.cwnd.min(cfg.rwnd);
        while self.snd_nxt < self.app_end {
            let len = cfg.mss.min(self.app_end - self.snd_nxt);
            let in_flight = self.snd_nxt - self.snd_una;
            if in_flight > 0 && in_flight + len > wnd {
                self.cwnd_limited = true;
                return false;
            }
            if budget == 0 {
                return true;
            }
            budget -= 1;
            self.emit(cfg, now, self.snd_nxt, len, out);
            self.snd_nxt += len;
            self.snd_max = self.snd_max.max(self.snd_nxt);
        }
        self.cwnd_limited = false;
        false
    }

    fn emit(&mut self, cfg: &TcpConfig, now: Ps, seq: u64, len: u64, out: &mut Vec<Segment>) {
        let retransmission = seq < self.snd_max;
        if retransmission {
            // Karn: an ACK covering retransmitted data times nothing.
            self.retransmits += 1;
            self.timing = None;
        } else if self.timing.is_none() {
            self.timing = Some((seq + len, now));
        }
        out.push(Segment { seq, len, retransmission });
        self.last_send = now;
        if self.rto_deadline == NEVER {
            self.rto_deadline = now + self.rto;
        }
        let _ = cfg;
    }

    fn retransmit_first(&mut self, cfg: &TcpConfig, now: Ps, out: &mut Vec<Segment>) {
        let len = cfg.mss.min(self.snd_max - self.snd_una);
        if len > 0 {
            self.emit(cfg, now, self.snd_una, len, out);
            self.snd_nxt = self.snd_nxt.max(self.snd_una + len);
        }
    }

    fn sample_rtt(&mut self, cfg: &TcpConfig, r: Ps) {
        // RFC 6298 with alpha = 1/8, beta = 1/4, in integer picoseconds.
        let (srtt, rttvar) = match self.srtt {
            None => (r, r / 2),
            Some((s, v)) => {
                let diff = s.abs_diff(r);
                (s - s / 8 + r / 8, v - v / 4 + diff / 4)
            }
        };
        self.srtt = Some((srtt, rttvar));
        self.rto = (srtt + 4 * rttvar).max(cfg.rto_min).min(MAX_RTO);
    }

    fn restart_timer(&mut self, now: Ps) {
        self.rto_deadline = if self.snd_una < self.snd_max { now + self.rto } else { NEVER };
    }

    /// A cumulative ACK for `ack` (echoing a congestion mark with `ece`).
    pub fn on_ack(&mut self, cfg: &TcpConfig, now: Ps, ack: u64, ece: bool, out: &mut Vec<Segment>) {
        let ack = ack.min(self.snd_max);
        if let Some(g) = cfg.dctcp_g {
            self.dctcp_ack(cfg, g, ack, ece);
        }
        if ack > self.snd_una {
            let acked = ack - self.snd_una;
            if let Some((end, sent)) = self.timing {
                if ack >= end {
                    self.sample_rtt(cfg, now - sent);
                    self.timing = None;
                }
            }
            // New data acknowledged: the timer's backoff ends (as Linux).
            if let Some((srtt, rttvar)) = self.srtt {
                self.rto = (srtt + 4 * rttvar).max(cfg.rto_min).min(MAX_RTO);
            }
            self.snd_una = ack;
            if self.snd_nxt < ack {
                self.snd_nxt = ack;
            }
            if self.in_recovery {
                if ack >= self.recover {
                    self.in_recovery = false;
                    self.dupacks = 0;
                    self.cwnd = self.ssthresh;
                } else {
                    // Partial ACK: the next hole is lost too.
                    self.retransmit_first(cfg, now, out);
                    self.cwnd = self.cwnd.saturating_sub(acked) + if acked >= cfg.mss { cfg.mss } else { 0 };
                    self.cwnd = self.cwnd.max(cfg.mss);
                }
            } else {
                self.dupacks = 0;
                let flight = self.snd_max - (ack - acked);
                if self.cwnd < self.ssthresh {
                    // Slow start grows while the window is used (Linux: cwnd < 2 x packets out).
                    if self.cwnd < 2 * flight || self.cwnd_limited {
                        self.cwnd += acked;
                    }
                } else if self.cwnd_limited {
                    self.ca_acked += acked;
                    while self.ca_acked >= self.cwnd {
                        self.ca_acked -= self.cwnd;
                        self.cwnd += cfg.mss;
                    }
                }
            }
            self.restart_timer(now);
        } else if ack == self.snd_una && self.snd_una < self.snd_max {
            self.dupacks += 1;
            if !self.in_recovery && self.dupacks == 3 && self.snd_una >= self.recover {
                self.ssthresh = (self.flight() / 2).max(2 * cfg.mss);
                self.recover = self.snd_max;
                self.in_recovery = true;
                self.timing = None;
                self.retransmit_first(cfg, now, out);
                self.cwnd = self.ssthresh + 3 * cfg.mss;
            } else if self.in_recovery {
                self.cwnd += cfg.mss;
            }
        }
    }

    fn dctcp_ack(&mut self, cfg: &TcpConfig, g: f64, ack: u64, ece: bool) {
        let acked = ack.saturating_sub(self.snd_una);
        self.acked_in_window += acked;
        if ece {
            self.marked_in_window += acked;
            if ack > self.cut_end || self.cut_end == 0 {
                // One cut per window of data.
                let cut = (self.cwnd as f64 * self.alpha / 2.0) as u64;
                self.cwnd = self.cwnd.saturating_sub(cut).max(2 * cfg.mss);
                self.ssthresh = self.cwnd;
                self.ca_acked = 0;
                self.cut_end = self.snd_max.max(1);
            }
        }
        if ack > self.alpha_end {
            if self.acked_in_window > 0 {
                let f = self.marked_in_window as f64 / self.acked_in_window as f64;
                self.alpha = (1.0 - g) * self.alpha + g * f;
            }
            self.acked_in_window = 0;
            self.marked_in_window = 0;
            self.alpha_end = self.snd_max;
        }
    }

    /// The retransmission timer fired at `now` (>= `rto_deadline`).
    pub fn on_timeout(&mut self, cfg: &TcpConfig, now: Ps, out: &mut Vec<Segment>) {
        if self.snd_una >= self.snd_max {
            self.rto_deadline = NEVER;
            return;
        }
        self.timeouts += 1;
        self.ssthresh = (self.flight() / 2).max(2 * cfg.mss);
        self.cwnd = cfg.mss;
        self.ca_acked = 0;
        self.in_recovery = false;
        self.dupacks = 0;
        self.recover = self.snd_max;
        self.timing = None;
        self.snd_nxt = self.snd_una;
        self.rto = (self.rto * 2).min(MAX_RTO);
        self.rto_deadline = NEVER;
        self.retransmit_first(cfg, now, out);
        self.rto_deadline = now + self.rto;
    }

    /// DCTCP's current `alpha` (1 before the first window).
    pub fn alpha(&self) -> f64 {
        self.alpha
    }
}

/// What the receiver returns for a segment: an ACK now, and/or a delayed ACK timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AckPlan {
    /// ACKs to send now, in order: (cumulative ack, ECN echo). At most two
    /// (a held ACK flushed by a change of mark, then this segment's).
    pub acks: [(u64, bool); 2],
    pub count: u8,
    /// Arm the delayed-ACK timer for this deadline ([`NEVER`]: leave it).
    pub timer: Ps,
}

impl AckPlan {
    fn push(&mut self, ack: u64, ece: bool) {
        self.acks[self.count as usize] = (ack, ece);
        self.count += 1;
    }
}

#[derive(Debug, Clone, Default)]
pub struct Receiver {
    pub rcv_nxt: u64,
    /// Out-of-order intervals [start, end), sorted and disjoint.
    ooo: Vec<(u64, u64)>,
    /// Full segments received but not yet acknowledged (delayed ACKs).
    held: u32,
    held_ece: bool,
    last_ce: bool,
    /// When the held ACK is due ([`NEVER`] if none).
    pub delack_deadline: Ps,
}

impl Receiver {
    pub fn new() -> Self {
        Receiver { delack_deadline: NEVER, ..Default::default() }
    }

    /// A data segment `[seq, seq + len)`, CE-marked or not, arrives at `now`.
    pub fn on_data(&mut self, cfg: &TcpConfig, now: Ps, seq: u64, len: u64, ce: bool) -> AckPlan {
        let mut plan = AckPlan { timer: NEVER, ..Default::default() };
        let dctcp = cfg.dctcp_g.is_some();
        if dctcp && ce != self.last_ce && self.held > 0 {
            plan.push(self.rcv_nxt, self.last_ce);
            self.held = 0;
            self.delack_deadline = NEVER;
        }
        self.last_ce = ce;
        let end = seq + len;
        let in_order = seq <= self.rcv_nxt && end > self.rcv_nxt;
        let filled_hole = in_order && !self.ooo.is_empty();
        if in_order {
            self.rcv_nxt = end;
            while let Some(&(s, e)) = self.ooo.first() {
                if s > self.rcv_nxt {
                    break;
                }
                self.rcv_nxt = self.rcv_nxt.max(e);
                self.ooo.remove(0);
            }
        } else if seq > self.rcv_nxt {
            self.insert(seq, end);
        }
        let ece = dctcp && ce;
        if !in_order || filled_hole || !self.ooo.is_empty() || !cfg.delayed_ack {
            plan.push(self.rcv_nxt, ece);
            self.held = 0;
            self.delack_deadline = NEVER;
        } else {
            self.held += 1;
            self.held_ece = ece;
            if self.held >= 2 {
                plan.push(self.rcv_nxt, ece);
                self.held = 0;
                self.delack_deadline = NEVER;
            } else if self.delack_deadline == NEVER {
                self.delack_deadline = now + cfg.delayed_ack_timeout;
                plan.timer = self.delack_deadline;
            }
        }
        plan
    }

    /// The delayed-ACK timer fired: the held ACK, if any.
    pub fn on_delack(&mut self, now: Ps) -> Option<(u64, bool)> {
        if self.held == 0 || now < self.delack_deadline {
            return None;
        }
        self.held = 0;
        self.delack_deadline = NEVER;
        Some((self.rcv_nxt, self.held_ece))
    }

    fn insert(&mut self, s: u64, e: u64) {
        let i = self.ooo.partition_point(|&(_, end)| end < s);
        let mut j = i;
        let (mut ns, mut ne) = (s, e);
        while j < self.ooo.len() && self.ooo[j].0 <= ne {
            ns = ns.min(self.ooo[j].0);
            ne = ne.max(self.ooo[j].1);
            j += 1;
        }
        self.ooo.splice(i..j, [(ns, ne)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> TcpConfig {
        TcpConfig {
            mss: 1000,
            iw: 10,
            rto_min: 1_000,
            rto_initial: 1_000_000,
            rwnd: u64::MAX,
            restart_after_idle: false,
            dctcp_g: None,
            delayed_ack: false,
            delayed_ack_timeout: 100,
        }
    }

    #[test]
    fn receiver_merges_out_of_order_data() {
        let c = cfg();
        let mut r = Receiver::new();
        assert_eq!(r.on_data(&c, 0, 1000, 1000, false).acks[0], (0, false));
        assert_eq!(r.on_data(&c, 0, 3000, 1000, false).acks[0], (0, false));
        assert_eq!(r.on_data(&c, 0, 2000, 1000, false).acks[0], (0, false));
        assert_eq!(r.on_data(&c, 0, 0, 1000, false).acks[0], (4000, false));
        assert!(r.ooo.is_empty());
    }

    #[test]
    fn slow_start_doubles_per_round_and_three_dupacks_halve() {
        let c = cfg();
        let mut s = Sender::new(&c);
        let mut out = Vec::new();
        s.push(&c, 0, 100_000);
        s.send(&c, 0, &mut out, u64::MAX);
        assert_eq!(out.len(), 10);
        out.clear();
        for k in 1..=10 {
            s.on_ack(&c, 10, k * 1000, false, &mut out);
            s.send(&c, 10, &mut out, u64::MAX);
        }
        assert_eq!(s.cwnd, 20_000);
        assert_eq!(out.len(), 20);
        out.clear();
        // Segment 10_000 lost: three duplicates.
        for _ in 0..3 {
            s.on_ack(&c, 20, 10_000, false, &mut out);
        }
        assert_eq!(out[0], Segment { seq: 10_000, len: 1000, retransmission: true });
        assert_eq!(s.ssthresh, 10_000);
        assert_eq!(s.cwnd, 13_000);
    }
}
