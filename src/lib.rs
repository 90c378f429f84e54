//! Python bindings (module `ddlsim._core`): a narrow boundary that only
//! converts. A training description or a workload graph goes in (the
//! graph as raw little-endian column buffers), the event log comes back as
//! column buffers that numpy wraps without copying per element. Engine
//! errors come back as ValueError with the engine's message.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use ddlsim_core::collective::Algorithm;
use ddlsim_core::graph::{CollectiveSpec, CollectiveType, Graph, Kind, Op, PolicyKind, StreamSpec};
use ddlsim_core::log::KIND_NAMES;
use ddlsim_core::lower::training::build_graph;
use ddlsim_core::{run_graph_with_hook, NetworkSpec, Progress, RunOutput, TraceDetail, TrainingSpec, INTERRUPTED};

mod watchdog;

fn as_bytes<T: Copy>(values: &[T]) -> &[u8] {
    // SAFETY: T is a plain integer type; viewing its storage as bytes is sound.
    unsafe { std::slice::from_raw_parts(values.as_ptr() as *const u8, std::mem::size_of_val(values)) }
}

fn column<'py, T: Copy>(py: Python<'py>, dict: &Bound<'py, PyDict>, name: &str, dtype: &str, values: &[T]) -> PyResult<()> {
    dict.set_item(name, (dtype, PyBytes::new(py, as_bytes(values))))
}

/// Reads column `name` of `dict` (bytes) as a vector of `T`.
fn read<T: Copy + Default>(dict: &Bound<'_, PyDict>, name: &str) -> PyResult<Vec<T>> {
    let item = dict.get_item(name)?.ok_or_else(|| PyValueError::new_err(format!("graph column {name:?} is missing")))?;
    let raw: &[u8] = item.extract()?;
    let size = std::mem::size_of::<T>();
    if raw.len() % size != 0 {
        return Err(PyValueError::new_err(format!("graph column {name:?} has {} bytes, not a multiple of {size}", raw.len())));
    }
    let mut out = vec![T::default(); raw.len() / size];
    // SAFETY: out has exactly raw.len() bytes of plain integers.
    unsafe { std::ptr::copy_nonoverlapping(raw.as_ptr(), out.as_mut_ptr() as *mut u8, raw.len()) };
    Ok(out)
}

fn detail(name: &str) -> PyResult<TraceDetail> {
    match name {
        "step" => Ok(TraceDetail::Step),
        "collective" => Ok(TraceDetail::Collective),
        other => Err(PyValueError::new_err(format!("trace detail {other:?}: use 'step' or 'collective'"))),
    }
}

fn network(json: &str) -> PyResult<NetworkSpec> {
    serde_json::from_str(json).map_err(|e| PyValueError::new_err(format!("invalid network description for the engine: {e}")))
}

