//! One batch of requests, one per node, sent at once and answered by a common deadline.
//!
//! The round is where stale input dies: a reply from another batch, for a node out of range, a
//! second reply for the same node, or one at or after the deadline is not recorded.

use std::sync::Arc;
use std::time::Instant;

use smallvec::{SmallVec, smallvec};

use crate::command::{Command, Extras, Op};
use crate::id::{Origin, RequestId};
use crate::output::Transmit;
use crate::quorum::Tally;
use crate::reply::{NodeErrorKind, Reply};
use crate::sit_out::SitOutCause;
use crate::spec::LockSpec;

/// One node's answer in an acquire or extend round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Vote {
    /// No answer yet (the round was decided without it).
    Pending,
    /// The node set (or extended) our keys.
    Granted,
    /// The node holds a key under another token (or, for an extend, no longer holds ours).
    Refused,
    /// The request failed.
    Failed(NodeErrorKind),
    /// No answer before the deadline.
    TimedOut,
    /// The node lost its memory too recently to vote (restart-aware voting): it refuses for
    /// this many more milliseconds by its own clock, for `cause`. Counts against the quorum
    /// like a failure.
    Ineligible {
        /// How much longer the node refuses, in ms.
        for_ms: u64,
        /// Why it sits out.
        cause: SitOutCause,
    },
}

/// One node's answer to a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeRelease {
    /// No answer yet.
    Pending,
    /// Our keys were deleted.
    Released,
    /// None of our keys was there (expired, or never set).
    Absent,
    /// A key is held by another token; it was left alone (ours, if any, were deleted). Also a
    /// node a held lock's release did not ask: it refused the winning round, when another
    /// token held the key (which may have expired since).
    HeldByOther,
    /// The request failed.
    Failed(NodeErrorKind),
    /// No answer before the deadline.
    TimedOut,
}

/// A per-node answer that a round can track.
pub(crate) trait NodeAnswer: Copy + PartialEq {
    const PENDING: Self;
    const TIMED_OUT: Self;
    /// Reads the reply to a command of `op`.
    fn from_reply(op: Op, reply: Reply) -> Self;
}

impl NodeAnswer for Vote {
    const PENDING: Self = Vote::Pending;
    const TIMED_OUT: Self = Vote::TimedOut;

    fn from_reply(op: Op, reply: Reply) -> Self {
        match (op, reply) {
            (Op::SetIfAbsent, Reply::Ok) | (_, Reply::Int(1)) => Vote::Granted,
            (Op::SetIfAbsent, Reply::Ineligible { for_ms, cause }) => {
                Vote::Ineligible { for_ms, cause }
            }
            (Op::SetIfAbsent, Reply::Int(n)) if n < 0 => Vote::Ineligible {
                for_ms: n.unsigned_abs(),
                cause: SitOutCause::Unrecorded,
            },
            (Op::SetIfAbsent, Reply::Nil) | (_, Reply::Int(0)) => Vote::Refused,
            (_, Reply::Error(kind)) => Vote::Failed(kind),
            _ => Vote::Failed(NodeErrorKind::Protocol),
        }
    }
}

impl NodeAnswer for NodeRelease {
    const PENDING: Self = NodeRelease::Pending;
    const TIMED_OUT: Self = NodeRelease::TimedOut;

    fn from_reply(_op: Op, reply: Reply) -> Self {
        match reply {
            Reply::Int(1) => NodeRelease::Released,
            Reply::Int(0) => NodeRelease::Absent,
            Reply::Int(-1) => NodeRelease::HeldByOther,
            Reply::Error(kind) => NodeRelease::Failed(kind),
            _ => NodeRelease::Failed(NodeErrorKind::Protocol),
        }
    }
}

/// How many nodes a round keeps inline: a deployment of up to this many nodes (the usual 3 or
/// 5) runs its rounds without allocating; a larger one allocates each round's per-node state.
const INLINE_NODES: usize = 5;

/// One value per node, inline up to [`INLINE_NODES`].
pub(crate) type PerNode<T> = SmallVec<[T; INLINE_NODES]>;

/// A batch of one command per node.
#[derive(Debug, Clone)]
pub(crate) struct Round<A> {
    origin: Origin,
    batch: u32,
    op: Op,
    ttl_ms: u64,
    /// What the round's commands add to their operation (restart-aware voting, fencing).
    extras: Extras,
    pub(crate) started: Instant,
    pub(crate) deadline: Instant,
    pub(crate) answers: PerNode<A>,
    /// What each node's fenced acquire reported: the largest of its fence counters and its
    /// clock (only for fenced acquires that granted).
    pub(crate) fences: PerNode<Option<u64>>,
    /// Nodes this round does not ask (a fence commit asks only the nodes that granted).
    skip: PerNode<bool>,
    /// Nodes whose command goes as to a node not heard granting
    /// ([`Extras::unheard`](crate::command::Extras)): a lost round's clean-up there.
    unheard: PerNode<bool>,
    sent: usize,
    /// Per node, the slot whose tag goes before its keys (one of several votes over one
    /// cluster), when any node has one.
    key_slots: Option<Arc<[Option<crate::Slot>]>>,
}

