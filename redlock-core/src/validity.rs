//! Clock drift and lock validity: how long a lock that a quorum granted may be trusted.
//!
//! Step 3 of the Redlock description: a lock granted by a quorum in a round that started at `t0`
//! is valid until `t0 + ttl − drift`, with `drift = ttl × drift_factor + drift_floor`. All math is
//! integer (the factor is kept in parts per million) and checked, so no TTL can overflow.

use std::time::{Duration, Instant};

use crate::error::ConfigError;
use crate::retry::check_duration;

/// The longest TTL the engine sends: `i64::MAX / 2` milliseconds. Redis rejects a `PX` whose
/// expiry (`now_ms + ttl`) overflows a signed 64-bit number; half the range keeps far away from
/// that for any server clock.
pub const MAX_TTL: Duration = Duration::from_millis(i64::MAX as u64 / 2);

const PPM: u64 = 1_000_000;

/// The clock-drift allowance: `ttl × factor + floor`, plus the bound on the error of the clock
/// that feeds the engine ([`clock_bound`](Drift::clock_bound)), taken from every validity up
/// front.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drift {
    ppm: u32,
    floor: Duration,
    clock_bound: Duration,
}

impl Drift {
    /// Checks and builds an allowance; the factor must be a number in `[0, 1)` (kept to a
    /// millionth).
    pub(crate) fn new(factor: f64, floor: Duration) -> Result<Self, ConfigError> {
        if !(0.0..1.0).contains(&factor) {
            return Err(ConfigError::DriftFactor { got: factor });
        }
        // In [0, 1e6): the cast cannot truncate or wrap.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let ppm = (factor * PPM as f64).round().min((PPM - 1) as f64) as u32;
        Ok(Self {
            ppm,
            floor,
            clock_bound: Duration::ZERO,
        })
    }

    /// The same allowance with `bound` taken from every validity too.
    pub(crate) fn with_clock_bound(self, bound: Duration) -> Self {
        Self {
            clock_bound: bound,
            ..self
        }
    }

    /// The drift factor, as configured (to a millionth).
    pub fn factor(&self) -> f64 {
        f64::from(self.ppm) / PPM as f64
    }

    /// The fixed part of the allowance.
    pub fn floor(&self) -> Duration {
        self.floor
    }

    /// The largest error of the clock that feeds the engine its instants, as the adapter
    /// declared it ([`ConfigBuilder::clock_bound`](crate::ConfigBuilder::clock_bound)): taken
    /// from every validity up front, besides the drift, so that a clock that counts time the
    /// machine was suspended need only count what grows beyond it, and a validity read twice
    /// reads the same. Zero by default.
    pub fn clock_bound(&self) -> Duration {
        self.clock_bound
    }

    /// The allowance for a lock of `ttl`: `ttl × factor + floor + clock_bound`, saturating
    /// (never panics).
    pub fn of(&self, ttl: Duration) -> Duration {
        let scaled = ttl.as_nanos() * u128::from(self.ppm) / u128::from(PPM);
        let secs = u64::try_from(scaled / 1_000_000_000).unwrap_or(u64::MAX);
        // The remainder is below 10^9, so it fits in u32.
        let nanos = u32::try_from(scaled % 1_000_000_000).unwrap_or(0);
        let scaled = Duration::new(secs, nanos);
        scaled
            .saturating_add(self.floor)
            .saturating_add(self.clock_bound)
    }
}

/// A lock TTL checked against the configuration: whole milliseconds, as sent in `PX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ttl {
    /// The TTL as sent to Redis, in milliseconds (at least 1).
    pub(crate) ms: u64,
    /// How long after a round's start a lock it wins stays valid: `ttl − drift`.
    pub(crate) span: Duration,
}

impl Ttl {
    /// Checks `ttl` (rounded down to whole milliseconds, as Redis sees it) for a lock that must
    /// keep at least `min_validity` after the drift; `now` proves the validity end is representable.
    pub(crate) fn new(
        now: Instant,
        ttl: Duration,
        drift: Drift,
        min_validity: Duration,
    ) -> Result<Self, ConfigError> {
        check_duration("ttl", ttl, Duration::from_millis(1), MAX_TTL)?;
        // MAX_TTL fits in u64 milliseconds.
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let sent = Duration::from_millis(ms);
        let drift_of = drift.of(sent);
        let too_short = ConfigError::TtlTooShort {
            got: ttl,
            drift: drift_of,
            min_validity,
        };
        let span = sent.checked_sub(drift_of).ok_or(too_short.clone())?;
        if span.is_zero() || span <= min_validity {
            return Err(too_short);
        }
        if now.checked_add(sent).is_none() {
            // Only reachable with an `Instant` near the end of its range.
            return Err(ConfigError::Duration {
                field: "ttl",
                got: ttl,
                min: Duration::from_millis(1),
                max: Duration::from_millis(1),
            });
        }
        Ok(Self { ms, span })
    }

