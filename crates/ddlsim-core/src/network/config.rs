//! Network configuration as the engine reads it (plain data from Python).

use serde::Deserialize;

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Fidelity {
    Analytic,
    Flow,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Routing {
    #[default]
    Ecmp,
    Spray,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum TopologySpec {
    Star,
    LeafSpine {
        hosts_per_leaf: u32,
        spines: u32,
        oversubscription: f64,
        #[serde(default)]
        routing: Routing,
    },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    pub fidelity: Fidelity,
    pub bandwidth_bps: f64,
    pub latency_ns: u64,
    pub topology: TopologySpec,
    #[serde(default)]
    pub intra_host_bandwidth_bps: Option<f64>,
    #[serde(default)]
    pub intra_host_latency_ns: u64,
    #[serde(default)]
    pub record_flows: bool,
}
