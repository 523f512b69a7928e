//! The check of an extension's trace against the reference reading.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use redlock_core::{ExtendFailure, ExtendOutcome, FailureReason, Lease, Op};

use crate::reference::{Batch, Decision, check_single_batch_send, decide};
use crate::world::Rec;
use crate::{At, Outcome};
/// What a run of one extension must satisfy.
pub(crate) struct ExtendSpec {
    pub(crate) nodes: usize,
    pub(crate) quorum: usize,
    pub(crate) ttl: Duration,
    pub(crate) span: Duration,
    pub(crate) node_timeout: Duration,
    pub(crate) min_validity: Duration,
    pub(crate) start: At,
    pub(crate) lease: Lease,
    pub(crate) timer_lag: Duration,
}

/// Checks an extension's whole trace against the reference reading.
pub(crate) fn check_extend(
    trace: &[Rec<ExtendOutcome>],
    x: &ExtendSpec,
    base: Instant,
) -> Outcome<ExtendOutcome> {
    let old_until = x.lease.valid_until().saturating_duration_since(base);
    let deadline = old_until
        .min(x.start + x.span)
        .min(x.start + x.node_timeout);
    let mut round: Option<Batch> = None;
    let mut previous: Option<&Rec<ExtendOutcome>> = None;
    let mut result = None;
    for rec in trace {
        match rec {
            Rec::Send { at, id, command } => {
                prop_assert_eq!(
                    command.op(),
                    Op::ExpireIfEquals,
                    "an extension only sends compare-and-pexpire"
                );
                prop_assert_eq!(command.spec(), x.lease.spec());
                let ms = u64::try_from(x.ttl.as_millis()).expect("small");
                prop_assert_eq!(command.ttl_ms(), Some(ms));
                prop_assert_eq!(*at, x.start, "every request goes out at once");
                let new = || Batch::new(id.batch(), Op::ExpireIfEquals, x.start, deadline, x.nodes);
                check_single_batch_send(round.get_or_insert_with(new), *id, previous)?;
            }
            Rec::Reply {
                at,
                id,
                reply,
                source,
            } => {
                if let Some(round) = &mut round {
                    round.record(*at, *id, *reply, *source);
                }
            }
            Rec::Timeout { .. } => {}
            Rec::Wait { at, until } => {
                let Some(round) = &round else {
                    return Err(TestCaseError::fail("waited without a round"));
                };
                prop_assert!(round.all_sent(), "waited before asking every node");
                prop_assert_eq!(
                    decide(&round.votes(*at), x.quorum),
                    Decision::Open,
                    "waited on a decided extension"
                );
                prop_assert!(*until <= deadline);
            }
            Rec::Done { at, outcome } => {
                prop_assert!(
                    *at <= deadline.max(x.start) + x.timer_lag,
                    "done at {at:?}, after the deadline {deadline:?}"
                );
                let Some(round) = &round else {
                    prop_assert!(old_until <= x.start, "nothing sent for a valid lease");
                    prop_assert_eq!(
                        outcome,
                        &ExtendOutcome::NotExtended {
                            reason: ExtendFailure::Expired,
                            votes: Vec::new()
                        }
                    );
                    result = Some(outcome.clone());
                    continue;
                };
                prop_assert!(old_until > x.start, "an expired lease was extended");
                let votes = round.votes(*at);
                let decision = decide(&votes, x.quorum);
                let valid_until = x.start + x.span;
                let fresh = valid_until
                    .checked_sub(*at)
                    .is_some_and(|left| left > x.min_validity);
                match outcome {
                    ExtendOutcome::Extended {
                        valid_until: got,
                        ttl,
                        votes: got_votes,
                    } => {
                        prop_assert_eq!(
                            decision,
                            Decision::Won,
                            "extended without a quorum: {:?}",
                            votes
                        );
                        prop_assert!(fresh);
                        prop_assert_eq!(
                            got.saturating_duration_since(base),
                            valid_until,
                            "counted from the extension's start"
                        );
                        prop_assert_eq!(
                            *ttl,
                            Duration::from_millis(u64::try_from(x.ttl.as_millis()).expect("small"))
                        );
                        prop_assert_eq!(got_votes, &votes);
                    }
                    ExtendOutcome::NotExtended {
                        reason,
                        votes: got_votes,
                    } => {
                        let want = match decision {
                            Decision::Won if !fresh => ExtendFailure::TooSlow,
                            Decision::Lost(FailureReason::Contended) => ExtendFailure::NotHeld,
                            Decision::Lost(_) => ExtendFailure::Unavailable,
                            other => {
                                return Err(TestCaseError::fail(format!(
                                    "not extended, yet {other:?}: {votes:?}"
                                )));
                            }
                        };
                        prop_assert_eq!(*reason, want);
                        prop_assert_eq!(got_votes, &votes);
                    }
                }
                result = Some(outcome.clone());
            }
        }
        previous = Some(rec);
    }
    result.ok_or_else(|| TestCaseError::fail("no outcome"))
}