/// The run's results: `(columns, stats, op_names, flows)`.
fn output<'py>(py: Python<'py>, out: RunOutput, graph: &Graph) -> PyResult<Bound<'py, PyDict>> {
    let cols = PyDict::new(py);
    let log = &out.log;
    column(py, &cols, "id", "<i8", &log.id)?;
    column(py, &cols, "iteration", "<i4", &log.iteration)?;
    column(py, &cols, "rank", "<i4", &log.rank)?;
    column(py, &cols, "kind_code", "u1", &log.kind)?;
    column(py, &cols, "op_code", "<u4", &log.op)?;
    column(py, &cols, "layer", "<i4", &log.layer)?;
    column(py, &cols, "tensor", "<i4", &log.tensor)?;
    column(py, &cols, "group", "<i4", &log.group)?;
    column(py, &cols, "peer", "<i4", &log.peer)?;
    column(py, &cols, "message", "<i8", &log.message)?;
    column(py, &cols, "bytes", "<i8", &log.bytes)?;
    column(py, &cols, "priority", "<i4", &log.priority)?;
    column(py, &cols, "tenant", "<i4", &log.tenant)?;
    column(py, &cols, "collective", "<i8", &log.collective)?;
    column(py, &cols, "step", "<i4", &log.step)?;
    column(py, &cols, "rpc", "<i8", &log.rpc)?;
    column(py, &cols, "stream_index", "<i4", &log.stream)?;
    column(py, &cols, "ready_ns", "<i8", &log.ready_ns)?;
    column(py, &cols, "start_ns", "<i8", &log.start_ns)?;
    column(py, &cols, "end_ns", "<i8", &log.end_ns)?;
    column(py, &cols, "dep_offsets", "<i8", &log.dep_offsets)?;
    column(py, &cols, "deps", "<i8", &log.deps)?;
    let result = PyDict::new(py);
    result.set_item("columns", cols)?;
    result.set_item("op_names", out.op_names)?;
    let stream_names: Vec<&str> = graph.streams.iter().map(|st| graph.stream_names[st.name as usize].as_str()).collect();
    result.set_item("stream_names", stream_names)?;
    result.set_item("events", out.events)?;
    result.set_item("transfers", out.transfers)?;
    result.set_item("recomputations", out.recomputations)?;
    result.set_item("makespan_ns", out.makespan)?;
    result.set_item("bytes_sent", out.bytes_sent)?;
    result.set_item("bytes_received", out.bytes_received)?;
    let flows = PyDict::new(py);
    let f = &out.flows;
    column(py, &flows, "message", "<u8", &f.iter().map(|r| r.message).collect::<Vec<_>>())?;
    column(py, &flows, "src", "<u4", &f.iter().map(|r| r.src).collect::<Vec<_>>())?;
    column(py, &flows, "dst", "<u4", &f.iter().map(|r| r.dst).collect::<Vec<_>>())?;
    column(py, &flows, "bytes", "<u8", &f.iter().map(|r| r.bytes).collect::<Vec<_>>())?;
    column(py, &flows, "band", "u1", &f.iter().map(|r| r.band).collect::<Vec<_>>())?;
    column(py, &flows, "tenant", "<u4", &f.iter().map(|r| r.tenant).collect::<Vec<_>>())?;
    column(py, &flows, "start_ns", "<u8", &f.iter().map(|r| r.start).collect::<Vec<_>>())?;
    column(py, &flows, "tx_end_ns", "<u8", &f.iter().map(|r| r.tx_end).collect::<Vec<_>>())?;
    column(py, &flows, "delivered_ns", "<u8", &f.iter().map(|r| r.delivered).collect::<Vec<_>>())?;
    result.set_item("flows", flows)?;
    Ok(result)
}

/// Lowers a training description (JSON) into a workload graph, returned
/// as columns (the same layout `run_graph_columns` takes).
#[pyfunction]
fn lower_training_json<'py>(py: Python<'py>, training_json: &str) -> PyResult<Bound<'py, PyDict>> {
    let spec = TrainingSpec::from_json(training_json).map_err(PyValueError::new_err)?;
    let graph = build_graph(&spec).map_err(PyValueError::new_err)?;
    graph_columns(py, &graph)
}

