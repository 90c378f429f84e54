//! Several training jobs on one fabric, lowered into ONE graph.
//!
//! Each job is a [`TrainingSpec`] of its own (model, workers, strategy,
//! grouping, iterations, band) with its own `host_of_rank`, lowered by
//! [`super::training::build_graph`] exactly as if it ran alone; the graphs
//! are then appended one after the other:
//! - **Ranks are global.** Job `j`'s ranks are `first_rank[j] ..
//!   first_rank[j] + total_ranks(j)`: its local rank `r` becomes
//!   `first_rank[j] + r`, where `first_rank[j]` is the sum of the ranks of
//!   the jobs before it (workers first, then servers, as in a job alone).
//!   The log's `job` column (added on the Python side from
//!   [`JobsGraph::job_of_rank`]) says which job a row belongs to.
//! - Ops, streams, collectives, fans, release times and RPC ids are
//!   renumbered by the same offsets; op and stream names are interned into
//!   one vocabulary. Iteration, layer, tensor and group stay job-local.
//! - **Hosts.** Every job names its hosts (`host_of_rank`); two jobs may not
//!   share a host (a host's NIC would then carry both and the jobs' ranks
//!   would share intra-host ports; the caller places jobs on disjoint hosts).
//! - **Start offsets.** A job with `start_ns > 0` begins then: every op of
//!   its graph that depends on nothing (the first forward of each worker)
//!   is released at `start_ns`, and release times the job already had are
//!   shifted by it.
//! - The graph-wide switches (`closed_form`, `preempt_at_messages`) must
//!   agree between the jobs that use them.
//!
//! Because every job keeps its own lowering and RNG streams (seeded by its
//! own `seed` and job-local ranks), a job on hosts no other job's traffic
//! crosses runs exactly as it runs alone.
//!
//! [`contention`] reads a run's flows back: per link of the fabric, the
//! bytes each job (and each background tenant) moved over it and how long
//! flows of two or more jobs were on it at the same time.

use serde::Deserialize;

use super::training::build_graph;
use super::spec::{CollectiveModel, TrainingSpec};
use crate::engine::{Time, MAX_TIME};
use crate::error::Error;
use crate::graph::{FanSpec, Graph, NO_STREAM};
use crate::network::{FlowRecord, NetworkSpec, Topology};

/// One job: its training description and when it starts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobEntry {
    /// Simulated time (ns) at which the job's first iteration may start.
    #[serde(default)]
    pub start_ns: u64,
    pub training: TrainingSpec,
}

/// The jobs of one run (the engine's JSON document for several jobs).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobsSpec {
    pub jobs: Vec<JobEntry>,
}

impl JobsSpec {
    pub fn from_json(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| format!("invalid jobs description for the engine: {e}"))
    }

    /// Checks what merging needs (each job's own description is checked by its lowering).
    pub fn validate(&self) -> Result<(), String> {
        if self.jobs.is_empty() {
            return Err("a jobs description needs at least one job".into());
        }
        let mut owner: Vec<Option<usize>> = Vec::new();
        for (j, job) in self.jobs.iter().enumerate() {
            let t = &job.training;
            if job.start_ns > MAX_TIME {
                return Err(format!("job {j}: start_ns {} is past the engine's clock ({MAX_TIME} ns)", job.start_ns));
            }
            if self.jobs.len() > 1 && t.host_of_rank.len() != t.total_ranks() as usize {
                return Err(format!("job {j}: host_of_rank must name a host for each of its {} ranks when several jobs share the fabric", t.total_ranks()));
            }
            let mut own: Vec<u32> = t.host_of_rank.clone();
            own.sort_unstable();
            own.dedup();
            for h in own {
                if owner.len() <= h as usize {
                    owner.resize(h as usize + 1, None);
                }
                if let Some(other) = owner[h as usize] {
                    return Err(format!("jobs {other} and {j} both use host {h}; jobs must run on disjoint hosts"));
                }
                owner[h as usize] = Some(j);
            }
        }
        let first = &self.jobs[0].training;
        for (j, job) in self.jobs.iter().enumerate().skip(1) {
            let t = &job.training;
            if t.collective_model != first.collective_model {
                return Err(format!("job {j}: collective_model differs from job 0's; the closed-form model is fabric-wide: give every job the same"));
            }
        }
        let at_messages: Vec<bool> = self.jobs.iter().map(|e| &e.training).filter(|t| t.preemption).map(|t| t.preempt_at_messages).collect();
        if at_messages.windows(2).any(|w| w[0] != w[1]) {
            return Err("jobs with preemption must all preempt at messages or all at steps (the graph has one such switch)".into());
        }
        Ok(())
    }
}

