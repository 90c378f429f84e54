//! Compute after a wait: an op's duration scaled by how long its thread idled
//! before it ([`crate::graph::Graph::idle_scaled`]).
//!
//! A CPU training thread that waited (a DDP rank blocked on its last
//! all-reduce) computes more slowly for a while: its data left the caches,
//! the core may have clocked down (docs/validation.md, "Compute after a
//! wait"). A measured curve r(t) gives the ratio of an op class's time after
//! an idle of t to its time after none. An op captured after an idle of t_c
//! took d = d0 r(t_c); replayed after an idle of t it takes
//! d r(t) / r(t_c). Self-contained: the graph holds these, the executor reads
//! them when a scaled op starts.

use crate::engine::Time;

/// Ratio to no wait as a function of the idle before: piecewise linear
/// through `points` ((idle ns, ratio), idle strictly ascending, ratio finite
/// and > 0), flat outside them (the first point's ratio before it, the
/// last's after it).
#[derive(Debug, Clone, PartialEq)]
pub struct IdleCurve {
    pub points: Vec<(Time, f64)>,
}

impl IdleCurve {
    /// The curve's ratio after an idle of `t` ns.
    pub fn ratio(&self, t: Time) -> f64 {
        let p = &self.points;
        let k = p.partition_point(|&(x, _)| x <= t);
        if k == 0 {
            return p[0].1;
        }
        if k == p.len() {
            return p[k - 1].1;
        }
        let ((x0, y0), (x1, y1)) = (p[k - 1], p[k]);
        y0 + (y1 - y0) * ((t - x0) as f64 / (x1 - x0) as f64)
    }

    /// `d` (ns) captured after an idle of `captured`, replayed after one of `idle`: d r(idle) / r(captured), rounded.
    pub fn scale(&self, d: Time, idle: Time, captured: Time) -> Time {
        let f = self.ratio(idle) / self.ratio(captured);
        (d as f64 * f).round() as Time
    }

    /// Points present, idle strictly ascending, every ratio finite and > 0.
    pub fn check(&self) -> Result<(), String> {
        if self.points.is_empty() {
            return Err("an idle curve has no points".into());
        }
        if self.points.windows(2).any(|w| w[1].0 <= w[0].0) {
            return Err("an idle curve's idle lengths must be strictly ascending".into());
        }
        if let Some(&(t, r)) = self.points.iter().find(|&&(_, r)| !(r.is_finite() && r > 0.0)) {
            return Err(format!("an idle curve's ratio at {t} ns is {r}; ratios must be finite and > 0"));
        }
        Ok(())
    }
}

/// A compute op whose duration is scaled by `curve`: the idle is the time
/// from the end of op `after` to the start of op `until` (the op itself, or
/// an earlier op of the same busy spell of its stream that started after
/// that idle), `captured_ns` the idle its duration was measured after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleScaled {
    pub op: u32,
    pub curve: u32,
    pub after: u32,
    pub until: u32,
    pub captured_ns: Time,
}