fn graph_columns<'py>(py: Python<'py>, g: &Graph) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let ops = &g.ops;
    column(py, &d, "kind", "u1", &ops.iter().map(|o| o.kind as u8).collect::<Vec<_>>())?;
    column(py, &d, "name", "<u4", &ops.iter().map(|o| o.name).collect::<Vec<_>>())?;
    column(py, &d, "rank", "<u4", &ops.iter().map(|o| o.rank).collect::<Vec<_>>())?;
    column(py, &d, "peer", "<i4", &ops.iter().map(|o| o.peer).collect::<Vec<_>>())?;
    column(py, &d, "stream", "<u4", &ops.iter().map(|o| o.stream).collect::<Vec<_>>())?;
    column(py, &d, "duration", "<u8", &ops.iter().map(|o| o.duration).collect::<Vec<_>>())?;
    column(py, &d, "bytes", "<u8", &ops.iter().map(|o| o.bytes).collect::<Vec<_>>())?;
    column(py, &d, "priority", "<i4", &ops.iter().map(|o| o.priority).collect::<Vec<_>>())?;
    column(py, &d, "band", "u1", &ops.iter().map(|o| o.band).collect::<Vec<_>>())?;
    column(py, &d, "tenant", "<u4", &ops.iter().map(|o| o.tenant).collect::<Vec<_>>())?;
    column(py, &d, "iteration", "<i4", &ops.iter().map(|o| o.iteration).collect::<Vec<_>>())?;
    column(py, &d, "layer", "<i4", &ops.iter().map(|o| o.layer).collect::<Vec<_>>())?;
    column(py, &d, "tensor", "<i4", &ops.iter().map(|o| o.tensor).collect::<Vec<_>>())?;
    column(py, &d, "group", "<i4", &ops.iter().map(|o| o.group).collect::<Vec<_>>())?;
    column(py, &d, "collective", "<i8", &ops.iter().map(|o| o.collective).collect::<Vec<_>>())?;
    column(py, &d, "member", "<u4", &ops.iter().map(|o| o.member).collect::<Vec<_>>())?;
    column(py, &d, "rpc", "<i8", &ops.iter().map(|o| o.rpc).collect::<Vec<_>>())?;
    column(py, &d, "dep_offsets", "<u4", g.dep_offsets())?;
    column(py, &d, "deps", "<u4", g.dep_ids())?;
    let cs = &g.collectives;
    column(py, &d, "coll_algorithm", "u1", &cs.iter().map(|c| c.algorithm as u8).collect::<Vec<_>>())?;
    column(py, &d, "coll_bytes", "<u8", &cs.iter().map(|c| c.bytes).collect::<Vec<_>>())?;
    column(py, &d, "coll_chunk_bytes", "<u8", &cs.iter().map(|c| c.chunk_bytes).collect::<Vec<_>>())?;
    column(py, &d, "coll_gamma_ns_per_byte", "<f8", &cs.iter().map(|c| c.gamma_ns_per_byte).collect::<Vec<_>>())?;
    let mut offsets = vec![0u32];
    let mut members = Vec::new();
    for c in cs {
        members.extend_from_slice(&c.members);
        offsets.push(members.len() as u32);
    }
    column(py, &d, "coll_member_offsets", "<u4", &offsets)?;
    column(py, &d, "coll_members", "<u4", &members)?;
    column(py, &d, "stream_rank", "<u4", &g.streams.iter().map(|s| s.rank).collect::<Vec<_>>())?;
    column(py, &d, "stream_name", "<u4", &g.streams.iter().map(|s| s.name).collect::<Vec<_>>())?;
    let policy = |p: PolicyKind| match p {
        PolicyKind::Fifo => 0u8,
        PolicyKind::Priority { preempt: false } => 1,
        PolicyKind::Priority { preempt: true } => 2,
    };
    column(py, &d, "stream_policy", "u1", &g.streams.iter().map(|s| policy(s.policy)).collect::<Vec<_>>())?;
    column(py, &d, "stream_credit", "<u8", &g.streams.iter().map(|s| s.credit).collect::<Vec<_>>())?;
    column(py, &d, "host_of_rank", "<u4", &g.host_of_rank)?;
    d.set_item("op_names", g.op_names.clone())?;
    d.set_item("stream_names", g.stream_names.clone())?;
    Ok(d)
}

