//! One capture row as the JSON line `ddlsim.capture.recorder` writes: the
//! bytes of Python's `json.dumps(record, separators=(",", ":"))` for
//! `{"id", "kind", "op", "start_ns", "end_ns", "deps"[, "ready_ns"], **fields}`,
//! made here because a capture formats hundreds of rows per iteration inside
//! the job it measures (a row cost 3.4 us with Python's %-templates, 2.3 us
//! with this, of which 0.9 us is the Python call of `row()` itself).
//!
//! What is written here: exact `int`s, exact `str`s (escaped as `json` does
//! with `ensure_ascii`, lone surrogates included), `None`, `True` / `False`.
//! Every other value (floats, lists, dicts, subclasses) goes through the
//! caller's own `encode` (the recorder passes its `json` encoder), so those
//! bytes are `json`'s by construction. A field named like a row key gives
//! `None` before anything else is read: `json.dumps` would overwrite that key
//! in place, which the recorder's general path does.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyList, PyString, PyTuple};

/// The row keys as JSON strings: a field written as one of these is named like a row key.
const ROW_KEYS: [&str; 7] = ["\"id\"", "\"kind\"", "\"op\"", "\"start_ns\"", "\"end_ns\"", "\"deps\"", "\"ready_ns\""];

/// The Python string `s` as a JSON string with `ensure_ascii`: `"` and `\` escaped, the short escapes of
/// `\b \f \n \r \t`, every other code point outside space..`~` as `\uXXXX` (lowercase hex; a pair of
/// surrogates above U+FFFF; a lone surrogate as itself, as `json` does). The code points are read with
/// `PyUnicode_AsUCS4` into `buf` (the limited API of Python 3.9 has no borrowed UTF-8 view: `to_cow` would make
/// a bytes object per string).
fn push_json_str(out: &mut String, s: &Bound<'_, PyString>, buf: &mut Vec<u32>) -> PyResult<()> {
    let len = unsafe { ffi::PyUnicode_GetLength(s.as_ptr()) };
    if len < 0 {
        return Err(PyErr::fetch(s.py()));
    }
    buf.clear();
    buf.reserve(len as usize);
    let copied = unsafe { ffi::PyUnicode_AsUCS4(s.as_ptr(), buf.as_mut_ptr(), len, 0) };
    if copied.is_null() {
        return Err(PyErr::fetch(s.py()));
    }
    unsafe { buf.set_len(len as usize) };
    out.push('"');
    for &c in buf.iter() {
        match c {
            0x22 => out.push_str("\\\""),
            0x5c => out.push_str("\\\\"),
            0x0a => out.push_str("\\n"),
            0x0d => out.push_str("\\r"),
            0x09 => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            0x20..=0x7e => out.push(c as u8 as char),
            0..=0xffff => push_unit(out, c as u16),
            _ => {
                let v = c - 0x10000;
                push_unit(out, 0xd800 | (v >> 10) as u16);
                push_unit(out, 0xdc00 | (v & 0x3ff) as u16);
            }
        }
    }
    out.push('"');
    Ok(())
}

fn push_unit(out: &mut String, unit: u16) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push_str("\\u");
    for shift in [12u16, 8, 4, 0] {
        out.push(HEX[((unit >> shift) & 0xf) as usize] as char);
    }
}

/// `int(value)` as decimal text (row ids and times: the recorder takes them through `int()`).
fn push_int(out: &mut String, value: &Bound<'_, PyAny>) -> PyResult<()> {
    if value.is_exact_instance_of::<PyInt>() {
        if let Ok(v) = value.extract::<i64>() {
            push_i64(out, v);
            return Ok(());
        }
        out.push_str(&value.str()?.to_cow()?);
        return Ok(());
    }
    let int = value.py().get_type::<PyInt>().call1((value,))?;
    match int.extract::<i64>() {
        Ok(v) => push_i64(out, v),
        Err(_) => out.push_str(&int.str()?.to_cow()?),
    }
    Ok(())
}

fn push_i64(out: &mut String, v: i64) {
    use std::fmt::Write;
    let _ = write!(out, "{v}");
}

/// A JSON value as `json` writes it: exact str, int, bool and None here, anything else through `encode`.
fn push_value(out: &mut String, value: &Bound<'_, PyAny>, encode: &Bound<'_, PyAny>, buf: &mut Vec<u32>) -> PyResult<()> {
    if value.is_exact_instance_of::<PyString>() {
        return push_json_str(out, value.downcast::<PyString>()?, buf);
    } else if value.is_exact_instance_of::<PyInt>() {
        return push_int(out, value);
    } else if value.is_none() {
        out.push_str("null");
        return Ok(());
    } else if value.is_exact_instance_of::<PyBool>() {
        out.push_str(if value.is_truthy()? { "true" } else { "false" });
        return Ok(());
    }
    let text = encode.call1((value,))?;
    out.push_str(&text.downcast::<PyString>()?.to_cow()?);
    Ok(())
}

