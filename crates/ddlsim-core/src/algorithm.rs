//! What a workload graph says about its collectives, below every layer
//! that runs them: the all-reduce [`Algorithm`] a collective uses and the
//! [`LinkCost`] of the closed-form collective model. The graph names these;
//! [`crate::collective`] runs them (the schedules, the closed forms).

/// The all-reduce algorithms the engine knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Algorithm {
    Ring = 0,
    HalvingDoubling = 1,
    RecursiveDoubling = 2,
    BinaryTree = 3,
    DoubleBinaryTree = 4,
    Direct = 5,
    Butterfly = 6,
    HierarchicalRing = 7,
}

impl Algorithm {
    pub const NAMES: [&'static str; 8] = [
        "ring",
        "halving_doubling",
        "recursive_doubling",
        "binary_tree",
        "double_binary_tree",
        "direct",
        "butterfly",
        "hierarchical_ring",
    ];

    pub const ALL: [Algorithm; 8] = [
        Algorithm::Ring,
        Algorithm::HalvingDoubling,
        Algorithm::RecursiveDoubling,
        Algorithm::BinaryTree,
        Algorithm::DoubleBinaryTree,
        Algorithm::Direct,
        Algorithm::Butterfly,
        Algorithm::HierarchicalRing,
    ];

    pub fn from_code(code: u8) -> Option<Algorithm> {
        Self::ALL.get(code as usize).copied()
    }

    pub fn from_name(name: &str) -> Option<Algorithm> {
        Self::NAMES.iter().position(|n| *n == name).map(|i| Self::ALL[i])
    }

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// Name of the log's `op` for this algorithm's point-to-point steps.
    pub fn step_op(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring_step",
            Algorithm::HalvingDoubling => "hd_step",
            Algorithm::RecursiveDoubling => "rd_step",
            Algorithm::BinaryTree => "tree_step",
            Algorithm::DoubleBinaryTree => "dbtree_step",
            Algorithm::Direct => "direct_step",
            Algorithm::Butterfly => "butterfly_step",
            Algorithm::HierarchicalRing => "hring_step",
        }
    }
}

/// The closed-form collective model's cost of one transfer: alpha +
/// ceil(bytes / rate) (see [`crate::collective::closed_form`], which also
/// derives it from a network description and evaluates it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkCost {
    pub latency_ns: u64,
    pub bandwidth_bps: f64,
    /// Intra-host link, when it differs from the NIC.
    pub intra: Option<(u64, f64)>,
}