fn graph_from_columns(d: &Bound<'_, PyDict>) -> PyResult<Graph> {
    let err = |m: String| PyValueError::new_err(format!("invalid workload graph: {m}"));
    let kind: Vec<u8> = read(d, "kind")?;
    let n = kind.len();
    let name: Vec<u32> = read(d, "name")?;
    let rank: Vec<u32> = read(d, "rank")?;
    let peer: Vec<i32> = read(d, "peer")?;
    let stream: Vec<u32> = read(d, "stream")?;
    let duration: Vec<u64> = read(d, "duration")?;
    let bytes: Vec<u64> = read(d, "bytes")?;
    let priority: Vec<i32> = read(d, "priority")?;
    let band: Vec<u8> = read(d, "band")?;
    let tenant: Vec<u32> = read(d, "tenant")?;
    let iteration: Vec<i32> = read(d, "iteration")?;
    let layer: Vec<i32> = read(d, "layer")?;
    let tensor: Vec<i32> = read(d, "tensor")?;
    let group: Vec<i32> = read(d, "group")?;
    let collective: Vec<i64> = read(d, "collective")?;
    let member: Vec<u32> = read(d, "member")?;
    let rpc: Vec<i64> = read(d, "rpc")?;
    for (col, len) in [("name", name.len()), ("rank", rank.len()), ("peer", peer.len()), ("stream", stream.len()),
        ("duration", duration.len()), ("bytes", bytes.len()), ("priority", priority.len()), ("band", band.len()),
        ("tenant", tenant.len()), ("iteration", iteration.len()), ("layer", layer.len()), ("tensor", tensor.len()),
        ("group", group.len()), ("collective", collective.len()), ("member", member.len()), ("rpc", rpc.len())]
    {
        if len != n {
            return Err(err(format!("column {col:?} has {len} entries, 'kind' has {n}")));
        }
    }
    let mut ops = Vec::with_capacity(n);
    for i in 0..n {
        let k = Kind::from_code(kind[i]).ok_or_else(|| err(format!("op {i}: unknown kind code {}", kind[i])))?;
        let mut op = Op::new(k, name[i], rank[i]);
        op.peer = peer[i];
        op.stream = stream[i];
        op.duration = duration[i];
        op.bytes = bytes[i];
        op.priority = priority[i];
        op.band = band[i];
        op.tenant = tenant[i];
        op.iteration = iteration[i];
        op.layer = layer[i];
        op.tensor = tensor[i];
        op.group = group[i];
        op.collective = collective[i];
        op.member = member[i];
        op.rpc = rpc[i];
        ops.push(op);
    }
    let algorithm: Vec<u8> = read(d, "coll_algorithm")?;
    let coll_bytes: Vec<u64> = read(d, "coll_bytes")?;
    // Optional (graphs written before partitioning existed): no partitioning.
    let coll_chunk: Vec<u64> = if d.contains("coll_chunk_bytes")? { read(d, "coll_chunk_bytes")? } else { vec![0; algorithm.len()] };
    if coll_chunk.len() != algorithm.len() {
        return Err(err("coll_chunk_bytes has one entry per collective".to_string()));
    }
    let coll_gamma: Vec<f64> = if d.contains("coll_gamma_ns_per_byte")? { read(d, "coll_gamma_ns_per_byte")? } else { vec![0.0; algorithm.len()] };
    if coll_gamma.len() != algorithm.len() || coll_gamma.iter().any(|g| !(g.is_finite() && *g >= 0.0)) {
        return Err(err("coll_gamma_ns_per_byte has one finite, non-negative entry per collective".to_string()));
    }
    let offsets: Vec<u32> = read(d, "coll_member_offsets")?;
    let members: Vec<u32> = read(d, "coll_members")?;
    if offsets.len() != algorithm.len() + 1 || coll_bytes.len() != algorithm.len() {
        return Err(err("collective columns disagree in length".into()));
    }
    let mut collectives = Vec::with_capacity(algorithm.len());
    for c in 0..algorithm.len() {
        let (a, b) = (offsets[c] as usize, offsets[c + 1] as usize);
        if a > b || b > members.len() {
            return Err(err(format!("collective {c}: member offsets out of range")));
        }
        let algo = Algorithm::from_code(algorithm[c]).ok_or_else(|| err(format!("collective {c}: unknown algorithm {}", algorithm[c])))?;
        collectives.push(CollectiveSpec { algorithm: algo, coll_type: CollectiveType::AllReduce, members: members[a..b].to_vec(), bytes: coll_bytes[c], chunk_bytes: coll_chunk[c], gamma_ns_per_byte: coll_gamma[c] });
    }
    let stream_rank: Vec<u32> = read(d, "stream_rank")?;
    let stream_name: Vec<u32> = read(d, "stream_name")?;
    let stream_policy: Vec<u8> = read(d, "stream_policy")?;
    // Optional (graphs written before ByteScheduler's credit existed): one op at a time.
    let stream_credit: Vec<u64> = if d.contains("stream_credit")? { read(d, "stream_credit")? } else { vec![0; stream_rank.len()] };
    if stream_name.len() != stream_rank.len() || stream_policy.len() != stream_rank.len() || stream_credit.len() != stream_rank.len() {
        return Err(err("stream columns disagree in length".into()));
    }
    let streams = (0..stream_rank.len())
        .map(|s| {
            let policy = match stream_policy[s] {
                0 => PolicyKind::Fifo,
                1 => PolicyKind::Priority { preempt: false },
                2 => PolicyKind::Priority { preempt: true },
                other => return Err(err(format!("stream {s}: unknown policy code {other}"))),
            };
            Ok(StreamSpec { rank: stream_rank[s], name: stream_name[s], policy, credit: stream_credit[s] })
        })
        .collect::<PyResult<Vec<_>>>()?;
    let op_names: Vec<String> = d.get_item("op_names")?.ok_or_else(|| err("op_names is missing".into()))?.extract()?;
    let stream_names: Vec<String> = d.get_item("stream_names")?.ok_or_else(|| err("stream_names is missing".into()))?.extract()?;
    Graph::from_parts(ops, read(d, "dep_offsets")?, read(d, "deps")?, collectives, streams, read(d, "host_of_rank")?, op_names, stream_names)
        .map_err(err)
}

