//! How long each call may take, derived from the client's retry policy and per-node timeout.
//!
//! The engine never waits for a node past its per-node timeout, so:
//!
//! | call | bound |
//! |---|---|
//! | `lock` | `attempts × node_timeout + (attempts − 1) × (delay + jitter) + node_timeout` (the last failed round's release is awaited up to one node timeout) |
//! | `try_lock` | `2 × node_timeout` (the round, and the release of a failed round) |
//! | `extend`, `release` | `node_timeout` |
//!
//! A call passes if it returns within [`SLACK_FACTOR`] × its bound + [`SLACK`]: a hang or a
//! wait on a node's I/O timeout shows up, a loaded machine does not.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use redlock_core::{Attempts, Config};

/// Multiple of the bound a call may take.
pub const SLACK_FACTOR: u32 = 3;
/// Added to every limit for scheduling noise on a loaded machine.
pub const SLACK: Duration = Duration::from_secs(2);

/// A timed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Call {
    /// `lock`, and the acquisition inside `with_lock`.
    Lock,
    /// `try_lock`.
    TryLock,
    /// `Lock::extend`.
    Extend,
    /// `Lock::release`, and the release at the end of `with_lock`.
    Release,
}

impl Call {
    /// The API name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::TryLock => "try_lock",
            Self::Extend => "extend",
            Self::Release => "release",
        }
    }
}

/// The bounds of one client configuration.
#[derive(Debug, Clone)]
pub struct CallBounds {
    config: Config,
}

impl CallBounds {
    /// Bounds for a client with `config`.
    ///
    /// # Panics
    /// If its retry policy has no attempt limit and no deadline (nothing bounds `lock`).
    pub fn new(config: &Config) -> Self {
        let retry = config.retry();
        assert!(
            matches!(retry.attempts, Attempts::Limited(_)) || retry.deadline.is_some(),
            "the chaos run needs a retry policy with bounded attempts or a deadline"
        );
        Self {
            config: config.clone(),
        }
    }

    /// The most `call` may take for a lock with `ttl`, as the policy allows it.
    pub fn bound(&self, call: Call, ttl: Duration) -> Duration {
        let node_timeout = self.config.node_timeout(ttl);
        match call {
            Call::Lock => {
                let retry = self.config.retry();
                let pause = retry.delay + retry.jitter;
                let by_attempts = match retry.attempts {
                    Attempts::Limited(n) => node_timeout * n + pause * n.saturating_sub(1),
                    _ => Duration::MAX,
                };
                let by_deadline = retry.deadline.map_or(Duration::MAX, |d| d + node_timeout);
                by_attempts.min(by_deadline) + node_timeout
            }
            Call::TryLock => node_timeout * 2,
            Call::Extend | Call::Release => node_timeout,
        }
    }

    /// The limit a call is checked against: [`SLACK_FACTOR`] × bound + [`SLACK`].
    pub fn limit(&self, call: Call, ttl: Duration) -> Duration {
        self.bound(call, ttl) * SLACK_FACTOR + SLACK
    }
}

/// What the timed calls of a run took.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallTimes {
    stats: BTreeMap<Call, CallStat>,
    /// One line per call that ran past its limit (or never returned).
    pub overruns: Vec<String>,
}

/// Timing of one kind of call.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CallStat {
    /// Calls timed.
    pub count: u64,
    /// The longest one.
    pub max: Duration,
    /// The largest `took / bound` seen.
    pub max_ratio: f64,
}

impl CallTimes {
    /// Records that `call` with bound `bound` and limit `limit` took `took`.
    pub fn record(
        &mut self,
        client: usize,
        call: Call,
        took: Duration,
        bound: Duration,
        limit: Duration,
    ) {
        let stat = self.stats.entry(call).or_default();
        stat.count += 1;
        stat.max = stat.max.max(took);
        if !bound.is_zero() {
            stat.max_ratio = stat.max_ratio.max(took.as_secs_f64() / bound.as_secs_f64());
        }
        if took > limit {
            self.overruns.push(format!(
                "client {client}: {} took {took:?}, bound {bound:?}, limit {limit:?}",
                call.name()
            ));
        }
    }

    /// Records that `call` had not returned when its limit ran out (the test gave up on it).
    pub fn record_hang(&mut self, client: usize, call: Call, limit: Duration) {
        self.overruns.push(format!(
            "client {client}: {} had not returned after {limit:?}",
            call.name()
        ));
    }

    /// Adds `other`'s calls to these.
    pub fn merge(&mut self, other: &Self) {
        for (call, theirs) in &other.stats {
            let stat = self.stats.entry(*call).or_default();
            stat.count += theirs.count;
            stat.max = stat.max.max(theirs.max);
            stat.max_ratio = stat.max_ratio.max(theirs.max_ratio);
        }
        self.overruns.extend(other.overruns.iter().cloned());
    }

    /// The timing of `call`.
    pub fn get(&self, call: Call) -> CallStat {
        self.stats.get(&call).copied().unwrap_or_default()
    }
}

impl fmt::Display for CallTimes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (call, stat)) in self.stats.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(
                f,
                "{} ×{} max {:.0} ms ({:.2} of its bound)",
                call.name(),
                stat.count,
                stat.max.as_secs_f64() * 1e3,
                stat.max_ratio
            )?;
        }
        Ok(())
    }
}
