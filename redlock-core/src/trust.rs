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

/// How long the trust command waits for answers: the node timeout of a lock with this TTL
/// (1 s with the default settings).
const WAIT_AS_FOR_TTL: Duration = Duration::from_secs(10);

/// Marks every node trusted. Inputs and outputs as for [`Acquire`](crate::Acquire); the outcome
/// is each node's answer (`Granted` = trusted).
#[derive(Debug)]
pub struct Trust(Broadcast<Vote>);

impl Trust {
    /// Prepares the trust command for every node.
    pub fn new(now: Instant, config: &Config) -> Self {
        let timeout = config.node_timeout(WAIT_AS_FOR_TTL);
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
