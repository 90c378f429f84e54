//! ddlsim-core: the deterministic discrete-event engine of ddlsim.
//!
//! The engine runs a generic workload [`graph`] (operations on ranks and
//! streams, dependencies, collectives, a rank -> host map) on a
//! [`network`] model and records what happened in a columnar
//! [`log::EventLog`]. Three traits carry everything that varies:
//! [`collective::Collective`] (all-reduce algorithms),
//! [`stream::StreamPolicy`] (which ready op a stream runs next) and
//! [`network::NetworkModel`] (how transfers are timed). Producers of graphs
//! live in [`lower`] (training lowering today).

pub mod algorithm;
pub mod collective;
pub mod engine;
pub mod error;
pub mod executor;
pub mod graph;
pub mod idle;
pub mod log;
pub mod lower;
pub mod network;
pub mod rng;
pub mod stream;

pub use executor::{run, run_with_hook, Growth, Progress, ProgressHook, RunOutput, Session, TraceDetail, INTERRUPTED};
pub use lower::training::TrainingSpec;
pub use error::{Error, ErrorKind};
pub use network::NetworkSpec;

/// Lowers a training description into a graph and runs it on `network`.
pub fn simulate_training(spec: &TrainingSpec, network: &NetworkSpec, detail: TraceDetail) -> Result<RunOutput, Error> {
    let graph = training_graph(spec, network)?;
    run_graph(&graph, network, detail)
}

/// The training graph ready to run on `network`: with the closed-form
/// collective model, it carries the network's transfer cost.
pub fn training_graph(spec: &TrainingSpec, network: &NetworkSpec) -> Result<graph::Graph, Error> {
    if spec.collective_model == lower::training::CollectiveModel::ClosedForm {
        let cost = collective::closed_form::LinkCost::of_network(network)?;
        // Alike workers run once per class (lower::classes), when the spec allows it.
        let classes = if spec.rank_classes { spec.validate()?; lower::classes::rank_classes(spec, &cost) } else { None };
        let mut graph = lower::training::build_graph_classes(spec, classes)?;
        graph.closed_form = Some(cost);
        return Ok(graph);
    }
    Ok(lower::training::build_graph(spec)?)
}

/// Runs any workload graph on the network `network` describes.
pub fn run_graph(graph: &graph::Graph, network: &NetworkSpec, detail: TraceDetail) -> Result<RunOutput, Error> {
    let model = network::build_network(network, &graph.hosts())?;
    let mut out = run(graph, model, detail)?;
    lower::classes::expand_output(&mut out, graph);
    Ok(out)
}

/// [`run_graph`] with a progress hook (see [`executor::run_with_hook`]):
/// `hook` is called about every 50 ms and stops the run when it returns false.
pub fn run_graph_with_hook(graph: &graph::Graph, network: &NetworkSpec, detail: TraceDetail, hook: Option<ProgressHook<'_>>) -> Result<RunOutput, Error> {
    let model = network::build_network(network, &graph.hosts())?;
    let mut out = run_with_hook(graph, model, detail, hook)?;
    lower::classes::expand_output(&mut out, graph);
    Ok(out)
}

/// [`run_graph_with_hook`] with the hook called about every `interval` (see [`executor::run_with_hook_every`]).
pub fn run_graph_with_hook_every(
    graph: &graph::Graph,
    network: &NetworkSpec,
    detail: TraceDetail,
    hook: Option<ProgressHook<'_>>,
    interval: std::time::Duration,
) -> Result<RunOutput, Error> {
    let model = network::build_network(network, &graph.hosts())?;
    let mut out = executor::run_with_hook_every(graph, model, detail, hook, interval)?;
    lower::classes::expand_output(&mut out, graph);
    Ok(out)
}

/// Several jobs' graphs merged into one, ready to run on `network` (see [`lower::jobs`]).
pub fn jobs_graph(spec: &lower::jobs::JobsSpec, network: &NetworkSpec) -> Result<lower::jobs::JobsGraph, Error> {
    lower::jobs::build_jobs_graph(spec, Some(network))
}
