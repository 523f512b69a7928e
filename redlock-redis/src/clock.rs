//! A clock that counts the time the machine was suspended, for lock validity.
//!
//! On Linux, std's [`Instant`] reads `CLOCK_MONOTONIC`, which stops while the machine is
//! suspended (rust-lang/rust#87907), while Redis keeps counting every key's TTL on the nodes. A
//! holder whose laptop or VM sleeps through its validity would wake up believing it still holds
//! the lock. [`Clock::now`] is `Instant::now()` plus the suspend time accumulated since the clock
//! was created, so validity deadlines taken from it end on time across a suspend: it follows
//! `CLOCK_BOOTTIME`, as an `Instant` that compares with every other `Instant`.
//!
//! It never reads anything but the clocks, never sleeps and never fails: a clock that cannot be
//! read counts as no suspend.
//!
//! # Implementation note
//! The suspend time is `(BOOTTIME − MONOTONIC)` now minus the same gap when the clock was
//! created: both clocks advance together while the machine runs, and only `CLOCK_BOOTTIME`
//! advances during a suspend. That is the one assumption, and it is what the Linux clocks
//! promise (`clock_gettime(2)`: `CLOCK_BOOTTIME` "is identical to `CLOCK_MONOTONIC`, except that
//! it also includes any time that the system is suspended"). Each gap comes from two readings
//! that are not taken at the same instant, so the readings are ordered to err on the side of
//! *more* suspend (a clock ahead only shortens a validity): at creation `BOOTTIME` is read
//! before `MONOTONIC`, in [`Clock::now`] after; and a pair whose reads were far apart (the
//! thread was preempted between them) is read again, so the error stays near a microsecond.
//! Most readings are quicker and err the same way: `MONOTONIC` from `Instant::now()` against
//! a base pair taken at creation (`MONOTONIC`, then an `Instant`), `BOOTTIME` read after it;
//! only a gap that shows more suspend than was already counted is read again the careful way
//! (see [`Clock::now`]).
//! The clock counts as suspend only the gap's growth beyond [`READING_BOUND`], and every
//! validity takes that bound up front (the adapters' `Config::clock_bound`): without a suspend
//! the clock is exactly `Instant::now()` and a validity reads the same each time; after a
//! suspend `s`, the clock counts `s − READING_BOUND` at least, which with the bound taken up
//! front never leaves a validity later than the truth. The suspend time only grows: a gap that
//! reads smaller than before (reading jitter, odd values) changes nothing, so [`Clock::now`]
//! never moves backwards and is never earlier than `Instant::now()`. [`suspend_adjusted`] is that
//! conversion as a pure function, unit-tested; a real suspend cannot be produced in a test here.
//!
//! Elsewhere (not Linux), [`Clock::now`] is plain `Instant::now()`, with whatever that
//! platform's `Instant` does during a suspend (see std's documentation of `Instant`; on macOS it
//! does not count sleep either).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One reading of both clocks, in nanoseconds (any values: odd ones never panic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Readings {
    /// `CLOCK_MONOTONIC`: stops during a suspend.
    pub monotonic_ns: i128,
    /// `CLOCK_BOOTTIME`: counts a suspend.
    pub boottime_ns: i128,
}

impl Readings {
    /// How far `CLOCK_BOOTTIME` is ahead of `CLOCK_MONOTONIC`: the suspend time since boot.
    fn gap_ns(self) -> i128 {
        self.boottime_ns.saturating_sub(self.monotonic_ns)
    }
}

/// How far a reading of the gap between the two clocks may be off (the readings of a pair are
/// taken again until they are within 50 µs of each other): growth of the gap up to this is not
/// counted as suspend, and every validity takes it up front instead.
pub(crate) const READING_BOUND: Duration = Duration::from_millis(1);

