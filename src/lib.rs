//! Python bindings (module `ddlsim._core`): a narrow boundary that only
//! converts. A training description or a workload graph goes in (the
//! graph as raw little-endian column buffers), the event log comes back as
//! column buffers that numpy wraps without copying per element. Engine
//! errors come back as one exception class per [`ErrorKind`] (see
//! [`ERROR_CLASSES`]), each also a subclass of the builtin exception it
//! used to be (ValueError, MemoryError, RuntimeError).

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBytes, PyDict, PyType};

use ddlsim_core::collective::Algorithm;
use ddlsim_core::graph::{CollectiveSpec, CollectiveType, FanKind, FanSpec, Graph, IdleCurve, IdleScaled, Kind, LinkCost, Op, PolicyKind, StreamSpec};
use ddlsim_core::log::KIND_NAMES;
use ddlsim_core::lower::training::{build_graph, CollectiveModel};
use ddlsim_core::{run_graph_with_hook, Error, ErrorKind, NetworkSpec, Progress, RunOutput, TraceDetail, TrainingSpec, INTERRUPTED};

mod rows;
mod watchdog;

/// The exception classes of the engine's error kinds, defined in Python
/// at import (several bases each): `EngineError` and one subclass per kind.
const ERROR_CLASSES: &str = r#"
class EngineError(Exception):
    """An error of the ddlsim engine; `kind` names its ErrorKind."""
    kind = None

class BadInputError(EngineError, ValueError):
    """The input (a graph, a training or network description) is invalid."""
    kind = "bad_input"

class OutOfRangeError(BadInputError):
    """A time or size lies beyond the engine's range (about 146 years of simulated time)."""
    kind = "out_of_range"

class StuckGraphError(BadInputError):
    """The workload graph cannot finish (a dependency cycle, a collective member that never joins)."""
    kind = "stuck"

class EngineMemoryError(EngineError, MemoryError):
    """An allocation the run needs failed."""
    kind = "memory"

class InterruptedRunError(EngineError):
    """The run's progress hook stopped it."""
    kind = "interrupted"

class InternalEngineError(EngineError, RuntimeError):
    """A broken invariant of the engine (or of its own lowering): a bug."""
    kind = "internal"

ERROR_KINDS = {cls.kind: cls for cls in (BadInputError, OutOfRangeError, StuckGraphError, EngineMemoryError,
                                         InterruptedRunError, InternalEngineError)}
"#;

static ERRORS: GILOnceCell<Py<PyModule>> = GILOnceCell::new();

fn errors_module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    let module = ERRORS.get_or_try_init(py, || -> PyResult<Py<PyModule>> {
        let code = std::ffi::CString::new(ERROR_CLASSES).expect("no NUL");
        Ok(PyModule::from_code(py, &code, c"ddlsim/_core_errors.py", c"ddlsim._core")?.unbind())
    })?;
    Ok(module.bind(py))
}

/// The Python exception for an engine error of `kind`.
fn kind_err(kind: ErrorKind, message: impl Into<String>) -> PyErr {
    let message = message.into();
    Python::with_gil(|py| {
        let class = errors_module(py)
            .and_then(|m| m.getattr("ERROR_KINDS"))
            .and_then(|kinds| kinds.get_item(kind.name()))
            .and_then(|c| c.downcast_into::<PyType>().map_err(PyErr::from));
        match class {
            Ok(class) => PyErr::from_type(class, message),
            Err(e) => e,
        }
    })
}

fn engine_err(e: Error) -> PyErr {
    kind_err(e.kind, e.message)
}

/// A refusal of the caller's input.
fn bad_input(message: impl Into<String>) -> PyErr {
    kind_err(ErrorKind::BadInput, message)
}

fn as_bytes<T: Copy>(values: &[T]) -> &[u8] {
    // SAFETY: T is a plain integer type; viewing its storage as bytes is sound.
    unsafe { std::slice::from_raw_parts(values.as_ptr() as *const u8, std::mem::size_of_val(values)) }
}

