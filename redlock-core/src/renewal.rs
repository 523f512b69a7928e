//! Auto-extension: when to extend a held lock, and when to give it up as lost.
//!
//! The policy keeps a lease alive for as long as its holder works: it extends once half of the
//! validity that is left has passed (so a 30 s lock is extended about every 15 s), retries a
//! failed extension while a retry can still finish in time, and declares the lock lost as soon
//! as keeping it is no longer possible — always at or before `valid_until`, never after.
//! The adapter only runs the timers and the [`Extend`](crate::Extend) machines this asks for.

use std::time::{Duration, Instant};

use crate::extend::{ExtendFailure, ExtendOutcome};
use crate::lease::Lease;

/// What the holder of an auto-extended lock must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RenewalStep {
    /// Start an extension now (with the lease's TTL), and report how it ended.
    Extend,
    /// Nothing until this instant (or until an extension in flight ends).
    Wait(Instant),
    /// The lock is lost: stop the work it protects now.
    Lost,
}

/// Tracks one auto-extended lease.
#[derive(Debug, Clone)]
pub struct Renewal {
    valid_until: Instant,
    node_timeout: Duration,
    next: Instant,
    in_flight: bool,
    lost: bool,
}

impl Renewal {
    /// Starts tracking `lease`; `node_timeout` is how long one extension may take (the
    /// configuration's timeout for the lease's TTL).
    pub fn new(now: Instant, lease: &Lease, node_timeout: Duration) -> Self {
        let mut renewal = Self {
            valid_until: lease.valid_until(),
            node_timeout,
            next: now,
            in_flight: false,
            lost: false,
        };
        renewal.schedule(now);
        renewal
    }

    /// The end of validity as far as this tracker knows.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// What to do at `now`.
    pub fn poll(&mut self, now: Instant) -> RenewalStep {
        if self.lost || now >= self.valid_until {
            self.lost = true;
            return RenewalStep::Lost;
        }
        if self.in_flight {
            return RenewalStep::Wait(self.valid_until);
        }
        if now >= self.next {
            self.in_flight = true;
            return RenewalStep::Extend;
        }
        RenewalStep::Wait(self.next)
    }

    /// Hands in how the extension asked for ended.
    pub fn handle_extended(&mut self, now: Instant, outcome: &ExtendOutcome) {
        self.in_flight = false;
        match outcome {
            ExtendOutcome::Extended { valid_until, .. } => {
                self.valid_until = self.valid_until.max(*valid_until);
                self.schedule(now);
            }
            ExtendOutcome::NotExtended { reason: ExtendFailure::NotHeld | ExtendFailure::Expired, .. } => {
                self.lost = true;
            }
            ExtendOutcome::NotExtended { .. } => self.schedule(now),
        }
    }

    /// Plans the next extension halfway through what is left, and gives up when what is left
    /// cannot fit another extension.
    fn schedule(&mut self, now: Instant) {
        let left = self.valid_until.saturating_duration_since(now);
        if left <= self.node_timeout.saturating_mul(2) {
            self.lost = true;
            return;
        }
        let before_deadline = left - self.node_timeout.saturating_mul(2);
        self.next = now + (left / 2).min(before_deadline);
    }
}
