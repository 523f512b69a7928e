//! The check of a release's trace against the reference reading.

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use redlock_core::{Lease, NodeRelease, Op, ReleaseReport};

use crate::reference::{Batch, check_single_batch_send};
use crate::world::{Rec, Source};
use crate::{At, Outcome};

/// Checks a release's whole trace against the reference reading, given when it started, its
/// deadline and how late the driver's timer fires.
pub(crate) fn check_release(
    trace: &[Rec<ReleaseReport>],
    lease: &Lease,
    nodes: usize,
    (start, deadline, timer_lag): (At, At, Duration),
) -> Outcome<ReleaseReport> {
    let mut round: Option<Batch> = None;
    let mut previous: Option<&Rec<ReleaseReport>> = None;
    let mut result = None;
    for rec in trace {
        match rec {
            Rec::Send { at, id, command } => {
                prop_assert_eq!(
                    command.op(),
                    Op::DeleteIfEquals,
                    "a release only sends compare-and-delete"
                );
                prop_assert_eq!(
                    command.spec(),
                    lease.spec(),
                    "with the lease's keys and token"
                );
                prop_assert_eq!(*at, start, "every request goes out at once");
                let new = || Batch::new(id.batch(), Op::DeleteIfEquals, start, deadline, nodes);
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
                prop_assert!(
                    *at < deadline && round.answers.iter().any(Option::is_none),
                    "waited for nothing at {at:?}"
                );
                prop_assert!(*until <= deadline);
            }
            Rec::Done { at, outcome } => {
                let Some(round) = &round else {
                    return Err(TestCaseError::fail("done without asking"));
                };
                let answered = round.answers.iter().all(Option::is_some);
                prop_assert!(
                    answered || *at >= deadline,
                    "done at {at:?} with nodes unanswered before the deadline"
                );
                prop_assert!(*at <= deadline + timer_lag, "done after the deadline");
                prop_assert_eq!(&outcome.nodes, &round.releases(*at));
                for (node, (report, answer)) in outcome.nodes.iter().zip(&round.answers).enumerate()
                {
                    if let Some((_, Source::Node { foreign: true })) = answer {
                        prop_assert_ne!(
                            *report,
                            NodeRelease::Released,
                            "node {} holds another token",
                            node
                        );
                    }
                }
                result = Some(outcome.clone());
            }
        }
        previous = Some(rec);
    }
    result.ok_or_else(|| TestCaseError::fail("no outcome"))
}
