//! The plain-data scenario the Python layer hands to the engine (JSON).
//! Python validates user input; `validate` here only guards the engine's
//! own assumptions so that a direct Rust caller gets an error, not a panic.

use serde::Deserialize;

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    Ring,
    Ps,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Fidelity {
    Analytic,
    Flow,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TraceDetail {
    /// Every point-to-point transfer, including each ring step.
    Step,
    /// One row per rank per collective; ring steps are simulated, not logged.
    Collective,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Topology {
    /// All hosts under one switch.
    Star,
    /// Hosts in racks of `hosts_per_leaf`, every leaf linked to every spine.
    /// Leaf uplink capacity = hosts_per_leaf * host bandwidth / (spines * oversubscription).
    LeafSpine {
        hosts_per_leaf: u32,
        spines: u32,
        oversubscription: f64,
    },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    pub fidelity: Fidelity,
    /// Host link bandwidth in bit/s.
    pub bandwidth_bps: f64,
    /// One-way host-to-host latency under one switch, in ns. In the flow model
    /// every link carries half of it (uplink gets the odd nanosecond).
    pub latency_ns: u64,
    pub topology: Topology,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerSpec {
    pub fwd_ns: u64,
    pub bwd_ns: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorSpec {
    pub layer: u32,
    pub bytes: u64,
    /// Parameter server (0-based) owning the tensor; `ps` only.
    #[serde(default)]
    pub server: u32,
    /// Server-side update (aggregation + apply) time; `ps` only.
    #[serde(default)]
    pub update_ns: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainingSpec {
    pub strategy: Strategy,
    pub workers: u32,
    #[serde(default)]
    pub servers: u32,
    pub iterations: u32,
    pub seed: u64,
    /// Coefficient of variation of each compute duration (0 = none).
    #[serde(default)]
    pub jitter: f64,
    /// Global barrier before each iteration's forward pass; off = a layer's
    /// forward waits only for its own parameters.
    #[serde(default = "default_true")]
    pub barrier: bool,
    /// Size of PS control messages (push ack, pull request) and header added
    /// to payload messages.
    #[serde(default)]
    pub header_bytes: u64,
    pub layers: Vec<LayerSpec>,
    pub tensors: Vec<TensorSpec>,
    pub network: NetworkSpec,
    pub trace_detail: TraceDetail,
}

fn default_true() -> bool {
    true
}

impl TrainingSpec {
    pub fn from_json(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| format!("invalid scenario for the engine: {e}"))
    }

    pub fn total_ranks(&self) -> u32 {
        match self.strategy {
            Strategy::Ring => self.workers,
            Strategy::Ps => self.workers + self.servers,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.workers == 0 {
            return Err("workers must be at least 1".into());
        }
        if self.strategy == Strategy::Ps && self.servers == 0 {
            return Err("strategy ps needs at least 1 server".into());
        }
        if self.layers.is_empty() {
            return Err("the model has no layers".into());
        }
        if !(self.network.bandwidth_bps.is_finite() && self.network.bandwidth_bps > 0.0) {
            return Err("network bandwidth must be a positive number".into());
        }
        if !(self.jitter.is_finite() && self.jitter >= 0.0) {
            return Err("jitter must be >= 0".into());
        }
        for (i, t) in self.tensors.iter().enumerate() {
            if t.layer as usize >= self.layers.len() {
                return Err(format!("tensor {i} names layer {} which does not exist", t.layer));
            }
            if self.strategy == Strategy::Ps && t.server >= self.servers {
                return Err(format!("tensor {i} is placed on server {} of {}", t.server, self.servers));
            }
        }
        if let Topology::LeafSpine { hosts_per_leaf, spines, oversubscription } = self.network.topology {
            if hosts_per_leaf == 0 || spines == 0 {
                return Err("leaf-spine needs hosts_per_leaf >= 1 and spines >= 1".into());
            }
            if !(oversubscription.is_finite() && oversubscription > 0.0) {
                return Err("oversubscription must be a positive number".into());
            }
        }
        Ok(())
    }
}
