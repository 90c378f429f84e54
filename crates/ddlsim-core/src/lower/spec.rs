//! What the lowerings read: a training description ([`TrainingSpec`], the
//! engine's JSON document) with its in-network options. Shared by
//! [`super::training`] and [`super::in_network`], which use it and not
//! each other's types.

use serde::Deserialize;

use crate::graph::{Algorithm, PolicyKind};


#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum AlgorithmName {
    Ring,
    HalvingDoubling,
    RecursiveDoubling,
    BinaryTree,
    DoubleBinaryTree,
    Direct,
    Butterfly,
    HierarchicalRing,
}

impl AlgorithmName {
    pub fn algorithm(self) -> Algorithm {
        match self {
            AlgorithmName::Ring => Algorithm::Ring,
            AlgorithmName::HalvingDoubling => Algorithm::HalvingDoubling,
            AlgorithmName::RecursiveDoubling => Algorithm::RecursiveDoubling,
            AlgorithmName::BinaryTree => Algorithm::BinaryTree,
            AlgorithmName::DoubleBinaryTree => Algorithm::DoubleBinaryTree,
            AlgorithmName::Direct => Algorithm::Direct,
            AlgorithmName::Butterfly => Algorithm::Butterfly,
            AlgorithmName::HierarchicalRing => Algorithm::HierarchicalRing,
        }
    }

    pub const ALL: [AlgorithmName; 8] = [
        AlgorithmName::Ring,
        AlgorithmName::HalvingDoubling,
        AlgorithmName::RecursiveDoubling,
        AlgorithmName::BinaryTree,
        AlgorithmName::DoubleBinaryTree,
        AlgorithmName::Direct,
        AlgorithmName::Butterfly,
        AlgorithmName::HierarchicalRing,
    ];
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SyncSpec {
    Allreduce { algorithm: AlgorithmName },
    Ps { servers: u32 },
}

/// How collectives are simulated: step by step through the network, or as
/// one event per member from the algorithm's closed form (analytic fidelity
/// only; see `collective::closed_form` for when that is exact).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveModel {
    #[default]
    Steps,
    ClosedForm,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum StreamPolicyName {
    #[default]
    Fifo,
    Priority,
}

/// Order of the PS distribution (pull response) phase.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Distribution {
    /// Each parameter goes back to every worker right after its update (concurrently).
    #[default]
    Immediate,
    /// One parameter at a time to every worker, then the next parameter.
    RoundRobin,
    /// The whole model to one worker, then the next worker.
    Block,
}

/// How the backpropagation start skew is chosen.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum StaggerMode {
    /// Worker w waits w x stagger_ns.
    #[default]
    Fixed,
    /// Each worker and iteration draws uniformly from [0, stagger_ns].
    Random,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerSpec {
    pub fwd_ns: u64,
    pub bwd_ns: u64,
}

/// Gradients that travel together.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupSpec {
    /// Layers whose tensors the group holds (their forward waits for it without a barrier).
    pub layers: Vec<u32>,
    /// The tensor, when the group is exactly one tensor; -1 otherwise.
    #[serde(default = "minus_one")]
    pub tensor: i32,
    pub bytes: u64,
    /// Parameter server (0-based) owning the group; `ps` only.
    #[serde(default)]
    pub server: u32,
    /// Server-side update (aggregation + apply) time; `ps` only.
    #[serde(default)]
    pub update_ns: u64,
}

fn minus_one() -> i32 {
    -1
}

