//! The event log as columns (schema v2): one entry per operation that
//! happened. Column meanings match `ddlsim.trace.schema`; the columns the
//! engine cannot know (host, device, role, names, collective type and
//! algorithm) are joined on in Python from the graph's tables.

use crate::engine::Time;
use crate::error::Error;

/// The log's closed `kind` vocabulary, by code.
pub const KIND_NAMES: [&str; 6] = ["compute", "send", "recv", "collective", "barrier", "marker"];
pub const KIND_COMPUTE: u8 = 0;
pub const KIND_SEND: u8 = 1;
pub const KIND_RECV: u8 = 2;
pub const KIND_COLLECTIVE: u8 = 3;
pub const KIND_BARRIER: u8 = 4;
pub const KIND_MARKER: u8 = 5;

/// The error of an allocation the engine could not make (instead of aborting the process).
pub fn out_of_memory(bytes: usize, what: &str) -> Error {
    Error::memory(format!(
        "out of memory: the engine could not allocate {} MiB more for the {what}; log collectives instead of their steps \
         (trace detail collective), or simulate fewer iterations or workers",
        bytes.div_ceil(1 << 20)
    ))
}

/// `vec![value; n]` that reports a failed allocation as an error.
pub fn try_filled<T: Clone>(n: usize, value: T, what: &str) -> Result<Vec<T>, Error> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| out_of_memory(n.saturating_mul(std::mem::size_of::<T>()), what))?;
    v.resize(n, value);
    Ok(v)
}

#[derive(Debug, Default, Clone)]
pub struct EventLog {
    pub id: Vec<i64>,
    pub iteration: Vec<i32>,
    pub rank: Vec<i32>,
    pub kind: Vec<u8>,
    /// Index into the run's op-name table.
    pub op: Vec<u32>,
    pub layer: Vec<i32>,
    pub tensor: Vec<i32>,
    pub group: Vec<i32>,
    pub peer: Vec<i32>,
    pub message: Vec<i64>,
    pub bytes: Vec<i64>,
    pub priority: Vec<i32>,
    pub tenant: Vec<i32>,
    pub collective: Vec<i64>,
    pub step: Vec<i32>,
    pub rpc: Vec<i64>,
    /// Graph stream index, -1 none.
    pub stream: Vec<i32>,
    pub ready_ns: Vec<i64>,
    pub start_ns: Vec<i64>,
    pub end_ns: Vec<i64>,
    /// CSR: row i depends on deps[dep_offsets[i]..dep_offsets[i+1]].
    pub dep_offsets: Vec<i64>,
    pub deps: Vec<i64>,
}

/// One row, as the executor fills it.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub id: i64,
    pub iteration: i32,
    pub rank: i32,
    pub kind: u8,
    pub op: u32,
    pub layer: i32,
    pub tensor: i32,
    pub group: i32,
    pub peer: i32,
    pub message: i64,
    pub bytes: i64,
    pub priority: i32,
    pub tenant: i32,
    pub collective: i64,
    pub step: i32,
    pub rpc: i64,
    pub stream: i32,
    pub ready: Time,
    pub start: Time,
    pub end: Time,
}

impl EventLog {
    pub fn new() -> Self {
        EventLog { dep_offsets: vec![0], ..Default::default() }
    }

    pub fn len(&self) -> usize {
        self.id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.id.is_empty()
    }

    pub fn push(&mut self, row: Row, deps: impl IntoIterator<Item = i64>) {
        self.id.push(row.id);
        self.iteration.push(row.iteration);
        self.rank.push(row.rank);
        self.kind.push(row.kind);
        self.op.push(row.op);
        self.layer.push(row.layer);
        self.tensor.push(row.tensor);
        self.group.push(row.group);
        self.peer.push(row.peer);
        self.message.push(row.message);
        self.bytes.push(row.bytes);
        self.priority.push(row.priority);
        self.tenant.push(row.tenant);
        self.collective.push(row.collective);
        self.step.push(row.step);
        self.rpc.push(row.rpc);
        self.stream.push(row.stream);
        self.ready_ns.push(row.ready as i64);
        self.start_ns.push(row.start as i64);
        self.end_ns.push(row.end as i64);
        self.deps.extend(deps);
        self.dep_offsets.push(self.deps.len() as i64);
    }