/// Runs a workload graph given as columns on the network described by JSON.
#[pyfunction]
#[pyo3(signature = (graph, network_json, trace_detail, progress=None))]
fn run_graph_columns<'py>(
    py: Python<'py>,
    graph: &Bound<'py, PyDict>,
    network_json: &str,
    trace_detail: &str,
    progress: Option<PyObject>,
) -> PyResult<Bound<'py, PyDict>> {
    let g = graph_from_columns(graph)?;
    let net = network(network_json)?;
    let detail = detail(trace_detail)?;
    let out = run_interruptible(py, progress, |hook| run_graph_with_hook(&g, &net, detail, Some(hook)))
        .map_err(|e| e.into_py_err(PyValueError::new_err))?;
    output(py, out, &g)
}

/// Lowers and runs a training description in one call (no graph round trip).
///
/// The GIL is released while lowering and simulating. About every 50 ms the
/// engine briefly takes it back to run Python's signal handlers (so Ctrl-C
/// raises KeyboardInterrupt within a fraction of a second) and to call
/// `progress(sim_now_ns, events, ops_done, ops_total)` when given; an
/// exception from either stops the run and propagates.
#[pyfunction]
#[pyo3(signature = (training_json, network_json, trace_detail, progress=None))]
fn simulate_training_json<'py>(
    py: Python<'py>,
    training_json: &str,
    network_json: &str,
    trace_detail: &str,
    progress: Option<PyObject>,
) -> PyResult<Bound<'py, PyDict>> {
    let spec = TrainingSpec::from_json(training_json).map_err(PyValueError::new_err)?;
    let net = network(network_json)?;
    let detail = detail(trace_detail)?;
    let (out, graph) = run_interruptible(py, progress, |hook| {
        let graph = ddlsim_core::training_graph(&spec, &net).map_err(RunError::Lowering)?;
        let built = Progress { now: 0, events: 0, ops_done: 0, ops_total: graph.len() as u64 };
        if !hook(&built) {
            return Err(RunError::Engine(INTERRUPTED.to_string()));
        }
        let out = run_graph_with_hook(&graph, &net, detail, Some(hook)).map_err(RunError::Engine)?;
        Ok::<_, RunError>((out, graph))
    })
    .map_err(|e| e.into_py_err(training_run_error))?;
    output(py, out, &graph)
}