fn default_true() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainingSpec {
    pub workers: u32,
    pub iterations: u32,
    pub seed: u64,
    pub sync: SyncSpec,
    /// Coefficient of variation of each compute duration (0 = none).
    #[serde(default)]
    pub jitter: f64,
    #[serde(default = "default_true")]
    pub barrier: bool,
    /// Size of PS control messages and of the header added to payloads.
    #[serde(default)]
    pub header_bytes: u64,
    #[serde(default)]
    pub stream_policy: StreamPolicyName,
    /// With the priority policy: a running collective yields at chunk boundaries.
    #[serde(default)]
    pub preemption: bool,
    /// With preemption: yield only where a message (a P3 slice: `chunk_bytes`) starts, not between steps.
    #[serde(default)]
    pub preempt_at_messages: bool,
    /// Gradient transfers carry their layer's priority into network bands.
    #[serde(default)]
    pub priority_bands: bool,
    /// Band of all the job's transfers (0 = highest); with `priority_bands`, added to each layer's band (capped at
    /// `BANDS - 1`). Puts a whole job below (or beside) background tenants, as the thesis' chapter 5 does.
    #[serde(default)]
    pub job_band: u8,
    /// Band of each group's transfers, set by a band policy (docs/adaptive-priority.md); empty: `band_of`. When
    /// given, one entry per group, each below `BANDS`, and it replaces `job_band` and `priority_bands` for it.
    #[serde(default)]
    pub group_bands: Vec<u8>,
    #[serde(default)]
    pub tenant: u32,
    pub layers: Vec<LayerSpec>,
    pub groups: Vec<GroupSpec>,
    /// Host of each rank (workers first, then servers); empty: one host each.
    #[serde(default)]
    pub host_of_rank: Vec<u32>,
    /// All-reduce: partition each group into messages of at most this many
    /// bytes (ring; see `collective::ring`). 0 (default): no partitioning.
    #[serde(default)]
    pub chunk_bytes: u64,
    /// All-reduce: reduction cost per byte a member combines (MG-WFBP Table II's gamma). 0 (default): free.
    #[serde(default)]
    pub gamma_ns_per_byte: f64,
    /// All-reduce (ByteScheduler): a group larger than this travels as
    /// ceil(bytes / partition_bytes) all-reduces of (nearly) equal size, each
    /// scheduled on its own. 0 (default): one all-reduce per group.
    #[serde(default)]
    pub partition_bytes: u64,
    /// All-reduce (ByteScheduler): the communication stream's credit (see
    /// [`crate::graph::StreamSpec::credit`]). 0 (default): one all-reduce at a time.
    #[serde(default)]
    pub credit_bytes: u64,
    #[serde(default)]
    pub collective_model: CollectiveModel,
    /// PS: split every group evenly over all servers (its `server` is ignored).
    #[serde(default)]
    pub ps_split: bool,
    /// PS: order of the distribution phase.
    #[serde(default)]
    pub distribution: Distribution,
    /// PS: no cross-worker update barrier; each push is applied on its own.
    #[serde(default)]
    pub asynchronous: bool,
    /// Asynchronous PS: at most this many iterations ahead of the slowest worker (none: unbounded).
    #[serde(default)]
    pub staleness: Option<u32>,
    /// PS: each request a server handles costs `a_ns + b_ns * workers` on its FIFO request processor
    /// (see `lower::server_cost`). Default zero: no cost, no extra op.
    #[serde(default)]
    pub server_cost: super::server_cost::ServerCost,
    /// PS: each worker's requests and responses hold its FIFO request issuer (see `lower::client_cost`).
    /// Default zero: no cost, no extra op.
    #[serde(default)]
    pub client_cost: super::client_cost::ClientCost,
    /// Backpropagation staggering: per-worker idle time before the first backward op.
    #[serde(default)]
    pub stagger_ns: u64,
    #[serde(default)]
    pub stagger: StaggerMode,
    /// PS: multicast / in-network aggregation; ring: multicast all-gather (see `lower::in_network`).
    #[serde(default)]
    pub in_network: InNetworkSpec,
    /// Per-rank compute: per-layer time vectors ranks draw from (see `lower::variation`); empty: the layer table.
    #[serde(default)]
    pub compute_pool: Vec<ComputeVector>,
    /// Per worker, the pool vectors of its iterations (cycled); empty: seeded uniform draws.
    #[serde(default)]
    pub compute_assign: Vec<Vec<u32>>,
    /// Ranks slower every iteration.
    #[serde(default)]
    pub stragglers: Vec<Straggler>,
    /// Any rank slower with a probability per iteration.
    #[serde(default)]
    pub transient_stragglers: Vec<TransientStraggler>,
    /// Closed form: simulate one worker per class of alike workers when the
    /// run allows it (see `lower::classes`); false (default): every worker.
    #[serde(default)]
    pub rank_classes: bool,
    /// All-reduce: compute after a wait, each worker's forward and backward ops scaled by how long its compute
    /// stream idled before the iteration (see `lower::idle_wake`). Default: none.
    #[serde(default)]
    pub idle_wake: super::idle_wake::IdleWake,
    /// PS: each RPC message's transport time beyond the route's latency, drawn from measured samples (see
    /// `lower::message_latency`). Default: none.
    #[serde(default)]
    pub message_latency: super::message_latency::MessageLatency,
}

