//! A simulated client process: acquire → hold (auto-extended, or a fixed amount of work) →
//! release → think → again, driving the real `redlock-core` [`Multiplexer`] the way an adapter's
//! driver does, over one connection per node.
//!
//! # Driving the engine
//! After every input (a batch's replies, a transport timeout, the multiplexer's wake-up, a call
//! of the client's own) the client drains the multiplexer: every batch it hands out goes to its
//! node as one message, every event of the current lock is acted on, and the next wake-up
//! becomes a timer on the client's own clock. The multiplexer alone decides what counts (a
//! reply of an earlier operation or an earlier lock does not): the client keeps no operation
//! numbers, no renewal schedule and no validity rule of its own beyond checking the lease
//! before each use.
//!
//! # Connections
//! Each batch is answered exactly once, as the adapters' connections answer it: by the node's
//! replies, or — when they have not come within the transport timeout (lost, or a node that
//! does not answer) — by a timeout error for each request, after which a late reply is skipped.
//! On tracked connections every batch goes through the core's [`NodeBatch`]
//! ([`Connections`]): the node runs the forms it picked, and the replies count as it says.
//!
//! # Pauses
//! A paused client processes nothing: replies wait in its socket buffer (handed in, in arrival
//! order, when it resumes) and timers fire late. The work of a critical section does not
//! progress during a pause. A [`ClientKind::Correct`] client checks its lease before every use,
//! so after a pause past `valid_until` it stops at once; its claim ends at `valid_until`.

use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use chacha20::ChaCha8Rng;
use redlock_core::{
    Config, ExtendOutcome, Lease, LockEvent, LockId, LockRequest, Multiplexer, NodeBatch,
    NodeErrorKind, Reply, RequestId, Start, Transmit,
};

use super::checker::{Checker, ClaimId};
use super::clock::{Clock, Nanos, TimeBase, nanos};
use super::connections::{Connections, ReadBack, Sent};
use super::scenario::{ClientKind, Scenario};
use super::stats::Stats;
use super::trace::Trace;
use crate::rng::TestRng;

/// A message a client hands to the network.
#[derive(Debug)]
pub(crate) enum Outgoing {
    /// A batch of requests for one node, in one write.
    Batch {
        client: usize,
        /// The client's number for it: its replies (or its timeout) come back with it.
        number: u64,
        node: usize,
        transmits: Vec<Transmit>,
        /// Its plan on a tracked connection (the forms the node runs, the proof reads).
        plan: Option<NodeBatch>,
        /// The node's server its connection was opened to (`None`: untracked, the master).
        server: Option<usize>,
    },
}

/// What a client reads from its connections, in order (buffered while it is paused).
#[derive(Debug)]
pub(crate) enum Input {
    /// The replies to batch `number`, produced by a node that had lost its memory `losses`
    /// times.
    Replies {
        number: u64,
        replies: Vec<(RequestId, Reply)>,
        read_back: ReadBack,
        losses: u64,
    },
}

/// A batch on its way: each request is answered exactly once (its reply, or an error).
#[derive(Debug)]
struct InFlight {
    node: usize,
    /// When the connection gives up waiting (the client's clock).
    deadline: Instant,
    ids: Vec<RequestId>,
    /// Its plan on the tracked connection it went out on.
    sent: Option<Sent>,
}

/// What a client handler may touch in the world.
pub(crate) struct Env<'a> {
    /// True time now.
    pub(crate) t: Nanos,
    pub(crate) base: TimeBase,
    pub(crate) checker: &'a mut Checker,
    pub(crate) stats: &'a mut Stats,
    pub(crate) trace: &'a mut Option<Trace>,
    pub(crate) outbox: &'a mut Vec<Outgoing>,
}

impl Env<'_> {
    fn log(&mut self, client: usize, keys: Vec<Vec<u8>>, text: impl FnOnce(&Trace) -> String) {
        if let Some(trace) = self.trace.as_mut() {
            let text = text(trace);
            trace.push(self.t, Some(client), None, keys, text);
        }
    }
}

/// Why a hold ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    /// The work was done.
    WorkDone,
    /// The lease's validity ran out first.
    ValidityOver,
    /// The renewal policy declared the lock lost.
    Lost,
}

