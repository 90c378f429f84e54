//! The executor's event queue against the binary heap when every event
//! has a time of its own (the bucket queue's worst case): 1,000 pending
//! events, 2 M pops each followed by a push at a random later time.
//! Count instructions with callgrind:
//!
//!     cargo build --release -p ddlsim-core --example queue_bench
//!     valgrind --tool=callgrind ./target/release/examples/queue_bench heap
//!     valgrind --tool=callgrind ./target/release/examples/queue_bench bucket

use ddlsim_core::engine::{BucketQueue, EventQueue};

fn main() {
    let which = std::env::args().nth(1).unwrap_or_else(|| "bucket".to_string());
    let mut state: u64 = 12345;
    let mut rnd = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let n = 2_000_000u64;
    let mut acc = 0u64;
    match which.as_str() {
        "heap" => {
            let mut q = EventQueue::new();
            for i in 0..1000u64 {
                q.push(rnd() % 1_000_000, i);
            }
            for i in 0..n {
                let (t, e) = q.pop().expect("never empty");
                acc ^= e;
                q.push(t + 1 + rnd() % 1_000_000, i);
            }
        }
        "bucket" => {
            let mut q = BucketQueue::new();
            for i in 0..1000u64 {
                q.push(rnd() % 1_000_000, i);
            }
            for i in 0..n {
                let (t, e) = q.pop().expect("never empty");
                acc ^= e;
                q.push(t + 1 + rnd() % 1_000_000, i);
            }
        }
        other => panic!("heap or bucket, got {other}"),
    }
    println!("{acc}");
}