/// The merged graph and where each job's ranks are.
#[derive(Debug, Clone)]
pub struct JobsGraph {
    pub graph: Graph,
    /// First global rank of each job.
    pub first_rank: Vec<u32>,
    /// Job of each global rank.
    pub job_of_rank: Vec<u32>,
}

/// Appends `src` (a job's own graph) to `dst`, its ranks shifted by `rank_offset` and its RPC ids by `rpc_offset`;
/// every op of `src` without dependencies is released at `start` (and `src`'s release times are shifted by it).
fn append(dst: &mut Graph, src: &Graph, rank_offset: u32, rpc_offset: i64, start: Time) -> Result<(), Error> {
    let op_base = dst.ops.len() as u32;
    let coll_base = dst.collectives.len() as i64;
    let names: Vec<u32> = src.op_names.iter().map(|n| dst.op_name(n)).collect();
    let mut streams = Vec::with_capacity(src.streams.len());
    for s in &src.streams {
        let id = dst.new_stream(s.rank + rank_offset, &src.stream_names[s.name as usize], s.policy);
        dst.streams[id as usize].credit = s.credit;
        streams.push(id);
    }
    for c in &src.collectives {
        let mut c = c.clone();
        c.members.iter_mut().for_each(|m| *m += rank_offset);
        dst.add_collective(c);
    }
    let mut released = vec![None; src.ops.len()];
    for &(op, t) in &src.releases {
        released[op as usize] = Some(crate::engine::later(t, start)?);
    }
    let mut deps: Vec<u32> = Vec::new();
    for (i, op) in src.ops.iter().enumerate() {
        let mut op = op.clone();
        op.name = names[op.name as usize];
        op.rank += rank_offset;
        if op.peer >= 0 {
            op.peer += rank_offset as i32;
        }
        if op.stream != NO_STREAM {
            op.stream = streams[op.stream as usize];
        }
        if op.collective >= 0 {
            op.collective += coll_base;
        }
        if op.rpc >= 0 {
            op.rpc += rpc_offset;
        }
        deps.clear();
        deps.extend(src.deps(i as u32).iter().map(|&d| d + op_base));
        let release = released[i].or((start > 0 && deps.is_empty()).then_some(start));
        match release {
            Some(t) => dst.add_released(op, &deps, t),
            None => dst.add(op, &deps),
        };
    }
    for f in &src.fans {
        dst.fans.push(FanSpec { kind: f.kind, ops: f.ops.iter().map(|&o| o + op_base).collect() });
    }
    dst.wakeups.extend(src.wakeups.iter().map(|&(op, w)| (op + op_base, w)));
    dst.continuations.extend(src.continuations.iter().map(|&op| op + op_base));
    dst.transit_delays.extend(src.transit_delays.iter().map(|&(op, d)| (op + op_base, d)));
    let curve_base = dst.idle_curves.len() as u32;
    dst.idle_curves.extend(src.idle_curves.iter().cloned());
    dst.idle_scaled.extend(src.idle_scaled.iter().map(|s| crate::graph::IdleScaled {
        op: s.op + op_base,
        curve: s.curve + curve_base,
        after: s.after + op_base,
        until: s.until + op_base,
        captured_ns: s.captured_ns,
    }));
    Ok(())
}

