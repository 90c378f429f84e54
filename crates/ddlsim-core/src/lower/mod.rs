//! Producers of workload graphs. The engine runs any [`crate::graph::Graph`];
//! these build one from a higher-level description.

pub mod classes;
pub mod client_cost;
pub mod idle_wake;
pub mod in_network;
pub mod jobs;
pub mod message_latency;
pub mod ps;
pub mod server_cost;
pub mod spec;
pub mod training;
pub mod variation;
