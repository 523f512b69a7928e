//! The trust machine: marks every node trusted for restart-aware voting, in one round.
//!
//! For a first deployment, or after restarts an operator waited out: a node whose epoch key is
//! missing refuses to vote for the longest TTL in use (it cannot tell a fresh node from one that
//! lost its memory). Someone who *knows* that no lock is live on the nodes may say so, and the
//! nodes vote at once. Trusting a node while a lock may be live on it gives up the protection
//! restart-aware voting exists for: it is an operator's decision, never the engine's.

#![cfg_attr(not(any(test, feature = "testing")), allow(unreachable_pub))]

use std::time::{Duration, Instant};

use crate::broadcast::Broadcast;
use crate::command::Op;
use crate::config::Config;
use crate::id::{Origin, RequestId};
use crate::output::Output;
use crate::reply::Reply;
use crate::round::Vote;
use crate::spec::LockSpec;

/// The least a trust waits for each node's answer (a node timeout set longer is kept). A trust
/// is an operator's one-shot command, often a client's first contact with its nodes
/// (connections made, a cluster's map learnt and its masters connected, before the trust
/// itself goes out): a lock's node timeout (at most 1 s unless set) is too short for that on a
/// loaded machine (`redlock nodes trust` on a fresh cluster timed out on every vote at 1 s),
/// and waiting longer costs a lock nothing. Each step is still bounded by the transport's I/O
/// timeout.
const LEAST_WAIT: Duration = Duration::from_secs(10);

/// Marks every node trusted. Inputs and outputs as for [`Acquire`](crate::Acquire); the outcome
/// is each node's answer (`Granted` = trusted).
#[derive(Debug)]
pub struct Trust(Broadcast<Vote>);

impl Trust {
    /// Prepares the trust command for every node.
    pub fn new(now: Instant, config: &Config) -> Self {
        // The node timeout derived from a TTL is at most 1 s: only one set longer wins.
        let timeout = config.node_timeout(LEAST_WAIT).max(LEAST_WAIT);
        let deadline = now.checked_add(timeout).unwrap_or(now);
        Self(Broadcast::new(
            Op::Trust,
            LockSpec::epoch(),
            config,
            now,
            deadline,
        ))
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

    /// The next thing to do. See [`Output`].
    pub fn poll_output(&mut self, now: Instant) -> Output<Vec<Vote>> {
        self.0.poll_output(now)
    }
}

crate::machine::impl_machine!(Trust, Vec<Vote>);

#[cfg(test)]
mod tests {
    use super::*;

    /// A trust waits at least [`LEAST_WAIT`] for each answer, whatever the node timeout of the
    /// locks: a reply that comes after a lock's node timeout still trusts its node.
    #[test]
    fn a_trust_waits_longer_than_a_locks_node_timeout() {
        for node_timeout in [None, Some(Duration::from_millis(50))] {
            let mut builder = Config::builder(1);
            if let Some(timeout) = node_timeout {
                builder = builder.node_timeout(timeout);
            }
            let config = builder.build().expect("valid");
            let now = crate::testing::epoch();
            let mut trust = Trust::new(now, &config);
            let Output::Send(transmit) = trust.poll_output(now) else {
                panic!("a trust sends");
            };
            let Output::Wait(deadline) = trust.poll_output(now) else {
                panic!("a trust waits for its answer");
            };
            assert_eq!(deadline, now + LEAST_WAIT, "{node_timeout:?}");
            // Later than the node timeout of any lock here, before the trust's own.
            let late = now + Duration::from_secs(5);
            trust.handle_reply(late, transmit.id, Reply::Int(1));
            let Output::Done(votes) = trust.poll_output(late) else {
                panic!("one node answered: done");
            };
            assert_eq!(votes, vec![Vote::Granted], "{node_timeout:?}");
        }
    }

    /// An explicit node timeout longer than [`LEAST_WAIT`] is kept.
    #[test]
    fn a_longer_node_timeout_is_kept() {
        let config = Config::builder(1)
            .node_timeout(Duration::from_secs(30))
            .build()
            .expect("valid");
        let now = crate::testing::epoch();
        let mut trust = Trust::new(now, &config);
        assert!(matches!(trust.poll_output(now), Output::Send(_)));
        assert_eq!(
            trust.poll_output(now),
            Output::Wait(now + Duration::from_secs(30))
        );
    }
}
