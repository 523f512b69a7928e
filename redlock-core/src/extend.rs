//! The extend machine: compare-and-pexpire on every node, one round.
//!
//! Step 5 of the Redlock description. The new validity is counted from the extend round's own
//! start. A lost round changes nothing: no key is deleted, the lease keeps its validity, and the
//! extend script never shortens a key's TTL, so a partial extension cannot weaken the old
//! validity either. A lease whose validity has passed is not extended at all (a lock that lapsed
//! may have had another holder meanwhile).

#![cfg_attr(not(any(test, feature = "testing")), allow(unreachable_pub))]

use std::time::{Duration, Instant};

use crate::command::Op;
use crate::config::Config;
use crate::error::ConfigError;
use crate::id::{Origin, RequestId};
use crate::lease::Lease;
use crate::output::Output;
use crate::quorum::{Decision, FailureReason};
use crate::reply::Reply;
use crate::round::{Round, Vote};
use crate::spec::LockSpec;
use crate::validity::Ttl;

/// Why an extension did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ExtendFailure {
    /// The lease's validity had passed before the extension started: nothing was sent.
    Expired,
    /// Too few nodes still hold our token: the lock is lost.
    NotHeld,
    /// Too few nodes answered.
    Unavailable,
    /// A quorum extended, but too late to leave the minimum validity.
    TooSlow,
}

/// How an extension ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ExtendOutcome {
    /// A quorum extended in time; apply with [`Lease::apply`].
    Extended {
        /// The new end of validity: the extend round's start plus TTL minus drift.
        valid_until: Instant,
        /// The TTL that was set.
        ttl: Duration,
        /// Each node's answer.
        votes: Vec<Vote>,
    },
    /// Nothing changed; the lease keeps its old validity.
    NotExtended {
        /// Why.
        reason: ExtendFailure,
        /// Each node's answer (empty when nothing was sent).
        votes: Vec<Vote>,
    },
}

/// Extends a lease. Inputs and outputs as for [`Acquire`](crate::Acquire).
#[derive(Debug)]
pub struct Extend {
    spec: LockSpec,
    ttl: Ttl,
    quorum: usize,
    min_validity: Duration,
    round: Round<Vote>,
    outcome: Option<Option<ExtendOutcome>>,
}

impl Extend {
    /// Prepares to extend `lease` to `ttl` from now. The TTL is checked like an acquisition's.
    pub fn new(
        now: Instant,
        config: &Config,
        lease: &Lease,
        ttl: Duration,
    ) -> Result<Self, ConfigError> {
        let ttl = Ttl::for_config(now, config, ttl)?;
        let outcome = (!lease.is_valid(now)).then(|| {
            Some(ExtendOutcome::NotExtended {
                reason: ExtendFailure::Expired,
                votes: Vec::new(),
            })
        });
        // An answer after the old validity could only extend a lock that already lapsed.
        let mut reply_by = lease.valid_until().min(ttl.valid_until(now));
        if let Some(by) = now.checked_add(config.node_timeout(ttl.duration())) {
            reply_by = reply_by.min(by);
        }
        Ok(Self {
            spec: lease.spec().clone(),
            ttl,
            quorum: config.quorum(),
            min_validity: config.min_validity(),
            round: Round::new(1, Op::ExpireIfEquals, ttl.ms, config, now, reply_by),
            outcome,
        })
    }

    /// Proves that `spec`'s token holds the lock on a quorum by extending it to `ttl` from now,
    /// without a lease of our own (a lock resumed by another client than the one that took it).
    /// The validity is counted from this round's start, as for any extension.
    pub(crate) fn resume(
        now: Instant,
        config: &Config,
        spec: LockSpec,
        ttl: Duration,
    ) -> Result<Self, ConfigError> {
        let ttl = Ttl::for_config(now, config, ttl)?;
        let mut reply_by = ttl.valid_until(now);
        if let Some(by) = now.checked_add(config.node_timeout(ttl.duration())) {
            reply_by = reply_by.min(by);
        }
        Ok(Self {
            spec,
            ttl,
            quorum: config.quorum(),
            min_validity: config.min_validity(),
            round: Round::new(1, Op::ExpireIfEquals, ttl.ms, config, now, reply_by),
            outcome: None,
        })
    }

