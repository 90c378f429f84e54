//! Randomness by purpose: every random draw comes from its own stream,
//! keyed by (seed, purpose, rank, iteration, index). Adding a new random
//! element (a new purpose) therefore never changes the draws of existing
//! ones, and the draws of one op do not depend on how many others drew
//! before it.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// What a random stream is for; never renumber, only append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum Purpose {
    ForwardJitter = 1,
    BackwardJitter = 2,
    /// Backpropagation staggering (per-worker start skew).
    Stagger = 3,
    /// A background tenant's flows from one sending host (arrivals, peers, sizes).
    TenantFlows = 4,
    /// Replay at scale: which per-layer compute vector a rank draws in an iteration.
    ComputeSample = 5,
    /// Whether a rank is a transient straggler in an iteration.
    TransientStraggler = 6,
    /// A parameter-server message's transport time beyond the route's latency (see `lower::message_latency`).
    MessageLatency = 7,
}

/// The stream for one purpose and one (rank, iteration, index).
pub fn stream(seed: u64, purpose: Purpose, rank: u32, iteration: i32, index: u64) -> ChaCha8Rng {
    let mut key = mix(seed ^ mix(purpose as u64));
    key = mix(key ^ rank as u64);
    key = mix(key ^ (iteration as u32 as u64));
    key = mix(key ^ index);
    ChaCha8Rng::seed_from_u64(key)
}

/// SplitMix64's finaliser: a fixed, well-spread hash.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngCore;

    #[test]
    fn streams_differ_by_every_key_part_and_repeat_for_the_same_key() {
        let draw = |s, p, r, i, x| stream(s, p, r, i, x).next_u64();
        let base = draw(1, Purpose::ForwardJitter, 2, 3, 4);
        assert_eq!(base, draw(1, Purpose::ForwardJitter, 2, 3, 4));
        for other in [
            draw(2, Purpose::ForwardJitter, 2, 3, 4),
            draw(1, Purpose::BackwardJitter, 2, 3, 4),
            draw(1, Purpose::ForwardJitter, 3, 3, 4),
            draw(1, Purpose::ForwardJitter, 2, 4, 4),
            draw(1, Purpose::ForwardJitter, 2, 3, 5),
        ] {
            assert_ne!(base, other);
        }
    }
}
