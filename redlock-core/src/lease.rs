//! A held lock: what it claims, and until when it may be trusted.

use std::time::{Duration, Instant};

use crate::extend::ExtendOutcome;
use crate::round::Vote;
use crate::spec::LockSpec;
use crate::token::Token;

/// The engine's record of a lock a quorum granted (adapters hand users a `Lock` built on it).
/// Valid until [`valid_until`](Lease::valid_until) by the holder's monotonic clock, and not one
/// instant longer: work that must not overlap another holder's has to finish (or be fenced)
/// before then.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    pub(crate) spec: LockSpec,
    pub(crate) ttl: Duration,
    pub(crate) valid_until: Instant,
    pub(crate) votes: Vec<Vote>,
    pub(crate) attempts: u32,
    pub(crate) fence: Option<u64>,
}

impl Lease {
    /// The token written under every key.
    pub fn token(&self) -> &Token {
        self.spec.token()
    }

    /// Keys, token and resources.
    pub fn spec(&self) -> &LockSpec {
        &self.spec
    }

    /// The TTL last set on the nodes (by the acquisition or the last successful extension).
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The end of validity: the winning round's start plus TTL minus drift (the drift
    /// allowance includes the clock bound, [`Drift::clock_bound`](crate::Drift::clock_bound)),
    /// in the instants of the clock that fed the engine. It changes only with an extension that
    /// succeeded, and never moves backwards.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// Validity left at `now` (zero once it has passed).
    pub fn remaining(&self, now: Instant) -> Duration {
        self.valid_until.saturating_duration_since(now)
    }

    /// Whether the lock may still be trusted at `now`.
    pub fn is_valid(&self, now: Instant) -> bool {
        now < self.valid_until
    }

    /// Each node's answer in the winning round (or the last successful extension).
    pub fn votes(&self) -> &[Vote] {
        &self.votes
    }

    /// The fencing token, for a lock acquired with
    /// [`LockRequest::fenced`](crate::LockRequest::fenced): larger than the fence of every
    /// earlier holder of these resources, as long as the model holds: restart-aware voting on, and
    /// the nodes' wall clocks within the longest TTL in use of each other (a node that lost its
    /// counters restarts them from its clock once it may vote again). Hand it to the protected resource with
    /// every write, and have the resource reject a write whose fence is smaller than the largest
    /// it accepted. `None` for a lock acquired without fencing (or resumed by token).
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// How many rounds the acquisition took.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Applies an extension's outcome. A successful one moves the validity (never backwards: the
    /// extend script never shortens a key's TTL, so the earlier validity still stands); a failed
    /// one changes nothing.
    pub fn apply(&mut self, outcome: &ExtendOutcome) {
        if let ExtendOutcome::Extended {
            valid_until,
            ttl,
            votes,
        } = outcome
        {
            self.valid_until = self.valid_until.max(*valid_until);
            self.ttl = self.ttl.max(*ttl);
            self.votes.clone_from(votes);
        }
    }
}