    /// Checks `ttl` as [`Ttl::new`] does with `config`'s drift and minimum validity, and against
    /// its longest TTL in use.
    pub(crate) fn for_config(
        now: Instant,
        config: &crate::Config,
        ttl: Duration,
    ) -> Result<Self, ConfigError> {
        let checked = Self::new(now, ttl, config.drift(), config.min_validity())?;
        config.check_max_ttl(ttl)?;
        Ok(checked)
    }

    /// The TTL that Redis applies.
    pub(crate) fn duration(&self) -> Duration {
        Duration::from_millis(self.ms)
    }

    /// The validity a quorum reached at `now` grants to a round that started at `t0`: its end,
    /// if more than `min_validity` of it is left (otherwise the quorum came too late).
    pub(crate) fn grant(
        &self,
        t0: Instant,
        now: Instant,
        min_validity: Duration,
    ) -> Option<Instant> {
        let valid_until = self.valid_until(t0);
        let left = valid_until.checked_duration_since(now)?;
        (left > min_validity).then_some(valid_until)
    }

    /// The end of validity for a round that started at `t0`. Never fails for a `t0` at or after
    /// the `now` the TTL was checked with; earlier instants saturate to `t0`.
    pub(crate) fn valid_until(&self, t0: Instant) -> Instant {
        t0.checked_add(self.span).unwrap_or(t0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drift() -> Drift {
        Drift::new(0.01, Duration::from_millis(2)).expect("valid drift")
    }

    #[test]
    fn validity_is_ttl_minus_drift() {
        let now = crate::testing::epoch();
        let ttl = Ttl::new(now, Duration::from_secs(10), drift(), Duration::ZERO).expect("valid");
        assert_eq!(ttl.ms, 10_000);
        assert_eq!(ttl.span, Duration::from_millis(10_000 - 100 - 2));
        assert_eq!(ttl.valid_until(now), now + Duration::from_millis(9_898));
        // A clock bound is taken up front as well, besides the drift.
        let bounded = drift().with_clock_bound(Duration::from_millis(1));
        assert_eq!(
            bounded.of(Duration::from_secs(10)),
            Duration::from_millis(103)
        );
        let ttl = Ttl::new(now, Duration::from_secs(10), bounded, Duration::ZERO).expect("valid");
        assert_eq!(ttl.span, Duration::from_millis(10_000 - 100 - 2 - 1));
        assert_eq!(drift().clock_bound(), Duration::ZERO);
    }

    #[test]
    fn sub_millisecond_ttls_round_down() {
        let now = crate::testing::epoch();
        let ttl =
            Ttl::new(now, Duration::from_micros(10_999), drift(), Duration::ZERO).expect("valid");
        assert_eq!(ttl.ms, 10);
        assert!(Ttl::new(now, Duration::from_micros(999), drift(), Duration::ZERO).is_err());
    }

    #[test]
    fn ttl_must_exceed_drift_and_min_validity() {
        let now = crate::testing::epoch();
        assert!(matches!(
            Ttl::new(now, Duration::from_millis(2), drift(), Duration::ZERO),
            Err(ConfigError::TtlTooShort { .. })
        ));
        assert!(Ttl::new(now, Duration::from_millis(3), drift(), Duration::ZERO).is_ok());
        assert!(matches!(
            Ttl::new(
                now,
                Duration::from_millis(100),
                drift(),
                Duration::from_millis(97)
            ),
            Err(ConfigError::TtlTooShort { .. })
        ));
    }

    #[test]
    fn extreme_ttls_are_errors_not_overflows() {
        let now = crate::testing::epoch();
        for ttl in [
            Duration::ZERO,
            Duration::MAX,
            MAX_TTL + Duration::from_millis(1),
        ] {
            let err = Ttl::new(now, ttl, drift(), Duration::ZERO).expect_err("out of range");
            assert!(err.to_string().starts_with("ttl:"), "{err}");
        }
        assert!(Ttl::new(now, MAX_TTL, drift(), Duration::ZERO).is_ok());
    }

    #[test]
    fn drift_saturates_instead_of_overflowing() {
        let d = Drift::new(0.999_999, Duration::from_secs(3600)).expect("valid");
        assert!(
            d.of(Duration::MAX) > Duration::MAX / 2,
            "scaled without wrapping"
        );
        assert_eq!(drift().factor(), 0.01);
    }
}