    /// Names the lock and operation its requests belong to.
    pub(crate) fn set_origin(&mut self, origin: Origin) {
        self.round.set_origin(origin);
    }

    /// The TTL it sets, in milliseconds as sent.
    pub(crate) fn ttl_ms(&self) -> u64 {
        self.ttl.ms
    }

    /// Leaves out the nodes `not_held` marks: they said our token does not hold the lock there,
    /// and count as [`Vote::Refused`] without being asked.
    pub(crate) fn skip_not_held(&mut self, not_held: &[bool]) {
        for (node, _) in not_held.iter().enumerate().filter(|(_, gone)| **gone) {
            self.round.leave_out(node, Vote::Refused);
        }
    }

    /// Marks its commands safe to set the TTL exactly: the caller knows no key of the lock can
    /// hold a longer TTL ([`Command::sets_exact_ttl`](crate::Command::sets_exact_ttl)).
    pub(crate) fn allow_exact_ttl(&mut self) {
        self.round.set_extras(crate::command::Extras {
            exact_ttl: true,
            ..crate::command::Extras::default()
        });
    }

    /// The keys and token being extended.
    pub(crate) fn spec(&self) -> &LockSpec {
        &self.spec
    }

    /// Hands in the reply to request `id` (stale, duplicate, late and unknown ones are ignored).
    pub fn handle_reply(&mut self, now: Instant, id: RequestId, reply: Reply) {
        if self.outcome.is_none() {
            self.round.record(now, id, reply);
        }
    }

    /// Lets the deadline pass; harmless at any other time.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.round.expire(now);
    }

    /// The next thing to do. See [`Output`](crate::Output).
    pub fn poll_output(&mut self, now: Instant) -> Output<ExtendOutcome> {
        if let Some(outcome) = &mut self.outcome {
            return outcome.take().map_or(Output::Idle, Output::Done);
        }
        if let Some(transmit) = self.round.next_transmit(&self.spec) {
            return Output::Send(transmit);
        }
        self.round.expire(now);
        let outcome = match self.round.tally().decide(self.quorum) {
            Decision::Open => return Output::Wait(self.round.deadline),
            Decision::Won => match self.ttl.grant(self.round.started, now, self.min_validity) {
                Some(valid_until) => ExtendOutcome::Extended {
                    valid_until,
                    ttl: self.ttl.duration(),
                    votes: self.round.answers.to_vec(),
                },
                None => self.failed(ExtendFailure::TooSlow),
            },
            Decision::Lost(FailureReason::Contended) => self.failed(ExtendFailure::NotHeld),
            Decision::Lost(_) => self.failed(ExtendFailure::Unavailable),
        };
        self.outcome = Some(None);
        Output::Done(outcome)
    }

    fn failed(&self, reason: ExtendFailure) -> ExtendOutcome {
        ExtendOutcome::NotExtended {
            reason,
            votes: self.round.answers.to_vec(),
        }
    }
}

