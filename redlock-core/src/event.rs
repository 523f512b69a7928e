//! What a [`Lifecycle`](crate::Lifecycle) tells its driver: requests to send, when to wake and
//! why, and what happened to the lock.

use std::time::Instant;

use crate::acquire::AcquireFailure;
use crate::extend::ExtendOutcome;
use crate::lease::Lease;
use crate::output::Transmit;
use crate::release::ReleaseReport;
use crate::renewal::LossCause;
use crate::round::Vote;

/// Which operation of a lock a wake-up or a request belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Acquisition rounds (and the clean-up of a lost round).
    Acquire,
    /// Proving a token holds the lock, to resume it in another client.
    Resume,
    /// An extension (asked for by the caller, or by auto-extension).
    Extend,
    /// The release.
    Release,
    /// Marking the nodes trusted (restart-aware voting).
    Trust,
}

/// Why the lifecycle wants to be woken: for traces and logs (firezone's labelled timers). The
/// driver treats every reason alike: call `handle_timeout` at the instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WakeReason {
    /// The replies of a round of this operation are due by then (unanswered requests time out).
    Replies(Operation),
    /// The pause between two acquisition rounds ends (a `handle_wake` ends it earlier).
    RetryPause,
    /// The next auto-extension is due.
    AutoExtend,
}

/// Who started an extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trigger {
    /// The caller, through [`Lifecycle::extend`](crate::Lifecycle::extend).
    Caller,
    /// Auto-extension ([`LockRequest::auto_extend`](crate::LockRequest::auto_extend)).
    Renewal,
}

/// What happened to a lock. Each comes out of `poll_output` once.
#[derive(Debug, Clone, PartialEq)]
pub enum LockEvent {
    /// A quorum granted the lock (or, for a resumed lock, proved the token holds it): it is held
    /// until the lease's `valid_until`.
    Acquired(Lease),
    /// No round won (or the token did not hold the lock); every round's keys were released.
    /// The lifecycle has ended.
    NotAcquired(AcquireFailure),
    /// An extension ended; on success the lease's validity already moved.
    Extended {
        /// How it ended.
        outcome: ExtendOutcome,
        /// Who asked for it.
        trigger: Trigger,
    },
    /// The lock could not be kept: stop the work it protects now. The keys stay until released
    /// (or until their TTL).
    ///
    /// A [`Lifecycle`](crate::Lifecycle) reports it for an auto-extended lock. If the driver
    /// calls `handle_timeout` at every `Wait` instant, it comes out when the validity ends at
    /// the latest ([`LossCause::Expired`]), and often earlier: the renewal gives up with
    /// [`LossCause::NoTimeLeft`] as soon as one more extension could not finish in time, and
    /// with [`LossCause::NotHeld`] when an extension finds the token gone. The exception is a
    /// caller's extension still in flight when the validity ends: its answer is awaited first.
    /// A [`Multiplexer`](crate::Multiplexer) also reports it, with [`LossCause::Expired`], when
    /// a lock held without auto-extension reaches the end of its validity. Either way the
    /// deadline to trust is [`Lease::valid_until`], not the arrival of this event.
    Lost {
        /// Why.
        cause: LossCause,
        /// Each node's answer in the last extension that failed (empty if none ran).
        votes: Vec<Vote>,
    },
    /// The release ended; the lifecycle has ended.
    Released(ReleaseReport),
    /// The nodes were asked to trust their memory (`Granted` = trusted); the lifecycle has ended.
    Trusted(Vec<Vote>),
}

/// The next thing a [`Lifecycle`](crate::Lifecycle) needs. Not `#[non_exhaustive]`: a driver
/// handles every variant, and a new one must fail to compile rather than panic at run time.
#[derive(Debug, Clone, PartialEq)]
#[must_use = "drain poll_output until it says Wait or Idle"]
pub enum LockOutput {
    /// Send this request now. Every request of a round comes out before the next `Wait`, so all
    /// nodes are asked at once.
    Send(Transmit),
    /// Nothing to do until a reply arrives or `at` passes; then `handle_reply` or
    /// `handle_timeout`, and poll again.
    Wait {
        /// When to call `handle_timeout`.
        at: Instant,
        /// Why (for traces).
        reason: WakeReason,
    },
    /// Something happened to the lock; keep polling.
    Event(LockEvent),
    /// Nothing in flight and nothing scheduled: the lock is held without auto-extension and
    /// waits for the caller (`extend`, `release`), or the lifecycle has ended.
    Idle,
}
