//! What a machine asks its driver to do next.

use std::time::Instant;

use crate::command::Command;

/// Names one request: the batch it belongs to and the node it goes to. Every reply is handed back
/// with the id of its request; a reply whose id is not from the batch in flight never counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId {
    batch: u32,
    node: u16,
}

impl RequestId {
    pub(crate) fn new(batch: u32, node: usize) -> Self {
        // Node indices are below MAX_NODES (64), so they fit.
        let node = u16::try_from(node).unwrap_or(u16::MAX);
        Self { batch, node }
    }

    /// Index of the node (into the node list the [`Config`](crate::Config) was built for).
    pub fn node(&self) -> usize {
        usize::from(self.node)
    }

    /// The batch of requests this one belongs to (increases within one machine).
    pub fn batch(&self) -> u32 {
        self.batch
    }
}

/// Send `command` to node `id.node()`, then hand its reply back with `id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The request's id, to pass back with the reply.
    pub id: RequestId,
    /// What to send.
    pub command: Command,
}

/// The next thing a machine needs. Drain with `poll_output(now)` after every input until it says
/// [`Output::Wait`], [`Output::Done`] or [`Output::Idle`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Output<T> {
    /// Send this request now (every request of a round comes out before the first `Wait`, so all
    /// nodes are asked at once). Send every transmit, even when `Done` follows: a clean-up release
    /// must reach its node although its reply may no longer be awaited.
    Send(Transmit),
    /// Nothing to do until a reply arrives or this instant passes; then call `handle_reply` or
    /// `handle_timeout` and poll again.
    Wait(Instant),
    /// The operation finished; this comes out once.
    Done(T),
    /// The outcome was already handed out; nothing will ever come out again.
    Idle,
}

/// What every operation machine ([`Acquire`](crate::Acquire), [`Extend`](crate::Extend),
/// [`Release`](crate::Release)) offers its driver, so that one driver loop runs them all.
pub trait Machine {
    /// What the operation ends with.
    type Outcome;

    /// Hands in the reply to request `id`. Stale, duplicate, late and unknown replies are ignored.
    fn handle_reply(&mut self, now: Instant, id: RequestId, reply: crate::Reply);

    /// Lets deadlines pass: call when the instant of the last [`Output::Wait`] has come.
    /// Harmless at any other time.
    fn handle_timeout(&mut self, now: Instant);

    /// The next thing to do; drain after every input until `Wait`, `Done` or `Idle`.
    fn poll_output(&mut self, now: Instant) -> Output<Self::Outcome>;
}

macro_rules! impl_machine {
    ($machine:ty, $outcome:ty) => {
        impl $crate::output::Machine for $machine {
            type Outcome = $outcome;
            fn handle_reply(&mut self, now: Instant, id: RequestId, reply: $crate::Reply) {
                <$machine>::handle_reply(self, now, id, reply)
            }
            fn handle_timeout(&mut self, now: Instant) {
                <$machine>::handle_timeout(self, now)
            }
            fn poll_output(&mut self, now: Instant) -> Output<$outcome> {
                <$machine>::poll_output(self, now)
            }
        }
    };
}
pub(crate) use impl_machine;
