//! What a machine asks its driver to do next.

#![cfg_attr(not(any(test, feature = "testing")), allow(unreachable_pub))]

use std::time::Instant;

use crate::command::Command;
use crate::id::RequestId;

/// Send `command` to node `id.node()`, then hand its reply back with `id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The request's id, to pass back with the reply.
    pub id: RequestId,
    /// What to send.
    pub command: Command,
}

/// The next thing an operation machine needs. Drain with `poll_output(now)` after every input
/// until it says [`Output::Wait`], [`Output::Done`] or [`Output::Idle`].
///
/// Not `#[non_exhaustive]`: a driver handles every variant, and a new one must fail to compile
/// in every driver rather than reach an `unreachable!` at run time.
#[derive(Debug, Clone, PartialEq)]
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
