//! The reference reading of a trace, shared by every check: the span a lease is valid for, how
//! a reply must be read, where a round must stand given its votes, and which replies a batch may
//! count.

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use redlock_core::{
    Config, FailureReason, NodeErrorKind, NodeRelease, Op, Reply, RequestId, SitOutCause, Vote,
};

use crate::At;
use crate::world::{Rec, Source};

/// `ttl − drift`, with `drift = ttl × factor + floor + clock_bound` (the factor kept to a
/// millionth).
pub(crate) fn span(config: &Config, ttl: Duration) -> Duration {
    // The factor is a number in [0, 1): its millionths fit in u64.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let ppm = (config.drift().factor() * 1e6).round() as u128;
    let scaled = u64::try_from(ttl.as_nanos() * ppm / 1_000_000).expect("below the ttl");
    ttl - (Duration::from_nanos(scaled) + config.drift().floor() + config.drift().clock_bound())
}

/// How an acquire or extend round must read a reply.
fn vote(op: Op, reply: Reply) -> Vote {
    match (op, reply) {
        (Op::SetIfAbsent, Reply::Ok) | (_, Reply::Int(1)) => Vote::Granted,
        (Op::SetIfAbsent, Reply::Nil) | (_, Reply::Int(0)) => Vote::Refused,
        // Restart-aware voting: −m = the node may not vote for m ms more (a failure).
        // A plain −m names no cause; a script's `{-m, why}` names its own.
        (Op::SetIfAbsent, Reply::Int(n)) if n < 0 => Vote::Ineligible {
            for_ms: n.unsigned_abs(),
            cause: SitOutCause::Unrecorded,
        },
        (Op::SetIfAbsent, Reply::Ineligible { for_ms, cause }) => {
            Vote::Ineligible { for_ms, cause }
        }
        (_, Reply::Error(kind)) => Vote::Failed(kind),
        _ => Vote::Failed(NodeErrorKind::Protocol),
    }
}

/// How a release must read a reply.
fn node_release(reply: Reply) -> NodeRelease {
    match reply {
        Reply::Int(1) => NodeRelease::Released,
        Reply::Int(0) => NodeRelease::Absent,
        Reply::Int(-1) => NodeRelease::HeldByOther,
        Reply::Error(kind) => NodeRelease::Failed(kind),
        _ => NodeRelease::Failed(NodeErrorKind::Protocol),
    }
}

/// Where a round stands: still open, won, or lost and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    Open,
    Won,
    Lost(FailureReason),
}

/// Where a round must stand given its votes: won at a quorum of grants, lost once a quorum
/// cannot be reached any more (contended if the nodes that answered could have formed one).
pub(crate) fn decide(votes: &[Vote], quorum: usize) -> Decision {
    let count = |v: Vote| votes.iter().filter(|x| **x == v).count();
    let (granted, refused, pending) = (
        count(Vote::Granted),
        count(Vote::Refused),
        count(Vote::Pending),
    );
    if granted >= quorum {
        Decision::Won
    } else if granted + pending < quorum {
        if granted + refused >= quorum {
            Decision::Lost(FailureReason::Contended)
        } else {
            Decision::Lost(FailureReason::Unavailable)
        }
    } else {
        Decision::Open
    }
}

/// One batch as the engine should see it: the first reply per node that came under the batch's
/// id, from the network (not a stray), before the deadline.
#[derive(Debug, Clone)]
pub(crate) struct Batch {
    pub(crate) batch: u32,
    op: Op,
    pub(crate) t0: At,
    pub(crate) deadline: At,
    pub(crate) sent: Vec<bool>,
    pub(crate) answers: Vec<Option<(Reply, Source)>>,
}

/// Checks one request of a machine that sends a single batch: it belongs to that batch, goes out
/// in the same drain as the batch's other requests, and asks its node once.
pub(crate) fn check_single_batch_send<O>(
    round: &mut Batch,
    id: RequestId,
    previous: Option<&Rec<O>>,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(id.batch(), round.batch, "one batch");
    if round.sent.iter().any(|s| *s) {
        prop_assert!(
            matches!(previous, Some(Rec::Send { .. })),
            "requests in separate drains"
        );
    }
    prop_assert!(round.mark_sent(id.node()), "a node asked twice");
    Ok(())
}

impl Batch {
    pub(crate) fn new(batch: u32, op: Op, t0: At, deadline: At, nodes: usize) -> Self {
        Self {
            batch,
            op,
            t0,
            deadline,
            sent: vec![false; nodes],
            answers: vec![None; nodes],
        }
    }

    /// Marks node `node` as sent to; false if it already was.
    pub(crate) fn mark_sent(&mut self, node: usize) -> bool {
        !std::mem::replace(&mut self.sent[node], true)
    }

    pub(crate) fn all_sent(&self) -> bool {
        self.sent.iter().all(|s| *s)
    }

    pub(crate) fn record(&mut self, at: At, id: RequestId, reply: Reply, source: Source) {
        let node = id.node();
        let counts = source != Source::Stray
            && id.batch() == self.batch
            && node < self.sent.len()
            && self.sent[node]
            && at < self.deadline;
        if counts && self.answers[node].is_none() {
            self.answers[node] = Some((reply, source));
        }
    }

    pub(crate) fn votes(&self, at: At) -> Vec<Vote> {
        self.answers
            .iter()
            .map(|answer| match answer {
                Some((reply, _)) => vote(self.op, *reply),
                None if at >= self.deadline => Vote::TimedOut,
                None => Vote::Pending,
            })
            .collect()
    }

    pub(crate) fn releases(&self, at: At) -> Vec<NodeRelease> {
        self.answers
            .iter()
            .map(|answer| match answer {
                Some((reply, _)) => node_release(*reply),
                None if at >= self.deadline => NodeRelease::TimedOut,
                None => NodeRelease::Pending,
            })
            .collect()
    }
}