/// Why an interruptible run failed.
enum RunError {
    /// A Python exception raised in the hook (a signal handler's or the progress callback's).
    Python(PyErr),
    Lowering(String),
    Engine(String),
}

impl From<String> for RunError {
    fn from(message: String) -> Self {
        RunError::Engine(message)
    }
}

impl RunError {
    fn into_py_err(self, engine: impl FnOnce(String) -> PyErr) -> PyErr {
        match self {
            RunError::Python(e) => e,
            RunError::Lowering(m) => PyValueError::new_err(m),
            RunError::Engine(m) => engine(m),
        }
    }
}

/// Runs `body` without the GIL, handing it a hook that re-acquires the GIL
/// to check for signals and call `progress`. A Python exception raised there
/// wins over the engine's "interrupted" error.
fn run_interruptible<T, E: Into<RunError>>(
    py: Python<'_>,
    progress: Option<PyObject>,
    body: impl FnOnce(&mut dyn FnMut(&Progress) -> bool) -> Result<T, E> + Send,
) -> Result<T, RunError>
where
    T: Send,
{
    let mut raised: Option<PyErr> = None;
    let result = py.allow_threads(|| {
        let mut hook = |p: &Progress| -> bool {
            Python::with_gil(|py| {
                let called = py.check_signals().and_then(|()| match &progress {
                    Some(callback) => callback.call1(py, (p.now, p.events, p.ops_done, p.ops_total)).map(|_| ()),
                    None => Ok(()),
                });
                match called {
                    Ok(()) => true,
                    Err(e) => {
                        raised = Some(e);
                        false
                    }
                }
            })
        };
        body(&mut hook).map_err(Into::into)
    });
    match raised {
        Some(e) => Err(RunError::Python(e)),
        None => result,
    }
}

/// A training graph is built by our own lowering, so a run that fails on it
/// is a bug (RuntimeError), except for times and sizes beyond the engine's
/// range and allocations the machine cannot make, which are the scenario's (ValueError).
fn training_run_error(message: String) -> PyErr {
    if message.contains("would overflow") || message.contains("would pass") || message.starts_with("out of memory") {
        PyValueError::new_err(message)
    } else {
        PyRuntimeError::new_err(message)
    }
}

/// Arms the native backstop for Ctrl-C and SIGTERM (see src/watchdog.rs):
/// `grace_ms` after the first such signal, if the process is still alive,
/// the registered scratch directories are removed and the process exits with
/// 128 + the signal number. Call it after installing Python's handlers.
#[pyfunction]
fn arm_interrupt_watchdog(grace_ms: u64) -> PyResult<()> {
    watchdog::arm(std::time::Duration::from_millis(grace_ms)).map_err(PyRuntimeError::new_err)
}

/// A scratch directory the backstop removes if it ends the process.
#[pyfunction]
fn register_scratch(path: std::path::PathBuf) {
    watchdog::register(path);
}

#[pyfunction]
fn unregister_scratch(path: std::path::PathBuf) {
    watchdog::unregister(&path);
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(simulate_training_json, m)?)?;
    m.add_function(wrap_pyfunction!(lower_training_json, m)?)?;
    m.add_function(wrap_pyfunction!(run_graph_columns, m)?)?;
    m.add_function(wrap_pyfunction!(arm_interrupt_watchdog, m)?)?;
    m.add_function(wrap_pyfunction!(register_scratch, m)?)?;
    m.add_function(wrap_pyfunction!(unregister_scratch, m)?)?;
    m.add("KIND_NAMES", KIND_NAMES.to_vec())?;
    m.add("ALGORITHM_NAMES", Algorithm::NAMES.to_vec())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