fn column<'py, T: Copy>(py: Python<'py>, dict: &Bound<'py, PyDict>, name: &str, dtype: &str, values: &[T]) -> PyResult<()> {
    dict.set_item(name, (dtype, PyBytes::new(py, as_bytes(values))))
}

/// Reads column `name` of `dict` (bytes, or a `(dtype, bytes)` pair as
/// [`lower_training_json`] returns them) as a vector of `T`.
fn read<T: Copy + Default>(dict: &Bound<'_, PyDict>, name: &str) -> PyResult<Vec<T>> {
    let item = dict.get_item(name)?.ok_or_else(|| bad_input(format!("graph column {name:?} is missing")))?;
    let bytes = match item.downcast::<pyo3::types::PyTuple>() {
        Ok(pair) if pair.len() == 2 => pair.get_item(1)?,
        _ => item,
    };
    let bytes = bytes.downcast_into::<PyBytes>().map_err(|_| bad_input(format!("graph column {name:?} must be bytes or a (dtype, bytes) pair")))?;
    let raw: &[u8] = bytes.as_bytes();
    let size = std::mem::size_of::<T>();
    if raw.len() % size != 0 {
        return Err(bad_input(format!("graph column {name:?} has {} bytes, not a multiple of {size}", raw.len())));
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
        other => Err(bad_input(format!("trace detail {other:?}: use 'step' or 'collective'"))),
    }
}

fn network(json: &str) -> PyResult<NetworkSpec> {
    serde_json::from_str(json).map_err(|e| bad_input(format!("invalid network description for the engine: {e}")))
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
    let host_of = graph.hosts();
    let host = |rank: u32, own: u32| if (rank as usize) < host_of.len() { host_of[rank as usize] } else { own };
    column(py, &flows, "src_host", "<u4", &f.iter().map(|r| host(r.src, r.src_host)).collect::<Vec<_>>())?;
    column(py, &flows, "dst_host", "<u4", &f.iter().map(|r| host(r.dst, r.dst_host)).collect::<Vec<_>>())?;
    column(py, &flows, "retransmits", "<u8", &f.iter().map(|r| r.retransmits as u64).collect::<Vec<_>>())?;
    column(py, &flows, "timeouts", "<u8", &f.iter().map(|r| r.timeouts as u64).collect::<Vec<_>>())?;
    column(py, &flows, "drops", "<u8", &f.iter().map(|r| r.drops as u64).collect::<Vec<_>>())?;
    column(py, &flows, "ecn_marks", "<u8", &f.iter().map(|r| r.ecn_marks as u64).collect::<Vec<_>>())?;
    result.set_item("flows", flows)?;
    let queues = PyDict::new(py);
    let q = &out.queues;
    column(py, &queues, "time_ns", "<i8", &q.iter().map(|s| s.time as i64).collect::<Vec<_>>())?;
    column(py, &queues, "node", "<i4", &q.iter().map(|s| s.node as i32).collect::<Vec<_>>())?;
    column(py, &queues, "port", "<i4", &q.iter().map(|s| s.port as i32).collect::<Vec<_>>())?;
    column(py, &queues, "band", "<i4", &q.iter().map(|s| s.band as i32).collect::<Vec<_>>())?;
    column(py, &queues, "bytes", "<i8", &q.iter().map(|s| s.bytes as i64).collect::<Vec<_>>())?;
    column(py, &queues, "packets", "<i8", &q.iter().map(|s| s.packets as i64).collect::<Vec<_>>())?;
    result.set_item("queues", queues)?;
    let ports = PyDict::new(py);
    let p = &out.ports;
    column(py, &ports, "port", "<i4", &p.iter().map(|r| r.port as i32).collect::<Vec<_>>())?;
    column(py, &ports, "node", "<i4", &p.iter().map(|r| r.node as i32).collect::<Vec<_>>())?;
    ports.set_item("name", p.iter().map(|r| r.name.as_str()).collect::<Vec<_>>())?;
    column(py, &ports, "packets", "<u8", &p.iter().map(|r| r.packets).collect::<Vec<_>>())?;
    column(py, &ports, "bytes", "<u8", &p.iter().map(|r| r.bytes).collect::<Vec<_>>())?;
    column(py, &ports, "drops", "<u8", &p.iter().map(|r| r.drops).collect::<Vec<_>>())?;
    column(py, &ports, "ecn_marks", "<u8", &p.iter().map(|r| r.ecn_marks).collect::<Vec<_>>())?;
    column(py, &ports, "max_packets", "<u8", &p.iter().map(|r| r.max_packets).collect::<Vec<_>>())?;
    column(py, &ports, "max_bytes", "<u8", &p.iter().map(|r| r.max_bytes).collect::<Vec<_>>())?;
    result.set_item("ports", ports)?;
    let network = PyDict::new(py);
    let (totals, truncated) = out.packet.unwrap_or_default();
    network.set_item("packets_forwarded", totals.packets_forwarded)?;
    network.set_item("drops", totals.drops)?;
    network.set_item("ecn_marks", totals.ecn_marks)?;
    network.set_item("retransmits", totals.retransmits)?;
    network.set_item("timeouts", totals.timeouts)?;
    network.set_item("queues_truncated", truncated)?;
    result.set_item("network", network)?;
    if let Some(classes) = &graph.rank_classes {
        // Rank classes: the log holds one worker per class (see ddlsim_core::lower::classes).
        let c = PyDict::new(py);
        c.set_item("workers", classes.workers)?;
        column(py, &c, "class_of", "<u4", &classes.class_of)?;
        column(py, &c, "representatives", "<u4", &classes.representatives)?;
        column(py, &c, "sizes", "<u4", &classes.sizes)?;
        c.set_item("compute_stride", classes.compute_stride)?;
        c.set_item("collective_stride", classes.collective_stride)?;
        result.set_item("rank_classes", c)?;
    }
    Ok(result)
}