impl<A: NodeAnswer> Round<A> {
    /// A round of `op` to every node of `config`, started at `now`, answered by `deadline`.
    pub(crate) fn new(
        batch: u32,
        op: Op,
        ttl_ms: u64,
        config: &crate::Config,
        now: Instant,
        deadline: Instant,
    ) -> Self {
        let nodes = config.nodes();
        Self {
            key_slots: config.key_slots().cloned(),
            origin: Origin::default(),
            batch,
            op,
            ttl_ms,
            extras: Extras::default(),
            started: now,
            deadline,
            answers: smallvec![A::PENDING; nodes],
            fences: smallvec![None; nodes],
            skip: smallvec![false; nodes],
            unheard: smallvec![false; nodes],
            sent: 0,
        }
    }

    /// A round of `op` to the same nodes, for the same lock (origin, TTL and key slots), with
    /// this round's batch and times until [`restart`](Round::restart)ed, which it must be
    /// before its first request.
    pub(crate) fn sibling<B: NodeAnswer>(&self, op: Op) -> Round<B> {
        let nodes = self.answers.len();
        Round {
            key_slots: self.key_slots.clone(),
            origin: self.origin,
            batch: self.batch,
            op,
            ttl_ms: self.ttl_ms,
            extras: Extras::default(),
            started: self.started,
            deadline: self.deadline,
            answers: smallvec![B::PENDING; nodes],
            fences: smallvec![None; nodes],
            skip: smallvec![false; nodes],
            unheard: smallvec![false; nodes],
            sent: 0,
        }
    }

    /// Names the lock and operation this round's requests belong to.
    pub(crate) fn set_origin(&mut self, origin: Origin) {
        self.origin = origin;
    }

    /// What every command of the round adds to its operation.
    pub(crate) fn set_extras(&mut self, extras: Extras) {
        self.extras = extras;
    }

    /// Asks only the nodes `only` marks; the others count as `skipped` from the start.
    pub(crate) fn ask_only(&mut self, only: &[bool], skipped: A) {
        for (node, _) in only.iter().enumerate().filter(|(_, asked)| !**asked) {
            self.leave_out(node, skipped);
        }
    }

    /// Does not ask `node`: it counts as `answer` from the start.
    pub(crate) fn leave_out(&mut self, node: usize, answer: A) {
        if let (Some(skip), Some(slot)) = (self.skip.get_mut(node), self.answers.get_mut(node)) {
            *skip = true;
            *slot = answer;
        }
    }

    /// Sends `node` its command as to a node not heard granting
    /// ([`Extras::unheard`](crate::command::Extras)).
    pub(crate) fn mark_unheard(&mut self, node: usize) {
        if let Some(unheard) = self.unheard.get_mut(node) {
            *unheard = true;
        }
    }

    /// Reuses the round's storage for a new batch.
    pub(crate) fn restart(&mut self, batch: u32, op: Op, now: Instant, deadline: Instant) {
        self.batch = batch;
        self.op = op;
        self.started = now;
        self.deadline = deadline;
        self.answers.fill(A::PENDING);
        self.fences.fill(None);
        self.skip.fill(false);
        self.unheard.fill(false);
        self.sent = 0;
    }

    /// The next request to send, until every node has one.
    pub(crate) fn next_transmit(&mut self, spec: &LockSpec) -> Option<Transmit> {
        while self.skip.get(self.sent).copied().unwrap_or(false) {
            self.sent += 1;
        }
        if self.sent >= self.answers.len() {
            return None;
        }
        let node = self.sent;
        self.sent += 1;
        let slot = self.key_slots.as_ref().and_then(|slots| slots[node]);
        let spec = slot.map_or_else(|| spec.clone(), |slot| spec.in_slot(slot));
        let mut extras = self.extras;
        extras.unheard = self.unheard[node];
        Some(Transmit {
            id: RequestId::new(self.origin, self.batch, node),
            command: Command::new(self.op, spec, self.ttl_ms, extras),
        })
    }

    /// Records a reply if it belongs here: this lock and operation, this batch, a known node,
    /// sent, first answer, in time.
    /// Returns whether it was recorded.
    pub(crate) fn record(&mut self, now: Instant, id: RequestId, reply: Reply) -> bool {
        if id.origin() != self.origin
            || id.batch() != self.batch
            || id.node() >= self.sent
            || self.skip[id.node()]
            || now >= self.deadline
        {
            return false;
        }
        let slot = &mut self.answers[id.node()];
        if *slot != A::PENDING {
            return false;
        }
        // A fenced acquire answers `v + 1` when it sets the keys (see ACQUIRE_FENCED_SCRIPT).
        let fenced = self.op == Op::SetIfAbsent && self.extras.fenced;
        match reply {
            Reply::Int(n) if fenced && n >= 1 => {
                *slot = A::from_reply(self.op, Reply::Int(1));
                self.fences[id.node()] = Some(n.unsigned_abs() - 1);
            }
            reply => *slot = A::from_reply(self.op, reply),
        }
        true
    }

