//! Lowers synchronous data-parallel SGD into a workload graph.
//!
//! Per iteration and worker: forward layer by layer, backward in reverse on
//! the worker's compute stream. The gradients travel in *groups* chosen by
//! a grouping pass upstream (one group per tensor is wait-free
//! backpropagation; buckets, fusion and merge plans are other passes): a
//! group is ready when the backward of its earliest layer ends (backward
//! runs from the last layer down, so all its layers are done then).
//! Gradient synchronisation per group:
//! - `allreduce`: one collective over all workers on each worker's
//!   communication stream, with the chosen algorithm;
//! - `ps`: push (gradient) to the owning server, server update once all
//!   workers pushed, push acknowledgement, pull request, pull response
//!   (parameters): the four messages of a PS push/pull pair.
//! With `barrier`, the next iteration's forward waits for every worker's
//! synchronisation; without, a layer's forward waits only for the groups
//! holding its tensors.

use rand_distr::{Distribution, StandardNormal};
use serde::Deserialize;

use crate::collective::Algorithm;
use crate::graph::{CollectiveSpec, CollectiveType, Graph, Kind, Op, PolicyKind};
use crate::rng::{stream, Purpose};

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
    /// Gradient transfers carry their layer's priority into network bands.
    #[serde(default)]
    pub priority_bands: bool,
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
    #[serde(default)]
    pub collective_model: CollectiveModel,
    /// PS: multicast / in-network aggregation; ring: multicast all-gather (see `lower::in_network`).
    #[serde(default)]
    pub in_network: super::in_network::InNetworkSpec,
}

/// Network priority bands used for gradient priorities.
pub const BANDS: u32 = 8;

impl TrainingSpec {
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
        if !self.host_of_rank.is_empty() && self.host_of_rank.len() != self.total_ranks() as usize {
            return Err(format!(
                "host_of_rank has {} entries for {} ranks",
                self.host_of_rank.len(),
                self.total_ranks()
            ));
        }
        super::in_network::validate(self)?;
        if self.collective_model == CollectiveModel::ClosedForm && self.preemption {
            return Err("the closed-form collective model has no steps to preempt at; turn preemption off or use the step-by-step model".into());
        }
        Ok(())
    }

    fn policy(&self) -> PolicyKind {
        match self.stream_policy {
            StreamPolicyName::Fifo => PolicyKind::Fifo,
            StreamPolicyName::Priority => PolicyKind::Priority { preempt: self.preemption },
        }
    }
}

/// `ns` scaled by max(0, 1 + cv z), z standard normal from the op's own stream.
fn jittered(spec: &TrainingSpec, ns: u64, purpose: Purpose, rank: u32, iteration: i32, layer: usize) -> u64 {
    if spec.jitter == 0.0 || ns == 0 {
        return ns;
    }
    let z: f64 = StandardNormal.sample(&mut stream(spec.seed, purpose, rank, iteration, layer as u64));
    ((ns as f64) * (1.0 + spec.jitter * z).max(0.0)).round() as u64
}

struct Names {
    forward: u32,
    backward: u32,
    update: u32,
    push_request: u32,
    push_response: u32,
    pull_request: u32,
    pull_response: u32,
    allreduce: u32,
    barrier: u32,
}