/// Lowers a training description (JSON) into a workload graph, returned
/// as columns (the same layout `run_graph_columns` takes): the graph
/// `simulate_training_json` runs, fans, closed-form cost and preemption
/// mode included. The closed-form collective model takes its cost from the
/// network, so it needs `network_json`.
#[pyfunction]
#[pyo3(signature = (training_json, network_json=None))]
fn lower_training_json<'py>(py: Python<'py>, training_json: &str, network_json: Option<&str>) -> PyResult<Bound<'py, PyDict>> {
    let mut spec = TrainingSpec::from_json(training_json).map_err(bad_input)?;
    // The graph's columns are every worker's ops: rank classes live in the engine's run only.
    spec.rank_classes = false;
    let graph = match network_json {
        Some(json) => ddlsim_core::training_graph(&spec, &network(json)?).map_err(engine_err)?,
        None if spec.collective_model == CollectiveModel::ClosedForm => {
            return Err(bad_input(
                "the closed-form collective model takes its cost from the network: pass the network description (network_json)",
            ))
        }
        None => build_graph(&spec).map_err(bad_input)?,
    };
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
    let mut fan_offsets = vec![0u32];
    let mut fan_ops = Vec::new();
    for fan in &g.fans {
        fan_ops.extend_from_slice(&fan.ops);
        fan_offsets.push(fan_ops.len() as u32);
    }
    column(py, &d, "fan_kind", "u1", &g.fans.iter().map(|f| fan_code(f.kind)).collect::<Vec<_>>())?;
    column(py, &d, "fan_offsets", "<u4", &fan_offsets)?;
    column(py, &d, "fan_ops", "<u4", &fan_ops)?;
    column(py, &d, "release_ops", "<u4", &g.releases.iter().map(|r| r.0).collect::<Vec<_>>())?;
    column(py, &d, "release_ns", "<u8", &g.releases.iter().map(|r| r.1).collect::<Vec<_>>())?;
    column(py, &d, "wakeup_ops", "<u4", &g.wakeups.iter().map(|r| r.0).collect::<Vec<_>>())?;
    column(py, &d, "wakeup_ns", "<u8", &g.wakeups.iter().map(|r| r.1).collect::<Vec<_>>())?;
    column(py, &d, "continuation_ops", "<u4", &g.continuations)?;
    if !g.idle_scaled.is_empty() || !g.idle_curves.is_empty() {
        // compute after a wait (ddlsim_core::idle); absent from a graph without it, as before it existed
        let mut offsets = vec![0u32];
        let points: Vec<(u64, f64)> = g.idle_curves.iter().flat_map(|c| {
            offsets.push(offsets.last().copied().unwrap_or(0) + c.points.len() as u32);
            c.points.iter().copied()
        }).collect();
        column(py, &d, "idle_curve_offsets", "<u4", &offsets)?;
        column(py, &d, "idle_curve_ns", "<u8", &points.iter().map(|p| p.0).collect::<Vec<_>>())?;
        column(py, &d, "idle_curve_ratio", "<f8", &points.iter().map(|p| p.1).collect::<Vec<_>>())?;
        let s = &g.idle_scaled;
        column(py, &d, "idle_ops", "<u4", &s.iter().map(|x| x.op).collect::<Vec<_>>())?;
        column(py, &d, "idle_curve", "<u4", &s.iter().map(|x| x.curve).collect::<Vec<_>>())?;
        column(py, &d, "idle_after", "<u4", &s.iter().map(|x| x.after).collect::<Vec<_>>())?;
        column(py, &d, "idle_until", "<u4", &s.iter().map(|x| x.until).collect::<Vec<_>>())?;
        column(py, &d, "idle_captured_ns", "<u8", &s.iter().map(|x| x.captured_ns).collect::<Vec<_>>())?;
    }
    d.set_item("preempt_at_messages", g.preempt_at_messages)?;
    d.set_item("closed_form", g.closed_form.map(|c| (c.latency_ns, c.bandwidth_bps, c.intra)))?;
    d.set_item("op_names", g.op_names.clone())?;
    d.set_item("stream_names", g.stream_names.clone())?;
    Ok(d)
}