/// The conversion behind [`Clock::now`], pure: `instant_now` (an `Instant::now()` reading) plus
/// the suspend time between the readings `at_start` and `now` beyond `READING_BOUND` (1 ms), never
/// less than `suspended_before` (what an earlier call returned as suspend time).
///
/// Returns the instant and the suspend time it counts. A gap that shrank counts as no suspend;
/// nothing here panics or overflows (a sum past what `Instant` can hold, which real clocks
/// never reach, gives `instant_now`).
pub(crate) fn suspend_adjusted(
    instant_now: Instant,
    at_start: Readings,
    now: Readings,
    suspended_before: Duration,
) -> (Instant, Duration) {
    let bound = i128::try_from(READING_BOUND.as_nanos()).unwrap_or(i128::MAX);
    let grown = now
        .gap_ns()
        .saturating_sub(at_start.gap_ns())
        .saturating_sub(bound)
        .max(0);
    let grown = Duration::from_nanos(u64::try_from(grown).unwrap_or(u64::MAX));
    let suspended = grown.max(suspended_before);
    match instant_now.checked_add(suspended) {
        Some(instant) => (instant, suspended),
        None => (instant_now, suspended_before.min(suspended)),
    }
}

/// A clock whose [`Clock::now`] counts suspend time on Linux (see the module docs). Cheap to
/// clone (one `Arc`); clones share what they have seen, so none of them moves backwards.
#[derive(Debug, Clone)]
pub(crate) struct Clock {
    /// The readings when the clock was created (`None`: no suspend-aware clock here).
    at_start: Option<Readings>,
    /// `CLOCK_MONOTONIC` in ns, read just before an `Instant`: std's `Instant` reads that
    /// clock, so `Instant::now()` gives `CLOCK_MONOTONIC` from it with no reading of its own.
    base: Option<(i128, Instant)>,
    /// The largest suspend time returned so far, in ns.
    suspended_ns: Arc<AtomicU64>,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    /// A clock that counts suspend time from now on.
    pub(crate) fn new() -> Self {
        Self {
            at_start: read(Order::BoottimeFirst),
            base: base(),
            suspended_ns: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The current instant: `Instant::now()` plus the suspend time since [`Clock::new`]
    /// (Linux), or `Instant::now()` (elsewhere). Never earlier than `Instant::now()` read
    /// before the call, and never earlier than an earlier result of this clock or its clones.
    ///
    /// Most calls read two clocks, not four: `CLOCK_BOOTTIME` once, after `Instant::now()`,
    /// whose `CLOCK_MONOTONIC` comes from [`base`]. That gap errs on the side of more suspend
    /// (`MONOTONIC` from a base read before its `Instant`, `BOOTTIME` read after), so a gap that
    /// shows no suspend beyond the one already counted is one the careful pair would show too;
    /// any other goes to the careful pair (`MONOTONIC`, `BOOTTIME`, `MONOTONIC`, read again
    /// while far apart). Should `Instant` ever count suspend itself, the quick gap never
    /// grows, and `Instant::now()` already holds the suspend.
    pub(crate) fn now(&self) -> Instant {
        let instant_now = Instant::now();
        let Some(at_start) = self.at_start else {
            return instant_now;
        };
        let before = Duration::from_nanos(self.suspended_ns.load(Ordering::Acquire));
        if let Some((monotonic_at_base, base)) = self.base
            && let Some(boottime_ns) = read_one(Source::Boottime)
        {
            let elapsed = instant_now.saturating_duration_since(base).as_nanos();
            let quick = Readings {
                monotonic_ns: monotonic_at_base
                    .saturating_add(i128::try_from(elapsed).unwrap_or(i128::MAX)),
                boottime_ns,
            };
            let (instant, suspended) = suspend_adjusted(instant_now, at_start, quick, before);
            if suspended <= before {
                return instant;
            }
        }
        let Some(now) = read(Order::MonotonicFirst) else {
            return instant_now;
        };
        let (instant, suspended) = suspend_adjusted(instant_now, at_start, now, before);
        let ns = u64::try_from(suspended.as_nanos()).unwrap_or(u64::MAX);
        self.suspended_ns.fetch_max(ns, Ordering::AcqRel);
        instant
    }

    /// A clock that has already counted `suspended` of suspend (Linux): for tests of what a
    /// suspend does to a lock.
    #[cfg(all(test, target_os = "linux"))]
    pub(crate) fn after_suspend(suspended: Duration) -> Self {
        let clock = Self::new();
        let ns = i128::try_from(suspended.as_nanos()).unwrap_or(i128::MAX);
        let at_start = clock.at_start.map(|r| Readings {
            boottime_ns: r.boottime_ns - ns,
            ..r
        });
        let clock = Self { at_start, ..clock };
        clock.now();
        clock
    }

    /// The suspend time counted so far (zero where the clock does not count it).
    pub(crate) fn suspended(&self) -> Duration {
        Duration::from_nanos(self.suspended_ns.load(Ordering::Acquire))
    }
}

/// Which clock to read first (see the module's implementation note).
#[derive(Debug, Clone, Copy)]
enum Order {
    BoottimeFirst,
    MonotonicFirst,
}

/// Readings further apart than this are taken again (a preemption between two reads would
/// otherwise count as suspend, for good: the suspend time only grows).
#[cfg(target_os = "linux")]
const TIGHT_NS: i128 = 50_000;
/// How many times to try for readings within [`TIGHT_NS`]; the tightest is kept.
#[cfg(target_os = "linux")]
const ATTEMPTS: usize = 4;

/// Reads both clocks, the first one again after the second, and keeps the pair from the
/// tightest of a few attempts: the error of a pair is at most the time between its reads.
#[cfg(target_os = "linux")]
fn read(order: Order) -> Option<Readings> {
    let (first, second) = match order {
        Order::BoottimeFirst => (Source::Boottime, Source::Monotonic),
        Order::MonotonicFirst => (Source::Monotonic, Source::Boottime),
    };
    let mut best: Option<(i128, Readings)> = None;
    for _ in 0..ATTEMPTS {
        let (a, b, again) = (read_one(first)?, read_one(second)?, read_one(first)?);
        let span = again.saturating_sub(a);
        let readings = match order {
            Order::BoottimeFirst => Readings {
                monotonic_ns: b,
                boottime_ns: a,
            },
            Order::MonotonicFirst => Readings {
                monotonic_ns: a,
                boottime_ns: b,
            },
        };
        if best.is_none_or(|(tightest, _)| span < tightest) {
            best = Some((span, readings));
        }
        if span < TIGHT_NS {
            break;
        }
    }
    best.map(|(_, readings)| readings)
}

#[cfg(not(target_os = "linux"))]
fn read(_order: Order) -> Option<Readings> {
    None
}

/// One of the two clocks.
#[derive(Debug, Clone, Copy)]
enum Source {
    Monotonic,
    Boottime,
}

/// One clock, in ns.
#[cfg(target_os = "linux")]
fn read_one(source: Source) -> Option<i128> {
    use nix::time::{ClockId, clock_gettime};
    let clock = match source {
        Source::Monotonic => ClockId::CLOCK_MONOTONIC,
        Source::Boottime => ClockId::CLOCK_BOOTTIME,
    };
    clock_gettime(clock).ok().map(|ts| {
        i128::from(ts.tv_sec())
            .saturating_mul(1_000_000_000)
            .saturating_add(i128::from(ts.tv_nsec()))
    })
}

#[cfg(not(target_os = "linux"))]
fn read_one(_source: Source) -> Option<i128> {
    None
}

/// `CLOCK_MONOTONIC` read just before an `Instant` (the tightest of a few tries): the
/// `MONOTONIC` that `Instant::now()` gives from it is never later than the true one.
#[cfg(target_os = "linux")]
fn base() -> Option<(i128, Instant)> {
    let mut best: Option<(i128, (i128, Instant))> = None;
    for _ in 0..ATTEMPTS {
        let before = read_one(Source::Monotonic)?;
        let instant = Instant::now();
        let after = read_one(Source::Monotonic)?;
        let span = after.saturating_sub(before);
        if best.is_none_or(|(tightest, _)| span < tightest) {
            best = Some((span, (before, instant)));
        }
        if span < TIGHT_NS {
            break;
        }
    }
    best.map(|(_, base)| base)
}

#[cfg(not(target_os = "linux"))]
fn base() -> Option<(i128, Instant)> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i128 = 1_000_000_000;

    fn at(monotonic_s: i128, boottime_s: i128) -> Readings {
        Readings {
            monotonic_ns: monotonic_s * S,
            boottime_ns: boottime_s * S,
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_quick_reading_is_instant_now_without_a_suspend_and_sees_one() {
        let clock = Clock::new();
        assert!(clock.base.is_some());
        for _ in 0..10_000 {
            let before = Instant::now();
            let now = clock.now();
            assert!(before <= now && now <= Instant::now());
        }
        assert_eq!(clock.suspended(), Duration::ZERO);
        // A suspend (the start's BOOTTIME moved back) is seen through the quick reading.
        let suspended = Duration::from_secs(20);
        let clock = Clock::after_suspend(suspended);
        let before = Instant::now();
        assert!(clock.now() >= before + suspended - READING_BOUND);
        assert!(clock.suspended() >= suspended - READING_BOUND);
    }

    #[test]
    fn without_a_suspend_it_is_instant_now() {
        let now = Instant::now();
        let (instant, suspended) =
            suspend_adjusted(now, at(100, 130), at(160, 190), Duration::ZERO);
        assert_eq!(instant, now);
        assert_eq!(suspended, Duration::ZERO);
    }

    #[test]
    fn a_suspend_of_x_moves_now_by_x_less_the_bound() {
        let now = Instant::now();
        // 60 s of running, and 45 s asleep: BOOTTIME ran 45 s further than MONOTONIC.
        let (instant, suspended) =
            suspend_adjusted(now, at(100, 130), at(160, 235), Duration::ZERO);
        assert_eq!(suspended, Duration::from_secs(45) - READING_BOUND);
        assert_eq!(instant, now + Duration::from_secs(45) - READING_BOUND);
        // A validity of 30 s taken before the suspend (the bound taken from it up front) has
        // ended by this clock.
        let valid_until = now + Duration::from_secs(30) - READING_BOUND;
        assert!(instant > valid_until);
    }

    #[test]
    fn reading_jitter_within_the_bound_counts_as_no_suspend() {
        let now = Instant::now();
        let start = at(100, 130);
        for jitter_ns in [1, 999, 50_000, 999_999, 1_000_000] {
            let later = Readings {
                monotonic_ns: 160 * S,
                boottime_ns: 190 * S + jitter_ns,
            };
            let (instant, suspended) = suspend_adjusted(now, start, later, Duration::ZERO);
            assert_eq!(
                (instant, suspended),
                (now, Duration::ZERO),
                "{jitter_ns} ns"
            );
        }
        // Beyond it, only the excess counts.
        let later = Readings {
            monotonic_ns: 160 * S,
            boottime_ns: 190 * S + 1_000_007,
        };
        let (_, suspended) = suspend_adjusted(now, start, later, Duration::ZERO);
        assert_eq!(suspended, Duration::from_nanos(7));
    }

    #[test]
    fn it_never_goes_backwards_nor_before_instant_now() {
        let now = Instant::now();
        // The gap shrank (reading jitter, odd values): no suspend, not a negative one.
        let (instant, suspended) =
            suspend_adjusted(now, at(100, 130), at(160, 120), Duration::ZERO);
        assert_eq!((instant, suspended), (now, Duration::ZERO));
        // A suspend counted before stays counted.
        let before = Duration::from_secs(10);
        let (instant, suspended) = suspend_adjusted(now, at(100, 130), at(160, 195), before);
        assert_eq!(suspended, before);
        assert_eq!(instant, now + before);
    }

    #[test]
    fn extreme_readings_never_panic() {
        let now = Instant::now();
        let extremes = [i128::MIN, -1, 0, 1, i128::from(i64::MAX), i128::MAX];
        for &a in &extremes {
            for &b in &extremes {
                let start = Readings {
                    monotonic_ns: a,
                    boottime_ns: b,
                };
                let later = Readings {
                    monotonic_ns: b,
                    boottime_ns: a,
                };
                for before in [Duration::ZERO, Duration::MAX] {
                    let (instant, _) = suspend_adjusted(now, start, later, before);
                    assert!(instant >= now);
                }
            }
        }
    }

    #[test]
    fn the_real_clock_is_never_behind_instant_now_and_never_goes_backwards() {
        let clock = Clock::new();
        let copy = clock.clone();
        let mut last = clock.now();
        for i in 0..10_000 {
            let before = Instant::now();
            let now = if i % 2 == 0 { clock.now() } else { copy.now() };
            assert!(now >= before, "never behind Instant::now()");
            assert!(now >= last, "never backwards");
            last = now;
        }
        // No suspend happens during a test run; only reading jitter beyond the bound (a thread
        // preempted through every attempt at a tight pair) could show, and it is tiny.
        assert!(
            clock.suspended() < Duration::from_millis(100),
            "{:?}",
            clock.suspended()
        );
    }
}
