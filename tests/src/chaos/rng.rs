//! The chaos run's randomness: ChaCha8 streams forked from one seed (one for the fault schedule,
//! one per client), so that what one part draws does not shift what another draws.

use std::time::Duration;

use chacha20::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

/// A seeded random stream with the few draws the chaos run needs.
#[derive(Debug)]
pub(crate) struct ChaosRng(ChaCha8Rng);

impl ChaosRng {
    /// The stream for `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self(ChaCha8Rng::seed_from_u64(seed))
    }

    /// An independent stream seeded from this one.
    pub(crate) fn fork(&mut self) -> Self {
        Self::new(self.0.next_u64())
    }

    /// Uniform in `0..n` (`0` when `n` is `0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        let wide = u128::from(self.0.next_u64()) * u128::from(n);
        u64::try_from(wide >> 64).unwrap_or(0)
    }

    /// Uniform index into a slice of `len` elements (`len > 0`).
    pub(crate) fn index(&mut self, len: usize) -> usize {
        let drawn = self.below(u64::try_from(len).unwrap_or(u64::MAX));
        usize::try_from(drawn).unwrap_or(0)
    }

    /// One element of `items`, or `None` if it is empty.
    pub(crate) fn pick<T: Copy>(&mut self, items: &[T]) -> Option<T> {
        if items.is_empty() {
            return None;
        }
        Some(items[self.index(items.len())])
    }

    /// Uniform in `lo..=hi`, at microsecond resolution.
    pub(crate) fn duration(&mut self, (lo, hi): (Duration, Duration)) -> Duration {
        let lo_us = micros(lo);
        let hi_us = micros(hi);
        if hi_us <= lo_us {
            return lo;
        }
        Duration::from_micros(lo_us + self.below(hi_us - lo_us + 1))
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        // 53 random bits: exactly representable in an f64.
        let bits = self.0.next_u64() >> 11;
        f64::from(u32::try_from(bits >> 32).unwrap_or(0)) * 2f64.powi(-21)
            + f64::from(u32::try_from(bits & 0xffff_ffff).unwrap_or(0)) * 2f64.powi(-53)
    }

    /// True with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}