fn graph_from_columns(d: &Bound<'_, PyDict>) -> PyResult<Graph> {
    let err = |m: String| bad_input(format!("invalid workload graph: {m}"));
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
    let mut g = Graph::from_parts(ops, read(d, "dep_offsets")?, read(d, "deps")?, collectives, streams, read(d, "host_of_rank")?, op_names, stream_names)
        .map_err(err)?;
    // Optional (graphs written before the columns carried everything): no fans, no closed form, preemption at steps.
    if d.contains("fan_kind")? {
        let kinds: Vec<u8> = read(d, "fan_kind")?;
        let offsets: Vec<u32> = read(d, "fan_offsets")?;
        let ops: Vec<u32> = read(d, "fan_ops")?;
        if offsets.len() != kinds.len() + 1 || offsets.first() != Some(&0) || offsets.last().map(|&o| o as usize) != Some(ops.len()) {
            return Err(err("fan_offsets must have one more entry than fan_kind, from 0 to the length of fan_ops".into()));
        }
        for (f, &code) in kinds.iter().enumerate() {
            let kind = match code {
                0 => FanKind::Multicast,
                1 => FanKind::Aggregate,
                other => return Err(err(format!("fan {f}: unknown kind code {other} (0 multicast, 1 aggregate)"))),
            };
            let (a, b) = (offsets[f] as usize, offsets[f + 1] as usize);
            if a > b {
                return Err(err(format!("fan {f}: fan_offsets decrease")));
            }
            g.fans.push(FanSpec { kind, ops: ops[a..b].to_vec() });
        }
    }
    if d.contains("release_ops")? {
        let (ops, times): (Vec<u32>, Vec<u64>) = (read(d, "release_ops")?, read(d, "release_ns")?);
        if ops.len() != times.len() {
            return Err(err("release_ops and release_ns have one entry per released op".into()));
        }
        g.releases = ops.into_iter().zip(times).collect();
    }
    if d.contains("wakeup_ops")? {
        let (ops, times): (Vec<u32>, Vec<u64>) = (read(d, "wakeup_ops")?, read(d, "wakeup_ns")?);
        if ops.len() != times.len() {
            return Err(err("wakeup_ops and wakeup_ns have one entry per woken op".into()));
        }
        g.wakeups = ops.into_iter().zip(times).collect();
    }
    if d.contains("continuation_ops")? {
        g.continuations = read(d, "continuation_ops")?;
    }
    if d.contains("idle_curve_offsets")? {
        let offsets: Vec<u32> = read(d, "idle_curve_offsets")?;
        let (ns, ratio): (Vec<u64>, Vec<f64>) = (read(d, "idle_curve_ns")?, read(d, "idle_curve_ratio")?);
        if ns.len() != ratio.len() || offsets.first() != Some(&0) || offsets.last().map(|&o| o as usize) != Some(ns.len())
            || offsets.windows(2).any(|w| w[0] > w[1]) {
            return Err(err("idle_curve_offsets must rise from 0 to the length of idle_curve_ns, idle_curve_ratio beside it".into()));
        }
        g.idle_curves = offsets.windows(2).map(|w| IdleCurve { points: ns[w[0] as usize..w[1] as usize].iter().copied().zip(ratio[w[0] as usize..w[1] as usize].iter().copied()).collect() }).collect();
        let ops: Vec<u32> = read(d, "idle_ops")?;
        let (curve, after, until): (Vec<u32>, Vec<u32>, Vec<u32>) = (read(d, "idle_curve")?, read(d, "idle_after")?, read(d, "idle_until")?);
        let captured: Vec<u64> = read(d, "idle_captured_ns")?;
        if [curve.len(), after.len(), until.len(), captured.len()].iter().any(|&l| l != ops.len()) {
            return Err(err("idle_ops, idle_curve, idle_after, idle_until and idle_captured_ns have one entry per scaled op".into()));
        }
        g.idle_scaled = (0..ops.len()).map(|k| IdleScaled { op: ops[k], curve: curve[k], after: after[k], until: until[k], captured_ns: captured[k] }).collect();
    }
    if let Some(flag) = d.get_item("preempt_at_messages")? {
        g.preempt_at_messages = flag.extract()?;
    }
    if let Some(cost) = d.get_item("closed_form")? {
        if !cost.is_none() {
            let (latency_ns, bandwidth_bps, intra): (u64, f64, Option<(u64, f64)>) = cost
                .extract()
                .map_err(|_| err("closed_form must be None or (latency_ns, bandwidth_bps, None or (intra_latency_ns, intra_bandwidth_bps))".into()))?;
            if !(bandwidth_bps.is_finite() && bandwidth_bps > 0.0) || intra.is_some_and(|(_, bps)| !(bps.is_finite() && bps > 0.0)) {
                return Err(err("closed_form: bandwidths must be finite and positive".into()));
            }
            g.closed_form = Some(LinkCost { latency_ns, bandwidth_bps, intra });
        }
    }
    g.check().map_err(err)?;
    Ok(g)
}