/// A lock being held.
#[derive(Debug)]
struct Hold {
    lock: LockId,
    /// The lease as the lifecycle last granted it (kept current from its events).
    lease: Lease,
    label: String,
    claim: ClaimId,
    /// When the work will be done (moves later by each pause).
    work_until: Instant,
    /// A one-off `extend(ttl)` to start at this instant.
    manual_extend: Option<(Instant, Duration)>,
    /// Set on a [`ClientKind::TrustsLeaseAfterPause`] client after a pause: it no longer checks.
    trusting: bool,
}

#[derive(Debug)]
enum Phase {
    Thinking { until: Instant },
    Acquiring { label: String, lock: LockId },
    Holding(Box<Hold>),
    Releasing(LockId),
    Finished,
}

#[derive(Debug, Clone, Copy)]
struct Paused {
    until: Nanos,
    /// Local clock reading when the pause began.
    since: Nanos,
}

/// One client process.
#[derive(Debug)]
pub(crate) struct Client<'s> {
    id: usize,
    scenario: &'s Scenario,
    clock: Clock,
    rng: TestRng,
    /// Every lock of the client, as an adapter's driver keeps them.
    mux: Multiplexer<ChaCha8Rng>,
    /// The client's connections' watches over the nodes' memory, when they are tracked.
    connections: Option<Connections>,
    /// Batches sent and not answered yet, by number.
    in_flight: BTreeMap<u64, InFlight>,
    batches: u64,
    phase: Phase,
    locks: u32,
    paused: Option<Paused>,
    deferred: Vec<Input>,
    /// No new acquisition starts at or after this true time.
    stop_at: Nanos,
    /// The true time of the timer in the queue, if any.
    timer: Option<Nanos>,
    /// Numbers the timers put in the queue; only the latest one fires.
    timer_seq: u64,
    new_timer: Option<(Nanos, u64)>,
}

impl<'s> Client<'s> {
    pub(crate) fn new(
        id: usize,
        scenario: &'s Scenario,
        clock: Clock,
        config: Config,
        mut rng: TestRng,
        stop_at: Nanos,
        connections: Option<Connections>,
    ) -> Self {
        let mux = Multiplexer::new(config, rng.fork().into_core());
        Self {
            id,
            scenario,
            clock,
            rng,
            mux,
            connections,
            in_flight: BTreeMap::new(),
            batches: 0,
            phase: Phase::Finished,
            locks: 0,
            paused: None,
            deferred: Vec::new(),
            stop_at,
            timer: None,
            timer_seq: 0,
            new_timer: None,
        }
    }

    /// The client's clock.
    pub(crate) fn clock(&self) -> Clock {
        self.clock
    }

    /// Starts the first think time (at true time zero).
    pub(crate) fn start(&mut self, env: &mut Env<'_>) {
        let now = self.now(env);
        self.think(now);
        self.advance(env);
    }

    /// The timer to put in the queue after a handler, if it changed: `(true time, seq)`.
    pub(crate) fn take_timer(&mut self) -> Option<(Nanos, u64)> {
        self.new_timer.take()
    }