/// Network priority bands used for gradient priorities.
pub const BANDS: u32 = 8;

impl TrainingSpec {
    /// The network band of a transfer of layer `layer` (of `num_layers`): `job_band`, plus the layer's share of
    /// the bands with `priority_bands`, capped at `BANDS - 1`.
    pub fn band_of(&self, layer: usize, num_layers: usize) -> u8 {
        let own = if self.priority_bands { (layer as u32 * BANDS / num_layers.max(1) as u32).min(BANDS - 1) } else { 0 };
        (own + self.job_band as u32).min(BANDS - 1) as u8
    }

    /// The network band of group `group`'s transfers (its ready layer `layer` of `num_layers`): the band policy's
    /// `group_bands` entry where one is given, else [`Self::band_of`].
    pub fn group_band(&self, group: usize, layer: usize, num_layers: usize) -> u8 {
        self.group_bands.get(group).copied().unwrap_or_else(|| self.band_of(layer, num_layers))
    }
}

impl TrainingSpec {
    /// One iteration with every optional field at the default the JSON reader
    /// fills in (barrier on, FIFO, per-host nothing special); set fields on the result.
    pub fn new(workers: u32, sync: SyncSpec, layers: Vec<LayerSpec>, groups: Vec<GroupSpec>) -> Self {
        TrainingSpec {
            workers,
            iterations: 1,
            seed: 0,
            sync,
            jitter: 0.0,
            barrier: true,
            header_bytes: 0,
            stream_policy: Default::default(),
            preemption: false,
            preempt_at_messages: false,
            priority_bands: false,
            job_band: 0,
            group_bands: Vec::new(),
            tenant: 0,
            layers,
            groups,
            host_of_rank: Vec::new(),
            chunk_bytes: 0,
            gamma_ns_per_byte: 0.0,
            partition_bytes: 0,
            credit_bytes: 0,
            collective_model: Default::default(),
            ps_split: false,
            distribution: Default::default(),
            asynchronous: false,
            staleness: None,
            server_cost: Default::default(),
            client_cost: Default::default(),
            stagger_ns: 0,
            stagger: Default::default(),
            in_network: Default::default(),
            compute_pool: Vec::new(),
            compute_assign: Vec::new(),
            stragglers: Vec::new(),
            transient_stragglers: Vec::new(),
            rank_classes: false,
            idle_wake: Default::default(),
            message_latency: Default::default(),
        }
    }

