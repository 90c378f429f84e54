//! Python bindings (module `ddlsim._core`): a narrow boundary. Python hands
//! over a validated scenario as JSON; the engine hands back the event log
//! as raw little-endian column buffers that numpy wraps without copying
//! per element.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use ddlsim_core::graph::OpCode;
use ddlsim_core::{simulate_training, TrainingSpec};

fn column<'py, T: Copy>(py: Python<'py>, dict: &Bound<'py, PyDict>, name: &str, dtype: &str, values: &[T]) -> PyResult<()> {
    // SAFETY: T is a plain integer type; viewing its storage as bytes is sound.
    let bytes = unsafe { std::slice::from_raw_parts(values.as_ptr() as *const u8, std::mem::size_of_val(values)) };
    dict.set_item(name, (dtype, PyBytes::new(py, bytes)))
}

/// Simulates a training scenario given as JSON; returns
/// `(columns, stats)` where `columns[name] = (numpy dtype, bytes)`.
#[pyfunction]
fn simulate_training_json<'py>(py: Python<'py>, scenario_json: &str) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
    let spec = TrainingSpec::from_json(scenario_json).map_err(PyValueError::new_err)?;
    let out = py.allow_threads(|| simulate_training(&spec)).map_err(PyValueError::new_err)?;
    let cols = PyDict::new(py);
    let log = &out.log;
    column(py, &cols, "id", "<i8", &log.id)?;
    column(py, &cols, "iteration", "<i4", &log.iteration)?;
    column(py, &cols, "rank", "<i4", &log.rank)?;
    column(py, &cols, "kind_code", "u1", &log.kind)?;
    column(py, &cols, "op_code", "u1", &log.op)?;
    column(py, &cols, "layer", "<i4", &log.layer)?;
    column(py, &cols, "tensor", "<i4", &log.tensor)?;
    column(py, &cols, "peer", "<i4", &log.peer)?;
    column(py, &cols, "bytes", "<i8", &log.bytes)?;
    column(py, &cols, "priority", "<i4", &log.priority)?;
    column(py, &cols, "collective", "<i8", &log.collective)?;
    column(py, &cols, "step", "<i4", &log.step)?;
    column(py, &cols, "rpc", "<i8", &log.rpc)?;
    column(py, &cols, "ready_ns", "<i8", &log.ready_ns)?;
    column(py, &cols, "start_ns", "<i8", &log.start_ns)?;
    column(py, &cols, "end_ns", "<i8", &log.end_ns)?;
    column(py, &cols, "dep_offsets", "<i8", &log.dep_offsets)?;
    column(py, &cols, "deps", "<i8", &log.deps)?;
    let stats = PyDict::new(py);
    stats.set_item("events", out.events)?;
    stats.set_item("transfers", out.transfers)?;
    stats.set_item("recomputations", out.recomputations)?;
    stats.set_item("makespan_ns", out.makespan)?;
    stats.set_item("bytes_sent", out.bytes_sent)?;
    stats.set_item("bytes_received", out.bytes_received)?;
    Ok((cols, stats))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(simulate_training_json, m)?)?;
    m.add("OP_NAMES", OpCode::NAMES.to_vec())?;
    m.add("KIND_NAMES", vec!["compute", "transfer", "collective", "barrier"])?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
