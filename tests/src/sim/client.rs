//! A simulated client process: acquire → hold (auto-extended, or a fixed amount of work) →
//! release → think → again, driving the real `redlock-core` lock lifecycle the way an adapter
//! does.
//!
//! # Driving the engine
//! After every input (`handle_reply`, `handle_timeout`) and after creating a lifecycle, the
//! client drains `poll_output` until `Wait` or `Idle`: every `Send` goes to the network at once,
//! every event is acted on, and the `Wait` instant becomes a timer on the client's own clock.
//! Every reply goes to the current lock's lifecycle, which alone decides whether it counts (a
//! reply of an earlier operation or an earlier lock does not): the client keeps no operation
//! numbers, no renewal schedule and no validity rule of its own beyond checking the lease
//! before each use.
//!
//! # Pauses
//! A paused client processes nothing: replies wait in its socket buffer (handed in, in arrival
//! order, when it resumes) and timers fire late. The work of a critical section does not
//! progress during a pause. A [`ClientKind::Correct`] client checks its lease before every use,
//! so after a pause past `valid_until` it stops at once; its claim ends at `valid_until`.

use std::time::{Duration, Instant};

use redlock_core::{
    Config, ExtendOutcome, Lease, Lifecycle, LockEvent, LockOutput, LockRequest, Reply, RequestId,
    Transmit,
};

use super::checker::{Checker, ClaimId};
use super::clock::{Clock, Nanos, TimeBase, nanos};
use super::scenario::{ClientKind, Scenario};
use super::stats::Stats;
use super::trace::Trace;
use crate::rng::TestRng;

/// A request a client hands to the network.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub(crate) client: usize,
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

enum Drained {
    Wait(Instant),
    Event(LockEvent),
    Idle,
}

