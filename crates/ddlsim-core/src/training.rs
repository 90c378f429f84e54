//! Lowers synchronous data-parallel training into a workload graph.
//!
//! Per iteration and worker: forward layer by layer, backward in reverse;
//! a layer's gradients are ready when its backward step ends (wait-free
//! backpropagation). Gradient synchronisation per tensor:
//! - `ring`: one all-reduce per tensor over all workers, run one at a time
//!   per worker on its communication stream, in ready order;
//! - `ps`: push (gradient) to the owning server, server update once all
//!   workers pushed, push acknowledgement, pull request, pull response
//!   (parameters) — the four messages of a PS push/pull pair.
//! With `barrier`, the next iteration's forward pass waits for every
//! worker's synchronisation; without, a layer's forward waits only for its
//! own tensors.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

use crate::graph::{CollectiveSpec, Graph, Kind, Op, OpCode};
use crate::spec::{Strategy, TrainingSpec};

struct Jitter {
    rng: ChaCha8Rng,
    cv: f64,
}

impl Jitter {
    /// `ns` scaled by max(0, 1 + cv * z), z standard normal.
    fn apply(&mut self, ns: u64) -> u64 {
        if self.cv == 0.0 || ns == 0 {
            return ns;
        }
        let z: f64 = StandardNormal.sample(&mut self.rng);
        ((ns as f64) * (1.0 + self.cv * z).max(0.0)).round() as u64
    }
}

pub fn build_graph(spec: &TrainingSpec) -> Graph {
    let mut g = Graph::new();
    let n = spec.workers;
    let num_layers = spec.layers.len();
    let mut jitter = Jitter { rng: ChaCha8Rng::seed_from_u64(spec.seed), cv: spec.jitter };

    let mut tensors_of_layer: Vec<Vec<u32>> = vec![Vec::new(); num_layers];
    for (t, ts) in spec.tensors.iter().enumerate() {
        tensors_of_layer[ts.layer as usize].push(t as u32);
    }
    let compute_stream: Vec<u32> = (0..n).map(|_| g.new_stream()).collect();
    let comm_stream: Vec<u32> = (0..n).map(|_| g.new_stream()).collect();
    let server_stream: Vec<u32> = (0..spec.servers).map(|_| g.new_stream()).collect();

    // gates[w][l]: ops the forward of layer l on worker w waits for.
    let mut gates: Vec<Vec<Vec<u32>>> = vec![vec![Vec::new(); num_layers]; n as usize];
    let mut rpc_counter: i64 = 0;
    let mut bwd_of: Vec<Vec<u32>> = vec![vec![0; num_layers]; n as usize];
    // sync_end[w][t]: the op after which worker w holds tensor t's new value.
    let mut sync_end: Vec<Vec<u32>> = vec![vec![0; spec.tensors.len()]; n as usize];

    for it in 0..spec.iterations as i32 {
        for w in 0..n {
            let wu = w as usize;
            let mut prev: Option<u32> = None;
            for l in 0..num_layers {
                let mut op = Op::new(Kind::Compute, OpCode::Forward, w);
                op.duration = jitter.apply(spec.layers[l].fwd_ns);
                op.stream = compute_stream[wu];
                op.iteration = it;
                op.layer = l as i32;
                let mut deps: Vec<u32> = prev.into_iter().collect();
                deps.extend(gates[wu][l].drain(..));
                prev = Some(g.add(op, &deps));
            }
            for l in (0..num_layers).rev() {
                let mut op = Op::new(Kind::Compute, OpCode::Backward, w);
                op.duration = jitter.apply(spec.layers[l].bwd_ns);
                op.stream = compute_stream[wu];
                op.iteration = it;
                op.layer = l as i32;
                let id = g.add(op, &prev.into_iter().collect::<Vec<_>>());
                bwd_of[wu][l] = id;
                prev = Some(id);
            }
        }
        for l in (0..num_layers).rev() {
            for &t in &tensors_of_layer[l] {
                let ts = &spec.tensors[t as usize];
                let tag = |mut op: Op| {
                    op.iteration = it;
                    op.layer = l as i32;
                    op.tensor = t as i32;
                    op
                };
                match spec.strategy {
                    Strategy::Ring => {
                        let c = g.add_collective(CollectiveSpec { members: (0..n).collect(), bytes: ts.bytes });
                        for w in 0..n {
                            let mut op = tag(Op::new(Kind::Collective, OpCode::AllReduce, w));
                            op.bytes = ts.bytes;
                            op.stream = comm_stream[w as usize];
                            op.collective = c;
                            op.member = w;
                            sync_end[w as usize][t as usize] = g.add(op, &[bwd_of[w as usize][l]]);
                        }
                    }
                    Strategy::Ps => {
                        let server = n + ts.server;
                        let transfer = |code: OpCode, src: u32, dst: u32, bytes: u64, rpc: i64| {
                            let mut op = tag(Op::new(Kind::Transfer, code, src));
                            op.peer = dst as i32;
                            op.bytes = bytes;
                            op.rpc = rpc;
                            op
                        };
                        let push_rpc = rpc_counter;
                        let pull_rpc = rpc_counter + n as i64;
                        rpc_counter += 2 * n as i64;
                        let pushes: Vec<u32> = (0..n)
                            .map(|w| {
                                let op = transfer(OpCode::PushRequest, w, server, ts.bytes + spec.header_bytes, push_rpc + w as i64);
                                g.add(op, &[bwd_of[w as usize][l]])
                            })
                            .collect();
                        let mut update = tag(Op::new(Kind::Compute, OpCode::Update, server));
                        update.duration = ts.update_ns;
                        update.stream = server_stream[ts.server as usize];
                        let update = g.add(update, &pushes);
                        for w in 0..n {
                            let ack = g.add(transfer(OpCode::PushResponse, server, w, spec.header_bytes, push_rpc + w as i64), &[update]);
                            let req = g.add(transfer(OpCode::PullRequest, w, server, spec.header_bytes, pull_rpc + w as i64), &[ack]);
                            let resp = g.add(
                                transfer(OpCode::PullResponse, server, w, ts.bytes + spec.header_bytes, pull_rpc + w as i64),
                                &[req],
                            );
                            sync_end[w as usize][t as usize] = resp;
                        }
                    }
                }
            }
        }
        if spec.barrier {
            let all: Vec<u32> = sync_end.iter().flat_map(|v| v.iter().copied()).collect();
            let mut b = Op::new(Kind::Barrier, OpCode::Barrier, 0);
            b.iteration = it;
            let b = g.add(b, &all);
            for gw in gates.iter_mut() {
                gw[0].push(b);
            }
        } else {
            for (w, gw) in gates.iter_mut().enumerate() {
                for (l, tensors) in tensors_of_layer.iter().enumerate() {
                    gw[l].extend(tensors.iter().map(|&t| sync_end[w][t as usize]));
                }
            }
        }
    }
    g
}
