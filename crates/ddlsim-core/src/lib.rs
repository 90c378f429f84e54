//! ddlsim-core: the deterministic discrete-event engine of ddlsim.
//!
//! A training job is a graph of operations on ranks ([`graph`]); the
//! [`executor`] runs it on a network model ([`network`]) and records what
//! happened in a columnar [`log::EventLog`]. [`training`] lowers a training
//! scenario ([`spec`]) into such a graph.

pub mod engine;
pub mod executor;
pub mod graph;
pub mod log;
pub mod network;
pub mod ring;
pub mod spec;
pub mod training;

pub use executor::{try_run, RunOutput};
pub use spec::TrainingSpec;

/// Runs a training scenario end to end: lower it into a graph, execute it.
pub fn simulate_training(spec: &TrainingSpec) -> Result<RunOutput, String> {
    spec.validate()?;
    let graph = training::build_graph(spec);
    let network = network::Network::new(&spec.network, spec.total_ranks())?;
    try_run(&graph, network, spec.trace_detail)
}
