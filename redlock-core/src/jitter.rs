//! The random pause between acquisition rounds.
//!
//! Seeded once from the injected RNG, then a SplitMix64 stream: the jitter needs no secrecy, and
//! a fixed seed reproduces every pause.

use std::time::Duration;

use rand_core::Rng;

use crate::retry::RetryPolicy;

/// Draws pauses of `delay + U[0, jitter]`.
#[derive(Debug, Clone)]
pub(crate) struct Jitter {
    state: u64,
}

impl Jitter {
    pub(crate) fn new<R: Rng + ?Sized>(rng: &mut R) -> Self {
        Self {
            state: rng.next_u64(),
        }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The pause before the next round: `delay + U[0, jitter]`, at nanosecond resolution.
    pub(crate) fn pause(&mut self, policy: &RetryPolicy) -> Duration {
        policy.delay.saturating_add(self.within(policy.jitter))
    }

    /// `U[0, span]`, at nanosecond resolution.
    pub(crate) fn within(&mut self, span: Duration) -> Duration {
        // Checked policies keep jitters within a day, so nanoseconds fit in u64.
        let span = u64::try_from(span.as_nanos()).unwrap_or(u64::MAX);
        let draw = (u128::from(self.next_u64()) * (u128::from(span) + 1)) >> 64;
        Duration::from_nanos(u64::try_from(draw).unwrap_or(span))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::rng;

    #[test]
    fn pauses_stay_in_bounds_and_replay_from_the_seed() {
        let policy = RetryPolicy::default()
            .delay(Duration::from_millis(50))
            .jitter(Duration::from_millis(10));
        let mut a = Jitter::new(&mut rng(1));
        let mut b = Jitter::new(&mut rng(1));
        let mut seen_low = false;
        let mut seen_high = false;
        for _ in 0..1000 {
            let pause = a.pause(&policy);
            assert_eq!(pause, b.pause(&policy));
            assert!(pause >= Duration::from_millis(50) && pause <= Duration::from_millis(60));
            seen_low |= pause < Duration::from_millis(52);
            seen_high |= pause > Duration::from_millis(58);
        }
        assert!(seen_low && seen_high, "the jitter spreads over its range");
    }

    #[test]
    fn zero_jitter_is_the_plain_delay() {
        let policy = RetryPolicy::default()
            .delay(Duration::from_millis(7))
            .jitter(Duration::ZERO);
        let mut jitter = Jitter::new(&mut rng(3));
        assert_eq!(jitter.pause(&policy), Duration::from_millis(7));
    }
}
