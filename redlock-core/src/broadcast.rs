//! One command to every node, answered by a deadline, with no decision to make: the shape of a
//! release and of the trust command. Done when every node answered or the deadline passed.

use std::time::Instant;

use crate::command::Op;
use crate::id::{Origin, RequestId};
use crate::output::Output;
use crate::reply::Reply;
use crate::round::{NodeAnswer, Round};
use crate::spec::LockSpec;

/// Sends `op` on `spec` to every node and collects each node's answer.
#[derive(Debug)]
pub(crate) struct Broadcast<A> {
    spec: LockSpec,
    round: Round<A>,
    done: bool,
}

impl<A: NodeAnswer> Broadcast<A> {
    /// `op` on `spec` to every node of `config`, answered by `deadline`.
    pub(crate) fn new(
        op: Op,
        spec: LockSpec,
        config: &crate::Config,
        now: Instant,
        deadline: Instant,
    ) -> Self {
        Self {
            spec,
            round: Round::new(1, op, 0, config, now, deadline),
            done: false,
        }
    }

    /// What the commands add to the operation.
    pub(crate) fn set_extras(&mut self, extras: crate::command::Extras) {
        self.round.set_extras(extras);
    }

    /// Does not send to `node`: it counts as `answer` from the start.
    pub(crate) fn leave_out(&mut self, node: usize, answer: A) {
        self.round.leave_out(node, answer);
    }

    pub(crate) fn spec(&self) -> &LockSpec {
        &self.spec
    }

    pub(crate) fn set_origin(&mut self, origin: Origin) {
        self.round.set_origin(origin);
    }

    pub(crate) fn handle_reply(&mut self, now: Instant, id: RequestId, reply: Reply) {
        self.round.record(now, id, reply);
    }

    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        self.round.expire(now);
    }

    /// Sends, then waits, then hands out every node's answer once.
    pub(crate) fn poll_output(&mut self, now: Instant) -> Output<Vec<A>> {
        if self.done {
            return Output::Idle;
        }
        if let Some(transmit) = self.round.next_transmit(&self.spec) {
            return Output::Send(transmit);
        }
        self.round.expire(now);
        if self.round.has_pending() {
            return Output::Wait(self.round.deadline);
        }
        self.done = true;
        Output::Done(self.round.answers.to_vec())
    }
}
