//! The release machine: compare-and-delete on every node.
//!
//! Step 5 of the Redlock description. Every node is asked, whether or not it granted the lock
//! (a request that timed out may still have set its key), but one that refused the winning
//! round of a token drawn for that round alone ([`Release::skip_refused`]). Done when every
//! node answered or the deadline passed; a key held by another token is never touched.
//! Releasing a lock that expired is an ordinary report (`Absent` or `HeldByOther`), not an
//! error.

#![cfg_attr(not(any(test, feature = "testing")), allow(unreachable_pub))]

use std::time::{Duration, Instant};

use crate::broadcast::Broadcast;
use crate::command::{Extras, Op};
use crate::config::Config;
use crate::id::{Origin, RequestId};
use crate::lease::Lease;
use crate::output::Output;
use crate::reply::Reply;
use crate::round::NodeRelease;
use crate::spec::LockSpec;

/// What each node did with a release.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReleaseReport {
    /// One entry per node, in node order.
    pub nodes: Vec<NodeRelease>,
}

impl ReleaseReport {
    /// How many nodes deleted our keys.
    pub fn released(&self) -> usize {
        self.count(|n| n == NodeRelease::Released)
    }

    /// How many nodes had none of our keys (expired, or never set).
    pub fn absent(&self) -> usize {
        self.count(|n| n == NodeRelease::Absent)
    }

    /// How many nodes hold a key under another token.
    pub fn held_by_other(&self) -> usize {
        self.count(|n| n == NodeRelease::HeldByOther)
    }

    /// How many nodes failed or did not answer in time: their keys (if any) expire by TTL.
    pub fn unreachable(&self) -> usize {
        self.count(|n| {
            matches!(
                n,
                NodeRelease::Failed(_) | NodeRelease::TimedOut | NodeRelease::Pending
            )
        })
    }

    /// True when every node answered and none still holds our keys.
    pub fn is_clean(&self) -> bool {
        self.unreachable() == 0
    }

    fn count(&self, f: impl Fn(NodeRelease) -> bool) -> usize {
        self.nodes.iter().filter(|n| f(**n)).count()
    }
}

/// Releases a lock. Inputs and outputs as for [`Acquire`](crate::Acquire).
#[derive(Debug)]
pub struct Release(Broadcast<NodeRelease>);

impl Release {
    /// Prepares to release `lease` on every node.
    pub fn new(now: Instant, config: &Config, lease: &Lease) -> Self {
        Self::for_spec(now, config, lease.spec().clone(), lease.ttl())
    }

    /// Prepares to release `spec`'s keys (set with `ttl`) on every node; for locks whose lease
    /// never reached the caller, such as a cancelled acquisition.
    pub fn for_spec(now: Instant, config: &Config, spec: LockSpec, ttl: Duration) -> Self {
        let timeout = config.node_timeout(ttl);
        let deadline = now.checked_add(timeout).unwrap_or(now);
        let mut broadcast = Broadcast::new(Op::DeleteIfEquals, spec, config, now, deadline);
        // A release ends a hold: waiters on the keys may go now.
        broadcast.set_extras(Extras {
            notify: true,
            ..Extras::default()
        });
        Self(broadcast)
    }

    /// The keys and token being released.
    pub fn spec(&self) -> &LockSpec {
        self.0.spec()
    }

    /// Sends nothing to the nodes `refused` marks: they refused this token because another
    /// token held the key, and this one never reaches them, so a compare-and-delete would
    /// delete nothing there and, announced, wake every waiter for a lock that is no freer.
    /// They count as [`NodeRelease::HeldByOther`], as they answered the acquisition (that
    /// other key may have expired since). Only for a token no other round or client ever used:
    /// a caller's token may be held, from an earlier round whose release failed, on a node
    /// that refused it.
    pub(crate) fn skip_refused(&mut self, refused: &[bool]) {
        for (node, _) in refused.iter().enumerate().filter(|(_, refused)| **refused) {
            self.0.leave_out(node, NodeRelease::HeldByOther);
        }
    }

    /// Names the lock and operation its requests belong to.
    pub(crate) fn set_origin(&mut self, origin: Origin) {
        self.0.set_origin(origin);
    }

    /// Hands in the reply to request `id` (stale, duplicate, late and unknown ones are ignored).
    pub fn handle_reply(&mut self, now: Instant, id: RequestId, reply: Reply) {
        self.0.handle_reply(now, id, reply);
    }

    /// Lets the deadline pass; harmless at any other time.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.0.handle_timeout(now);
    }

    /// The next thing to do. See [`Output`](crate::Output).
    pub fn poll_output(&mut self, now: Instant) -> Output<ReleaseReport> {
        match self.0.poll_output(now) {
            Output::Send(transmit) => Output::Send(transmit),
            Output::Wait(at) => Output::Wait(at),
            Output::Done(nodes) => Output::Done(ReleaseReport { nodes }),
            Output::Idle => Output::Idle,
        }
    }
}

crate::machine::impl_machine!(Release, ReleaseReport);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{FakeNode, Link, drive};
    use crate::token::Token;

    #[test]
    fn releases_ours_reports_others_and_waits_only_until_the_deadline() {
        let config = Config::new(5).expect("valid");
        let spec = LockSpec::new(b"", [b"r"], Token::new(b"mine".to_vec()).expect("valid"))
            .expect("valid");
        let mut nodes = vec![FakeNode::default(); 5];
        nodes[0].put(b"r".to_vec(), b"mine".to_vec());
        nodes[1].put(b"r".to_vec(), b"theirs".to_vec());
        nodes[4].put(b"r".to_vec(), b"mine".to_vec());
        let ttl = Duration::from_secs(1);
        let t0 = crate::testing::epoch();
        let mut release = Release::for_spec(t0, &config, spec, ttl);
        let links = [Link::Up, Link::Up, Link::Up, Link::Refused, Link::Silent];
        let (report, took, _) = drive(&mut release, &mut nodes, &links, t0);
        assert_eq!(
            report.nodes,
            [
                NodeRelease::Released,
                NodeRelease::HeldByOther,
                NodeRelease::Absent,
                NodeRelease::Failed(crate::NodeErrorKind::Connection),
                NodeRelease::TimedOut
            ]
        );
        assert_eq!(
            (
                report.released(),
                report.held_by_other(),
                report.unreachable()
            ),
            (1, 1, 2)
        );
        assert!(!report.is_clean());
        assert_eq!(took, config.node_timeout(ttl));
        assert_eq!(
            nodes[1].token(b"r"),
            Some(&b"theirs"[..]),
            "another holder's key is never touched"
        );
        assert!(nodes[0].keys.is_empty());
        assert!(matches!(release.poll_output(t0 + took), Output::Idle));
    }
}
