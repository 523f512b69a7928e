//! Time in the simulator: one true timeline, and each process's own clock reading it.
//!
//! True time is a count of nanoseconds since the start of a run ([`Nanos`]). Every client and
//! every node has a [`Clock`] with a fixed offset and a fixed rate error: a linear, monotonic
//! clock that never jumps (the Redlock model allows clocks to run at slightly different *rates*,
//! not to be set back or forward). Clients hand the engine `Instant`s read from their own clock
//! ([`TimeBase::instant`]); nodes expire keys by theirs.

use std::time::{Duration, Instant};

/// Nanoseconds of true (simulated) time since the start of a run, or of a process's local clock.
pub type Nanos = u64;

const PPM: i128 = 1_000_000;

/// Converts a duration to [`Nanos`], saturating (simulated runs last seconds, never centuries).
pub(crate) fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A process's clock: `local(t) = offset + t × (1 + rate_ppm / 10⁶)`.
///
/// A positive `rate_ppm` runs fast (a node whose clock runs fast expires keys early in true
/// time); a negative one runs slow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Clock {
    offset: Nanos,
    rate_ppm: i32,
}

impl Clock {
    /// A clock reading `offset` at true time zero and running `rate_ppm` parts per million fast.
    pub(crate) fn new(offset: Nanos, rate_ppm: i32) -> Self {
        assert!(
            i128::from(rate_ppm) > -PPM,
            "a clock must move forward: rate {rate_ppm} ppm"
        );
        Self { offset, rate_ppm }
    }

    /// The clock's rate error in parts per million.
    pub(crate) fn rate_ppm(&self) -> i32 {
        self.rate_ppm
    }

    /// What the clock reads at true time `t`.
    pub(crate) fn local(&self, t: Nanos) -> Nanos {
        let scaled = i128::from(t) * (PPM + i128::from(self.rate_ppm)) / PPM;
        let local = i128::from(self.offset) + scaled;
        u64::try_from(local).unwrap_or(u64::MAX)
    }

    /// The first true instant at which the clock reads `local` or more.
    pub(crate) fn true_at(&self, local: Nanos) -> Nanos {
        if local <= self.offset {
            return 0;
        }
        let x = i128::from(local - self.offset);
        let den = PPM + i128::from(self.rate_ppm);
        let mut t = u64::try_from((x * PPM + den - 1) / den).unwrap_or(u64::MAX);
        // Integer rounding can leave the estimate one step off either way.
        while t > 0 && self.local(t - 1) >= local {
            t -= 1;
        }
        while self.local(t) < local {
            t += 1;
        }
        t
    }
}

/// Maps local clock readings to the `Instant`s the engine takes, and back. One base `Instant`
/// per run; every simulated instant is an offset from it, so a run never depends on when it ran.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TimeBase {
    base: Instant,
}

impl TimeBase {
    /// Takes the real clock once: the only clock read of a run.
    pub(crate) fn new() -> Self {
        Self {
            base: Instant::now(),
        }
    }

    /// The `Instant` for local reading `local`.
    pub(crate) fn instant(&self, local: Nanos) -> Instant {
        self.base + Duration::from_nanos(local)
    }

    /// The local reading of `instant` (instants before the base read as zero).
    pub(crate) fn local(&self, instant: Instant) -> Nanos {
        nanos(instant.saturating_duration_since(self.base))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn true_at_inverts_local_exactly() {
        for (offset, rate) in [(0, 0), (5_000, 4_500), (123, -4_500), (7, 300_000), (0, -1)] {
            let clock = Clock::new(offset, rate);
            for local in [0, 1, 999, 1_000_000, 123_456_789, 4_000_000_001] {
                let t = clock.true_at(local);
                assert!(clock.local(t) >= local, "{clock:?} {local}");
                assert!(t == 0 || clock.local(t - 1) < local, "{clock:?} {local}");
            }
        }
    }
}