crate::machine::impl_machine!(Extend, ExtendOutcome);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acquire::{Acquire, AcquireOutcome};
    use crate::request::LockRequest;
    use crate::testing::{FakeNode, Link, drive, rng};

    const TTL: Duration = Duration::from_secs(10);

    fn held(config: &Config, nodes: &mut [FakeNode], t0: Instant) -> Lease {
        let request = LockRequest::new("r", TTL);
        let mut acquire = Acquire::new(t0, config, &request, &mut rng(2)).expect("valid");
        match drive(&mut acquire, nodes, &vec![Link::Up; nodes.len()], t0).0 {
            AcquireOutcome::Acquired(lease) => lease,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn extending_counts_validity_from_the_extend_round() {
        let config = Config::new(5).expect("valid");
        let mut nodes = vec![FakeNode::default(); 5];
        let t0 = crate::testing::epoch();
        let mut lease = held(&config, &mut nodes, t0);
        let later = t0 + Duration::from_secs(4);
        let mut extend = Extend::new(later, &config, &lease, TTL).expect("valid");
        let (outcome, _, sent) = drive(&mut extend, &mut nodes, &[Link::Up; 5], later);
        assert!(sent.iter().all(|(_, c)| c.op() == Op::ExpireIfEquals));
        lease.apply(&outcome);
        assert_eq!(
            lease.valid_until(),
            later + TTL - Duration::from_millis(102)
        );
    }

    #[test]
    fn a_failed_extend_changes_nothing_and_deletes_nothing() {
        let config = Config::new(5).expect("valid");
        let mut nodes = vec![FakeNode::default(); 5];
        let t0 = crate::testing::epoch();
        let mut lease = held(&config, &mut nodes, t0);
        let before = lease.clone();
        for node in &mut nodes[..3] {
            node.keys.clear();
        }
        let later = t0 + Duration::from_secs(1);
        let mut extend = Extend::new(later, &config, &lease, TTL).expect("valid");
        let (outcome, _, sent) = drive(&mut extend, &mut nodes, &[Link::Up; 5], later);
        assert!(
            matches!(
                outcome,
                ExtendOutcome::NotExtended {
                    reason: ExtendFailure::NotHeld,
                    ..
                }
            ),
            "{outcome:?}"
        );
        assert!(
            sent.iter().all(|(_, c)| c.op() == Op::ExpireIfEquals),
            "no delete"
        );
        lease.apply(&outcome);
        assert_eq!(lease, before);
        assert_eq!(nodes[3..].iter().filter(|n| !n.keys.is_empty()).count(), 2);
    }

    #[test]
    fn silent_nodes_make_it_unavailable_and_an_expired_lease_is_not_extended() {
        let config = Config::new(5).expect("valid");
        let mut nodes = vec![FakeNode::default(); 5];
        let t0 = crate::testing::epoch();
        let lease = held(&config, &mut nodes, t0);
        let links = [Link::Silent, Link::Silent, Link::Silent, Link::Up, Link::Up];
        let mut extend = Extend::new(t0, &config, &lease, TTL).expect("valid");
        let (outcome, took, _) = drive(&mut extend, &mut nodes, &links, t0);
        assert!(matches!(
            outcome,
            ExtendOutcome::NotExtended {
                reason: ExtendFailure::Unavailable,
                ..
            }
        ));
        assert_eq!(took, config.node_timeout(TTL));

        let expired = lease.valid_until();
        let mut extend = Extend::new(expired, &config, &lease, TTL).expect("valid");
        let (outcome, _, sent) = drive(&mut extend, &mut nodes, &[Link::Up; 5], expired);
        assert!(matches!(
            outcome,
            ExtendOutcome::NotExtended {
                reason: ExtendFailure::Expired,
                ..
            }
        ));
        assert!(sent.is_empty());
    }

    #[test]
    fn no_answer_counts_after_the_old_validity() {
        let config = Config::builder(3)
            .node_timeout(Duration::from_secs(5))
            .build()
            .expect("valid");
        let mut nodes = vec![FakeNode::default(); 3];
        let t0 = crate::testing::epoch();
        let lease = held(&config, &mut nodes, t0);
        let near_end = lease.valid_until() - Duration::from_millis(1);
        let mut extend = Extend::new(near_end, &config, &lease, TTL).expect("valid");
        let (outcome, took, _) = drive(&mut extend, &mut nodes, &[Link::Silent; 3], near_end);
        assert!(matches!(outcome, ExtendOutcome::NotExtended { .. }));
        assert_eq!(
            took,
            Duration::from_millis(1),
            "the wait ends with the old validity"
        );
    }
}
