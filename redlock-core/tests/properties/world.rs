//! The simulated network, the clients that run machines over it, and the driver that steps
//! virtual time from one event to the next, recording each machine's trace.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use redlock_core::strategies::{Fate, Schedule};
use redlock_core::{Command, Machine, Output, Reply, RequestId};

use crate::{At, MAX_TIME, Outcome};
use redlock_core::fake::FakeNode as Node;

/// More polls than any run needs (the longest runs have a few hundred rounds of 18 requests).
const MAX_POLLS: usize = 500_000;

/// Where a reply came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The node ran the request; `foreign`: a key was held by another token when it did.
    Node { foreign: bool },
    /// `Fate::Wrong` or `Fate::Contradict`: the network made it up, under the request's id.
    Wrong,
    /// A stray reply, under an id that was never in flight.
    Stray,
}

/// Everything that went in and out of one machine, in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Rec<O> {
    Send {
        at: At,
        id: RequestId,
        command: Command,
    },
    Wait {
        at: At,
        until: At,
    },
    Done {
        at: At,
        outcome: O,
    },
    Reply {
        at: At,
        id: RequestId,
        reply: Reply,
        source: Source,
    },
    Timeout {
        at: At,
        asked: bool,
    },
}

#[derive(Debug)]
enum Event {
    Start {
        client: usize,
    },
    /// A request reaches its node; each delay in `replies` sends a copy of the answer back.
    Arrive {
        client: usize,
        id: RequestId,
        command: Command,
        replies: Vec<Duration>,
    },
    Reply {
        client: usize,
        id: RequestId,
        reply: Reply,
        source: Source,
    },
    Stray {
        client: usize,
        index: usize,
    },
    Tick {
        client: usize,
    },
}

/// A machine under test, with everything that went in and out of it.
pub(crate) struct Client<M: Machine> {
    machine: M,
    pub(crate) trace: Vec<Rec<M::Outcome>>,
    started: bool,
    done: bool,
    wait: Option<At>,
    latest: Option<RequestId>,
}

impl<M: Machine> Client<M> {
    pub(crate) fn new(machine: M) -> Self {
        Self {
            machine,
            trace: Vec::new(),
            started: false,
            done: false,
            wait: None,
            latest: None,
        }
    }

    pub(crate) fn outcome(&self) -> Option<(At, &M::Outcome)> {
        self.trace.iter().find_map(|rec| match rec {
            Rec::Done { at, outcome } => Some((*at, outcome)),
            _ => None,
        })
    }
}

/// The nodes, the network between them and the clients, and virtual time.
pub(crate) struct World {
    pub(crate) base: Instant,
    pub(crate) now: At,
    pub(crate) nodes: Vec<Node>,
    queue: BTreeMap<(At, u64), Event>,
    seq: u64,
    pub(crate) schedule: Schedule,
    pub(crate) sent: usize,
    /// Per (client, node) connection: requests run in the order they were sent.
    pub(crate) fifo: BTreeMap<(usize, usize), At>,
    polls: usize,
}

impl World {
    pub(crate) fn new(base: Instant, nodes: usize) -> Self {
        Self {
            base,
            now: Duration::ZERO,
            nodes: vec![Node::default(); nodes],
            queue: BTreeMap::new(),
            seq: 0,
            schedule: perfect(),
            sent: 0,
            fifo: BTreeMap::new(),
            polls: 0,
        }
    }

    fn instant(&self, at: At) -> Instant {
        self.base + at
    }

    fn push(&mut self, at: At, event: Event) {
        self.seq += 1;
        self.queue.insert((at, self.seq), event);
    }

    fn send(&mut self, client: usize, id: RequestId, command: Command) {
        let fate = self.schedule.fate(self.sent);
        self.sent += 1;
        let now = self.now;
        let arrive = |world: &mut World, there: Duration, replies: Vec<Duration>| {
            let slot = world.fifo.entry((client, id.node())).or_default();
            *slot = (*slot).max(now + there);
            let at = *slot;
            world.push(
                at,
                Event::Arrive {
                    client,
                    id,
                    command: command.clone(),
                    replies,
                },
            );
        };
        match fate {
            Fate::Deliver { there, back } => arrive(self, there, vec![back]),
            Fate::Drop => {}
            Fate::LoseReply { there } => arrive(self, there, Vec::new()),
            Fate::Duplicate { there, back, again } => arrive(self, there, vec![back, back + again]),
            Fate::Wrong { after, reply } => {
                self.push(
                    now + after,
                    Event::Reply {
                        client,
                        id,
                        reply,
                        source: Source::Wrong,
                    },
                );
            }
            Fate::Contradict {
                there,
                back,
                after,
                reply,
            } => {
                arrive(self, there, vec![back]);
                self.push(
                    now + after,
                    Event::Reply {
                        client,
                        id,
                        reply,
                        source: Source::Wrong,
                    },
                );
            }
        }
    }

