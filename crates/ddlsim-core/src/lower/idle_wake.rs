//! Compute after a wait in a data-parallel training graph (see
//! [`crate::idle`]): from its second iteration on, each worker's forward and
//! backward ops are scaled by their layer's curve at the idle its compute
//! stream had before the iteration's first op (from the end of the previous
//! iteration's last compute op to that op's start: the wait for the last
//! all-reduce), over the curve at the idle the capture measured there. The
//! curves give the ratio to no wait of the whole spell of compute after the
//! wait (a benchmark times the optimizer step, the forward and the backward
//! that follow one), so every op of the iteration takes its ratio, not only
//! the first. Default (no layers): the graph is built as without it.

use serde::Deserialize;

use crate::graph::{Graph, IdleCurve, IdleScaled, Kind};

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdleWake {
    /// Each curve's (idle ns, ratio to no wait) points (see [`IdleCurve`]).
    #[serde(default)]
    pub curves: Vec<Vec<(u64, f64)>>,
    /// Per layer: the curves of its forward and of its backward; empty: nothing is scaled.
    #[serde(default)]
    pub layers: Vec<[u32; 2]>,
    /// The idle the captured durations were measured after, ns.
    #[serde(default)]
    pub captured_ns: u64,
}

impl IdleWake {
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// One entry per layer, curves that exist and are well formed.
    pub fn validate(&self, num_layers: usize) -> Result<(), String> {
        if self.is_empty() {
            return Ok(());
        }
        if self.layers.len() != num_layers {
            return Err(format!("idle_wake.layers has {} entries for {num_layers} layers", self.layers.len()));
        }
        if let Some(&c) = self.layers.iter().flatten().find(|&&c| c as usize >= self.curves.len()) {
            return Err(format!("idle_wake.layers names curve {c}, but there are {} curves", self.curves.len()));
        }
        for (c, points) in self.curves.iter().enumerate() {
            IdleCurve { points: points.clone() }.check().map_err(|e| format!("idle_wake.curves[{c}]: {e}"))?;
        }
        Ok(())
    }

    /// Adds the curves and scales the forward and backward ops (names `forward`, `backward`) of `streams`.
    pub fn attach(&self, g: &mut Graph, streams: &[u32], forward: u32, backward: u32) {
        if self.is_empty() {
            return;
        }
        let base = g.idle_curves.len() as u32;
        g.idle_curves.extend(self.curves.iter().map(|p| IdleCurve { points: p.clone() }));
        // per stream: the iteration its compute is in, that iteration's first op, the previous iteration's last
        let mut at: Vec<Option<Spell>> = vec![None; g.streams.len()];
        let mut scaled = Vec::new();
        for (id, op) in g.ops.iter().enumerate() {
            let id = id as u32;
            if op.kind != Kind::Compute || !streams.contains(&op.stream) {
                continue;
            }
            let spell = match at[op.stream as usize] {
                Some(s) if s.iteration == op.iteration => Spell { last: id, ..s },
                Some(s) => Spell { iteration: op.iteration, first: id, previous: Some(s.last), last: id },
                None => Spell { iteration: op.iteration, first: id, previous: None, last: id },
            };
            at[op.stream as usize] = Some(spell);
            let (Some(after), Ok(layer)) = (spell.previous, usize::try_from(op.layer)) else { continue };
            let side = if op.name == forward { 0 } else if op.name == backward { 1 } else { continue };
            scaled.push(IdleScaled { op: id, curve: base + self.layers[layer][side], after, until: spell.first, captured_ns: self.captured_ns });
        }
        g.idle_scaled.extend(scaled);
    }
}

/// A stream's compute of one iteration: its first op, the previous iteration's last, the last seen.
#[derive(Debug, Clone, Copy)]
struct Spell {
    iteration: i32,
    first: u32,
    previous: Option<u32>,
    last: u32,
}