/// The fields of a row as the JSON after its row keys (`,"name":value...}`), into `tail`; false where a field is
/// named like a row key (the caller's general path writes that row). `columns` (a dict or None) follows `fields`,
/// as `{**fields, **columns}` would: a column named like a field replaces the field's value in its place.
fn push_fields(
    tail: &mut String,
    fields: &Bound<'_, PyDict>,
    columns: &Bound<'_, PyAny>,
    encode: &Bound<'_, PyAny>,
    buf: &mut Vec<u32>,
) -> PyResult<bool> {
    let mut merged = None;
    if !columns.is_none() {
        let columns = columns.downcast::<PyDict>()?;
        let mut shared = false;
        for key in columns.keys() {
            if fields.contains(&key)? {
                shared = true;
                break;
            }
        }
        if shared {
            let m = fields.copy()?;
            m.update(columns.as_mapping())?;
            merged = Some(m);
        }
    }
    let mut one = |tail: &mut String, dict: &Bound<'_, PyDict>| -> PyResult<bool> {
        for (name, value) in dict.iter() {
            tail.push(',');
            let at = tail.len();
            push_value(tail, &name, encode, buf)?;
            if ROW_KEYS.contains(&&tail[at..]) {
                return Ok(false);
            }
            tail.push(':');
            push_value(tail, &value, encode, buf)?;
        }
        Ok(true)
    };
    if let Some(m) = merged {
        if !one(tail, &m)? {
            return Ok(false);
        }
    } else {
        if !one(tail, fields)? {
            return Ok(false);
        }
        if !columns.is_none() && !one(tail, columns.downcast::<PyDict>()?)? {
            return Ok(false);
        }
    }
    tail.push('}');
    Ok(true)
}

/// One row's JSON line (no newline) appended to `out`; false (and `out` as it was) where a field is named like a
/// row key.
#[allow(clippy::too_many_arguments)]
fn push_row(
    out: &mut String,
    tail: &mut String,
    row: [&Bound<'_, PyAny>; 7],
    fields: &Bound<'_, PyDict>,
    columns: &Bound<'_, PyAny>,
    encode: &Bound<'_, PyAny>,
    buf: &mut Vec<u32>,
) -> PyResult<bool> {
    let [kind, op, start_ns, end_ns, ready_ns, deps, row_id] = row;
    // the fields first (into their own string): a field named like a row key returns before deps, which may be an
    // iterator, is read, so the caller's general path still finds them
    tail.clear();
    if !push_fields(tail, fields, columns, encode, buf)? {
        return Ok(false);
    }
    out.push_str("{\"id\":");
    push_int(out, row_id)?;
    out.push_str(",\"kind\":");
    push_value(out, kind, encode, buf)?;
    out.push_str(",\"op\":");
    push_value(out, op, encode, buf)?;
    out.push_str(",\"start_ns\":");
    push_int(out, start_ns)?;
    out.push_str(",\"end_ns\":");
    push_int(out, end_ns)?;
    out.push_str(",\"deps\":");
    if deps.is_none() {
        out.push_str("null");
    } else {
        out.push('[');
        for (i, dep) in deps.try_iter()?.enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_int(out, &dep?)?;
        }
        out.push(']');
    }
    if !ready_ns.is_none() {
        out.push_str(",\"ready_ns\":");
        push_int(out, ready_ns)?;
    }
    out.push_str(tail);
    Ok(true)
}

/// The JSON line (no newline) of one capture row, or None where a field is named like a row key.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn encode_row(
    kind: &Bound<'_, PyAny>,
    op: &Bound<'_, PyAny>,
    start_ns: &Bound<'_, PyAny>,
    end_ns: &Bound<'_, PyAny>,
    ready_ns: &Bound<'_, PyAny>,
    deps: &Bound<'_, PyAny>,
    row_id: &Bound<'_, PyAny>,
    fields: &Bound<'_, PyDict>,
    encode: &Bound<'_, PyAny>,
) -> PyResult<Option<String>> {
    let mut buf = Vec::new();
    let mut tail = String::with_capacity(24 * fields.len() + 1);
    let mut out = String::with_capacity(200 + 24 * fields.len());
    let none = kind.py().None().into_bound(kind.py());
    let row = [kind, op, start_ns, end_ns, ready_ns, deps, row_id];
    Ok(if push_row(&mut out, &mut tail, row, fields, &none, encode, &mut buf)? { Some(out) } else { None })
}

/// The recorder's held rows as one text, a line each (each ending in a newline), in their order: a `str` is a
/// line already made; a tuple `(kind, op, start_ns, end_ns, ready_ns, deps, row_id, fields, columns)` is
/// written as `encode_row` writes it with the fields `{**fields, **columns}` (`columns` None: `fields`), and
/// where a field is named like a row key as `general(*row)` returns it. One call for the rows of a flush: the
/// Python call, the merged dict and the string object of each row are left out (1.7 us per row before, 2026-11-28).
#[pyfunction]
pub fn encode_rows(rows: &Bound<'_, PyList>, encode: &Bound<'_, PyAny>, general: &Bound<'_, PyAny>) -> PyResult<String> {
    let mut buf = Vec::new();
    let mut tail = String::with_capacity(256);
    let mut out = String::with_capacity(200 * rows.len());
    for item in rows.iter() {
        if item.is_exact_instance_of::<PyString>() {
            out.push_str(&item.downcast::<PyString>()?.to_cow()?);
        } else {
            let row = item.downcast::<PyTuple>()?;
            if row.len() != 9 {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "a held row has 9 parts (kind, op, start_ns, end_ns, ready_ns, deps, row_id, fields, columns), got {}",
                    row.len()
                )));
            }
            let part = |i: usize| row.get_item(i);
            let (kind, op, start, end, ready, deps, rid) = (part(0)?, part(1)?, part(2)?, part(3)?, part(4)?, part(5)?, part(6)?);
            let fields = part(7)?;
            let columns = part(8)?;
            let at = out.len();
            let written = push_row(
                &mut out,
                &mut tail,
                [&kind, &op, &start, &end, &ready, &deps, &rid],
                fields.downcast::<PyDict>()?,
                &columns,
                encode,
                &mut buf,
            )?;
            if !written {
                out.truncate(at);
                let line = general.call1(row)?;
                out.push_str(&line.downcast::<PyString>()?.to_cow()?);
            }
        }
        out.push('\n');
    }
    Ok(out)
}
