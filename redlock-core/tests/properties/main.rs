//! Properties of the engine, checked by driving the real machines against in-memory nodes over a
//! simulated network whose faults come from `redlock_core::strategies`.
//!
//! Time is virtual: each case reads `Instant::now()` once as its base, and every instant after
//! that is the base plus an offset. The simulator always jumps to the earliest thing due (a
//! network event or the instant a machine waits for), so a case replays exactly.
//!
//! Each run is checked after the fact against a reference reading of its trace: which replies
//! the engine was entitled to count (first answer per node, from the current batch, before the
//! deadline computed here from the configuration), what the quorum decision had to be at every
//! output, and what the outcome must say.
// `Instant::now()` is read once per case, as the base of virtual time. The clock ban in
// clippy.toml is for the engine, not for the code that drives it.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, TestCaseError};
use rand_core::SeedableRng;
use redlock_core::strategies::{self, Fate, Schedule};
use redlock_core::{
    Acquire, AcquireOutcome, Attempts, Command, Config, Extend, ExtendFailure, ExtendOutcome,
    FailureReason, Lease, LockRequest, LockSpec, Machine, NodeErrorKind, NodeRelease, Op, Output,
    Release, ReleaseReport, Reply, RequestId, RetryPolicy, Vote,
};

/// An offset from the base instant of a case.
type At = Duration;

type Outcome<T> = Result<T, TestCaseError>;

const FOREIGN_TOKEN: &[u8] = b"someone-else";
/// More polls than any run needs (the longest runs have a few hundred rounds of 18 requests).
const MAX_POLLS: usize = 500_000;
/// Further than any run goes in virtual time.
const MAX_TIME: Duration = Duration::from_secs(3600);

fn rng(seed: u64) -> chacha20::ChaCha8Rng {
    chacha20::ChaCha8Rng::seed_from_u64(seed)
}

// ---------------------------------------------------------------------------------------------
// In-memory nodes

/// One Redis node: key -> (token, expiry), with the semantics of `SET NX PX` and the three
/// scripts (expired keys are gone for every command).
/// key -> (token, expiry).
type Keys = BTreeMap<Vec<u8>, (Vec<u8>, At)>;

#[derive(Debug, Clone, Default)]
struct Node {
    keys: Keys,
}

impl Node {
    fn purge(&mut self, now: At) {
        self.keys.retain(|_, (_, expires)| *expires > now);
    }

    /// Whether any of the command's keys is held under another token.
    fn foreign(&mut self, now: At, command: &Command) -> bool {
        self.purge(now);
        let token = command.spec().token().as_bytes();
        command
            .spec()
            .keys()
            .any(|key| self.keys.get(key).is_some_and(|(value, _)| value != token))
    }