    /// Marks every unanswered request as timed out once the deadline has come.
    pub(crate) fn expire(&mut self, now: Instant) {
        if now >= self.deadline {
            for slot in &mut self.answers {
                if *slot == A::PENDING {
                    *slot = A::TIMED_OUT;
                }
            }
        }
    }

    /// Whether any request still waits for an answer.
    pub(crate) fn has_pending(&self) -> bool {
        self.answers.contains(&A::PENDING)
    }
}

impl Round<Vote> {
    pub(crate) fn tally(&self) -> Tally {
        let mut tally = Tally::default();
        for vote in &self.answers {
            match vote {
                Vote::Granted => tally.granted += 1,
                Vote::Refused => tally.refused += 1,
                Vote::Failed(_) | Vote::TimedOut | Vote::Ineligible { .. } => tally.failed += 1,
                Vote::Pending => tally.pending += 1,
            }
        }
        tally
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::Token;
    use std::time::Duration;

    fn spec() -> LockSpec {
        LockSpec::new(b"", [b"r"], Token::new(b"t".to_vec()).expect("valid")).expect("valid")
    }

    #[test]
    fn stale_duplicate_late_and_unknown_replies_do_not_count() {
        let t0 = crate::testing::epoch();
        let deadline = t0 + Duration::from_millis(10);
        let mut round: Round<Vote> = Round::new(
            7,
            Op::SetIfAbsent,
            100,
            &crate::Config::new(3).expect("valid"),
            t0,
            deadline,
        );
        let spec = spec();
        let ids: Vec<RequestId> = std::iter::from_fn(|| round.next_transmit(&spec))
            .map(|t| t.id)
            .collect();
        assert_eq!(ids.len(), 3);
        assert!(round.record(t0, ids[0], Reply::Ok));
        assert!(!round.record(t0, ids[0], Reply::Nil), "duplicate");
        assert!(
            !round.record(t0, ids[1].with_batch(6), Reply::Ok),
            "old batch"
        );
        assert!(
            !round.record(t0, ids[1].with_node(9), Reply::Ok),
            "unknown node"
        );
        let other_operation = RequestId::new(Origin::new(0, 1), 7, 1);
        assert!(
            !round.record(t0, other_operation, Reply::Ok),
            "another operation's batch 7"
        );
        let other_lock = RequestId::new(Origin::new(9, 0), 7, 1);
        assert!(
            !round.record(t0, other_lock, Reply::Ok),
            "another lock's batch 7"
        );
        assert!(!round.record(deadline, ids[1], Reply::Ok), "late");
        round.expire(deadline);
        assert_eq!(
            round.answers[..],
            [Vote::Granted, Vote::TimedOut, Vote::TimedOut]
        );
    }

    #[test]
    fn replies_read_per_operation() {
        assert_eq!(Vote::from_reply(Op::SetIfAbsent, Reply::Ok), Vote::Granted);
        assert_eq!(Vote::from_reply(Op::SetIfAbsent, Reply::Nil), Vote::Refused);
        assert_eq!(
            Vote::from_reply(Op::SetIfAbsent, Reply::Int(-26_000)),
            Vote::Ineligible {
                for_ms: 26_000,
                cause: SitOutCause::Unrecorded
            }
        );
        let restarted = Reply::Ineligible {
            for_ms: 26_000,
            cause: SitOutCause::Restart,
        };
        assert_eq!(
            Vote::from_reply(Op::SetIfAbsent, restarted),
            Vote::Ineligible {
                for_ms: 26_000,
                cause: SitOutCause::Restart
            }
        );
        assert_eq!(
            Vote::from_reply(Op::ExpireIfEquals, restarted),
            Vote::Failed(NodeErrorKind::Protocol)
        );
        assert_eq!(
            Vote::from_reply(Op::ExpireIfEquals, Reply::Int(-5)),
            Vote::Failed(NodeErrorKind::Protocol),
            "only an acquire can be refused for eligibility"
        );
        assert_eq!(
            Vote::from_reply(Op::ExpireIfEquals, Reply::Ok),
            Vote::Failed(NodeErrorKind::Protocol)
        );
        assert_eq!(
            Vote::from_reply(Op::ExpireIfEquals, Reply::Int(7)),
            Vote::Failed(NodeErrorKind::Protocol)
        );
        assert_eq!(
            NodeRelease::from_reply(Op::DeleteIfEquals, Reply::Int(-1)),
            NodeRelease::HeldByOther
        );
        assert_eq!(
            NodeRelease::from_reply(Op::DeleteIfEquals, Reply::Other),
            NodeRelease::Failed(NodeErrorKind::Protocol)
        );
    }
}