/// Lowers every job and merges them into one graph (see the module doc).
/// With the closed-form collective model, `network` gives its cost.
pub fn build_jobs_graph(spec: &JobsSpec, network: Option<&NetworkSpec>) -> Result<JobsGraph, Error> {
    spec.validate()?;
    let mut g = Graph::new();
    let mut first_rank = Vec::with_capacity(spec.jobs.len());
    let mut job_of_rank = Vec::new();
    let mut host_of_rank = Vec::new();
    let mut rpc_offset: i64 = 0;
    for (j, job) in spec.jobs.iter().enumerate() {
        let t = &job.training;
        let own = build_graph(t).map_err(|e| Error::from(format!("job {j}: {e}")))?;
        let offset = job_of_rank.len() as u32;
        first_rank.push(offset);
        let ranks = t.total_ranks().max(own.ranks());
        job_of_rank.extend(std::iter::repeat_n(j as u32, ranks as usize));
        host_of_rank.extend(own.hosts());
        if t.preemption {
            g.preempt_at_messages = own.preempt_at_messages;
        }
        append(&mut g, &own, offset, rpc_offset, job.start_ns)?;
        rpc_offset += own.ops.iter().map(|o| o.rpc + 1).max().unwrap_or(0).max(0);
    }
    g.host_of_rank = host_of_rank;
    if spec.jobs[0].training.collective_model == CollectiveModel::ClosedForm {
        let network = network.ok_or_else(|| Error::from("the closed-form collective model takes its cost from the network: pass the network description".to_string()))?;
        g.closed_form = Some(crate::collective::closed_form::LinkCost::of_network(network)?);
    }
    Ok(JobsGraph { graph: g, first_rank, job_of_rank })
}

/// Who a flow belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FlowOwner {
    Job(u32),
    /// A background tenant (its id, >= 1).
    Tenant(u32),
}

/// One owner's use of a link.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkUse {
    pub owner: FlowOwner,
    /// Bytes of its flows over the link (a sprayed flow counts its share).
    pub bytes: f64,
    /// Flows of it that crossed the link.
    pub flows: u64,
    /// Time at least one of its flows was on the link (union of their intervals).
    pub busy_ns: Time,
}

/// A link that carried flows of at least two jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkContention {
    pub link: u32,
    pub name: String,
    /// Every owner with flows on the link: jobs first, then tenants, by id.
    pub uses: Vec<LinkUse>,
    /// Time flows of two or more jobs were on the link at once.
    pub shared_ns: Time,
}

/// A link's name: `host H up` / `host H down` (NIC), `leaf A -> spine S` / `spine S -> leaf A`,
/// `rank R out` / `rank R in` (intra-host ports).
pub fn link_name(topo: &Topology, spec: &NetworkSpec, link: u32) -> String {
    let hosts = topo.hosts();
    if link < 2 * hosts {
        return format!("host {} {}", link / 2, if link % 2 == 0 { "up" } else { "down" });
    }
    if link < topo.network_links() {
        let spines = match spec.topology {
            crate::network::TopologySpec::LeafSpine { spines, .. } => spines.max(1),
            crate::network::TopologySpec::Star => 1,
        };
        let i = (link - 2 * hosts) / 2;
        let (leaf, spine) = (i / spines, i % spines);
        return if link % 2 == 0 { format!("leaf {leaf} -> spine {spine}") } else { format!("spine {spine} -> leaf {leaf}") };
    }
    let r = (link - topo.network_links()) / 2;
    format!("rank {r} {}", if (link - topo.network_links()) % 2 == 0 { "out" } else { "in" })
}

