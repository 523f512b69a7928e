//! The tests' randomness (simulator and chaos run alike): ChaCha8 streams forked from one seed
//! (one per client, one for the network or the fault schedule, ...), so that what one part
//! draws does not shift what another draws, and a seed replays a run's choices bit for bit.

use std::time::Duration;

use chacha20::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

/// A seeded random stream with the few draws the tests need.
#[derive(Debug)]
pub(crate) struct TestRng(ChaCha8Rng);

impl TestRng {
    /// The stream for `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self(ChaCha8Rng::seed_from_u64(seed))
    }

    /// An independent stream seeded from this one.
    pub(crate) fn fork(&mut self) -> Self {
        Self::new(self.0.next_u64())
    }

    /// The underlying CSPRNG, to inject into the engine (tokens, lock ids and retry jitter).
    #[cfg(test)]
    pub(crate) fn core(&mut self) -> &mut ChaCha8Rng {
        &mut self.0
    }

    /// The underlying CSPRNG, given away (to a [`Multiplexer`](redlock_core::Multiplexer),
    /// which owns its RNG).
    pub(crate) fn into_core(self) -> ChaCha8Rng {
        self.0
    }

    /// Uniform in `0..n` (`0` when `n` is `0`); Lemire's multiply-shift.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
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

    /// Uniform in `lo..=hi`, at nanosecond resolution.
    pub(crate) fn duration(&mut self, (lo, hi): (Duration, Duration)) -> Duration {
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(self.between(nanos(lo), nanos(hi)))
    }

    /// Uniform in `lo..=hi`, at microsecond resolution (the chaos run's schedules).
    pub(crate) fn duration_micros(&mut self, (lo, hi): (Duration, Duration)) -> Duration {
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let (lo_us, hi_us) = (micros(lo), micros(hi));
        if hi_us <= lo_us {
            return lo;
        }
        Duration::from_micros(lo_us + self.below(hi_us - lo_us + 1))
    }

    /// Uniform in `[lo, hi)`.
    pub(crate) fn unit_between(&mut self, (lo, hi): (f64, f64)) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform in `[0, 1)`: 53 random bits, exactly representable in an f64.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }
}
