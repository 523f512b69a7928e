//! Auto-extension: when to extend a held lock, and when to give it up as lost.
//!
//! The policy keeps a lease alive for as long as its holder works: it extends once half of the
//! validity that is left has passed (so a 30 s lock is extended about every 15 s), retries a
//! failed extension while a retry can still finish in time, and declares the lock lost as soon
//! as keeping it is no longer possible — always at or before `valid_until`, never after.
//! The adapter only runs the timers and the [`Extend`](crate::Extend) machines this asks for.

#![cfg_attr(not(any(test, feature = "testing")), allow(unreachable_pub))]

use std::time::{Duration, Instant};

use crate::extend::{ExtendFailure, ExtendOutcome};
use crate::lease::Lease;

/// Why a held lock was given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossCause {
    /// An extension found too few nodes still holding our token (it expired there, or was
    /// deleted, or the node lost its memory).
    NotHeld,
    /// The validity ran out before an extension succeeded.
    Expired,
    /// Too little validity is left for one more extension to finish in time (nodes kept failing
    /// or timing out): given up before the validity ends, not after.
    NoTimeLeft,
}

/// What the holder of an auto-extended lock must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewalStep {
    /// Start an extension now (with the lease's TTL), and report how it ended.
    Extend,
    /// Nothing until this instant (or until an extension in flight ends).
    Wait(Instant),
    /// The lock is lost: stop the work it protects now.
    Lost(LossCause),
}

/// Tracks one auto-extended lease.
#[derive(Debug, Clone)]
pub struct Renewal {
    valid_until: Instant,
    node_timeout: Duration,
    next: Instant,
    in_flight: bool,
    lost: Option<LossCause>,
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
            lost: None,
        };
        renewal.schedule(now);
        renewal
    }

    /// The end of validity as far as this tracker knows.
    #[cfg(any(test, feature = "testing"))]
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// What to do at `now`.
    pub fn poll(&mut self, now: Instant) -> RenewalStep {
        if now >= self.valid_until {
            self.lost.get_or_insert(LossCause::Expired);
        }
        if let Some(cause) = self.lost {
            return RenewalStep::Lost(cause);
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
            ExtendOutcome::NotExtended {
                reason: ExtendFailure::NotHeld,
                ..
            } => {
                self.lost = Some(LossCause::NotHeld);
            }
            ExtendOutcome::NotExtended {
                reason: ExtendFailure::Expired,
                ..
            } => {
                self.lost = Some(LossCause::Expired);
            }
            ExtendOutcome::NotExtended { .. } => self.schedule(now),
        }
    }

    /// Plans the next extension halfway through what is left, and gives up when what is left
    /// cannot fit another extension.
    fn schedule(&mut self, now: Instant) {
        let left = self.valid_until.saturating_duration_since(now);
        if left <= self.node_timeout.saturating_mul(2) {
            self.lost = Some(LossCause::NoTimeLeft);
            return;
        }
        let before_deadline = left - self.node_timeout.saturating_mul(2);
        self.next = now + (left / 2).min(before_deadline);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::round::Vote;
    use crate::spec::LockSpec;
    use crate::token::Token;

    fn lease(now: Instant, validity: Duration) -> Lease {
        Lease {
            spec: LockSpec::new(b"", [b"r"], Token::new(b"t".to_vec()).expect("valid"))
                .expect("valid"),
            ttl: validity,
            valid_until: now + validity,
            votes: vec![Vote::Granted; 3],
            attempts: 1,
            fence: None,
        }
    }

    fn extended(valid_until: Instant) -> ExtendOutcome {
        ExtendOutcome::Extended {
            valid_until,
            ttl: Duration::from_secs(10),
            votes: Vec::new(),
        }
    }

    fn failed(reason: ExtendFailure) -> ExtendOutcome {
        ExtendOutcome::NotExtended {
            reason,
            votes: Vec::new(),
        }
    }

    #[test]
    fn extends_halfway_and_keeps_going() {
        let t0 = crate::testing::epoch();
        let timeout = Duration::from_millis(100);
        let mut renewal = Renewal::new(t0, &lease(t0, Duration::from_secs(10)), timeout);
        assert_eq!(
            renewal.poll(t0),
            RenewalStep::Wait(t0 + Duration::from_secs(5))
        );
        let t1 = t0 + Duration::from_secs(5);
        assert_eq!(renewal.poll(t1), RenewalStep::Extend);
        assert_eq!(
            renewal.poll(t1),
            RenewalStep::Wait(t0 + Duration::from_secs(10)),
            "one extension at a time"
        );
        renewal.handle_extended(t1, &extended(t1 + Duration::from_secs(10)));
        assert_eq!(
            renewal.poll(t1),
            RenewalStep::Wait(t1 + Duration::from_secs(5))
        );
    }

    #[test]
    fn retries_while_a_retry_can_finish_then_gives_up_before_validity_ends() {
        let t0 = crate::testing::epoch();
        let timeout = Duration::from_millis(100);
        let mut renewal = Renewal::new(t0, &lease(t0, Duration::from_secs(2)), timeout);
        let mut now = t0;
        let mut attempts = 0;
        loop {
            match renewal.poll(now) {
                RenewalStep::Wait(at) => {
                    assert!(at > now);
                    now = at;
                }
                RenewalStep::Extend => {
                    attempts += 1;
                    renewal.handle_extended(now, &failed(ExtendFailure::Unavailable));
                }
                RenewalStep::Lost(cause) => {
                    assert_eq!(cause, LossCause::NoTimeLeft);
                    break;
                }
            }
        }
        assert!(attempts >= 3, "{attempts}");
        assert!(
            now < t0 + Duration::from_secs(2),
            "lost is declared before validity ends"
        );
    }

    #[test]
    fn a_lock_that_is_not_held_is_lost_at_once() {
        let t0 = crate::testing::epoch();
        let mut renewal = Renewal::new(
            t0,
            &lease(t0, Duration::from_secs(10)),
            Duration::from_millis(10),
        );
        let t1 = t0 + Duration::from_secs(5);
        assert_eq!(renewal.poll(t1), RenewalStep::Extend);
        renewal.handle_extended(t1, &failed(ExtendFailure::NotHeld));
        assert_eq!(renewal.poll(t1), RenewalStep::Lost(LossCause::NotHeld));
    }

    #[test]
    fn validity_passing_mid_extension_is_a_loss() {
        let t0 = crate::testing::epoch();
        let mut renewal = Renewal::new(
            t0,
            &lease(t0, Duration::from_secs(1)),
            Duration::from_millis(10),
        );
        let due = t0 + Duration::from_millis(500);
        assert_eq!(renewal.poll(due), RenewalStep::Extend);
        assert_eq!(
            renewal.poll(t0 + Duration::from_secs(1)),
            RenewalStep::Lost(LossCause::Expired)
        );
    }
}
