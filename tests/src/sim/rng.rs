//! The simulator's randomness: ChaCha8 streams forked from one seed, so a seed replays a run
//! bit-for-bit.

use std::time::Duration;

use chacha20::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

/// A seeded random stream with the few draws the simulator needs.
#[derive(Debug)]
pub(crate) struct SimRng(ChaCha8Rng);

impl SimRng {
    /// The stream for `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self(ChaCha8Rng::seed_from_u64(seed))
    }

    /// An independent stream seeded from this one (one per client, one for the network, ...),
    /// so that what one part draws does not shift what another draws.
    pub(crate) fn fork(&mut self) -> Self {
        Self::new(self.0.next_u64())
    }

    /// The underlying CSPRNG, to inject into the engine (tokens and retry jitter).
    pub(crate) fn core(&mut self) -> &mut ChaCha8Rng {
        &mut self.0
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        // Lemire's multiply-shift: unbiased enough for a simulator, and fast.
        let wide = u128::from(self.0.next_u64()) * u128::from(n);
        u64::try_from(wide >> 64).unwrap_or(0)
    }

    /// Uniform in `lo..=hi`.
    pub(crate) fn between(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        match (hi - lo).checked_add(1) {
            Some(span) => lo + self.below(span),
            None => self.0.next_u64(),
        }
    }

    /// Uniform in `lo..=hi`, at nanosecond resolution.
    pub(crate) fn duration(&mut self, (lo, hi): (Duration, Duration)) -> Duration {
        let lo_ns = super::clock::nanos(lo);
        let hi_ns = super::clock::nanos(hi);
        Duration::from_nanos(self.between(lo_ns, hi_ns))
    }

    /// Uniform in `[lo, hi)`.
    pub(crate) fn unit_between(&mut self, (lo, hi): (f64, f64)) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }
}