    /// Whether the client is done for the run.
    pub(crate) fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Finished)
    }

    /// Something arrives on a connection (or a transport timeout passes).
    pub(crate) fn on_input(&mut self, env: &mut Env<'_>, input: Input) {
        if self.paused.is_some() {
            self.deferred.push(input);
            return;
        }
        let now = self.now(env);
        self.deliver(env, now, input);
        self.advance(env);
    }

    /// The server of `node` this client's connection to it was opened to (`None`: untracked).
    pub(crate) fn server(&self, node: usize) -> Option<usize> {
        self.connections
            .as_ref()
            .map(|connections| connections.server(node))
    }

    /// Every connection to `node` ended (it crashed, after `losses` losses of its memory, or
    /// the client reconnects after a failover): the next batch opens a new one, to the node's
    /// server `server`.
    pub(crate) fn on_connection_end(&mut self, node: usize, losses: u64, server: usize) {
        if let Some(connections) = &mut self.connections {
            connections.crash(node, losses, server);
        }
    }

    /// A timer fires.
    pub(crate) fn on_timer(&mut self, env: &mut Env<'_>, seq: u64) {
        if seq != self.timer_seq {
            return;
        }
        self.timer = None;
        if self.paused.is_some() {
            return;
        }
        let now = self.now(env);
        self.timeout(now);
        self.advance(env);
    }

    /// The process stops for `length` of true time. Returns whether it paused (a finished
    /// client has nothing to pause).
    pub(crate) fn on_pause(&mut self, env: &mut Env<'_>, length: Nanos) -> bool {
        if self.is_finished() || self.paused.is_some() {
            return false;
        }
        self.paused = Some(Paused {
            until: env.t + length,
            since: self.clock.local(env.t),
        });
        env.log(self.id, Vec::new(), |_| {
            format!("paused for {}", super::checker::ms(length))
        });
        true
    }

    /// The process runs again: buffered replies are handed in, deadlines that passed fire.
    pub(crate) fn on_resume(&mut self, env: &mut Env<'_>) {
        let Some(paused) = self.paused.take() else {
            return;
        };
        debug_assert_eq!(paused.until, env.t);
        let now = self.now(env);
        if let Phase::Holding(hold) = &mut self.phase {
            let paused_for = self.clock.local(env.t).saturating_sub(paused.since);
            hold.work_until += Duration::from_nanos(paused_for);
            if self.scenario.client_kind == ClientKind::TrustsLeaseAfterPause {
                hold.trusting = true;
            }
        }
        env.log(self.id, Vec::new(), |_| "resumed".to_owned());
        // As an adapter reading its socket buffers: each reply is an input, drained after.
        for input in std::mem::take(&mut self.deferred) {
            self.deliver(env, now, input);
            self.advance(env);
        }
        self.timeout(now);
        self.advance(env);
    }

    fn now(&self, env: &Env<'_>) -> Instant {
        env.base.instant(self.clock.local(env.t))
    }

    /// Hands what a connection read to the multiplexer, as the connection counts it.
    fn deliver(&mut self, env: &mut Env<'_>, now: Instant, input: Input) {
        match input {
            Input::Replies {
                number,
                replies,
                read_back,
                losses,
            } => {
                // A late or duplicated reply: the connection skips it.
                let Some(flight) = self.in_flight.remove(&number) else {
                    return;
                };
                let mut answers: Vec<Reply> = replies.iter().map(|&(_, reply)| reply).collect();
                if let (Some(connections), Some(sent)) = (&mut self.connections, flight.sent) {
                    let counted =
                        connections.reply(flight.node, sent, losses, &read_back, &answers);
                    for (node_said, counted) in answers.iter().zip(&counted) {
                        // A refusal the connection made of the node's own answer (a vote after
                        // a push, or a native proof that found the memory young).
                        if node_said != counted
                            && matches!(counted, Reply::Ineligible { .. } | Reply::Int(i64::MIN..0))
                        {
                            env.stats.ineligible_votes += 1;
                        }
                    }
                    answers = counted;
                }
                for ((id, _), reply) in replies.iter().zip(answers) {
                    self.mux.handle_reply(now, *id, reply);
                }
            }
        }
    }

    /// Lets the connections' and the multiplexer's deadlines pass: a batch whose replies did
    /// not come in time is answered with a timeout error for each request (its late reply will
    /// be skipped).
    fn timeout(&mut self, now: Instant) {
        while let Some(entry) = self.in_flight.first_entry() {
            if entry.get().deadline > now {
                break;
            }
            for id in entry.remove().ids {
                self.mux
                    .handle_reply(now, id, Reply::Error(NodeErrorKind::Timeout));
            }
        }
        self.mux.handle_timeout(now);
    }

    /// Sends every batch the multiplexer hands out, each as one message to its node.
    fn transmit(&mut self, env: &mut Env<'_>, now: Instant) {
        while let Some(batch) = self.mux.poll_transmit() {
            self.batches += 1;
            let number = self.batches;
            let mut sent = self
                .connections
                .as_ref()
                .map(|connections| connections.send(batch.node, &batch.transmits, now));
            // A proof's marker: a name no other proof of the run has (this client, this batch),
            // where a driver draws a random one.
            if let Some(sent) = &mut sent
                && !sent.batch.reads().is_empty()
            {
                let client = u64::try_from(self.id).unwrap_or(u64::MAX);
                sent.batch.mark((client << 40) | number);
            }
            if let Some(sent) = &sent {
                let vouched = (0..batch.transmits.len()).filter(|&i| sent.batch.vouched(i));
                env.stats.vouched += u64::try_from(vouched.count()).unwrap_or(0);
                let marked = (0..batch.transmits.len())
                    .filter(|&i| sent.batch.seal_reads(i) == [redlock_core::SealRead::Marker]);
                env.stats.marked_seals += u64::try_from(marked.count()).unwrap_or(0);
            }
            self.in_flight.insert(
                number,
                InFlight {
                    node: batch.node,
                    // Deadlines grow with the numbers: the first batch in flight is the next due.
                    deadline: now + self.scenario.io_timeout(),
                    ids: batch.transmits.iter().map(|t| t.id).collect(),
                    sent: sent.clone(),
                },
            );
            env.outbox.push(Outgoing::Batch {
                client: self.id,
                number,
                node: batch.node,
                transmits: batch.transmits.into_iter().collect(),
                server: sent.as_ref().map(|sent| sent.server),
                plan: sent.map(|sent| sent.batch),
            });
        }
        // Release notices are not modelled (a notice at any moment is the wake storm's job).
        while self.mux.poll_subscription().is_some() {}
    }

    /// The next event of the current lock (events of locks the client is done with are nobody's
    /// business).
    fn next_event(&mut self) -> Option<LockEvent> {
        let current = match &self.phase {
            Phase::Acquiring { lock, .. } | Phase::Releasing(lock) => *lock,
            Phase::Holding(hold) => hold.lock,
            Phase::Thinking { .. } | Phase::Finished => return None,
        };
        while let Some((lock, event)) = self.mux.poll_event() {
            if lock == current {
                return Some(event);
            }
        }
        None
    }

    /// When the multiplexer or a connection wants to wake next, or `None`.
    fn wake(&self) -> Option<Instant> {
        let io = self.in_flight.values().next().map(|flight| flight.deadline);
        let mux = self.mux.poll_timeout().map(|timeout| timeout.at);
        assert_eq!(
            self.mux.next_timeout_at(),
            mux,
            "the two ways to the next timeout"
        );
        match (io, mux) {
            (Some(io), Some(mux)) => Some(io.min(mux)),
            (io, mux) => io.or(mux),
        }
    }

    /// Runs the client as far as it goes now, then asks for a timer at its next wake-up.
    fn advance(&mut self, env: &mut Env<'_>) {
        let wake = self.step(env).map(|at| {
            let local = env.base.local(at);
            self.clock.true_at(local).max(env.t + 1)
        });
        if wake != self.timer {
            self.timer = wake;
            if let Some(at) = wake {
                self.timer_seq += 1;
                self.new_timer = Some((at, self.timer_seq));
            }
        }
    }

    /// Drives the current phase until it has to wait; returns until when (local clock).
    fn step(&mut self, env: &mut Env<'_>) -> Option<Instant> {
        let now = self.now(env);
        loop {
            self.transmit(env, now);
            let wake = self.wake();
            if wake.is_some_and(|at| at <= now) {
                self.timeout(now);
                continue;
            }
            let event = self.next_event();
            match &mut self.phase {
                Phase::Finished => return wake,
                Phase::Thinking { until } => {
                    if now < *until {
                        return Some(earliest(*until, wake));
                    }
                    if env.t >= self.stop_at {
                        self.phase = Phase::Finished;
                        env.log(self.id, Vec::new(), |_| "finished".to_owned());
                        return wake;
                    }
                    self.begin_acquire(env, now);
                }
                Phase::Acquiring { .. } => match event {
                    Some(event) => self.acquired(env, now, event),
                    None => {
                        let noise = self.scenario.wake_noise;
                        if noise > 0.0 && self.rng.chance(noise) {
                            let channels: Vec<Vec<u8>> =
                                self.mux.channels().map(<[u8]>::to_vec).collect();
                            for channel in channels {
                                self.mux.handle_notice(now, &channel);
                            }
                            if self.mux.has_requests() || self.wake() != wake {
                                continue;
                            }
                        }
                        return wake;
                    }
                },
                Phase::Holding(hold) => {
                    match hold_step(hold, &mut self.mux, self.id, now, env, event) {
                        Ok(Some(at)) => return Some(earliest(at, wake)),
                        Ok(None) => continue,
                        Err(reason) => self.end_hold(env, now, reason),
                    }
                }
                Phase::Releasing(_) => match event {
                    None => return wake,
                    Some(LockEvent::Released(report)) => {
                        env.stats.releases += 1;
                        env.log(self.id, Vec::new(), |_| {
                            format!(
                                "release done: {} released, {} held by others, {} unreachable",
                                report.released(),
                                report.held_by_other(),
                                report.unreachable()
                            )
                        });
                        self.think(now);
                    }
                    // An extension or a loss the release overtook.
                    Some(LockEvent::Extended { .. } | LockEvent::Lost { .. }) => {}
                    Some(other) => panic!("unexpected event while releasing: {other:?}"),
                },
            }
        }
    }

    fn think(&mut self, now: Instant) {
        let pause = self.rng.duration(self.scenario.think);
        self.phase = Phase::Thinking { until: now + pause };
    }

    fn begin_acquire(&mut self, env: &mut Env<'_>, now: Instant) {
        self.locks += 1;
        let label = format!("c{}#{}", self.id, self.locks);
        let s = self.scenario;
        let ttl_ms = self
            .rng
            .between(nanos(s.ttl.0) / 1_000_000, nanos(s.ttl.1) / 1_000_000);
        let resources = u64::try_from(s.resources.max(1)).unwrap_or(1);
        let first = self.rng.below(resources);
        let mut request = LockRequest::new(format!("r{first}"), Duration::from_millis(ttl_ms));
        if resources > 1 && self.rng.chance(s.multi) {
            let second = (first + 1 + self.rng.below(resources - 1)) % resources;
            request = request.resource(format!("r{second}"));
        }
        let s = self.scenario;
        let auto = s.client_kind == ClientKind::Correct && self.rng.chance(s.hold.auto_extend);
        if auto {
            request = request.auto_extend();
        }
        if s.fenced {
            request = request.fenced();
        }
        let lock = LockId::new(u64::from(self.locks));
        self.mux
            .start(now, lock, Start::Acquire, &request)
            .expect("the scenario makes valid lock requests");
        let spec = self
            .mux
            .lock(lock)
            .and_then(|lifecycle| lifecycle.spec())
            .expect("a new lock has its keys");
        let keys: Vec<Vec<u8>> = spec.keys().map(<[u8]>::to_vec).collect();
        if let Some(trace) = env.trace.as_mut() {
            trace.name_token(spec.token().as_bytes(), &label);
        }
        env.log(self.id, keys, |_| {
            format!("acquire {label} with ttl {ttl_ms} ms starts")
        });
        self.phase = Phase::Acquiring { label, lock };
    }

    fn acquired(&mut self, env: &mut Env<'_>, now: Instant, event: LockEvent) {
        let Phase::Acquiring { label, lock } = std::mem::replace(&mut self.phase, Phase::Finished)
        else {
            unreachable!("only called while acquiring");
        };
        let lease = match event {
            LockEvent::Acquired(lease) => lease,
            LockEvent::NotAcquired(failure) => {
                env.stats.rounds += u64::from(failure.attempts);
                env.stats.acquire_failures += 1;
                let keys = Vec::new();
                env.log(self.id, keys, |_| {
                    format!(
                        "acquire {label} failed: {:?} after {} rounds, votes {:?}",
                        failure.reason, failure.attempts, failure.votes
                    )
                });
                self.think(now);
                return;
            }
            other => panic!("unexpected event while acquiring: {other:?}"),
        };
        env.stats.rounds += u64::from(lease.attempts());
        let keys: Vec<Vec<u8>> = lease.spec().keys().map(<[u8]>::to_vec).collect();
        self.begin_hold(env, now, lock, lease, label, keys);
    }

    fn begin_hold(
        &mut self,
        env: &mut Env<'_>,
        now: Instant,
        lock: LockId,
        lease: Lease,
        label: String,
        keys: Vec<Vec<u8>>,
    ) {
        let resources = lease.spec().resources().map(<[u8]>::to_vec).collect();
        let claim = env.checker.open(self.id, label.clone(), resources, env.t);
        env.checker.set_fence(claim, lease.fence());
        let hold = self.scenario.hold;
        let correct = self.scenario.client_kind == ClientKind::Correct;
        // Auto-extension was asked for (or not) with the lock request.
        let auto = self
            .mux
            .lock(lock)
            .is_some_and(|lifecycle| lifecycle.is_auto_extended());
        let work = if auto {
            lease
                .ttl()
                .mul_f64(self.rng.unit_between(hold.extended_work))
        } else {
            let mut share = self.rng.unit_between(hold.fixed_work);
            if !correct {
                // Without a pause, even a careless client finishes inside its validity.
                share = share.min(0.9);
            }
            lease.remaining(now).mul_f64(share)
        };
        let manual_extend = match hold.manual_extend {
            Some((share, factor)) if !auto => {
                Some((now + work.mul_f64(share), lease.ttl().mul_f64(factor)))
            }
            _ => None,
        };
        let valid_end = self.true_of(env, lease.valid_until());
        env.log(self.id, keys, |_| {
            format!(
                "ACQUIRED {label}: valid until {} (true), work {work:?}{}, votes {:?}, {} rounds",
                super::checker::ms(valid_end),
                if auto { ", auto-extended" } else { "" },
                lease.votes(),
                lease.attempts()
            )
        });
        self.phase = Phase::Holding(Box::new(Hold {
            lock,
            lease,
            label,
            claim,
            work_until: now + work,
            manual_extend,
            trusting: false,
        }));
    }

    fn end_hold(&mut self, env: &mut Env<'_>, now: Instant, reason: StopReason) {
        let Phase::Holding(hold) = std::mem::replace(&mut self.phase, Phase::Finished) else {
            unreachable!("only called while holding");
        };
        let valid_end = self.true_of(env, hold.lease.valid_until());
        let end = if hold.trusting {
            env.t
        } else {
            env.t.min(valid_end)
        };
        env.checker.close(hold.claim, end);
        // A holder that finished its work (a correct one only inside its validity; a trusting
        // one whenever) writes its result, with its fence, through the fenced store.
        if hold.lease.fence().is_some() && (reason == StopReason::WorkDone || hold.trusting) {
            env.checker.write(hold.claim, env.t);
        }
        if reason != StopReason::WorkDone {
            env.stats.leases_lost += 1;
        }
        let keys: Vec<Vec<u8>> = hold.lease.spec().keys().map(<[u8]>::to_vec).collect();
        let label = env.checker.label(hold.claim).to_owned();
        env.log(self.id, keys, |_| {
            format!(
                "STOPS using {label} ({reason:?}; claim ends {}, validity ends {}){}",
                super::checker::ms(end),
                super::checker::ms(valid_end),
                if hold.trusting {
                    " without checking validity"
                } else {
                    ""
                }
            )
        });
        self.mux.release(now, hold.lock);
        self.phase = Phase::Releasing(hold.lock);
    }

    /// The first true instant at which this client's clock reads `instant`.
    fn true_of(&self, env: &Env<'_>, instant: Instant) -> Nanos {
        self.clock.true_at(env.base.local(instant))
    }
}

