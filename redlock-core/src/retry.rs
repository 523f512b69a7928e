//! What to do after a round that did not win the lock: how many rounds, how long to pause between
//! them, and when to stop waiting altogether.
//!
//! Step 4 of the Redlock description: "retry after a random delay". The policy is data; the
//! acquire machine applies it and [`Jitter`](crate::jitter::Jitter) draws the random part.

use std::time::Duration;

use crate::error::ConfigError;

/// Default [`RetryPolicy::deadline`]: how long an acquisition keeps trying.
pub const DEFAULT_RETRY_DEADLINE: Duration = Duration::from_secs(5);

/// Default [`RetryPolicy::wake_jitter`]: a contended hand-over on a LAN takes a few hundred µs,
/// so spreading woken waiters over 1 ms makes most of them find the lock already taken (and wait
/// for the next notice) rather than split the votes.
pub const DEFAULT_WAKE_JITTER: Duration = Duration::from_millis(1);

/// The longest delay, jitter or overall deadline the engine accepts (24 hours for delays,
/// 365 days for a deadline): longer values are almost certainly a unit mistake.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(24 * 3600);
/// The longest overall deadline for one acquisition.
pub const MAX_DEADLINE: Duration = Duration::from_secs(365 * 24 * 3600);

/// How many rounds an acquisition may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Attempts {
    /// At most this many rounds (1 = a single round, no retry; 0 is rejected by
    /// [`RetryPolicy::check`]).
    Limited(u32),
    /// Rounds until the lock is won or the overall deadline passes (if there is one).
    Unlimited,
}

/// How an acquisition retries.
///
/// The pause before round `k + 1` is `delay + U[0, jitter]`, drawn from the RNG injected into the
/// engine. There is never a pause after the last round, and no round starts (nor pause runs) past
/// the overall deadline.
///
/// A release notice ([`Lifecycle::handle_wake`](crate::Lifecycle::handle_wake)) ends a pause
/// early: the next round starts within [`wake_jitter`](RetryPolicy::wake_jitter), a window that
/// doubles each time such a round is lost. Every round counts as an attempt, early or not.
///
/// Defaults: rounds for up to 5 s ([`DEFAULT_RETRY_DEADLINE`]), no limit on their number, 200 ms
/// delay, 100 ms jitter, 1 ms wake jitter. The pause is node-redlock's (retryDelay 200 ms,
/// retryJitter 100 ms; redsync draws 50–250 ms); the limit is a time, not node-redlock's 10
/// attempts, because with release notices a waiter may lose several quick rounds in a
/// millisecond under contention, and how long `lock()` may wait is what a caller plans for
/// (node-redlock's 10 attempts come to about 2.5 s, redsync's 32 to about 5 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// How many rounds may run.
    pub attempts: Attempts,
    /// The fixed part of the pause between rounds.
    pub delay: Duration,
    /// The random part of the pause: uniform in `[0, jitter]`.
    pub jitter: Duration,
    /// Give up once this much time has passed since the first round started.
    pub deadline: Option<Duration>,
    /// After a release notice ([`Lifecycle::handle_wake`](crate::Lifecycle::handle_wake)), the
    /// next round starts after `U[0, wake_jitter]` instead of the rest of the pause: waiters
    /// woken by the same release spread out, so that one wins instead of all splitting the
    /// votes.
    pub wake_jitter: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: Attempts::Unlimited,
            delay: Duration::from_millis(200),
            jitter: Duration::from_millis(100),
            deadline: Some(DEFAULT_RETRY_DEADLINE),
            wake_jitter: DEFAULT_WAKE_JITTER,
        }
    }
}

impl RetryPolicy {
    /// One round, no retry (what `try_lock` uses).
    pub fn once() -> Self {
        Self {
            attempts: Attempts::Limited(1),
            ..Self::default()
        }
    }

    /// Sets the number of rounds (1 = no retry); the deadline, if any, still applies (whichever
    /// ends first). 0 is rejected when the policy is checked.
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = Attempts::Limited(attempts);
        self
    }

    /// Retries until the lock is won or the deadline passes (the default deadline is 5 s;
    /// [`no_deadline`](RetryPolicy::no_deadline) waits for as long as it takes).
    pub fn unlimited(mut self) -> Self {
        self.attempts = Attempts::Unlimited;
        self
    }

    /// Sets the fixed part of the pause between rounds.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Sets the random part of the pause between rounds.
    pub fn jitter(mut self, jitter: Duration) -> Self {
        self.jitter = jitter;
        self
    }

    /// Sets how far apart waiters woken by one release notice start their next round.
    pub fn wake_jitter(mut self, wake_jitter: Duration) -> Self {
        self.wake_jitter = wake_jitter;
        self
    }

    /// Never gives up for lack of time (only the number of attempts, if limited, ends it).
    pub fn no_deadline(mut self) -> Self {
        self.deadline = None;
        self
    }

    /// Gives up once `deadline` has passed since the first round started.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Checks the policy; every engine entry point calls this, so an unchecked policy never runs.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.attempts == Attempts::Limited(0) {
            return Err(ConfigError::NoAttempts);
        }
        check_duration("retry delay", self.delay, Duration::ZERO, MAX_RETRY_DELAY)?;
        check_duration("retry jitter", self.jitter, Duration::ZERO, MAX_RETRY_DELAY)?;
        check_duration(
            "retry wake jitter",
            self.wake_jitter,
            Duration::ZERO,
            MAX_RETRY_DELAY,
        )?;
        if let Some(deadline) = self.deadline {
            check_duration(
                "retry deadline",
                deadline,
                Duration::from_millis(1),
                MAX_DEADLINE,
            )?;
        }
        let retries = self.attempts != Attempts::Limited(1);
        if retries && self.delay.is_zero() && self.jitter.is_zero() {
            return Err(ConfigError::BusyRetry);
        }
        Ok(())
    }

    /// Whether a round numbered `attempt` (1-based) may start under the attempt limit.
    pub(crate) fn allows(&self, attempt: u32) -> bool {
        match self.attempts {
            Attempts::Limited(max) => attempt <= max,
            Attempts::Unlimited => true,
        }
    }
}

/// Checks that `got` lies in `min..=max`, naming `field` in the error.
pub(crate) fn check_duration(
    field: &'static str,
    got: Duration,
    min: Duration,
    max: Duration,
) -> Result<(), ConfigError> {
    if got < min || got > max {
        return Err(ConfigError::Duration {
            field,
            got,
            min,
            max,
        });
    }
    Ok(())
}
