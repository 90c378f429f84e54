//! The workload graph: operations on ranks joined by dependencies.
//!
//! An operation is ready when every operation it depends on has ended. Ops
//! that name a stream run one at a time on it, in the order they became
//! ready (a GPU compute stream, a communication stream, a server's CPU).

/// What an operation does; decides how the executor runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Occupies its rank for `duration` ns.
    Compute = 0,
    /// Moves `bytes` from `rank` to `peer` over the network.
    Transfer = 1,
    /// This rank's part in collective `collective` (lowered at run time).
    Collective = 2,
    /// Zero-duration synchronisation point.
    Barrier = 3,
}

/// The finer name of an operation, written to the event log's `op` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum OpCode {
    Forward = 0,
    Backward = 1,
    Update = 2,
    PushRequest = 3,
    PushResponse = 4,
    PullRequest = 5,
    PullResponse = 6,
    RingStep = 7,
    Send = 8,
    AllReduce = 9,
    Barrier = 10,
}

impl OpCode {
    pub const NAMES: [&'static str; 11] = [
        "forward",
        "backward",
        "update",
        "push_request",
        "push_response",
        "pull_request",
        "pull_response",
        "ring_step",
        "send",
        "allreduce",
        "barrier",
    ];
}

pub const NO_STREAM: u32 = u32::MAX;

#[derive(Debug, Clone)]
pub struct Op {
    pub kind: Kind,
    pub code: OpCode,
    pub rank: u32,
    /// Receiver of a transfer, -1 otherwise.
    pub peer: i32,
    pub bytes: u64,
    pub duration: u64,
    pub priority: i32,
    /// Global stream index, or [`NO_STREAM`].
    pub stream: u32,
    pub iteration: i32,
    pub layer: i32,
    pub tensor: i32,
    pub collective: i64,
    /// This rank's position in the collective's member list.
    pub member: u32,
    pub rpc: i64,
}

impl Op {
    pub fn new(kind: Kind, code: OpCode, rank: u32) -> Self {
        Op {
            kind,
            code,
            rank,
            peer: -1,
            bytes: 0,
            duration: 0,
            priority: 0,
            stream: NO_STREAM,
            iteration: -1,
            layer: -1,
            tensor: -1,
            collective: -1,
            member: 0,
            rpc: -1,
        }
    }
}

/// A collective operation: which ranks take part and how many bytes each
/// contributes (all-reduce of `bytes`).
#[derive(Debug, Clone)]
pub struct CollectiveSpec {
    pub members: Vec<u32>,
    pub bytes: u64,
}

/// Ops plus dependencies in compressed-sparse-row form.
#[derive(Debug, Default, Clone)]
pub struct Graph {
    pub ops: Vec<Op>,
    dep_offsets: Vec<u32>,
    dep_ids: Vec<u32>,
    pub collectives: Vec<CollectiveSpec>,
    pub num_streams: u32,
}

impl Graph {
    pub fn new() -> Self {
        Graph { ops: Vec::new(), dep_offsets: vec![0], dep_ids: Vec::new(), collectives: Vec::new(), num_streams: 0 }
    }

    /// Adds an op depending on `deps` (ids of ops added earlier); returns its id.
    pub fn add(&mut self, op: Op, deps: &[u32]) -> u32 {
        let id = self.ops.len() as u32;
        debug_assert!(deps.iter().all(|&d| d < id), "dependencies must be added first");
        self.ops.push(op);
        self.dep_ids.extend_from_slice(deps);
        self.dep_offsets.push(self.dep_ids.len() as u32);
        id
    }

    pub fn add_collective(&mut self, spec: CollectiveSpec) -> i64 {
        self.collectives.push(spec);
        (self.collectives.len() - 1) as i64
    }

    pub fn new_stream(&mut self) -> u32 {
        self.num_streams += 1;
        self.num_streams - 1
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn deps(&self, id: u32) -> &[u32] {
        let i = id as usize;
        &self.dep_ids[self.dep_offsets[i] as usize..self.dep_offsets[i + 1] as usize]
    }

    /// Successor lists (CSR) : for each op, the ops that depend on it.
    pub fn successors(&self) -> (Vec<u32>, Vec<u32>) {
        let n = self.ops.len();
        let mut counts = vec![0u32; n + 1];
        for &d in &self.dep_ids {
            counts[d as usize + 1] += 1;
        }
        for i in 0..n {
            counts[i + 1] += counts[i];
        }
        let mut fill = counts.clone();
        let mut succ = vec![0u32; self.dep_ids.len()];
        for id in 0..n as u32 {
            for &d in self.deps(id) {
                succ[fill[d as usize] as usize] = id;
                fill[d as usize] += 1;
            }
        }
        (counts, succ)
    }
}