fn fan_code(kind: FanKind) -> u8 {
    match kind {
        FanKind::Multicast => 0,
        FanKind::Aggregate => 1,
    }
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
    let out = run_interruptible(py, progress, |hook| run_graph_with_hook(&g, &net, detail, Some(hook))).map_err(|e| e.into_py_err(engine_err))?;
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
    let spec = TrainingSpec::from_json(training_json).map_err(bad_input)?;
    let net = network(network_json)?;
    let detail = detail(trace_detail)?;
    let (out, graph) = run_interruptible(py, progress, |hook| {
        let graph = ddlsim_core::training_graph(&spec, &net).map_err(RunError::Lowering)?;
        let built = Progress { now: 0, events: 0, ops_done: 0, ops_total: graph.len() as u64 };
        if !hook(&built) {
            return Err(RunError::Engine(Error::new(ErrorKind::Interrupted, INTERRUPTED)));
        }
        let out = run_graph_with_hook(&graph, &net, detail, Some(hook)).map_err(RunError::Engine)?;
        Ok::<_, RunError>((out, graph))
    })
    .map_err(|e| e.into_py_err(training_run_error))?;
    output(py, out, &graph)
}

/// Lowers several jobs (JSON: `{"jobs": [{"start_ns": ..., "training": {...}}, ...]}`) into one graph and runs it
/// (see `ddlsim_core::lower::jobs`). The result is `simulate_training_json`'s plus `jobs`: `first_rank` (each
/// job's first global rank), `job_of_rank`, and `contention`: one dict per link that carried flows of two or more
/// jobs (`link`, `name`, `shared_ns`, `uses`: [(kind "job" | "tenant", id, bytes, flows, busy_ns)]), empty unless
/// the network records flows.
#[pyfunction]
#[pyo3(signature = (jobs_json, network_json, trace_detail, progress=None))]
fn simulate_jobs_json<'py>(
    py: Python<'py>,
    jobs_json: &str,
    network_json: &str,
    trace_detail: &str,
    progress: Option<PyObject>,
) -> PyResult<Bound<'py, PyDict>> {
    use ddlsim_core::lower::jobs::{contention, FlowOwner, JobsSpec};
    let spec = JobsSpec::from_json(jobs_json).map_err(bad_input)?;
    let net = network(network_json)?;
    let detail = detail(trace_detail)?;
    let (out, merged, links) = run_interruptible(py, progress, |hook| {
        let merged = ddlsim_core::jobs_graph(&spec, &net).map_err(RunError::Lowering)?;
        let built = Progress { now: 0, events: 0, ops_done: 0, ops_total: merged.graph.len() as u64 };
        if !hook(&built) {
            return Err(RunError::Engine(Error::new(ErrorKind::Interrupted, INTERRUPTED)));
        }
        let out = run_graph_with_hook(&merged.graph, &net, detail, Some(hook)).map_err(RunError::Engine)?;
        let links = contention(&net, &merged.graph.host_of_rank, &merged.job_of_rank, &out.flows, out.makespan).map_err(RunError::Engine)?;
        Ok::<_, RunError>((out, merged, links))
    })
    .map_err(|e| e.into_py_err(training_run_error))?;
    let result = output(py, out, &merged.graph)?;
    let jobs = PyDict::new(py);
    jobs.set_item("first_rank", merged.first_rank.clone())?;
    jobs.set_item("job_of_rank", merged.job_of_rank.clone())?;
    let rows = pyo3::types::PyList::empty(py);
    for l in links {
        let d = PyDict::new(py);
        d.set_item("link", l.link)?;
        d.set_item("name", l.name)?;
        d.set_item("shared_ns", l.shared_ns)?;
        let uses: Vec<(&str, u32, f64, u64, u64)> = l
            .uses
            .iter()
            .map(|u| match u.owner {
                FlowOwner::Job(j) => ("job", j, u.bytes, u.flows, u.busy_ns),
                FlowOwner::Tenant(t) => ("tenant", t, u.bytes, u.flows, u.busy_ns),
            })
            .collect();
        d.set_item("uses", uses)?;
        rows.append(d)?;
    }
    jobs.set_item("contention", rows)?;
    result.set_item("jobs", jobs)?;
    Ok(result)
}