    /// Makes room for `rows` more rows and `deps` more dependencies without
    /// aborting on a failed allocation: grows every column (at least
    /// doubling, so pushes stay amortised) with `try_reserve`, and reports a
    /// failure as an error naming the size. Pushes that fit in the room made
    /// never reallocate.
    pub fn try_make_room(&mut self, rows: usize, deps: usize) -> Result<(), Error> {
        if self.id.capacity() - self.id.len() < rows {
            let more = rows.max(self.id.len()).max(1024);
            let row_bytes = 8 * 9 + 4 * 11 + 1; // the row columns' element sizes
            let fail = |_| out_of_memory(more.saturating_mul(row_bytes), "event log");
            macro_rules! grow {
                ($($col:ident),*) => { $( self.$col.try_reserve(more).map_err(fail)?; )* };
            }
            grow!(id, iteration, rank, kind, op, layer, tensor, group, peer, message, bytes, priority, tenant, collective, step, rpc, stream, ready_ns, start_ns, end_ns, dep_offsets);
        }
        if self.deps.capacity() - self.deps.len() < deps {
            let more = deps.max(self.deps.len()).max(4096);
            self.deps.try_reserve(more).map_err(|_| out_of_memory(more.saturating_mul(8), "event log dependencies"))?;
        }
        Ok(())
    }

    /// [`EventLog::try_make_room`] for exactly `rows` rows and `deps` dependencies more (no doubling).
    pub fn try_reserve_exact(&mut self, rows: usize, deps: usize) -> Result<(), Error> {
        let row_bytes = 8 * 9 + 4 * 11 + 1;
        let fail = |_| out_of_memory(rows.saturating_mul(row_bytes), "event log");
        macro_rules! grow {
            ($($col:ident),*) => { $( self.$col.try_reserve_exact(rows).map_err(fail)?; )* };
        }
        grow!(id, iteration, rank, kind, op, layer, tensor, group, peer, message, bytes, priority, tenant, collective, step, rpc, stream, ready_ns, start_ns, end_ns, dep_offsets);
        self.deps.try_reserve_exact(deps).map_err(|_| out_of_memory(deps.saturating_mul(8), "event log dependencies"))
    }

    pub fn deps_of(&self, row: usize) -> &[i64] {
        &self.deps[self.dep_offsets[row] as usize..self.dep_offsets[row + 1] as usize]
    }

    /// Position of every row id (ids are dense: 0..len).
    pub fn positions(&self) -> Vec<usize> {
        let mut pos = vec![usize::MAX; self.len()];
        for (i, &id) in self.id.iter().enumerate() {
            pos[id as usize] = i;
        }
        pos
    }

    /// Appends all rows of `other` (whose ids must not clash with ours).
    pub fn append(&mut self, other: EventLog) {
        let base = self.deps.len() as i64;
        self.id.extend(other.id);
        self.iteration.extend(other.iteration);
        self.rank.extend(other.rank);
        self.kind.extend(other.kind);
        self.op.extend(other.op);
        self.layer.extend(other.layer);
        self.tensor.extend(other.tensor);
        self.group.extend(other.group);
        self.peer.extend(other.peer);
        self.message.extend(other.message);
        self.bytes.extend(other.bytes);
        self.priority.extend(other.priority);
        self.tenant.extend(other.tenant);
        self.collective.extend(other.collective);
        self.step.extend(other.step);
        self.rpc.extend(other.rpc);
        self.stream.extend(other.stream);
        self.ready_ns.extend(other.ready_ns);
        self.start_ns.extend(other.start_ns);
        self.end_ns.extend(other.end_ns);
        self.deps.extend(other.deps);
        self.dep_offsets.extend(other.dep_offsets.into_iter().skip(1).map(|o| o + base));
    }
}