/// Length of the union of intervals, and of the time covered by intervals of at least two distinct keys.
fn union_and_shared(mut spans: Vec<(Time, Time, u32)>) -> (Time, Time) {
    // Sweep over start (+1) and end (-1) points per key.
    let mut points: Vec<(Time, i32, u32)> = Vec::with_capacity(2 * spans.len());
    for &(a, b, k) in &spans {
        if b > a {
            points.push((a, 1, k));
            points.push((b, -1, k));
        }
    }
    spans.clear();
    points.sort_unstable_by_key(|&(t, d, k)| (t, d, k));
    let mut active: std::collections::BTreeMap<u32, u32> = Default::default();
    let (mut union, mut shared, mut last) = (0u64, 0u64, 0u64);
    for (t, d, k) in points {
        if !active.is_empty() {
            union += t - last;
        }
        if active.len() >= 2 {
            shared += t - last;
        }
        last = t;
        if d > 0 {
            *active.entry(k).or_insert(0) += 1;
        } else if let Some(c) = active.get_mut(&k) {
            *c -= 1;
            if *c == 0 {
                active.remove(&k);
            }
        }
    }
    (union, shared)
}

/// Per link, the flows of every job and background tenant on it; the links
/// that carried flows of two or more jobs, by link id. `host_of_rank` is the
/// merged graph's (global ranks), `job_of_rank` as [`JobsGraph`] gives it;
/// a flow still in flight at the end counts until `end`.
pub fn contention(network: &NetworkSpec, host_of_rank: &[u32], job_of_rank: &[u32], flows: &[FlowRecord], end: Time) -> Result<Vec<LinkContention>, Error> {
    // As network::build_network: one endpoint per host (rank `ranks + h`) for tenants' flows.
    let ranks = host_of_rank.len() as u32;
    let used = host_of_rank.iter().copied().max().map_or(0, |h| h + 1);
    let hosts = network.hosts.unwrap_or(used).max(used);
    let extended: Vec<u32> = host_of_rank.iter().copied().chain(0..hosts).collect();
    let topo = Topology::new(network, &extended)?;
    let scale = topo.usage_scale() as f64;
    // per link: (owner, start, end, bytes share)
    let mut on_link: Vec<Vec<(FlowOwner, Time, Time, f64)>> = vec![Vec::new(); topo.links.len()];
    for f in flows {
        let (src, dst, owner) = if f.src < ranks && f.dst < ranks {
            (f.src, f.dst, FlowOwner::Job(job_of_rank.get(f.src as usize).copied().unwrap_or(0)))
        } else {
            (ranks + f.src_host, ranks + f.dst_host, FlowOwner::Tenant(f.tenant))
        };
        if src >= extended.len() as u32 || dst >= extended.len() as u32 || src == dst {
            continue;
        }
        let until = if f.delivered == u64::MAX { end } else { f.delivered };
        let path = topo.route(src, dst);
        for (&l, &u) in path.links().iter().zip(path.units()) {
            on_link[l as usize].push((owner, f.start, until.max(f.start), f.bytes as f64 * u as f64 / scale));
        }
    }
    let mut out = Vec::new();
    for (l, uses) in on_link.into_iter().enumerate() {
        let mut jobs: Vec<u32> = uses.iter().filter_map(|u| if let FlowOwner::Job(j) = u.0 { Some(j) } else { None }).collect();
        jobs.sort_unstable();
        jobs.dedup();
        if jobs.len() < 2 {
            continue;
        }
        let mut owners: Vec<FlowOwner> = uses.iter().map(|u| u.0).collect();
        owners.sort_unstable();
        owners.dedup();
        let per_owner = owners
            .iter()
            .map(|&o| {
                let mine: Vec<_> = uses.iter().filter(|u| u.0 == o).collect();
                let (busy, _) = union_and_shared(mine.iter().map(|u| (u.1, u.2, 0)).collect());
                LinkUse { owner: o, bytes: mine.iter().map(|u| u.3).sum(), flows: mine.len() as u64, busy_ns: busy }
            })
            .collect();
        let (_, shared) = union_and_shared(uses.iter().filter_map(|u| if let FlowOwner::Job(j) = u.0 { Some((u.1, u.2, j)) } else { None }).collect());
        out.push(LinkContention { link: l as u32, name: link_name(&topo, network, l as u32), uses: per_owner, shared_ns: shared });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lower::spec::{AlgorithmName, GroupSpec, LayerSpec, SyncSpec};

    fn job(workers: u32, hosts: Vec<u32>) -> TrainingSpec {
        let layers = vec![LayerSpec { fwd_ns: 100, bwd_ns: 200 }, LayerSpec { fwd_ns: 100, bwd_ns: 200 }];
        let groups = vec![GroupSpec { layers: vec![0], tensor: 0, bytes: 1000, server: 0, update_ns: 0 }, GroupSpec { layers: vec![1], tensor: 1, bytes: 2000, server: 0, update_ns: 0 }];
        TrainingSpec { host_of_rank: hosts, ..TrainingSpec::new(workers, SyncSpec::Allreduce { algorithm: AlgorithmName::Ring }, layers, groups) }
    }

    #[test]
    fn merged_graph_shifts_ranks_streams_and_collectives() {
        let spec = JobsSpec { jobs: vec![JobEntry { start_ns: 0, training: job(2, vec![0, 1]) }, JobEntry { start_ns: 500, training: job(3, vec![2, 3, 4]) }] };
        let a = build_graph(&spec.jobs[0].training).unwrap();
        let b = build_graph(&spec.jobs[1].training).unwrap();
        let m = build_jobs_graph(&spec, None).unwrap();
        assert_eq!(m.first_rank, vec![0, 2]);
        assert_eq!(m.job_of_rank, vec![0, 0, 1, 1, 1]);
        assert_eq!(m.graph.host_of_rank, vec![0, 1, 2, 3, 4]);
        assert_eq!(m.graph.len(), a.len() + b.len());
        assert_eq!(m.graph.collectives.len(), a.collectives.len() + b.collectives.len());
        m.graph.check().unwrap();
        for (i, op) in b.ops.iter().enumerate() {
            let merged = &m.graph.ops[a.len() + i];
            assert_eq!(merged.rank, op.rank + 2);
            assert_eq!(m.graph.op_names[merged.name as usize], b.op_names[op.name as usize]);
            let deps: Vec<u32> = b.deps(i as u32).iter().map(|d| d + a.len() as u32).collect();
            assert_eq!(m.graph.deps((a.len() + i) as u32), &deps[..]);
        }
        // job 1's roots (one first forward per worker) are released at its start; job 0's are not
        let released: Vec<u32> = m.graph.releases.iter().map(|&(op, t)| {
            assert_eq!(t, 500);
            op
        }).collect();
        assert_eq!(released.len(), 3);
        assert!(released.iter().all(|&op| op as usize >= a.len() && m.graph.deps(op).is_empty()));
    }

    #[test]
    fn overlapping_or_missing_hosts_are_refused() {
        let both = JobsSpec { jobs: vec![JobEntry { start_ns: 0, training: job(2, vec![0, 1]) }, JobEntry { start_ns: 0, training: job(2, vec![1, 2]) }] };
        assert!(build_jobs_graph(&both, None).unwrap_err().message.contains("both use host 1"));
        let missing = JobsSpec { jobs: vec![JobEntry { start_ns: 0, training: job(2, vec![0, 1]) }, JobEntry { start_ns: 0, training: job(2, vec![]) }] };
        assert!(build_jobs_graph(&missing, None).unwrap_err().message.contains("host_of_rank"));
    }

    #[test]
    fn shared_time_counts_only_overlap_of_distinct_keys() {
        // key 0 on [0, 10) and [5, 20); key 1 on [15, 30): union 30, two keys at once on [15, 20)
        assert_eq!(union_and_shared(vec![(0, 10, 0), (5, 20, 0), (15, 30, 1)]), (30, 5));
        assert_eq!(union_and_shared(vec![(0, 10, 0), (0, 10, 0)]), (10, 0));
    }
}