    /// Polls `client` until it waits, finishes or idles, checking what any output must satisfy.
    fn drain<M: Machine>(&mut self, index: usize, client: &mut Client<M>) -> Outcome<()>
    where
        M::Outcome: Clone,
    {
        let now = self.now;
        loop {
            self.polls += 1;
            prop_assert!(self.polls < MAX_POLLS, "no outcome after {MAX_POLLS} polls");
            match client.machine.poll_output(self.instant(now)) {
                Output::Send(transmit) => {
                    prop_assert!(!client.done, "a Send after Done: {transmit:?}");
                    prop_assert!(
                        transmit.id.node() < self.nodes.len(),
                        "a Send to an unknown node"
                    );
                    client.latest = Some(transmit.id);
                    client.trace.push(Rec::Send {
                        at: now,
                        id: transmit.id,
                        command: transmit.command.clone(),
                    });
                    self.send(index, transmit.id, transmit.command);
                }
                Output::Wait(until) => {
                    prop_assert!(!client.done, "a Wait after Done");
                    let until = until.saturating_duration_since(self.base);
                    // A wait for an instant that has come would spin the driver.
                    prop_assert!(until > now, "Wait({until:?}) at {now:?}: not in the future");
                    client.wait = Some(until);
                    client.trace.push(Rec::Wait { at: now, until });
                    return Ok(());
                }
                Output::Done(outcome) => {
                    prop_assert!(!client.done, "a second Done");
                    client.done = true;
                    client.wait = None;
                    client.trace.push(Rec::Done { at: now, outcome });
                    return Ok(());
                }
                Output::Idle => {
                    prop_assert!(client.done, "Idle before Done");
                    return Ok(());
                }
            }
        }
    }

    /// Runs `clients` (client `i` starting at `starts[i]`) until every network event is over
    /// and every machine is done.
    pub(crate) fn run<M: Machine>(
        &mut self,
        clients: &mut [Client<M>],
        starts: &[At],
    ) -> Outcome<()>
    where
        M::Outcome: Clone,
    {
        for (client, at) in starts.iter().enumerate() {
            self.push(*at, Event::Start { client });
        }
        // The schedule's instants count from the start of this run.
        let (origin, count) = (self.now, clients.len());
        for (index, spurious) in self.schedule.spurious.clone().iter().enumerate() {
            self.push(
                origin + spurious.at,
                Event::Stray {
                    client: index % count,
                    index,
                },
            );
        }
        for (index, tick) in self.schedule.ticks.clone().iter().enumerate() {
            self.push(
                origin + *tick,
                Event::Tick {
                    client: index % count,
                },
            );
        }
        loop {
            let event = self.queue.keys().next().map(|(at, _)| *at);
            // The timer fires `timer_lag` after the instant asked for.
            let lag = self.schedule.timer_lag;
            let wait = clients
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.wait.map(|until| (until + lag, i)))
                .min();
            match (event, wait) {
                (None, None) => break,
                (Some(at), wait) if wait.is_none_or(|(until, _)| at <= until) => {
                    let Some((_, event)) = self.queue.pop_first() else {
                        break;
                    };
                    self.now = at;
                    self.handle(clients, event)?;
                }
                (_, Some((until, i))) => {
                    self.now = until;
                    let client = &mut clients[i];
                    client.wait = None;
                    client.machine.handle_timeout(self.instant(until));
                    client.trace.push(Rec::Timeout {
                        at: until,
                        asked: true,
                    });
                    self.drain(i, client)?;
                }
                (Some(_), None) => unreachable!("an event with no wait is handled above"),
            }
            prop_assert!(self.now <= MAX_TIME, "virtual time ran past {MAX_TIME:?}");
        }
        for (i, client) in clients.iter().enumerate() {
            prop_assert!(client.done, "client {i} never finished");
        }
        Ok(())
    }

    fn handle<M: Machine>(&mut self, clients: &mut [Client<M>], event: Event) -> Outcome<()>
    where
        M::Outcome: Clone,
    {
        let now = self.now;
        let at = self.instant(now);
        match event {
            Event::Start { client } => {
                clients[client].started = true;
                self.drain(client, &mut clients[client])
            }
            Event::Arrive {
                client,
                id,
                command,
                replies,
            } => {
                let node = &mut self.nodes[id.node()];
                let foreign = node.holds_foreign(now, &command);
                let reply = node.run(now, &command);
                for delay in replies {
                    let source = Source::Node { foreign };
                    self.push(
                        now + delay,
                        Event::Reply {
                            client,
                            id,
                            reply,
                            source,
                        },
                    );
                }
                Ok(())
            }
            Event::Reply {
                client: index,
                id,
                reply,
                source,
            } => {
                let client = &mut clients[index];
                client.machine.handle_reply(at, id, reply);
                client.trace.push(Rec::Reply {
                    at: now,
                    id,
                    reply,
                    source,
                });
                self.drain(index, client)
            }
            Event::Stray {
                client: index,
                index: stray,
            } => {
                let client = &mut clients[index];
                let Some(latest) = client.latest else {
                    return Ok(());
                };
                let spurious = self.schedule.spurious[stray].clone();
                let id = spurious.stray.id(latest, self.nodes.len());
                client.machine.handle_reply(at, id, spurious.reply);
                client.trace.push(Rec::Reply {
                    at: now,
                    id,
                    reply: spurious.reply,
                    source: Source::Stray,
                });
                self.drain(index, client)
            }
            Event::Tick { client: index } => {
                let client = &mut clients[index];
                if !client.started {
                    return Ok(());
                }
                client.machine.handle_timeout(at);
                client.trace.push(Rec::Timeout {
                    at: now,
                    asked: false,
                });
                self.drain(index, client)
            }
        }
    }
}

/// A network that delivers everything at once.
fn perfect() -> Schedule {
    Schedule {
        fates: Vec::new(),
        spurious: Vec::new(),
        ticks: Vec::new(),
        timer_lag: Duration::ZERO,
    }
}
