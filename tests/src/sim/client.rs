//! A simulated client process: acquire → hold (auto-extended, or a fixed amount of work) →
//! release → think → again, driving the real `redlock-core` machines the way an adapter does.
//!
//! # Driving the engine
//! After every input (`handle_reply`, `handle_timeout`) and after creating a machine, the client
//! drains `poll_output` until `Wait` or `Done`: every `Send` goes to the network at once, and the
//! `Wait` instant becomes a timer on the client's own clock. Replies are matched to the machine
//! that sent the request by an operation number (as a connection matches a reply to its
//! request); replies for a machine that has finished are dropped.
//!
//! # Pauses
//! A paused client processes nothing: replies wait in its socket buffer (handed in, in arrival
//! order, when it resumes) and timers fire late. The work of a critical section does not
//! progress during a pause. A [`ClientKind::Correct`] client checks its lease before every use,
//! so after a pause past `valid_until` it stops at once; its claim ends at `valid_until`.

use std::time::{Duration, Instant};

use redlock_core::{
    Acquire, AcquireOutcome, Config, Extend, ExtendOutcome, Lease, LockRequest, Machine, Output,
    Release, Renewal, RenewalStep, Reply, RequestId, Transmit,
};

use super::checker::{Checker, ClaimId};
use super::clock::{Clock, Nanos, TimeBase, nanos};
use super::rng::SimRng;
use super::scenario::{ClientKind, Scenario};
use super::stats::Stats;
use super::trace::Trace;

/// A request a client hands to the network.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub(crate) client: usize,
    /// The operation (machine) that sent it, to match its reply.
    pub(crate) op: u64,
    pub(crate) transmit: Transmit,
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

enum Drained<T> {
    Wait(Instant),
    Done(T),
}