pub fn build_graph(spec: &TrainingSpec) -> Result<Graph, String> {
    spec.validate()?;
    let mut g = Graph::new();
    let names = Names {
        forward: g.op_name("forward"),
        backward: g.op_name("backward"),
        update: g.op_name("update"),
        push_request: g.op_name("push_request"),
        push_response: g.op_name("push_response"),
        pull_request: g.op_name("pull_request"),
        pull_response: g.op_name("pull_response"),
        allreduce: g.op_name("allreduce"),
        barrier: g.op_name("barrier"),
    };
    g.host_of_rank = spec.host_of_rank.clone();
    let n = spec.workers;
    let num_layers = spec.layers.len();
    let policy = spec.policy();
    let compute_stream: Vec<u32> = (0..n).map(|w| g.new_stream(w, "compute", PolicyKind::Fifo)).collect();
    let comm_stream: Vec<u32> = (0..n).map(|w| g.new_stream(w, "comm", policy)).collect();
    let server_stream: Vec<u32> = (0..spec.servers()).map(|s| g.new_stream(n + s, "server", policy)).collect();

    let mut groups_of_layer: Vec<Vec<u32>> = vec![Vec::new(); num_layers];
    for (i, group) in spec.groups.iter().enumerate() {
        for &l in &group.layers {
            groups_of_layer[l as usize].push(i as u32);
        }
    }
    // Groups by the layer whose backward makes them ready, latest layer first.
    let mut order: Vec<u32> = (0..spec.groups.len() as u32).collect();
    let ready_layer = |i: u32| *spec.groups[i as usize].layers.iter().min().expect("validated non-empty");
    order.sort_by_key(|&i| (std::cmp::Reverse(ready_layer(i)), i));

    // gates[w][l]: ops the forward of layer l on worker w waits for.
    let mut gates: Vec<Vec<Vec<u32>>> = vec![vec![Vec::new(); num_layers]; n as usize];
    let mut rpc_counter: i64 = 0;
    let in_switch = super::in_network::aggregated_groups(spec);
    let mut bwd_of: Vec<Vec<u32>> = vec![vec![0; num_layers]; n as usize];
    // sync_end[w][group]: the op after which worker w holds the group's new values.
    let mut sync_end: Vec<Vec<u32>> = vec![vec![0; spec.groups.len()]; n as usize];

    for it in 0..spec.iterations as i32 {
        for w in 0..n {
            let wu = w as usize;
            let mut prev: Option<u32> = None;
            for l in 0..num_layers {
                let mut op = Op::new(Kind::Compute, names.forward, w);
                op.duration = jittered(spec, spec.layers[l].fwd_ns, Purpose::ForwardJitter, w, it, l);
                op.stream = compute_stream[wu];
                op.iteration = it;
                op.layer = l as i32;
                op.tenant = spec.tenant;
                let mut deps: Vec<u32> = prev.into_iter().collect();
                deps.append(&mut gates[wu][l]);
                prev = Some(g.add(op, &deps));
            }
            for l in (0..num_layers).rev() {
                let mut op = Op::new(Kind::Compute, names.backward, w);
                op.duration = jittered(spec, spec.layers[l].bwd_ns, Purpose::BackwardJitter, w, it, l);
                op.stream = compute_stream[wu];
                op.iteration = it;
                op.layer = l as i32;
                op.tenant = spec.tenant;
                let id = g.add(op, &prev.into_iter().collect::<Vec<_>>());
                bwd_of[wu][l] = id;
                prev = Some(id);
            }
        }
        for &gi in &order {
            let group = &spec.groups[gi as usize];
            let l = ready_layer(gi) as usize;
            let band = if spec.priority_bands { (l as u32 * BANDS / num_layers as u32).min(BANDS - 1) as u8 } else { 0 };
            let tag = |mut op: Op| {
                op.iteration = it;
                op.layer = l as i32;
                op.tensor = group.tensor;
                op.group = gi as i32;
                op.priority = l as i32;
                op.band = band;
                op.tenant = spec.tenant;
                op
            };
            match spec.sync {
                SyncSpec::Allreduce { .. } if spec.in_network.mode == super::in_network::InNetworkMode::Multicast => {
                    let ready: Vec<u32> = (0..n as usize).map(|w| bwd_of[w][l]).collect();
                    let ends = super::in_network::lower_ring_multicast(&mut g, spec, gi as usize, &tag, &ready, &comm_stream);
                    for (w, end) in ends.into_iter().enumerate() {
                        sync_end[w][gi as usize] = end;
                    }
                }
                SyncSpec::Allreduce { algorithm } => {
                    let c = g.add_collective(CollectiveSpec {
                        algorithm: algorithm.algorithm(),
                        coll_type: CollectiveType::AllReduce,
                        members: (0..n).collect(),
                        bytes: group.bytes,
                        chunk_bytes: spec.chunk_bytes,
                    });
                    for w in 0..n {
                        let mut op = tag(Op::new(Kind::Collective, names.allreduce, w));
                        op.bytes = group.bytes;
                        op.stream = comm_stream[w as usize];
                        op.collective = c;
                        op.member = w;
                        sync_end[w as usize][gi as usize] = g.add(op, &[bwd_of[w as usize][l]]);
                    }
                }
                SyncSpec::Ps { .. } if spec.in_network.mode != super::in_network::InNetworkMode::None => {
                    let ready: Vec<u32> = (0..n as usize).map(|w| bwd_of[w][l]).collect();
                    let stream = server_stream[group.server as usize];
                    let ends = super::in_network::lower_ps_group(&mut g, spec, gi as usize, &tag, &ready, stream, &mut rpc_counter, in_switch[gi as usize]);
                    for (w, end) in ends.into_iter().enumerate() {
                        sync_end[w][gi as usize] = end;
                    }
                }
                SyncSpec::Ps { .. } => {
                    let server = n + group.server;
                    let transfer = |name: u32, src: u32, dst: u32, bytes: u64, rpc: i64| {
                        let mut op = tag(Op::new(Kind::Transfer, name, src));
                        op.peer = dst as i32;
                        op.bytes = bytes;
                        op.rpc = rpc;
                        op
                    };
                    let push_rpc = rpc_counter;
                    let pull_rpc = rpc_counter + n as i64;
                    rpc_counter += 2 * n as i64;
                    let pushes: Vec<u32> = (0..n)
                        .map(|w| {
                            let op = transfer(names.push_request, w, server, group.bytes + spec.header_bytes, push_rpc + w as i64);
                            g.add(op, &[bwd_of[w as usize][l]])
                        })
                        .collect();
                    let mut update = tag(Op::new(Kind::Compute, names.update, server));
                    update.duration = group.update_ns;
                    update.stream = server_stream[group.server as usize];
                    let update = g.add(update, &pushes);
                    for w in 0..n {
                        let (header, bytes) = (spec.header_bytes, group.bytes + spec.header_bytes);
                        let ack = g.add(transfer(names.push_response, server, w, header, push_rpc + w as i64), &[update]);
                        let req = g.add(transfer(names.pull_request, w, server, header, pull_rpc + w as i64), &[ack]);
                        let resp = g.add(transfer(names.pull_response, server, w, bytes, pull_rpc + w as i64), &[req]);
                        sync_end[w as usize][gi as usize] = resp;
                    }
                }
            }
        }
        if spec.barrier {
            let all: Vec<u32> = sync_end.iter().flat_map(|v| v.iter().copied()).collect();
            let mut b = Op::new(Kind::Barrier, names.barrier, 0);
            b.iteration = it;
            b.tenant = spec.tenant;
            let b = g.add(b, &all);
            for gw in gates.iter_mut() {
                gw[0].push(b);
            }
        } else {
            for (w, gw) in gates.iter_mut().enumerate() {
                for (l, groups) in groups_of_layer.iter().enumerate() {
                    gw[l].extend(groups.iter().map(|&gi| sync_end[w][gi as usize]));
                }
            }
        }
    }
    Ok(g)
}