/// Drains `lifecycle` until it waits, has an event or is idle, queueing every send (the
/// adapter's loop).
fn drain(
    lifecycle: &mut Lifecycle,
    now: Instant,
    client: usize,
    outbox: &mut Vec<Outgoing>,
) -> Drained {
    loop {
        match lifecycle.poll_output(now) {
            LockOutput::Send(transmit) => outbox.push(Outgoing { client, transmit }),
            LockOutput::Wait { at, reason } => {
                assert!(
                    at > now,
                    "the lifecycle asked to wait until {at:?} at {now:?} ({reason:?})"
                );
                return Drained::Wait(at);
            }
            LockOutput::Event(event) => return Drained::Event(event),
            LockOutput::Idle => return Drained::Idle,
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
    lifecycle: Lifecycle,
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
    Thinking {
        until: Instant,
    },
    Acquiring {
        label: String,
        lifecycle: Box<Lifecycle>,
    },
    Holding(Box<Hold>),
    Releasing(Box<Lifecycle>),
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
    rng: TestRng,
    phase: Phase,
    locks: u32,
    paused: Option<Paused>,
    deferred: Vec<(RequestId, Reply)>,
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
        rng: TestRng,
        stop_at: Nanos,
    ) -> Self {
        Self {
            id,
            scenario,
            clock,
            config,
            rng,
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

    /// A reply arrives.
    pub(crate) fn on_reply(&mut self, env: &mut Env<'_>, id: RequestId, reply: Reply) {
        if self.paused.is_some() {
            self.deferred.push((id, reply));
            return;
        }
        let now = self.now(env);
        self.deliver(now, id, reply);
        self.advance(env);
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
        for (id, reply) in std::mem::take(&mut self.deferred) {
            self.deliver(now, id, reply);
            self.advance(env);
        }
        self.timeout(now);
        self.advance(env);
    }

    fn now(&self, env: &Env<'_>) -> Instant {
        env.base.instant(self.clock.local(env.t))
    }

    /// The current lock's lifecycle, if any.
    fn lifecycle(&mut self) -> Option<&mut Lifecycle> {
        match &mut self.phase {
            Phase::Acquiring { lifecycle, .. } | Phase::Releasing(lifecycle) => Some(lifecycle),
            Phase::Holding(hold) => Some(&mut hold.lifecycle),
            Phase::Thinking { .. } | Phase::Finished => None,
        }
    }

    /// Hands a reply to the current lock's lifecycle (which ignores it unless it counts).
    fn deliver(&mut self, now: Instant, id: RequestId, reply: Reply) {
        if let Some(lifecycle) = self.lifecycle() {
            lifecycle.handle_reply(now, id, reply);
        }
    }

    /// Lets the lifecycle's deadlines pass.
    fn timeout(&mut self, now: Instant) {
        if let Some(lifecycle) = self.lifecycle() {
            lifecycle.handle_timeout(now);
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
                Phase::Acquiring { lifecycle, .. } => {
                    let noise = self.scenario.wake_noise;
                    if noise > 0.0 && self.rng.chance(noise) {
                        lifecycle.handle_wake(now);
                    }
                    match drain(lifecycle, now, self.id, env.outbox) {
                        Drained::Wait(at) => return Some(at),
                        Drained::Event(event) => self.acquired(env, now, event),
                        Drained::Idle => panic!("a lifecycle went idle while acquiring"),
                    }
                }
                Phase::Holding(hold) => match hold_step(hold, self.id, now, env) {
                    Ok(wake) => return Some(wake),
                    Err(reason) => self.end_hold(env, now, reason),
                },
                Phase::Releasing(lifecycle) => match drain(lifecycle, now, self.id, env.outbox) {
                    Drained::Wait(at) => return Some(at),
                    Drained::Idle => panic!("a lifecycle went idle while releasing"),
                    Drained::Event(LockEvent::Released(report)) => {
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
                    Drained::Event(other) => panic!("unexpected event {other:?}"),
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
        let lifecycle = Lifecycle::acquire(now, &self.config, &request, self.rng.core())
            .expect("the scenario makes valid lock requests");
        let spec = lifecycle.spec().expect("a new lifecycle has its keys");
        let keys: Vec<Vec<u8>> = spec.keys().map(<[u8]>::to_vec).collect();
        if let Some(trace) = env.trace.as_mut() {
            trace.name_token(spec.token().as_bytes(), &label);
        }
        env.log(self.id, keys, |_| {
            format!("acquire {label} with ttl {ttl_ms} ms starts")
        });
        self.phase = Phase::Acquiring {
            label,
            lifecycle: Box::new(lifecycle),
        };
    }

    fn acquired(&mut self, env: &mut Env<'_>, now: Instant, event: LockEvent) {
        let Phase::Acquiring { label, lifecycle } =
            std::mem::replace(&mut self.phase, Phase::Finished)
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
        self.begin_hold(env, now, *lifecycle, lease, label, keys);
    }

    fn begin_hold(
        &mut self,
        env: &mut Env<'_>,
        now: Instant,
        lifecycle: Lifecycle,
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
        let auto = lifecycle.is_auto_extended();
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
            lifecycle,
            lease,
            label,
            claim,
            work_until: now + work,
            manual_extend,
            trusting: false,
        }));
    }

    fn end_hold(&mut self, env: &mut Env<'_>, now: Instant, reason: StopReason) {
        let Phase::Holding(mut hold) = std::mem::replace(&mut self.phase, Phase::Finished) else {
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
        hold.lifecycle.release(now);
        self.phase = Phase::Releasing(Box::new(hold.lifecycle));
    }

    /// The first true instant at which this client's clock reads `instant`.
    fn true_of(&self, env: &Env<'_>, instant: Instant) -> Nanos {
        self.clock.true_at(env.base.local(instant))
    }
}

/// Drives a hold: checks validity (a correct client checks before every use), starts a manual
/// extension when due, and runs the lifecycle (which extends an auto-extended lock and says when
/// it is lost). `Ok(wake)`: wait until then; `Err(reason)`: stop using the lock.
fn hold_step(
    hold: &mut Hold,
    client: usize,
    now: Instant,
    env: &mut Env<'_>,
) -> Result<Instant, StopReason> {
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
        if let Some((at, ttl)) = hold.manual_extend {
            if now >= at {
                hold.manual_extend = None;
                let label = &hold.label;
                env.log(client, Vec::new(), |_| {
                    format!("extend of {label} to {ttl:?} starts")
                });
                // A TTL the engine refuses: nothing to run.
                let _ = hold.lifecycle.extend(now, ttl);
                continue;
            }
            wake = wake.min(at);
        }
        match drain(&mut hold.lifecycle, now, client, env.outbox) {
            Drained::Wait(at) => return Ok(wake.min(at)),
            Drained::Idle => return Ok(wake),
            Drained::Event(LockEvent::Extended { outcome, trigger }) => {
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
            }
            Drained::Event(LockEvent::Lost { .. }) => return Err(StopReason::Lost),
            Drained::Event(other) => panic!("unexpected event while holding: {other:?}"),
        }
    }
}