/// Drains `machine` until it waits or is done, queueing every send (the adapter's loop).
fn drain<M: Machine>(
    machine: &mut M,
    now: Instant,
    client: usize,
    op: u64,
    outbox: &mut Vec<Outgoing>,
) -> Drained<M::Outcome> {
    loop {
        match machine.poll_output(now) {
            Output::Send(transmit) => outbox.push(Outgoing {
                client,
                op,
                transmit,
            }),
            Output::Wait(at) => {
                assert!(at > now, "a machine asked to wait until {at:?} at {now:?}");
                return Drained::Wait(at);
            }
            Output::Done(outcome) => return Drained::Done(outcome),
            Output::Idle => panic!("a machine went idle without handing out its outcome"),
            _ => panic!("an output this simulator does not know"),
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
    lease: Lease,
    label: String,
    claim: ClaimId,
    /// When the work will be done (moves later by each pause).
    work_until: Instant,
    renewal: Option<Renewal>,
    /// A one-off `extend(ttl)` to start at this instant.
    manual_extend: Option<(Instant, Duration)>,
    extend: Option<(u64, Extend)>,
    /// Set on a [`ClientKind::TrustsLeaseAfterPause`] client after a pause: it no longer checks.
    trusting: bool,
}

#[derive(Debug)]
enum Phase {
    Thinking {
        until: Instant,
    },
    Acquiring {
        op: u64,
        label: String,
        machine: Box<Acquire>,
    },
    Holding(Box<Hold>),
    Releasing {
        op: u64,
        machine: Release,
    },
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
    config: Config,
    rng: SimRng,
    phase: Phase,
    ops: u64,
    locks: u32,
    paused: Option<Paused>,
    deferred: Vec<(u64, RequestId, Reply)>,
    /// No new acquisition starts at or after this true time.
    stop_at: Nanos,
    /// The true time of the timer in the queue, if any.
    timer: Option<Nanos>,
    timer_gen: u64,
    new_timer: Option<(Nanos, u64)>,
}

impl<'s> Client<'s> {
    pub(crate) fn new(
        id: usize,
        scenario: &'s Scenario,
        clock: Clock,
        config: Config,
        rng: SimRng,
        stop_at: Nanos,
    ) -> Self {
        Self {
            id,
            scenario,
            clock,
            config,
            rng,
            phase: Phase::Finished,
            ops: 0,
            locks: 0,
            paused: None,
            deferred: Vec::new(),
            stop_at,
            timer: None,
            timer_gen: 0,
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

    /// The timer to put in the queue after a handler, if it changed: `(true time, generation)`.
    pub(crate) fn take_timer(&mut self) -> Option<(Nanos, u64)> {
        self.new_timer.take()
    }

    /// Whether the client is done for the run.
    pub(crate) fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Finished)
    }

    /// A reply arrives for operation `op`.
    pub(crate) fn on_reply(&mut self, env: &mut Env<'_>, op: u64, id: RequestId, reply: Reply) {
        if self.paused.is_some() {
            self.deferred.push((op, id, reply));
            return;
        }
        let now = self.now(env);
        self.deliver(now, op, id, reply);
        self.advance(env);
    }

    /// A timer fires.
    pub(crate) fn on_timer(&mut self, env: &mut Env<'_>, generation: u64) {
        if generation != self.timer_gen {
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
        for (op, id, reply) in std::mem::take(&mut self.deferred) {
            self.deliver(now, op, id, reply);
            self.advance(env);
        }
        self.timeout(now);
        self.advance(env);
    }

    fn now(&self, env: &Env<'_>) -> Instant {
        env.base.instant(self.clock.local(env.t))
    }

    fn next_op(&mut self) -> u64 {
        self.ops += 1;
        self.ops
    }

    /// Hands a reply to the machine that sent the request, if it is still running.
    fn deliver(&mut self, now: Instant, op: u64, id: RequestId, reply: Reply) {
        match &mut self.phase {
            Phase::Acquiring {
                op: current,
                machine,
                ..
            } if *current == op => machine.handle_reply(now, id, reply),
            Phase::Releasing {
                op: current,
                machine,
            } if *current == op => machine.handle_reply(now, id, reply),
            Phase::Holding(hold) => {
                if let Some((current, machine)) = &mut hold.extend {
                    if *current == op {
                        machine.handle_reply(now, id, reply);
                    }
                }
            }
            _ => {}
        }
    }

    /// Lets the running machine's deadlines pass.
    fn timeout(&mut self, now: Instant) {
        match &mut self.phase {
            Phase::Acquiring { machine, .. } => machine.handle_timeout(now),
            Phase::Releasing { machine, .. } => machine.handle_timeout(now),
            Phase::Holding(hold) => {
                if let Some((_, machine)) = &mut hold.extend {
                    machine.handle_timeout(now);
                }
            }
            Phase::Thinking { .. } | Phase::Finished => {}
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
                self.timer_gen += 1;
                self.new_timer = Some((at, self.timer_gen));
            }
        }
    }

    /// Drives the current phase until it has to wait; returns until when (local clock).
    fn step(&mut self, env: &mut Env<'_>) -> Option<Instant> {
        let now = self.now(env);
        loop {
            match &mut self.phase {
                Phase::Finished => return None,
                Phase::Thinking { until } => {
                    if now < *until {
                        return Some(*until);
                    }
                    if env.t >= self.stop_at {
                        self.phase = Phase::Finished;
                        env.log(self.id, Vec::new(), |_| "finished".to_owned());
                        return None;
                    }
                    self.begin_acquire(env, now);
                }
                Phase::Acquiring { op, machine, .. } => {
                    match drain(&mut **machine, now, self.id, *op, env.outbox) {
                        Drained::Wait(at) => return Some(at),
                        Drained::Done(outcome) => self.acquired(env, now, outcome),
                    }
                }
                Phase::Holding(hold) => {
                    match hold_step(hold, &self.config, self.id, &mut self.ops, now, env) {
                        Ok(wake) => return Some(wake),
                        Err(reason) => self.end_hold(env, now, reason),
                    }
                }
                Phase::Releasing { op, machine } => {
                    match drain(machine, now, self.id, *op, env.outbox) {
                        Drained::Wait(at) => return Some(at),
                        Drained::Done(report) => {
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
                    }
                }
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
        let machine = Acquire::new(now, &self.config, &request, self.rng.core())
            .expect("the scenario makes valid lock requests");
        let keys: Vec<Vec<u8>> = machine.spec().keys().map(<[u8]>::to_vec).collect();
        if let Some(trace) = env.trace.as_mut() {
            trace.name_token(machine.spec().token().as_bytes(), &label);
        }
        env.log(self.id, keys, |_| {
            format!("acquire {label} with ttl {ttl_ms} ms starts")
        });
        let op = self.next_op();
        self.phase = Phase::Acquiring {
            op,
            label,
            machine: Box::new(machine),
        };
    }

    fn acquired(&mut self, env: &mut Env<'_>, now: Instant, outcome: AcquireOutcome) {
        let Phase::Acquiring { label, machine, .. } =
            std::mem::replace(&mut self.phase, Phase::Finished)
        else {
            unreachable!("only called while acquiring");
        };
        let keys: Vec<Vec<u8>> = machine.spec().keys().map(<[u8]>::to_vec).collect();
        env.stats.rounds += u64::from(machine.attempts());
        let lease = match outcome {
            AcquireOutcome::Acquired(lease) => lease,
            AcquireOutcome::Failed(failure) => {
                env.stats.acquire_failures += 1;
                env.log(self.id, keys, |_| {
                    format!(
                        "acquire {label} failed: {:?} after {} rounds, votes {:?}",
                        failure.reason, failure.attempts, failure.votes
                    )
                });
                self.think(now);
                return;
            }
            other => panic!("unexpected outcome {other:?}"),
        };
        self.begin_hold(env, now, lease, label, keys);
    }

    fn begin_hold(
        &mut self,
        env: &mut Env<'_>,
        now: Instant,
        lease: Lease,
        label: String,
        keys: Vec<Vec<u8>>,
    ) {
        let resources = lease.spec().resources().map(<[u8]>::to_vec).collect();
        let claim = env.checker.open(self.id, label.clone(), resources, env.t);
        let hold = self.scenario.hold;
        let correct = self.scenario.client_kind == ClientKind::Correct;
        let auto = correct && self.rng.chance(hold.auto_extend);
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
        let renewal =
            auto.then(|| Renewal::new(now, &lease, self.config.node_timeout(lease.ttl())));
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
            lease,
            label,
            claim,
            work_until: now + work,
            renewal,
            manual_extend,
            extend: None,
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
        let op = self.next_op();
        let machine = Release::new(now, &self.config, &hold.lease);
        self.phase = Phase::Releasing { op, machine };
    }

    /// The first true instant at which this client's clock reads `instant`.
    fn true_of(&self, env: &Env<'_>, instant: Instant) -> Nanos {
        self.clock.true_at(env.base.local(instant))
    }
}

/// Drives a hold: checks validity (a correct client checks before every use), runs the renewal
/// policy and its extensions. `Ok(wake)`: wait until then; `Err(reason)`: stop using the lock.
fn hold_step(
    hold: &mut Hold,
    config: &Config,
    client: usize,
    ops: &mut u64,
    now: Instant,
    env: &mut Env<'_>,
) -> Result<Instant, StopReason> {
    let keys = || Vec::new();
    loop {
        if !hold.trusting && !hold.lease.is_valid(now) {
            return Err(StopReason::ValidityOver);
        }
        if now >= hold.work_until {
            return Err(StopReason::WorkDone);
        }
        let mut wake = hold.work_until;
        if !hold.trusting {
            wake = wake.min(hold.lease.valid_until());
        }
        if let Some((op, machine)) = &mut hold.extend {
            match drain(machine, now, client, *op, env.outbox) {
                Drained::Wait(at) => return Ok(wake.min(at)),
                Drained::Done(outcome) => {
                    let before = hold.lease.valid_until();
                    hold.lease.apply(&outcome);
                    if let Some(renewal) = &mut hold.renewal {
                        renewal.handle_extended(now, &outcome);
                    }
                    hold.extend = None;
                    let extended = matches!(outcome, ExtendOutcome::Extended { .. });
                    if extended {
                        env.stats.extensions += 1;
                    } else {
                        env.stats.extend_failures += 1;
                    }
                    let label = &hold.label;
                    let after = hold.lease.valid_until();
                    env.log(client, keys(), |_| {
                        format!(
                            "extend of {label} done: {outcome:?}; validity moved by {:?}",
                            after.saturating_duration_since(before)
                        )
                    });
                    continue;
                }
            }
        }
        if let Some(renewal) = &mut hold.renewal {
            match renewal.poll(now) {
                RenewalStep::Extend => {
                    let ttl = hold.lease.ttl();
                    start_extend(hold, config, client, ops, now, ttl, env);
                    continue;
                }
                RenewalStep::Wait(at) => return Ok(wake.min(at)),
                RenewalStep::Lost => return Err(StopReason::Lost),
                other => panic!("unexpected renewal step {other:?}"),
            }
        }
        if let Some((at, ttl)) = hold.manual_extend {
            if now >= at {
                hold.manual_extend = None;
                start_extend(hold, config, client, ops, now, ttl, env);
                continue;
            }
            wake = wake.min(at);
        }
        return Ok(wake);
    }
}

fn start_extend(
    hold: &mut Hold,
    config: &Config,
    client: usize,
    ops: &mut u64,
    now: Instant,
    ttl: Duration,
    env: &mut Env<'_>,
) {
    let Ok(machine) = Extend::new(now, config, &hold.lease, ttl) else {
        return; // a TTL the engine refuses: nothing to run
    };
    *ops += 1;
    let op = *ops;
    let label = &hold.label;
    env.log(client, Vec::new(), |_| {
        format!("extend of {label} to {ttl:?} starts")
    });
    hold.extend = Some((op, machine));
}