/// Why an interruptible run failed.
enum RunError {
    /// A Python exception raised in the hook (a signal handler's or the progress callback's).
    Python(PyErr),
    Lowering(Error),
    Engine(Error),
}

impl From<Error> for RunError {
    fn from(e: Error) -> Self {
        RunError::Engine(e)
    }
}

impl RunError {
    fn into_py_err(self, engine: impl FnOnce(Error) -> PyErr) -> PyErr {
        match self {
            RunError::Python(e) => e,
            RunError::Lowering(e) => engine_err(e),
            RunError::Engine(e) => engine(e),
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

/// A training graph is built by our own lowering, so a run that refuses it
/// (an invalid or stuck graph) is a bug; times and sizes beyond the
/// engine's range are the scenario's, and the other kinds stay as they are.
fn training_run_error(e: Error) -> PyErr {
    match e.kind {
        ErrorKind::BadInput | ErrorKind::Stuck => engine_err(e.with_kind(ErrorKind::Internal)),
        _ => engine_err(e),
    }
}

/// The all-reduce algorithms the engine runs, one dict per algorithm, in
/// code order: `name` (the engine's spelling; scenarios write '-' for '_'),
/// `code` (the graph column's value), `step_op` (the log's op of its steps),
/// `closed_form` (the closed-form collective model times it), `min_ranks`
/// (every count from this up is accepted), `folds_non_power_of_two` (MPICH's
/// fold: two extra stages when the rank count is not a power of two),
/// `uses_hosts` (its schedule reads the rank -> host map) and `partitions`
/// (it takes `chunk_bytes`). python/ddlsim/simulation/algorithms.py wraps it.
#[pyfunction]
fn algorithms(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    Algorithm::ALL
        .iter()
        .map(|&a| {
            // Exhaustive: a new algorithm must say what it is here.
            let (folds, uses_hosts, partitions) = match a {
                Algorithm::Ring => (false, false, true),
                Algorithm::HalvingDoubling | Algorithm::RecursiveDoubling | Algorithm::Butterfly => (true, false, false),
                Algorithm::BinaryTree | Algorithm::DoubleBinaryTree | Algorithm::Direct => (false, false, false),
                Algorithm::HierarchicalRing => (false, true, false),
            };
            let d = PyDict::new(py);
            d.set_item("name", a.name())?;
            d.set_item("code", a as u8)?;
            d.set_item("step_op", a.step_op())?;
            // closed_form::finish_offsets matches every algorithm.
            d.set_item("closed_form", true)?;
            d.set_item("min_ranks", 1u32)?;
            d.set_item("folds_non_power_of_two", folds)?;
            d.set_item("uses_hosts", uses_hosts)?;
            d.set_item("partitions", partitions)?;
            Ok(d)
        })
        .collect()
}

/// Arms the native backstop for Ctrl-C and SIGTERM (see src/watchdog.rs):
/// `grace_ms` after the first such signal, if the process is still alive,
/// the registered scratch directories are removed and the process exits with
/// 128 + the signal number. Call it after installing Python's handlers.
#[pyfunction]
fn arm_interrupt_watchdog(grace_ms: u64) -> PyResult<()> {
    watchdog::arm(std::time::Duration::from_millis(grace_ms)).map_err(PyRuntimeError::new_err)
}

/// Forgets a scratch directory without removing it (it holds a finished output now).
#[pyfunction]
fn unregister_scratch(path: std::path::PathBuf) {
    watchdog::unregister(&path);
}

/// Makes the directory `path` (`mode` less the umask; not its parents) and
/// registers it as a scratch directory, in one call no Python signal handler
/// interrupts. OSError (FileExistsError, ...) as os.mkdir.
#[pyfunction]
#[pyo3(signature = (path, mode = 0o777))]
fn create_scratch(py: Python<'_>, path: std::path::PathBuf, mode: u32) -> PyResult<()> {
    match watchdog::create(&path, mode) {
        Ok(()) => Ok(()),
        // OSError(errno, strerror, filename), as os.mkdir raises it (OSError picks the subclass from errno)
        Err(e) => match e.raw_os_error() {
            Some(code) => {
                let message: String = py.import("os")?.call_method1("strerror", (code,))?.extract()?;
                Err(pyo3::exceptions::PyOSError::new_err((code, message, path)))
            }
            None => Err(PyErr::from(e)),
        },
    }
}

/// Removes the scratch directory `path` (if there; never following a symbolic
/// link) and forgets it, in one call that no Python signal handler interrupts.
#[pyfunction]
fn remove_scratch(path: std::path::PathBuf) -> bool {
    watchdog::remove(&path)
}

/// Removes every scratch directory still registered (see `create_scratch`)
/// and forgets them; returns how many were there to remove.
#[pyfunction]
fn remove_registered_scratch() -> usize {
    watchdog::remove_all()
}

/// The sizes of the rank classes a closed-form run of this training would
/// simulate (see `ddlsim_core::lower::classes`); None: every worker on its own
/// (not eligible, not closed form, or the descriptions do not read: the run says why).
#[pyfunction]
fn rank_class_sizes(training_json: &str, network_json: &str) -> Option<Vec<u32>> {
    let spec = TrainingSpec::from_json(training_json).ok()?;
    let net: NetworkSpec = serde_json::from_str(network_json).ok()?;
    spec.validate().ok()?;
    let cost = ddlsim_core::collective::closed_form::LinkCost::of_network(&net).ok()?;
    ddlsim_core::lower::classes::rank_classes(&spec, &cost).map(|c| c.sizes)
}

/// Each message's time on a capture's shaped links, re-run on its own send
/// times (see `ddlsim_core::network::tbf_replay`); python/ddlsim/simulation/tbf_queue.py wraps it.
#[pyfunction]
fn tbf_transit(
    sent_ns: Vec<i64>,
    sender: Vec<i64>,
    receiver: Vec<i64>,
    wire_bytes: Vec<f64>,
    rate_bps: f64,
    bucket_bytes: f64,
) -> PyResult<Vec<f64>> {
    ddlsim_core::network::tbf_replay::tbf_transit(&sent_ns, &sender, &receiver, &wire_bytes, rate_bps, bucket_bytes)
        .map_err(engine_err)
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(simulate_training_json, m)?)?;
    m.add_function(wrap_pyfunction!(rows::encode_row, m)?)?;
    m.add_function(wrap_pyfunction!(rows::encode_rows, m)?)?;
    m.add_function(wrap_pyfunction!(simulate_jobs_json, m)?)?;
    m.add_function(wrap_pyfunction!(rank_class_sizes, m)?)?;
    m.add_function(wrap_pyfunction!(lower_training_json, m)?)?;
    m.add_function(wrap_pyfunction!(run_graph_columns, m)?)?;
    m.add_function(wrap_pyfunction!(arm_interrupt_watchdog, m)?)?;
    m.add_function(wrap_pyfunction!(unregister_scratch, m)?)?;
    m.add_function(wrap_pyfunction!(create_scratch, m)?)?;
    m.add_function(wrap_pyfunction!(remove_scratch, m)?)?;
    m.add_function(wrap_pyfunction!(remove_registered_scratch, m)?)?;
    m.add_function(wrap_pyfunction!(algorithms, m)?)?;
    m.add_function(wrap_pyfunction!(tbf_transit, m)?)?;
    m.add("KIND_NAMES", KIND_NAMES.to_vec())?;
    m.add("ALGORITHM_NAMES", Algorithm::NAMES.to_vec())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    let errors = errors_module(m.py())?;
    for name in ["EngineError", "BadInputError", "OutOfRangeError", "StuckGraphError", "EngineMemoryError", "InterruptedRunError", "InternalEngineError", "ERROR_KINDS"] {
        m.add(name, errors.getattr(name)?)?;
    }
    Ok(())
}