    pub fn from_json(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| format!("invalid training description for the engine: {e}"))
    }

    pub fn servers(&self) -> u32 {
        match self.sync {
            SyncSpec::Ps { servers } => servers,
            SyncSpec::Allreduce { .. } => 0,
        }
    }

    pub fn total_ranks(&self) -> u32 {
        self.workers + self.servers()
    }

    /// Guards the lowering's own assumptions (Python validates user input first).
    pub fn validate(&self) -> Result<(), String> {
        if self.workers == 0 {
            return Err("workers must be at least 1".into());
        }
        if let SyncSpec::Ps { servers: 0 } = self.sync {
            return Err("a parameter server strategy needs at least 1 server".into());
        }
        if self.layers.is_empty() {
            return Err("the model has no layers".into());
        }
        if !self.idle_wake.is_empty() && self.servers() > 0 {
            return Err("idle_wake applies to an all-reduce job's workers, not a parameter server's".into());
        }
        self.idle_wake.validate(self.layers.len())?;
        if !(self.jitter.is_finite() && self.jitter >= 0.0) {
            return Err("jitter must be a finite number >= 0".into());
        }
        for (i, g) in self.groups.iter().enumerate() {
            if g.layers.is_empty() {
                return Err(format!("group {i} holds no layer"));
            }
            if let Some(&l) = g.layers.iter().find(|&&l| l as usize >= self.layers.len()) {
                return Err(format!("group {i} names layer {l}, which does not exist"));
            }
            if matches!(self.sync, SyncSpec::Ps { .. }) && g.server >= self.servers() {
                return Err(format!("group {i} is placed on server {} of {}", g.server, self.servers()));
            }
        }
        if !self.group_bands.is_empty() && self.group_bands.len() != self.groups.len() {
            return Err(format!("group_bands has {} entries for {} groups", self.group_bands.len(), self.groups.len()));
        }
        if let Some(b) = self.group_bands.iter().find(|&&b| b as u32 >= BANDS) {
            return Err(format!("group_bands holds band {b}; bands are 0 to {}", BANDS - 1));
        }
        if !self.host_of_rank.is_empty() && self.host_of_rank.len() != self.total_ranks() as usize {
            return Err(format!("host_of_rank has {} entries for {} ranks", self.host_of_rank.len(), self.total_ranks()));
        }
        let ps = matches!(self.sync, SyncSpec::Ps { .. });
        if !ps && (self.ps_split || self.distribution != Distribution::Immediate || self.asynchronous) {
            return Err("ps_split, distribution and asynchronous apply to the parameter-server strategy only".into());
        }
        if self.staleness.is_some() && !self.asynchronous {
            return Err("a staleness bound needs asynchronous = true".into());
        }
        if self.asynchronous && self.distribution != Distribution::Immediate {
            return Err("asynchronous PS answers every push at once; the distribution order needs synchronous PS".into());
        }
        validate_in_network(self)?;
        validate_variation(self)?;
        super::server_cost::validate(&self.server_cost, self.servers(), self.in_network.mode != InNetworkMode::None)?;
        super::client_cost::validate(&self.client_cost, self.servers(), self.in_network.mode != InNetworkMode::None)?;
        self.message_latency.validate(self.servers(), self.in_network.mode != InNetworkMode::None)?;
        if ps && (self.partition_bytes > 0 || self.credit_bytes > 0) {
            return Err("partition_bytes and credit_bytes schedule all-reduces; the parameter-server strategy has none".into());
        }
        if self.partition_bytes > 0 && self.in_network.mode != InNetworkMode::None {
            return Err("partition_bytes cuts groups into all-reduces; the multicast all-gather lowers groups whole".into());
        }
        if self.credit_bytes > 0 && self.collective_model == CollectiveModel::ClosedForm {
            return Err("the closed-form collective model times each all-reduce alone; concurrent all-reduces (credit_bytes) need the step-by-step model".into());
        }
        if self.credit_bytes > 0 && self.preemption {
            return Err("with credit_bytes, partitions are never interrupted (ByteScheduler preempts between partitions); turn preemption off".into());
        }
        if self.collective_model == CollectiveModel::ClosedForm && self.preemption {
            return Err("the closed-form collective model has no steps to preempt at; turn preemption off or use the step-by-step model".into());
        }
        Ok(())
    }

    pub fn policy(&self) -> PolicyKind {
        match self.stream_policy {
            StreamPolicyName::Fifo => PolicyKind::Fifo,
            StreamPolicyName::Priority => PolicyKind::Priority { preempt: self.preemption },
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum InNetworkMode {
    #[default]
    None,
    Multicast,
    Aggregation,
    Multiagg,
}

impl InNetworkMode {
    pub fn aggregates(self) -> bool {
        matches!(self, InNetworkMode::Aggregation | InNetworkMode::Multiagg)
    }
    pub fn multicasts(self) -> bool {
        matches!(self, InNetworkMode::Multicast | InNetworkMode::Multiagg)
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InNetworkSpec {
    #[serde(default)]
    pub mode: InNetworkMode,
    /// Aggregation memory of the switch, bytes; None: unlimited.
    #[serde(default)]
    pub switch_memory: Option<u64>,
}

/// The in-network mechanisms each strategy takes (see `lower::in_network`).
pub fn validate_in_network(spec: &TrainingSpec) -> Result<(), String> {
    match (spec.in_network.mode, &spec.sync) {
        (InNetworkMode::None, _) => Ok(()),
        (mode, SyncSpec::Ps { .. }) if mode.multicasts() && spec.asynchronous => {
            Err("a parameter multicast answers one synchronous update; asynchronous PS answers each push: use in_network aggregation or none".into())
        }
        (_, SyncSpec::Ps { .. }) => Ok(()),
        (InNetworkMode::Multicast, SyncSpec::Allreduce { algorithm: AlgorithmName::Ring }) => {
            if spec.chunk_bytes != 0 {
                return Err("the ring with a multicast all-gather does not partition messages; set chunk_bytes to 0".into());
            }
            if spec.collective_model == CollectiveModel::ClosedForm {
                return Err("the ring with a multicast all-gather is simulated step by step; use the steps collective model".into());
            }
            Ok(())
        }
        (InNetworkMode::Multicast, SyncSpec::Allreduce { .. }) => {
            Err("a multicast all-gather is available for the ring all-reduce only (algorithm ring)".into())
        }
        _ => Err("in-network aggregation applies to the parameter-server strategy only (all-reduce takes in_network multicast with the ring)".into()),
    }
}

#[cfg(test)]
mod job_band_tests {
    use super::*;

    fn spec(priority_bands: bool, job_band: u8) -> TrainingSpec {
        let layers = (0..4).map(|_| LayerSpec { fwd_ns: 1, bwd_ns: 2 }).collect();
        TrainingSpec { priority_bands, job_band, ..TrainingSpec::new(2, SyncSpec::Allreduce { algorithm: AlgorithmName::Ring }, layers, vec![]) }
    }

    #[test]
    fn job_band_puts_every_layer_in_it_and_offsets_priority_bands() {
        for l in 0..4 {
            assert_eq!(spec(false, 0).band_of(l, 4), 0);
            assert_eq!(spec(false, 2).band_of(l, 4), 2);
            // priority bands: layer l of 4 gets band 2l; offset by job_band, capped at BANDS - 1
            assert_eq!(spec(true, 0).band_of(l, 4), (2 * l) as u8);
            assert_eq!(spec(true, 3).band_of(l, 4), ((2 * l) as u8 + 3).min(BANDS as u8 - 1));
        }
    }
}

// -- per-rank compute variation (what it does: `lower::variation`) --

/// One rank-iteration's per-layer compute times (ns), layer order as `layers`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputeVector {
    pub fwd_ns: Vec<u64>,
    pub bwd_ns: Vec<u64>,
}

/// A persistent straggler: worker `rank` (0-based, within the job) is `factor` times slower every iteration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Straggler {
    pub rank: u32,
    pub factor: f64,
}

/// A transient straggler: every worker, every iteration, is `factor` times slower with probability `probability`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransientStraggler {
    pub probability: f64,
    pub factor: f64,
}

/// Checks the per-rank variation fields against the spec's layers and workers.
fn validate_variation(spec: &TrainingSpec) -> Result<(), String> {
    let layers = spec.layers.len();
    for (i, v) in spec.compute_pool.iter().enumerate() {
        if v.fwd_ns.len() != layers || v.bwd_ns.len() != layers {
            return Err(format!(
                "compute_pool[{i}] has {} forward and {} backward times for {layers} layers",
                v.fwd_ns.len(),
                v.bwd_ns.len()
            ));
        }
    }
    if !spec.compute_assign.is_empty() {
        if spec.compute_pool.is_empty() {
            return Err("compute_assign needs a compute_pool to index".into());
        }
        if spec.compute_assign.len() != spec.workers as usize {
            return Err(format!("compute_assign has {} entries for {} workers", spec.compute_assign.len(), spec.workers));
        }
        for (w, row) in spec.compute_assign.iter().enumerate() {
            if row.is_empty() {
                return Err(format!("compute_assign[{w}] is empty"));
            }
            if let Some(&i) = row.iter().find(|&&i| i as usize >= spec.compute_pool.len()) {
                return Err(format!("compute_assign[{w}] names vector {i} of a pool of {}", spec.compute_pool.len()));
            }
        }
    }
    for s in &spec.stragglers {
        if s.rank >= spec.workers {
            return Err(format!("straggler rank {} is not a worker (workers 0 to {})", s.rank, spec.workers - 1));
        }
        if !(s.factor.is_finite() && s.factor > 0.0) {
            return Err(format!("straggler factor {} must be a finite number > 0", s.factor));
        }
    }
    for t in &spec.transient_stragglers {
        if !(t.probability.is_finite() && (0.0..=1.0).contains(&t.probability)) {
            return Err(format!("transient straggler probability {} must be in [0, 1]", t.probability));
        }
        if !(t.factor.is_finite() && t.factor > 0.0) {
            return Err(format!("transient straggler factor {} must be a finite number > 0", t.factor));
        }
    }
    Ok(())
}
