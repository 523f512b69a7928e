//! Unit-test helpers: a seeded RNG and in-memory nodes that answer the engine's commands.

use rand_core::SeedableRng;

use crate::command::Command;
use crate::reply::Reply;

pub(crate) fn rng(seed: u64) -> chacha20::ChaCha8Rng {
    chacha20::ChaCha8Rng::seed_from_u64(seed)
}

/// The project's one fake Redis node; unit tests keep its clock at zero (no key expires).
pub(crate) use crate::fake::FakeNode;

use std::time::{Duration, Instant};

use crate::id::RequestId;
use crate::machine::Machine;
use crate::output::Output;

/// How the test network treats each node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Link {
    /// Runs the command and answers at once.
    Up,
    /// Never answers (the command is not run).
    Silent,
    /// Answers with a connection error.
    Refused,
    /// Runs the command, but the answer never arrives.
    LostReply,
}

/// Drives `machine` against `nodes` with the given links, stepping time only on `Wait`, until it
/// is done. Returns the outcome, the time it took and every request sent.
pub(crate) fn drive<M: Machine>(
    machine: &mut M,
    nodes: &mut [FakeNode],
    links: &[Link],
    start: Instant,
) -> (M::Outcome, Duration, Vec<(RequestId, Command)>) {
    let mut now = start;
    let mut sent = Vec::new();
    let mut inbox: Vec<(RequestId, Reply)> = Vec::new();
    loop {
        match machine.poll_output(now) {
            Output::Send(t) => {
                let node = t.id.node();
                match links[node] {
                    Link::Up => inbox.push((t.id, nodes[node].run(Duration::ZERO, &t.command))),
                    Link::Refused => {
                        inbox.push((t.id, Reply::Error(crate::NodeErrorKind::Connection)))
                    }
                    Link::LostReply => {
                        nodes[node].run(Duration::ZERO, &t.command);
                    }
                    Link::Silent => {}
                }
                sent.push((t.id, t.command));
            }
            Output::Wait(until) => {
                if inbox.is_empty() {
                    assert!(until >= now, "a wait never goes back in time");
                    now = until;
                    machine.handle_timeout(now);
                } else {
                    for (id, reply) in inbox.drain(..) {
                        machine.handle_reply(now, id, reply);
                    }
                }
            }
            Output::Done(outcome) => return (outcome, now - start, sent),
            Output::Idle => panic!("idle before done"),
        }
    }
}

/// The one real instant unit tests start their virtual time from (the engine never reads the
/// clock; only this test helper does).
pub(crate) fn epoch() -> Instant {
    Instant::now()
}

/// A virtual network and clock for a [`Lifecycle`](crate::Lifecycle): sends reach `nodes` over
/// `links`, replies wait in an inbox, and time jumps to each `Wait` instant once the inbox is
/// empty.
pub(crate) struct Net<'a> {
    pub(crate) nodes: &'a mut [FakeNode],
    pub(crate) links: Vec<Link>,
    pub(crate) now: Instant,
    pub(crate) sent: Vec<(RequestId, Command)>,
    pub(crate) waits: Vec<crate::WakeReason>,
    /// When set, nodes see time pass from `start` (keys expire, epochs age); otherwise their
    /// clock stays at zero.
    pub(crate) node_clock: bool,
    start: Instant,
    inbox: Vec<(RequestId, Reply)>,
}

impl<'a> Net<'a> {
    pub(crate) fn new(nodes: &'a mut [FakeNode], now: Instant) -> Self {
        let links = vec![Link::Up; nodes.len()];
        Self {
            nodes,
            links,
            now,
            sent: Vec::new(),
            waits: Vec::new(),
            node_clock: false,
            start: now,
            inbox: Vec::new(),
        }
    }

    /// The nodes' clock now.
    pub(crate) fn node_time(&self) -> Duration {
        if self.node_clock {
            self.now - self.start
        } else {
            Duration::ZERO
        }
    }

    /// Runs `lock` until its next event (`None` when it goes idle first, or when time would pass
    /// `until`).
    pub(crate) fn next_event(
        &mut self,
        lock: &mut crate::Lifecycle,
        until: Option<Instant>,
    ) -> Option<crate::LockEvent> {
        use crate::LockOutput;
        loop {
            match lock.poll_output(self.now) {
                LockOutput::Send(t) => {
                    let node = t.id.node();
                    let at = self.node_time();
                    match self.links[node] {
                        Link::Up => self
                            .inbox
                            .push((t.id, self.nodes[node].run(at, &t.command))),
                        Link::Refused => self
                            .inbox
                            .push((t.id, Reply::Error(crate::NodeErrorKind::Connection))),
                        Link::LostReply => {
                            self.nodes[node].run(at, &t.command);
                        }
                        Link::Silent => {}
                    }
                    self.sent.push((t.id, t.command));
                }
                LockOutput::Wait { at, reason } => {
                    self.waits.push(reason);
                    if self.inbox.is_empty() {
                        assert!(at >= self.now, "a wait never goes back in time");
                        if until.is_some_and(|until| at > until) {
                            return None;
                        }
                        self.now = at;
                        lock.handle_timeout(self.now);
                    } else {
                        for (id, reply) in std::mem::take(&mut self.inbox) {
                            lock.handle_reply(self.now, id, reply);
                        }
                    }
                }
                LockOutput::Event(event) => return Some(event),
                LockOutput::Idle => return None,
            }
        }
    }
}