/// The earlier of `at` and the multiplexer's wake-up `wake`.
fn earliest(at: Instant, wake: Option<Instant>) -> Instant {
    wake.map_or(at, |wake| wake.min(at))
}

/// Drives a hold: acts on the lock's `event`, checks validity (a correct client checks before
/// every use), and starts a manual extension when due (the multiplexer extends an auto-extended
/// lock and says when it is lost). `Ok(Some(wake))`: wait until then (or the multiplexer's
/// wake-up); `Ok(None)`: drain the multiplexer again; `Err(reason)`: stop using the lock.
fn hold_step(
    hold: &mut Hold,
    mux: &mut Multiplexer<ChaCha8Rng>,
    client: usize,
    now: Instant,
    env: &mut Env<'_>,
    event: Option<LockEvent>,
) -> Result<Option<Instant>, StopReason> {
    // Validity first: an event that comes with the end of validity does not extend the use.
    if !hold.trusting && !hold.lease.is_valid(now) {
        return Err(StopReason::ValidityOver);
    }
    if now >= hold.work_until {
        return Err(StopReason::WorkDone);
    }
    match event {
        None => {}
        Some(LockEvent::Extended { outcome, trigger }) => {
            let before = hold.lease.valid_until();
            hold.lease.apply(&outcome);
            if matches!(outcome, ExtendOutcome::Extended { .. }) {
                env.stats.extensions += 1;
            } else {
                env.stats.extend_failures += 1;
            }
            let label = &hold.label;
            let after = hold.lease.valid_until();
            env.log(client, Vec::new(), |_| {
                format!(
                    "extend of {label} ({trigger:?}) done: {outcome:?}; validity moved by {:?}",
                    after.saturating_duration_since(before)
                )
            });
            return Ok(None);
        }
        // A client that stopped checking its lease does not listen for its loss either.
        Some(LockEvent::Lost { .. }) if hold.trusting => return Ok(None),
        Some(LockEvent::Lost { .. }) => return Err(StopReason::Lost),
        Some(other) => panic!("unexpected event while holding: {other:?}"),
    }
    let mut wake = hold.work_until;
    if !hold.trusting {
        wake = wake.min(hold.lease.valid_until());
    }
    if let Some((at, ttl)) = hold.manual_extend {
        if now >= at {
            hold.manual_extend = None;
            let label = &hold.label;
            env.log(client, Vec::new(), |_| {
                format!("extend of {label} to {ttl:?} starts")
            });
            // A TTL the engine refuses: nothing to run.
            let _ = mux.extend(now, hold.lock, ttl);
            return Ok(None);
        }
        wake = wake.min(at);
    }
    Ok(Some(wake))
}