    fn run(&mut self, now: At, command: &Command) -> Reply {
        self.purge(now);
        let token = command.spec().token().as_bytes();
        let keys: Vec<&[u8]> = command.spec().keys().collect();
        let ttl = Duration::from_millis(command.ttl_ms().unwrap_or(0));
        let single = keys.len() == 1;
        match command.op() {
            Op::SetIfAbsent => {
                if keys.iter().any(|key| self.keys.contains_key(*key)) {
                    return if single { Reply::Nil } else { Reply::Int(0) };
                }
                for key in keys {
                    self.keys.insert(key.to_vec(), (token.to_vec(), now + ttl));
                }
                if single { Reply::Ok } else { Reply::Int(1) }
            }
            Op::DeleteIfEquals => {
                let (mut released, mut foreign) = (0, 0);
                for key in keys {
                    match self.keys.get(key) {
                        Some((value, _)) if value == token => {
                            self.keys.remove(key);
                            released += 1;
                        }
                        Some(_) => foreign += 1,
                        None => {}
                    }
                }
                Reply::Int(if foreign > 0 {
                    -1
                } else {
                    i64::from(released > 0)
                })
            }
            Op::ExpireIfEquals => {
                let held = keys
                    .iter()
                    .all(|key| self.keys.get(*key).is_some_and(|(value, _)| value == token));
                if held {
                    // The extend script only ever lengthens a key's TTL.
                    for key in keys {
                        if let Some((_, expires)) = self.keys.get_mut(key) {
                            *expires = (*expires).max(now + ttl);
                        }
                    }
                }
                Reply::Int(i64::from(held))
            }
            _ => Reply::Error(NodeErrorKind::Other),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The simulated network and the driver

/// Where a reply came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The node ran the request; `foreign`: a key was held by another token when it did.
    Node { foreign: bool },
    /// `Fate::Wrong` or `Fate::Contradict`: the network made it up, under the request's id.
    Wrong,
    /// A stray reply, under an id that was never in flight.
    Stray,
}

/// Everything that went in and out of one machine, in order.
#[derive(Debug, Clone, PartialEq)]
enum Rec<O> {
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

struct Client<M: Machine> {
    machine: M,
    trace: Vec<Rec<M::Outcome>>,
    started: bool,
    done: bool,
    wait: Option<At>,
    latest: Option<RequestId>,
}

impl<M: Machine> Client<M> {
    fn new(machine: M) -> Self {
        Self {
            machine,
            trace: Vec::new(),
            started: false,
            done: false,
            wait: None,
            latest: None,
        }
    }

    fn outcome(&self) -> Option<(At, &M::Outcome)> {
        self.trace.iter().find_map(|rec| match rec {
            Rec::Done { at, outcome } => Some((*at, outcome)),
            _ => None,
        })
    }
}

struct World {
    base: Instant,
    now: At,
    nodes: Vec<Node>,
    queue: BTreeMap<(At, u64), Event>,
    seq: u64,
    schedule: Schedule,
    sent: usize,
    /// Per (client, node) connection: requests run in the order they were sent.
    fifo: BTreeMap<(usize, usize), At>,
    polls: usize,
}

impl World {
    fn new(base: Instant, nodes: usize) -> Self {
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
    fn run<M: Machine>(&mut self, clients: &mut [Client<M>], starts: &[At]) -> Outcome<()>
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
                let foreign = node.foreign(now, &command);
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

// ---------------------------------------------------------------------------------------------
// The reference reading of a trace

/// `ttl − drift`, with `drift = ttl × factor + floor` (the factor kept to a millionth).
fn span(config: &Config, ttl: Duration) -> Duration {
    // The factor is a number in [0, 1): its millionths fit in u64.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let ppm = (config.drift().factor() * 1e6).round() as u128;
    let scaled = u64::try_from(ttl.as_nanos() * ppm / 1_000_000).expect("below the ttl");
    ttl - (Duration::from_nanos(scaled) + config.drift().floor())
}

/// How an acquire or extend round must read a reply.
fn vote(op: Op, reply: Reply) -> Vote {
    match (op, reply) {
        (Op::SetIfAbsent, Reply::Ok) | (_, Reply::Int(1)) => Vote::Granted,
        (Op::SetIfAbsent, Reply::Nil) | (_, Reply::Int(0)) => Vote::Refused,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Open,
    Won,
    Lost(FailureReason),
}

/// Where a round must stand given its votes: won at a quorum of grants, lost once a quorum
/// cannot be reached any more (contended if the nodes that answered could have formed one).
fn decide(votes: &[Vote], quorum: usize) -> Decision {
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
struct Batch {
    batch: u32,
    op: Op,
    t0: At,
    deadline: At,
    sent: Vec<bool>,
    answers: Vec<Option<(Reply, Source)>>,
}

/// Checks one request of a machine that sends a single batch: it belongs to that batch, goes out
/// in the same drain as the batch's other requests, and asks its node once.
fn check_single_batch_send<O>(
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
    fn new(batch: u32, op: Op, t0: At, deadline: At, nodes: usize) -> Self {
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
    fn mark_sent(&mut self, node: usize) -> bool {
        !std::mem::replace(&mut self.sent[node], true)
    }

    fn all_sent(&self) -> bool {
        self.sent.iter().all(|s| *s)
    }

    fn record(&mut self, at: At, id: RequestId, reply: Reply, source: Source) {
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

    fn votes(&self, at: At) -> Vec<Vote> {
        self.answers
            .iter()
            .map(|answer| match answer {
                Some((reply, _)) => vote(self.op, *reply),
                None if at >= self.deadline => Vote::TimedOut,
                None => Vote::Pending,
            })
            .collect()
    }

    fn releases(&self, at: At) -> Vec<NodeRelease> {
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

/// What a run of one acquisition must satisfy.
#[derive(Debug, Clone)]
struct AcquireSpec {
    nodes: usize,
    quorum: usize,
    ttl: Duration,
    span: Duration,
    node_timeout: Duration,
    min_validity: Duration,
    retry: RetryPolicy,
    start: At,
    timer_lag: Duration,
}

impl AcquireSpec {
    fn new(
        config: &Config,
        ttl: Duration,
        retry: RetryPolicy,
        start: At,
        timer_lag: Duration,
    ) -> Self {
        Self {
            nodes: config.nodes(),
            quorum: config.quorum(),
            ttl,
            span: span(config, ttl),
            node_timeout: config.node_timeout(ttl),
            min_validity: config.min_validity(),
            retry,
            start,
            timer_lag,
        }
    }

    fn max_pause(&self) -> Duration {
        self.retry.delay + self.retry.jitter
    }

    /// The latest an acquisition may end: every allowed round running to its deadline, with
    /// the longest pauses, and never past the overall deadline (each wake-up as late as the
    /// driver's timer).
    fn time_bound(&self) -> Duration {
        let (round, lag) = (self.node_timeout.min(self.span), self.timer_lag);
        let by_attempts = match self.retry.attempts {
            Attempts::Limited(k) => Some((round + lag) * k + (self.max_pause() + lag) * (k - 1)),
            _ => None,
        };
        let rounds = match (by_attempts, self.retry.deadline.map(|d| d + lag)) {
            (Some(a), Some(d)) => a.min(d),
            (Some(a), None) => a,
            (None, Some(d)) => d,
            (None, None) => MAX_TIME,
        };
        // The last release's answers are awaited for up to one node timeout.
        rounds + self.node_timeout + lag
    }
}

/// What a checked acquisition yields for further checks.
#[derive(Debug, Clone)]
struct Acquired {
    done: At,
    outcome: AcquireOutcome,
    /// Each pause the machine asked for: from a round's last release to the instant it waited
    /// for.
    pauses: Vec<Duration>,
    /// Each pause as it happened: from a round's last release to the next round's first send.
    observed: Vec<Duration>,
}

enum Phase {
    Start,
    Collecting(Batch),
    CleaningUp {
        batch: u32,
        seen: Vec<bool>,
    },
    /// After a lost round's release went out at `since`: pausing before the next round, or,
    /// after the last round, waiting for the release's answers (`release`). Either way the
    /// machine waits for one instant, `until`, once it asks.
    Pausing {
        since: At,
        until: Option<At>,
        release: Batch,
        waited_when_settled: bool,
    },
    Over,
}

/// Checks an acquisition's whole trace against the reference reading.
fn check_acquire(
    trace: &[Rec<AcquireOutcome>],
    x: &AcquireSpec,
    base: Instant,
) -> Outcome<Acquired> {
    let mut phase = Phase::Start;
    let mut spec: Option<LockSpec> = None;
    let mut round_token: Option<Vec<u8>> = None;
    let mut rounds = 0u32;
    let mut first_t0: Option<At> = None;
    let mut last_batch = 0u32;
    let mut last_loss: Option<(FailureReason, Vec<Vote>)> = None;
    let mut pauses = Vec::new();
    let mut observed = Vec::new();
    let mut result = None;
    let mut previous: Option<&Rec<AcquireOutcome>> = None;
    let overall = |first: Option<At>| first.zip(x.retry.deadline).map(|(t, d)| t + d);

    for rec in trace {
        match rec {
            Rec::Send { at, id, command } => {
                let spec = spec.get_or_insert_with(|| command.spec().clone());
                prop_assert!(
                    command.spec().keys().eq(spec.keys()),
                    "every command is for the same keys"
                );
                // Each round has a token of its own; its clean-up carries that round's token.
                let token = command.spec().token().as_bytes().to_vec();
                let opens_round = command.op() == Op::SetIfAbsent
                    && !matches!(&phase, Phase::Collecting(round) if round.batch == id.batch());
                if opens_round {
                    prop_assert!(
                        round_token.as_ref() != Some(&token),
                        "a new round reuses the previous round's token"
                    );
                    round_token = Some(token);
                } else {
                    prop_assert_eq!(
                        round_token.as_ref(),
                        Some(&token),
                        "a request of a round carries its token"
                    );
                }
                let node = id.node();
                let same_drain = matches!(previous, Some(Rec::Send { at: p, .. }) if p == at);
                match command.op() {
                    Op::SetIfAbsent => {
                        if let Phase::Collecting(round) = &mut phase {
                            if round.batch == id.batch() {
                                prop_assert!(
                                    same_drain,
                                    "a round's requests went out in separate drains"
                                );
                                prop_assert!(
                                    round.mark_sent(node),
                                    "node {node} asked twice in one round"
                                );
                                previous = Some(rec);
                                continue;
                            }
                        }
                        match &phase {
                            Phase::Start => prop_assert_eq!(
                                *at,
                                x.start,
                                "the first round opens at the first poll"
                            ),
                            Phase::Pausing { since, until, .. } => {
                                // The round opens when the pause is over, or a little later if
                                // the driver's timer is late; a pause of zero asks no wait.
                                let (since, until) = (*since, until.unwrap_or(*since));
                                prop_assert!(
                                    *at >= until && *at <= until + x.timer_lag,
                                    "round opened at {at:?}, pause until {until:?}"
                                );
                                let pause = until - since;
                                prop_assert!(
                                    pause >= x.retry.delay && pause <= x.max_pause(),
                                    "pause {pause:?} outside [{:?}, {:?}]",
                                    x.retry.delay,
                                    x.max_pause()
                                );
                                pauses.push(pause);
                                observed.push(*at - since);
                            }
                            _ => {
                                return Err(TestCaseError::fail(format!(
                                    "round opened at {at:?} before the last one was released"
                                )));
                            }
                        }
                        if let Attempts::Limited(k) = x.retry.attempts {
                            prop_assert!(rounds < k, "round {} of at most {k}", rounds + 1);
                        }
                        if let Some(deadline) = overall(first_t0) {
                            prop_assert!(
                                *at < deadline,
                                "a round opened at {at:?}, past the deadline {deadline:?}"
                            );
                        }
                        prop_assert!(id.batch() > last_batch, "batch ids increase");
                        last_batch = id.batch();
                        rounds += 1;
                        let first = *first_t0.get_or_insert(*at);
                        let mut deadline = (*at + x.node_timeout).min(*at + x.span);
                        if let Some(d) = x.retry.deadline {
                            deadline = deadline.min((first + d).max(*at));
                        }
                        let ms = u64::try_from(x.ttl.as_millis()).expect("small");
                        prop_assert_eq!(command.ttl_ms(), Some(ms));
                        let mut round =
                            Batch::new(id.batch(), Op::SetIfAbsent, *at, deadline, x.nodes);
                        round.mark_sent(node);
                        phase = Phase::Collecting(round);
                    }
                    Op::DeleteIfEquals => {
                        match &mut phase {
                            Phase::Collecting(round) => {
                                prop_assert!(round.all_sent(), "released before asking every node");
                                let votes = round.votes(*at);
                                let reason = match decide(&votes, x.quorum) {
                                    Decision::Open => {
                                        return Err(TestCaseError::fail(format!(
                                            "gave up an open round at {at:?}: {votes:?}"
                                        )));
                                    }
                                    Decision::Won => {
                                        let left = (round.t0 + x.span).saturating_sub(*at);
                                        prop_assert!(
                                            left <= x.min_validity,
                                            "dropped a won round with {left:?} left"
                                        );
                                        FailureReason::TooSlow
                                    }
                                    Decision::Lost(reason) => reason,
                                };
                                last_loss = Some((reason, votes));
                                prop_assert!(
                                    id.batch() > round.batch,
                                    "the release has a batch of its own"
                                );
                                last_batch = id.batch();
                                let mut seen = vec![false; x.nodes];
                                seen[node] = true;
                                phase = Phase::CleaningUp {
                                    batch: id.batch(),
                                    seen,
                                };
                            }
                            Phase::CleaningUp { batch, seen } if *batch == id.batch() => {
                                prop_assert!(same_drain, "a release went out in separate drains");
                                prop_assert!(
                                    !std::mem::replace(&mut seen[node], true),
                                    "node {node} released twice"
                                );
                            }
                            _ => {
                                return Err(TestCaseError::fail(format!(
                                    "a release outside a lost round at {at:?}"
                                )));
                            }
                        }
                        if let Phase::CleaningUp { batch, seen } = &phase {
                            if seen.iter().all(|s| *s) {
                                let mut release = Batch::new(
                                    *batch,
                                    Op::DeleteIfEquals,
                                    *at,
                                    *at + x.node_timeout,
                                    x.nodes,
                                );
                                release.sent.fill(true);
                                phase = Phase::Pausing {
                                    since: *at,
                                    until: None,
                                    release,
                                    waited_when_settled: false,
                                };
                            }
                        }
                    }
                    op => return Err(TestCaseError::fail(format!("an acquisition sent {op:?}"))),
                }
            }
            Rec::Reply {
                at,
                id,
                reply,
                source,
            } => match &mut phase {
                Phase::Collecting(round) => round.record(*at, *id, *reply, *source),
                Phase::Pausing { release, .. } => release.record(*at, *id, *reply, *source),
                _ => {}
            },
            Rec::Timeout { .. } => {}
            Rec::Wait { at, until } => match &mut phase {
                Phase::Collecting(round) => {
                    prop_assert!(round.all_sent(), "waited before asking every node");
                    let votes = round.votes(*at);
                    prop_assert_eq!(
                        decide(&votes, x.quorum),
                        Decision::Open,
                        "waited on a decided round at {:?}: {:?}",
                        at,
                        votes
                    );
                    prop_assert!(*until <= round.deadline, "waits past the round's deadline");
                }
                Phase::Pausing {
                    since,
                    until: asked,
                    release,
                    waited_when_settled,
                } => {
                    // Whether this is a pause or the wait for the last release's answers shows
                    // in what comes next; both wait for one fixed instant.
                    prop_assert!(
                        asked.is_none_or(|asked| asked == *until),
                        "the wait after a release changed its end"
                    );
                    prop_assert!(
                        *until <= *since + x.max_pause().max(x.node_timeout),
                        "waits too long after a release"
                    );
                    *waited_when_settled |=
                        release.answers.iter().all(Option::is_some) || *at >= release.deadline;
                    *asked = Some(*until);
                }
                _ => {
                    return Err(TestCaseError::fail(format!(
                        "a Wait at {at:?} outside a round or a pause"
                    )));
                }
            },
            Rec::Done { at, outcome } => {
                prop_assert!(
                    *at - x.start <= x.time_bound(),
                    "done after {:?}, bound {:?}",
                    *at - x.start,
                    x.time_bound()
                );
                match outcome {
                    AcquireOutcome::Acquired(lease) => {
                        let Phase::Collecting(round) = &phase else {
                            return Err(TestCaseError::fail("acquired outside a round"));
                        };
                        prop_assert!(round.all_sent());
                        let votes = round.votes(*at);
                        prop_assert_eq!(
                            decide(&votes, x.quorum),
                            Decision::Won,
                            "acquired without a quorum: {:?}",
                            votes
                        );
                        prop_assert_eq!(lease.votes(), &votes[..]);
                        let valid_until = lease.valid_until().saturating_duration_since(base);
                        prop_assert_eq!(
                            valid_until,
                            round.t0 + x.span,
                            "valid_until = t0 + ttl − drift of the winning round"
                        );
                        prop_assert!(
                            *at < valid_until && valid_until - *at > x.min_validity,
                            "stale at {at:?}"
                        );
                        prop_assert_eq!(lease.attempts(), rounds);
                        prop_assert_eq!(
                            lease.ttl(),
                            Duration::from_millis(u64::try_from(x.ttl.as_millis()).expect("small"))
                        );
                        prop_assert!(
                            spec.as_ref()
                                .is_some_and(|s| lease.spec().keys().eq(s.keys()))
                        );
                        prop_assert_eq!(
                            Some(lease.token().as_bytes()),
                            round_token.as_deref(),
                            "the lease carries the winning round's token"
                        );
                    }
                    AcquireOutcome::Failed(failure) => {
                        let Phase::Pausing {
                            since,
                            until,
                            release,
                            waited_when_settled,
                        } = &phase
                        else {
                            return Err(TestCaseError::fail(
                                "failed without releasing the last round",
                            ));
                        };
                        // Either the last release settled (every node answered, or its
                        // deadline passed), and the outcome came out at once when it did ...
                        let settled =
                            release.answers.iter().all(Option::is_some) || *at >= release.deadline;
                        let after_release = settled
                            && !waited_when_settled
                            && *at <= release.deadline + x.timer_lag;
                        // ... or a pause ended with the overall deadline passed (the driver woke
                        // up late): no round may start any more.
                        let gave_up = until.is_some_and(|until| {
                            let pause = until - *since;
                            pause >= x.retry.delay && pause <= x.max_pause() && *at >= until
                        }) && overall(first_t0).is_some_and(|d| *at >= d);
                        prop_assert!(
                            after_release || gave_up,
                            "failed at {at:?}: release from {since:?} answered {:?}, \
                             waited until {until:?}",
                            release.answers
                        );
                        let since = *since;
                        let Some((reason, votes)) = &last_loss else {
                            return Err(TestCaseError::fail("failed without a lost round"));
                        };
                        prop_assert_eq!(failure.reason, *reason);
                        prop_assert_eq!(&failure.votes, votes);
                        prop_assert_eq!(failure.attempts, rounds);
                        let exhausted =
                            matches!(x.retry.attempts, Attempts::Limited(k) if rounds >= k);
                        if !exhausted && !gave_up {
                            let deadline = overall(first_t0);
                            prop_assert!(
                                deadline.is_some_and(|d| since + x.max_pause() >= d),
                                "stopped at {since:?} with rounds and time left"
                            );
                        }
                    }
                }
                result = Some(Acquired {
                    done: *at,
                    outcome: outcome.clone(),
                    pauses: pauses.clone(),
                    observed: observed.clone(),
                });
                phase = Phase::Over;
            }
        }
        previous = Some(rec);
    }
    result.ok_or_else(|| TestCaseError::fail("no outcome"))
}

/// What a run of one extension must satisfy.
struct ExtendSpec {
    nodes: usize,
    quorum: usize,
    ttl: Duration,
    span: Duration,
    node_timeout: Duration,
    min_validity: Duration,
    start: At,
    lease: Lease,
    timer_lag: Duration,
}

fn check_extend(
    trace: &[Rec<ExtendOutcome>],
    x: &ExtendSpec,
    base: Instant,
) -> Outcome<ExtendOutcome> {
    let old_until = x.lease.valid_until().saturating_duration_since(base);
    let deadline = old_until
        .min(x.start + x.span)
        .min(x.start + x.node_timeout);
    let mut round: Option<Batch> = None;
    let mut previous: Option<&Rec<ExtendOutcome>> = None;
    let mut result = None;
    for rec in trace {
        match rec {
            Rec::Send { at, id, command } => {
                prop_assert_eq!(
                    command.op(),
                    Op::ExpireIfEquals,
                    "an extension only sends compare-and-pexpire"
                );
                prop_assert_eq!(command.spec(), x.lease.spec());
                let ms = u64::try_from(x.ttl.as_millis()).expect("small");
                prop_assert_eq!(command.ttl_ms(), Some(ms));
                prop_assert_eq!(*at, x.start, "every request goes out at once");
                let new = || Batch::new(id.batch(), Op::ExpireIfEquals, x.start, deadline, x.nodes);
                check_single_batch_send(round.get_or_insert_with(new), *id, previous)?;
            }
            Rec::Reply {
                at,
                id,
                reply,
                source,
            } => {
                if let Some(round) = &mut round {
                    round.record(*at, *id, *reply, *source);
                }
            }
            Rec::Timeout { .. } => {}
            Rec::Wait { at, until } => {
                let Some(round) = &round else {
                    return Err(TestCaseError::fail("waited without a round"));
                };
                prop_assert!(round.all_sent(), "waited before asking every node");
                prop_assert_eq!(
                    decide(&round.votes(*at), x.quorum),
                    Decision::Open,
                    "waited on a decided extension"
                );
                prop_assert!(*until <= deadline);
            }
            Rec::Done { at, outcome } => {
                prop_assert!(
                    *at <= deadline.max(x.start) + x.timer_lag,
                    "done at {at:?}, after the deadline {deadline:?}"
                );
                let Some(round) = &round else {
                    prop_assert!(old_until <= x.start, "nothing sent for a valid lease");
                    prop_assert_eq!(
                        outcome,
                        &ExtendOutcome::NotExtended {
                            reason: ExtendFailure::Expired,
                            votes: Vec::new()
                        }
                    );
                    result = Some(outcome.clone());
                    continue;
                };
                prop_assert!(old_until > x.start, "an expired lease was extended");
                let votes = round.votes(*at);
                let decision = decide(&votes, x.quorum);
                let valid_until = x.start + x.span;
                let fresh = valid_until
                    .checked_sub(*at)
                    .is_some_and(|left| left > x.min_validity);
                match outcome {
                    ExtendOutcome::Extended {
                        valid_until: got,
                        ttl,
                        votes: got_votes,
                    } => {
                        prop_assert_eq!(
                            decision,
                            Decision::Won,
                            "extended without a quorum: {:?}",
                            votes
                        );
                        prop_assert!(fresh);
                        prop_assert_eq!(
                            got.saturating_duration_since(base),
                            valid_until,
                            "counted from the extension's start"
                        );
                        prop_assert_eq!(
                            *ttl,
                            Duration::from_millis(u64::try_from(x.ttl.as_millis()).expect("small"))
                        );
                        prop_assert_eq!(got_votes, &votes);
                    }
                    ExtendOutcome::NotExtended {
                        reason,
                        votes: got_votes,
                    } => {
                        let want = match decision {
                            Decision::Won if !fresh => ExtendFailure::TooSlow,
                            Decision::Lost(FailureReason::Contended) => ExtendFailure::NotHeld,
                            Decision::Lost(_) => ExtendFailure::Unavailable,
                            other => {
                                return Err(TestCaseError::fail(format!(
                                    "not extended, yet {other:?}: {votes:?}"
                                )));
                            }
                        };
                        prop_assert_eq!(*reason, want);
                        prop_assert_eq!(got_votes, &votes);
                    }
                }
                result = Some(outcome.clone());
            }
        }
        previous = Some(rec);
    }
    result.ok_or_else(|| TestCaseError::fail("no outcome"))
}

fn check_release(
    trace: &[Rec<ReleaseReport>],
    lease: &Lease,
    nodes: usize,
    (start, deadline, timer_lag): (At, At, Duration),
) -> Outcome<ReleaseReport> {
    let mut round: Option<Batch> = None;
    let mut previous: Option<&Rec<ReleaseReport>> = None;
    let mut result = None;
    for rec in trace {
        match rec {
            Rec::Send { at, id, command } => {
                prop_assert_eq!(
                    command.op(),
                    Op::DeleteIfEquals,
                    "a release only sends compare-and-delete"
                );
                prop_assert_eq!(
                    command.spec(),
                    lease.spec(),
                    "with the lease's keys and token"
                );
                prop_assert_eq!(*at, start, "every request goes out at once");
                let new = || Batch::new(id.batch(), Op::DeleteIfEquals, start, deadline, nodes);
                check_single_batch_send(round.get_or_insert_with(new), *id, previous)?;
            }
            Rec::Reply {
                at,
                id,
                reply,
                source,
            } => {
                if let Some(round) = &mut round {
                    round.record(*at, *id, *reply, *source);
                }
            }
            Rec::Timeout { .. } => {}
            Rec::Wait { at, until } => {
                let Some(round) = &round else {
                    return Err(TestCaseError::fail("waited without a round"));
                };
                prop_assert!(round.all_sent(), "waited before asking every node");
                prop_assert!(
                    *at < deadline && round.answers.iter().any(Option::is_none),
                    "waited for nothing at {at:?}"
                );
                prop_assert!(*until <= deadline);
            }
            Rec::Done { at, outcome } => {
                let Some(round) = &round else {
                    return Err(TestCaseError::fail("done without asking"));
                };
                let answered = round.answers.iter().all(Option::is_some);
                prop_assert!(
                    answered || *at >= deadline,
                    "done at {at:?} with nodes unanswered before the deadline"
                );
                prop_assert!(*at <= deadline + timer_lag, "done after the deadline");
                prop_assert_eq!(&outcome.nodes, &round.releases(*at));
                for (node, (report, answer)) in outcome.nodes.iter().zip(&round.answers).enumerate()
                {
                    if let Some((_, Source::Node { foreign: true })) = answer {
                        prop_assert_ne!(
                            *report,
                            NodeRelease::Released,
                            "node {} holds another token",
                            node
                        );
                    }
                }
                result = Some(outcome.clone());
            }
        }
        previous = Some(rec);
    }
    result.ok_or_else(|| TestCaseError::fail("no outcome"))
}

// ---------------------------------------------------------------------------------------------
// Set-ups

fn config_and_request() -> impl Strategy<Value = (Config, LockRequest)> {
    strategies::configs()
        .prop_flat_map(|config| (Just(config.clone()), strategies::lock_requests(&config)))
}

/// Another holder on some nodes: which of the lock's keys it holds, and until when.
fn contention() -> impl Strategy<Value = Vec<Option<(usize, Duration)>>> {
    let until = prop_oneof![
        (0u64..=2_000_000).prop_map(Duration::from_micros),
        Just(MAX_TIME),
    ];
    proptest::collection::vec(
        proptest::option::weighted(0.25, (0usize..3, until)),
        strategies::MAX_GENERATED_NODES,
    )
}

fn hold(node: &mut Node, spec: &LockSpec, key: usize, until: At) {
    let keys: Vec<&[u8]> = spec.keys().collect();
    let key = keys[key % keys.len()];
    node.keys
        .insert(key.to_vec(), (FOREIGN_TOKEN.to_vec(), until));
}

/// Acquires `request` at the base instant over a network that delivers everything at once.
fn acquire_at_once(
    world: &mut World,
    config: &Config,
    request: &LockRequest,
    seed: u64,
) -> Outcome<Lease> {
    let machine =
        Acquire::new(world.base, config, request, &mut rng(seed)).expect("a valid request");
    let mut clients = [Client::new(machine)];
    world.run(&mut clients, &[Duration::ZERO])?;
    match clients[0].outcome() {
        Some((_, AcquireOutcome::Acquired(lease))) => Ok(lease.clone()),
        other => Err(TestCaseError::fail(format!(
            "no lease on a perfect network: {other:?}"
        ))),
    }
}

/// One acquisition under `schedule`, checked; returns the checked result and the trace.
fn acquire_once(
    base: Instant,
    config: &Config,
    request: &LockRequest,
    schedule: &Schedule,
    contention: &[Option<(usize, Duration)>],
    seed: u64,
) -> Outcome<(Acquired, Vec<Rec<AcquireOutcome>>)> {
    let mut world = World::new(base, config.nodes());
    world.schedule = schedule.clone();
    let machine = Acquire::new(base, config, request, &mut rng(seed)).expect("a valid request");
    for (node, holder) in world.nodes.iter_mut().zip(contention) {
        if let Some((key, until)) = holder {
            hold(node, machine.spec(), *key, *until);
        }
    }
    let mut clients = [Client::new(machine)];
    world.run(&mut clients, &[Duration::ZERO])?;
    let x = AcquireSpec::new(
        config,
        request.ttl(),
        *config.retry(),
        Duration::ZERO,
        schedule.timer_lag,
    );
    let [client] = clients;
    let acquired = check_acquire(&client.trace, &x, base)?;
    Ok((acquired, client.trace))
}

/// `n` cases per property (`PROPTEST_CASES` overrides it, for a longer soak). Failures are saved
/// in `proptest-regressions/properties.txt` (relative to the package, where `cargo test` runs)
/// and replayed first on every later run: commit that file.
fn cases(n: u32) -> ProptestConfig {
    let n = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(n);
    ProptestConfig {
        cases: n,
        max_shrink_iters: 10_000,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/properties.txt",
        ))),
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Properties

proptest! {
    #![proptest_config(cases(256))]

    /// Any two quorums share a node: the builder accepts exactly the quorums with 2q > N and
    /// q ≤ N, and for every generated configuration two arbitrary quorums intersect.
    #[test]
    fn two_quorums_always_intersect(
        nodes in 0usize..=70,
        quorum in 0usize..=70,
        (config, a, b) in strategies::configs().prop_flat_map(|config| {
            let all: Vec<usize> = (0..config.nodes()).collect();
            (Just(config), Just(all.clone()).prop_shuffle(), Just(all).prop_shuffle())
        }),
    ) {
        let built = Config::builder(nodes).quorum(quorum).build();
        let allowed = (1..=redlock_core::MAX_NODES).contains(&nodes)
            && 2 * quorum > nodes
            && quorum <= nodes;
        prop_assert_eq!(built.is_ok(), allowed, "nodes {} quorum {}: {:?}", nodes, quorum, built);

        let q = config.quorum();
        prop_assert!(q <= config.nodes() && 2 * q > config.nodes());
        let first = &a[..q];
        let second = &b[..q];
        prop_assert!(second.iter().any(|node| first.contains(node)),
            "{:?} and {:?} share no node", first, second);
    }
}

proptest! {
    #![proptest_config(cases(512))]

    /// An acquisition under any schedule (delays, drops, duplicates, wrong replies, stray ids,
    /// unasked timeouts) and any contention never panics, ends within its time bound, and every
    /// output agrees with the reference reading: a quorum of in-time grants from the current
    /// round behind every lease, validity from the winning round's start, a release on every
    /// node after every lost round, pauses within the jitter, no pause after the last round.
    #[test]
    fn acquire_follows_the_algorithm_under_any_schedule(
        (config, request) in config_and_request(),
        schedule in strategies::schedules(),
        contention in contention(),
        seed in any::<u64>(),
    ) {
        acquire_once(Instant::now(), &config, &request, &schedule, &contention, seed)?;
    }

    /// Two clients racing for the same lock over an honest network (per-connection order kept,
    /// no made-up replies) never hold it at the same time.
    #[test]
    fn two_clients_never_hold_the_lock_at_once(
        (config, request) in config_and_request(),
        schedule in strategies::honest_schedules(),
        second_start in (0u64..=50_000).prop_map(Duration::from_micros),
        seed in any::<u64>(),
    ) {
        let base = Instant::now();
        let mut world = World::new(base, config.nodes());
        world.schedule = schedule.clone();
        let a = Acquire::new(base, &config, &request, &mut rng(seed)).expect("valid");
        let b = Acquire::new(base, &config, &request, &mut rng(seed ^ 1)).expect("valid");
        prop_assert_ne!(a.spec().token(), b.spec().token());
        let mut clients = [Client::new(a), Client::new(b)];
        let starts = [Duration::ZERO, second_start];
        world.run(&mut clients, &starts)?;
        let mut held = Vec::new();
        for (client, start) in clients.iter().zip(starts) {
            let lag = schedule.timer_lag;
            let x = AcquireSpec::new(&config, request.ttl(), *config.retry(), start, lag);
            let checked = check_acquire(&client.trace, &x, base)?;
            if let AcquireOutcome::Acquired(lease) = checked.outcome {
                held.push((checked.done, lease.valid_until().saturating_duration_since(base)));
            }
        }
        if let [(a_from, a_until), (b_from, b_until)] = held[..] {
            prop_assert!(a_until <= b_from || b_until <= a_from,
                "both hold the lock: [{:?}, {:?}) and [{:?}, {:?})",
                a_from, a_until, b_from, b_until);
        }
    }

}

proptest! {
    #![proptest_config(cases(256))]

    /// Against nodes that all hold the lock for someone else, every pause between a round's
    /// release and the next round lies in [delay, delay + jitter], there is none after the last
    /// round, and the same seed replays the whole run exactly (another seed does not).
    #[test]
    fn retry_pauses_stay_within_the_jitter_and_replay_from_the_seed(
        (config, request) in config_and_request(),
        attempts in 2u32..=6,
        delay in (0u64..=300_000).prop_map(Duration::from_micros),
        jitter in (1u64..=100_000).prop_map(Duration::from_micros),
        schedule in strategies::honest_schedules()
            .prop_map(|s| Schedule { timer_lag: Duration::ZERO, ..s }),
        seed in any::<u64>(),
    ) {
        let policy = RetryPolicy::default().attempts(attempts).delay(delay).jitter(jitter);
        // The request's policy overrides the configuration's.
        let request = request.retry(policy);
        let base = Instant::now();
        let run = |seed| -> Outcome<(Acquired, Vec<Rec<AcquireOutcome>>)> {
            let mut world = World::new(base, config.nodes());
            world.schedule = schedule.clone();
            let machine = Acquire::new(base, &config, &request, &mut rng(seed)).expect("valid");
            for node in &mut world.nodes {
                hold(node, machine.spec(), 0, MAX_TIME);
            }
            let mut clients = [Client::new(machine)];
            world.run(&mut clients, &[Duration::ZERO])?;
            let (start, lag) = (Duration::ZERO, Duration::ZERO);
            let x = AcquireSpec::new(&config, request.ttl(), policy, start, lag);
            let [client] = clients;
            Ok((check_acquire(&client.trace, &x, base)?, client.trace))
        };
        let (first, trace) = run(seed)?;
        let AcquireOutcome::Failed(failure) = &first.outcome else {
            return Err(TestCaseError::fail("acquired a lock held everywhere by someone else"));
        };
        prop_assert_eq!(failure.attempts, attempts);
        prop_assert_eq!(first.pauses.len(), usize::try_from(attempts - 1).expect("small"));
        prop_assert_eq!(&first.observed, &first.pauses,
            "with a punctual timer, rounds open when the pause ends");
        let (_, again) = run(seed)?;
        prop_assert!(trace == again, "the same seed gave another run");
        let (_, other) = run(seed.wrapping_add(1))?;
        prop_assert!(trace != other, "another seed gave the same run");
    }

    /// An extension under any schedule: a quorum of in-time grants behind every success, the
    /// new validity counted from the extension's own start, never a delete, and applying the
    /// outcome never lowers the lease's validity (a failure leaves the lease as it was).
    #[test]
    fn a_failed_extension_changes_nothing_and_never_releases(
        (config, request, ttl) in strategies::configs().prop_flat_map(|c| {
            (Just(c.clone()), strategies::lock_requests(&c), strategies::ttls(&c))
        }),
        schedule in strategies::schedules(),
        lost in proptest::collection::vec(0u8..4, strategies::MAX_GENERATED_NODES),
        later in 0u32..=1_200,
        seed in any::<u64>(),
    ) {
        let base = Instant::now();
        let mut world = World::new(base, config.nodes());
        let lease = acquire_at_once(&mut world, &config, &request, seed)?;
        // Some nodes lose our key (expired early, or taken over) before the extension.
        for (node, lost) in world.nodes.iter_mut().zip(&lost) {
            match lost {
                0 => node.keys.clear(),
                1 => hold(node, lease.spec(), 0, MAX_TIME),
                _ => {}
            }
        }
        let start = (request.ttl() * later) / 1_000;
        world.now = start;
        world.schedule = schedule;
        world.sent = 0;
        world.fifo.clear();
        let machine = Extend::new(base + start, &config, &lease, ttl).expect("a valid ttl");
        let mut clients = [Client::new(machine)];
        world.run(&mut clients, &[start])?;
        let x = ExtendSpec {
            nodes: config.nodes(),
            quorum: config.quorum(),
            ttl,
            span: span(&config, ttl),
            node_timeout: config.node_timeout(ttl),
            min_validity: config.min_validity(),
            start,
            lease: lease.clone(),
            timer_lag: world.schedule.timer_lag,
        };
        let outcome = check_extend(&clients[0].trace, &x, base)?;
        let mut applied = lease.clone();
        applied.apply(&outcome);
        prop_assert!(applied.valid_until() >= lease.valid_until(), "apply lowered the validity");
        match &outcome {
            ExtendOutcome::Extended { valid_until, .. } => {
                prop_assert_eq!(applied.valid_until(), lease.valid_until().max(*valid_until));
            }
            _ => prop_assert_eq!(&applied, &lease, "a failed extension changed the lease"),
        }
    }

    /// A release asks every node once with the lease's keys and token, ends as soon as every
    /// node answered or at the deadline, reports exactly what each node's first in-time answer
    /// said, never reports `Released` for a node holding another token, and leaves that token's
    /// keys in place.
    #[test]
    fn release_reports_every_node_and_never_touches_another_holder(
        (config, request) in config_and_request(),
        schedule in strategies::schedules(),
        state in proptest::collection::vec(0u8..4, strategies::MAX_GENERATED_NODES),
        later in 0u32..=1_200,
        seed in any::<u64>(),
    ) {
        let base = Instant::now();
        let mut world = World::new(base, config.nodes());
        let lease = acquire_at_once(&mut world, &config, &request, seed)?;
        let keys: Vec<Vec<u8>> = lease.spec().keys().map(<[u8]>::to_vec).collect();
        for (node, state) in world.nodes.iter_mut().zip(&state) {
            match state {
                0 => node.keys.clear(),
                1 => hold(node, lease.spec(), 0, MAX_TIME),
                2 => hold(node, lease.spec(), keys.len() - 1, MAX_TIME),
                _ => {}
            }
        }
        // Another holder's keys, node by node, to check they survive.
        let foreign: Vec<Keys> = world
            .nodes
            .iter()
            .map(|n| {
                let keys = n.keys.clone().into_iter();
                keys.filter(|(_, (token, _))| token == FOREIGN_TOKEN).collect()
            })
            .collect();
        let start = (request.ttl() * later) / 1_000;
        world.now = start;
        world.schedule = schedule;
        world.sent = 0;
        world.fifo.clear();
        let machine = Release::new(base + start, &config, &lease);
        let mut clients = [Client::new(machine)];
        world.run(&mut clients, &[start])?;
        let deadline = start + config.node_timeout(lease.ttl());
        let times = (start, deadline, world.schedule.timer_lag);
        check_release(&clients[0].trace, &lease, config.nodes(), times)?;
        for (node, held) in world.nodes.iter().zip(foreign) {
            for (key, value) in held {
                prop_assert_eq!(node.keys.get(&key), Some(&value),
                    "another holder's key was touched");
            }
        }
    }

    /// A lock extended (to any TTL, shorter than what is left included) over an honest network
    /// stays exclusive: another client racing for it afterwards gets it only once the holder's
    /// validity, as `Lease::apply` left it, is over.
    #[test]
    fn an_extended_lock_stays_exclusive(
        (config, request, ttl) in strategies::configs().prop_flat_map(|c| {
            (Just(c.clone()), strategies::lock_requests(&c), strategies::ttls(&c))
        }),
        schedule in strategies::honest_schedules(),
        later in 0u32..=1_000,
        wait in 0u32..=1_500,
        seed in any::<u64>(),
    ) {
        let base = Instant::now();
        let mut world = World::new(base, config.nodes());
        let mut lease = acquire_at_once(&mut world, &config, &request, seed)?;
        let start = (request.ttl() * later) / 1_000;
        world.now = start;
        world.schedule = schedule.clone();
        let machine = Extend::new(base + start, &config, &lease, ttl).expect("a valid ttl");
        let mut holder = [Client::new(machine)];
        world.run(&mut holder, &[start])?;
        let Some((_, outcome)) = holder[0].outcome() else {
            return Err(TestCaseError::fail("no outcome"));
        };
        lease.apply(outcome);
        let held_until = lease.valid_until().saturating_duration_since(base);

        let start = world.now + (request.ttl() * wait) / 1_000;
        world.now = start;
        let machine = Acquire::new(base + start, &config, &request, &mut rng(seed ^ 1))
            .expect("valid");
        let mut rival = [Client::new(machine)];
        world.run(&mut rival, &[start])?;
        let lag = schedule.timer_lag;
        let x = AcquireSpec::new(&config, request.ttl(), *config.retry(), start, lag);
        let checked = check_acquire(&rival[0].trace, &x, base)?;
        if let AcquireOutcome::Acquired(_) = checked.outcome {
            prop_assert!(checked.done >= held_until,
                "the rival holds at {:?}, the holder until {:?}", checked.done, held_until);
        }
    }
}
