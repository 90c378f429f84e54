//! The engine's seams: a network model times in-network fans itself (the
//! executor asks it, it does not time them), and a stream policy decides
//! how many ops share a stream (ByteScheduler's credit).

mod common;

use common::*;
use ddlsim_core::engine::Time;
use ddlsim_core::graph::{FanKind, FanSpec, Graph, Kind, Op, PolicyKind};
use ddlsim_core::log::{KIND_RECV, KIND_SEND};
use ddlsim_core::network::{build_network, Delivery, FanEnd, Fidelity, FlowRecord, NetworkModel, NetworkStats, Path, Scheduler, Topology, TransferRequest};
use ddlsim_core::stream::{new_policy, Credit, Fifo, StreamPolicy};
use ddlsim_core::{run, Error, TraceDetail};

/// A model that delegates to a real one but holds each fan back `start_delay`
/// ns and hands receiver i its copy `i * copy_gap` ns after the tree's delivery.
struct SlowFans {
    inner: Box<dyn NetworkModel>,
    start_delay: Time,
    copy_gap: Time,
    fans_started: usize,
}

impl NetworkModel for SlowFans {
    fn topology(&self) -> &Topology {
        self.inner.topology()
    }
    fn start(&mut self, now: Time, req: TransferRequest, sched: &mut dyn Scheduler) -> Result<(), Error> {
        self.inner.start(now, req, sched)
    }
    fn start_on(&mut self, now: Time, req: TransferRequest, path: &Path, sched: &mut dyn Scheduler) -> Result<(), Error> {
        self.inner.start_on(now, req, path, sched)
    }
    fn on_event(&mut self, now: Time, token: u64, sched: &mut dyn Scheduler, out: &mut Vec<Delivery>) -> Result<(), Error> {
        self.inner.on_event(now, token, sched, out)
    }
    fn fan_ready(&self, _kind: FanKind, _ends: &[FanEnd], now: Time) -> Result<Time, Error> {
        Ok(now + self.start_delay)
    }
    fn start_fan(&mut self, now: Time, req: TransferRequest, _kind: FanKind, _ends: &[FanEnd], sched: &mut dyn Scheduler) -> Result<(), Error> {
        // A plain unicast from the first end: this model has no trees.
        self.fans_started += 1;
        self.inner.start(now, req, sched)
    }
    fn fan_arrivals(&self, _kind: FanKind, ends: &[FanEnd], _tx_end: Time, delivered: Time, out: &mut Vec<Time>) -> Result<(), Error> {
        out.clear();
        out.extend((0..ends.len() as u64).map(|i| delivered + i * self.copy_gap));
        Ok(())
    }
    fn stats(&self) -> NetworkStats {
        self.inner.stats()
    }
    fn take_flows(&mut self) -> Vec<FlowRecord> {
        self.inner.take_flows()
    }
}

/// Rank 0 multicasts `bytes` to ranks 1..=receivers.
fn multicast_graph(receivers: u32, bytes: u64) -> Graph {
    let mut g = Graph::new();
    let name = g.op_name("mcast");
    let ops = (1..=receivers)
        .map(|r| {
            let mut op = Op::new(Kind::Transfer, name, 0);
            op.peer = r as i32;
            op.bytes = bytes;
            g.add(op, &[])
        })
        .collect();
    g.fans.push(FanSpec { kind: FanKind::Multicast, ops });
    g
}

fn recv_ends(out: &ddlsim_core::RunOutput) -> Vec<(i32, i64)> {
    let log = &out.log;
    let mut ends: Vec<(i32, i64)> = (0..log.len()).filter(|&i| log.kind[i] == KIND_RECV).map(|i| (log.rank[i], log.end_ns[i])).collect();
    ends.sort();
    ends
}

#[test]
fn the_network_model_times_a_multicast_not_the_executor() {
    // 1 byte/ns, 1 us latency, 1000 bytes: on the real model every copy arrives at 1000 + 1000 ns.
    let spec = net(Fidelity::Analytic, 8e9, 1000);
    let g = multicast_graph(3, 1000);
    let plain = run(&g, build_network(&spec, &g.hosts()).unwrap(), TraceDetail::Step).unwrap();
    assert_eq!(recv_ends(&plain), vec![(1, 2000), (2, 2000), (3, 2000)]);
    // The slow model starts the fan 500 ns late, unicasts it (1000 + 1000 ns) and spaces the copies 300 ns.
    let slow = SlowFans { inner: build_network(&spec, &g.hosts()).unwrap(), start_delay: 500, copy_gap: 300, fans_started: 0 };
    let out = run(&g, Box::new(slow), TraceDetail::Step).unwrap();
    assert_eq!(recv_ends(&out), vec![(1, 2500), (2, 2800), (3, 3100)]);
    let log = &out.log;
    let sends: Vec<usize> = (0..log.len()).filter(|&i| log.kind[i] == KIND_SEND).collect();
    assert_eq!(sends.len(), 1, "a multicast logs one send row");
    // The op started at 0; the tree left 500 ns later and ended transmitting 1000 ns after that.
    assert_eq!((log.start_ns[sends[0]], log.end_ns[sends[0]]), (0, 1500), "the send row is the op's start and the tree's end of transmission");
    assert_deps_explain_every_start(&out.log);
}

#[test]
fn the_network_model_decides_when_an_aggregation_starts() {
    // Ranks 1..=3 each push 1000 bytes to rank 0 as one aggregate.
    let spec = net(Fidelity::Analytic, 8e9, 1000);
    let mut g = Graph::new();
    let name = g.op_name("push");
    let ops = (1..=3u32)
        .map(|r| {
            let mut op = Op::new(Kind::Transfer, name, r);
            op.peer = 0;
            op.bytes = 1000;
            g.add(op, &[])
        })
        .collect();
    g.fans.push(FanSpec { kind: FanKind::Aggregate, ops });
    let plain = run(&g, build_network(&spec, &g.hosts()).unwrap(), TraceDetail::Step).unwrap();
    assert_eq!(recv_ends(&plain), vec![(0, 2000)]);
    let slow = SlowFans { inner: build_network(&spec, &g.hosts()).unwrap(), start_delay: 700, copy_gap: 0, fans_started: 0 };
    let out = run(&g, Box::new(slow), TraceDetail::Step).unwrap();
    assert_eq!(recv_ends(&out), vec![(0, 2700)]);
}

#[test]
fn the_credit_is_the_stream_policys_room_for_one_more_op() {
    let plain = new_policy(PolicyKind::Fifo, 0);
    let credit = new_policy(PolicyKind::Priority { preempt: false }, 300);
    for (running, bytes) in [(0, 0), (1, 100), (2, 299), (2, 300), (3, 1000)] {
        assert_eq!(plain.has_room(running, bytes), running == 0);
        assert_eq!(credit.has_room(running, bytes), running == 0 || bytes < 300);
    }
    assert!(credit.negotiates() && !plain.negotiates());
    let wrapped = Credit { inner: Fifo::default(), credit: 10 };
    assert!(wrapped.has_room(5, 9) && !wrapped.has_room(5, 10));
}
