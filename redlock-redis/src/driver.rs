//! The state of a client's driver, written once for every adapter: the engine's
//! [`Multiplexer`] plus who waits for what. An adapter's driver (a task, or a thread) only
//! carries calls in, batches out, replies and notices in, and time.
//!
//! # What it never does
//! It never does I/O, never blocks and never spawns: answering a caller is filling an
//! [`Answer`](crate::Answer) slot. The only clock it reads is the client's [`Clock`] it was
//! given (to let a due deadline pass, and to say how long to sleep); every input takes `now`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redlock_core::{
    Batch, Change, ExtendOutcome, Lease, LockEvent, LockId, LockRequest, Multiplexer,
    ReleaseReport, Reply, RequestId, Start, StartError, Trigger, Vote,
};

use crate::answer::{Responder, Turn, ask};
use crate::clock::Clock;
use crate::error::{Error, LockFailure, NodeReport};
use crate::handle::{LockHandle, Pending};
use crate::lease_watch::LeaseWatch;
use crate::telemetry;

/// The longest a driver sleeps while any lock runs: how soon after a machine suspend it sees
/// the time that passed (see [`DriverState::sleep_target`]).
pub(crate) const SUSPEND_CHECK: Duration = Duration::from_secs(1);

/// How long a release by token waits for answers: the node timeout of a lock with this TTL
/// (1 s with the default settings).
const RELEASE_BY_TOKEN_TTL: Duration = Duration::from_secs(10);

/// A message from a handle (or the client) to its driver.
pub(crate) enum Call {
    /// Acquire (or, with `resume`, resume by token) the lock `request` describes as lock `id`.
    Acquire {
        /// The lock's id.
        id: LockId,
        /// What to lock.
        request: LockRequest,
        /// Resume by the request's token instead of acquiring.
        resume: bool,
        /// Where the handle goes.
        answer: Responder<Result<LockHandle, Error>>,
    },
    /// Release a lock by its resources and token, as lock `id`.
    ReleaseByToken {
        /// The release's id.
        id: LockId,
        /// Resources and token.
        request: LockRequest,
        /// Where the report goes.
        answer: Responder<Result<ReleaseReport, Error>>,
    },
    /// Mark every node trusted, as lock `id`.
    Trust {
        /// The operation's id.
        id: LockId,
        /// Where each node's answer goes.
        answer: Responder<Vec<NodeReport<Vote>>>,
    },
    /// Extend held lock `id` to `ttl`.
    Extend {
        /// The lock.
        id: LockId,
        /// The new TTL.
        ttl: Duration,
        /// Where the outcome goes.
        answer: Responder<Result<(), Error>>,
    },
    /// Release lock `id` (a dropped handle sends no answer slot).
    Release {
        /// The lock.
        id: LockId,
        /// Where the report goes, if anyone asked.
        answer: Option<Responder<ReleaseReport>>,
    },
    /// An acquisition's caller went away: give the lock up unless it is held.
    Abandon {
        /// The lock.
        id: LockId,
    },
    /// Stop driving lock `id`, leaving it on the nodes.
    Detach {
        /// The lock.
        id: LockId,
    },
    /// Answer once nothing is queued or in flight on any node.
    Flush {
        /// Where the answer goes.
        answer: Responder<()>,
    },
    /// The client is gone: end once every lock is over and every request answered.
    ClientGone,
    /// Tests only (of the blocking driver): a bug in the driver's code, panicking while the
    /// call is handed in.
    #[cfg(all(test, feature = "blocking"))]
    Panic {
        /// Dropped unanswered by the panic.
        answer: Responder<()>,
        /// Told the thread that stepped the call, before the panic.
        stepped_on: std::sync::mpsc::Sender<std::thread::ThreadId>,
    },
}

/// How calls reach a driver: its adapter's channel.
pub(crate) trait Post: Send + Sync + 'static {
    /// Delivers `call`, or drops it (its answer slot with it, which tells the caller that the
    /// driver stopped) if the driver is gone.
    fn post(&self, call: Call);

    /// The driver's turn, if a waiting caller may run it on its own task (see [`Turn`]).
    fn turn(&self) -> Option<Arc<dyn Turn>> {
        None
    }
}

/// What a driver's shell must do next ([`DriverState::poll_output`]).
#[derive(Debug)]
pub(crate) enum Output {
    /// Write this batch to its node, as one pipeline; hand every reply back.
    Transmit(Batch),
    /// Make every node's release-notice subscriber apply this change, numbered as the
    /// multiplexer counts them ([`DriverState::handle_subscribed`]).
    Subscription(Change, u64),
    /// The client is gone and every lock is over: the driver ends.
    Done,
}

/// What a caller waits for, by lock id.
enum Waiting {
    Acquire {
        resume: bool,
        answer: Responder<Result<LockHandle, Error>>,
        started: Instant,
    },
    Held {
        watch: LeaseWatch,
        since: Instant,
        extends: std::collections::VecDeque<Responder<Result<(), Error>>>,
        release: Option<Responder<ReleaseReport>>,
    },
    ReleaseByToken(Responder<Result<ReleaseReport, Error>>),
    Trust(Responder<Vec<NodeReport<Vote>>>),
}

/// The ids of a client's locks: unique per client, whichever driver (an async client restarts
/// its driver on another runtime if the first one stopped) runs them.
#[derive(Debug, Default)]
pub(crate) struct LockIds(AtomicU64);

impl LockIds {
    /// The next id.
    pub(crate) fn next(&self) -> LockId {
        LockId::new(self.0.fetch_add(1, Ordering::Relaxed))
    }
}

/// Starts an acquisition (or resumption) through `driver`: the call goes out now, and the
/// returned [`Pending`] abandons it if dropped before the answer.
pub(crate) fn acquire(
    driver: Arc<dyn Post>,
    ids: &LockIds,
    request: LockRequest,
    resume: bool,
) -> Pending {
    let id = ids.next();
    let answer = ask(&*driver, |answer| Call::Acquire {
        id,
        request,
        resume,
        answer,
    });
    Pending::new(id, driver, answer)
}

/// Starts a release by token through `driver`.
pub(crate) fn release_by_token(
    driver: &dyn Post,
    ids: &LockIds,
    resource: Vec<u8>,
    token: Vec<u8>,
) -> crate::Answer<Result<ReleaseReport, Error>> {
    ask(driver, |answer| Call::ReleaseByToken {
        id: ids.next(),
        request: LockRequest::new(resource, RELEASE_BY_TOKEN_TTL).token(token),
        answer,
    })
}

/// Starts marking every node trusted through `driver`.
pub(crate) fn trust(driver: &dyn Post, ids: &LockIds) -> crate::Answer<Vec<NodeReport<Vote>>> {
    ask(driver, |answer| Call::Trust {
        id: ids.next(),
        answer,
    })
}

/// Asks `driver` to answer once every request sent so far was answered.
pub(crate) fn flush(driver: &dyn Post) -> crate::Answer<()> {
    ask(driver, |answer| Call::Flush { answer })
}

/// A client driver's state: the engine's multiplexer and the callers waiting on it.
pub(crate) struct DriverState {
    mux: Multiplexer<chacha20::ChaCha20Rng>,
    labels: Arc<[Arc<str>]>,
    /// Handed to every lock handle, so that it can reach this driver.
    post: Arc<dyn Post>,
    /// Only looked up, never iterated (but on drop); keeps its capacity when it empties. By
    /// lock id, which the driver draws (never user input): a fixed, unkeyed hash is safe.
    waiting: HashMap<LockId, Waiting, foldhash::fast::FixedState>,
    flushes: Vec<Responder<()>>,
    client_gone: bool,
    /// The client's clock (every `now` handed in comes from it), for the lock handles.
    clock: Clock,
    /// Locks listening for release notices, as last told to the metrics.
    listening: usize,
    /// The latest `now` handed in: a deadline due by then passes in
    /// [`poll_output`](Self::poll_output) without reading the clock again.
    latest: Option<Instant>,
}

impl DriverState {
    /// A driver's state for `config`'s nodes named `labels`; `post` reaches this driver, and
    /// every `now` handed in must come from `clock`.
    pub(crate) fn new(
        config: redlock_core::Config,
        labels: Arc<[Arc<str>]>,
        post: Arc<dyn Post>,
        clock: Clock,
    ) -> Result<Self, Error> {
        Ok(Self {
            mux: Multiplexer::new(config, crate::seeded_rng()?),
            labels,
            post,
            waiting: HashMap::default(),
            flushes: Vec::new(),
            client_gone: false,
            clock,
            listening: 0,
            latest: None,
        })
    }

    /// Whether every request of `batch` belongs to an operation a caller waits for (an
    /// acquisition, a release by token, a trust, or an extension or release asked through a
    /// handle); an auto-extension, a dropped handle's release or an abandoned acquisition has
    /// no one waiting.
    #[cfg(any(feature = "tokio", feature = "smol"))]
    pub(crate) fn is_awaited(&self, batch: &Batch) -> bool {
        batch
            .transmits
            .iter()
            .all(|transmit| self.awaits(transmit.id))
    }

    /// Whether every request queued and not yet sent is one a caller waits for (see
    /// [`is_awaited`](DriverState::is_awaited)).
    #[cfg(any(feature = "tokio", feature = "smol"))]
    pub(crate) fn queued_are_awaited(&self) -> bool {
        self.mux.queued().all(|id| self.awaits(*id))
    }

    #[cfg(any(feature = "tokio", feature = "smol"))]
    fn awaits(&self, id: RequestId) -> bool {
        let waiting = self
            .mux
            .lock_of(id)
            .and_then(|lock| self.waiting.get(&lock));
        match waiting {
            Some(Waiting::Held {
                extends, release, ..
            }) => !extends.is_empty() || release.is_some(),
            Some(_) => true,
            None => false,
        }
    }

    /// Whether the driver may end: the client is gone, no lock runs, nothing is in flight.
    pub(crate) fn is_done(&self) -> bool {
        self.client_gone && self.mux.is_idle()
    }

    /// A call from a handle or the client.
    pub(crate) fn handle_call(&mut self, now: Instant, call: Call) {
        match call {
            Call::Acquire {
                id,
                request,
                resume,
                answer,
            } => {
                let start = if resume {
                    Start::Resume
                } else {
                    Start::Acquire
                };
                let started = self.start(now, id, start, &request);
                match started {
                    Ok(()) => {
                        self.waiting.insert(
                            id,
                            Waiting::Acquire {
                                resume,
                                answer,
                                started: now,
                            },
                        );
                    }
                    Err(err) => {
                        let _ = answer.send(Err(err));
                    }
                }
            }
            Call::ReleaseByToken {
                id,
                request,
                answer,
            } => match self.start(now, id, Start::ReleaseByToken, &request) {
                Ok(()) => {
                    self.waiting.insert(id, Waiting::ReleaseByToken(answer));
                }
                Err(err) => {
                    let _ = answer.send(Err(err));
                }
            },
            Call::Trust { id, answer } => {
                if self.start_trust(now, id).is_ok() {
                    self.waiting.insert(id, Waiting::Trust(answer));
                }
            }
            Call::Extend { id, ttl, answer } => match self.waiting.get_mut(&id) {
                Some(Waiting::Held { extends, .. }) => match self.mux.extend(now, id, ttl) {
                    Ok(()) => extends.push_back(answer),
                    Err(err) => {
                        let _ = answer.send(Err(err.into()));
                    }
                },
                _ => {
                    let _ = answer.send(Err(Error::Lost(LockFailure::default())));
                }
            },
            Call::Release { id, answer } => {
                if let Some(Waiting::Held { release, .. }) = self.waiting.get_mut(&id) {
                    *release = answer;
                    self.mux.release(now, id);
                } else if let Some(answer) = answer {
                    let _ = answer.send(ReleaseReport { nodes: Vec::new() });
                }
            }
            Call::Abandon { id } => {
                if matches!(self.waiting.get(&id), Some(Waiting::Acquire { .. })) {
                    self.waiting.remove(&id);
                    self.mux.abandon(now, id);
                }
            }
            Call::Detach { id } => {
                self.waiting.remove(&id);
                self.mux.detach(now, id);
            }
            Call::Flush { answer } => self.flushes.push(answer),
            Call::ClientGone => self.client_gone = true,
            #[cfg(all(test, feature = "blocking"))]
            Call::Panic { answer, stepped_on } => {
                let _kept_until_the_panic = answer;
                let _ = stepped_on.send(std::thread::current().id());
                panic!("a bug in the driver (a test's)");
            }
        }
        self.deliver(now);
    }

    /// The replies to a batch sent to a node (or error replies for a transport that failed).
    pub(crate) fn handle_replies(
        &mut self,
        now: Instant,
        replies: impl IntoIterator<Item = (RequestId, Reply)>,
    ) {
        for (id, reply) in replies {
            self.mux.handle_reply(now, id, reply);
        }
        self.deliver(now);
    }

    /// A release notice on `channel`.
    pub(crate) fn handle_notice(&mut self, now: Instant, channel: &[u8]) {
        self.mux.handle_notice(now, channel);
        self.deliver(now);
    }

    /// What a release-notice subscriber said: a notice ([`handle_notice`](Self::handle_notice)),
    /// that its node confirmed every subscription through a numbered change
    /// ([`Multiplexer::handle_subscribed`]), or that its connection is gone.
    pub(crate) fn handle_heard(&mut self, now: Instant, heard: &crate::FromSubscriber) {
        match heard {
            crate::FromSubscriber::Notice(channel) => self.handle_notice(now, channel),
            &crate::FromSubscriber::Subscribed { node, through } => {
                self.mux.handle_subscribed(node, through);
            }
            &crate::FromSubscriber::Ended { node } => self.mux.handle_subscriber_ended(node),
        }
    }

    /// Lets deadlines up to `now` pass.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        self.mux.handle_timeout(now);
        self.deliver(now);
    }

    /// The next thing the shell must do, after letting a deadline pass that was due at the
    /// latest instant handed in: write a batch, apply a change of release channels, or end.
    /// Call until `None` after every input; then wait for the next input or
    /// [`wake_at`](Self::wake_at) (a deadline that came due since the latest input is the
    /// timer's: it never passes here unread; on tokio the timer fires at its next tick, up to
    /// a millisecond later).
    pub(crate) fn poll_output(&mut self) -> Option<Output> {
        loop {
            if let Some(batch) = self.mux.poll_transmit() {
                return Some(Output::Transmit(batch));
            }
            if let Some(change) = self.mux.poll_subscription() {
                return Some(Output::Subscription(
                    change,
                    self.mux.subscriptions_handed(),
                ));
            }
            if self.is_done() {
                tracing::debug!("client gone and every lock over: the driver ends");
                return Some(Output::Done);
            }
            // Before the shell sleeps (once a turn, not per output): a deadline already due —
            // inputs kept the shell busy past it — passes now. Judged by the latest input's
            // instant, read when it was handed in (no clock reading per turn); one due since
            // fires the shell's timer.
            let due = self.mux.next_timeout_at();
            if due.is_none_or(|at| self.latest.is_none_or(|latest| at > latest)) {
                return None;
            }
            self.handle_timeout(self.clock.now());
        }
    }

    /// Every release channel to listen on, for a subscriber connection that (re)starts.
    pub(crate) fn channels(&self) -> Vec<Vec<u8>> {
        self.mux.channels().map(<[u8]>::to_vec).collect()
    }

    /// When to call [`handle_timeout`](DriverState::handle_timeout) next, and why (for the
    /// async driver's trace of a wake-up; the shells' timers need only
    /// [`wake_at`](DriverState::wake_at)).
    #[cfg(any(feature = "tokio", feature = "smol"))]
    pub(crate) fn poll_timeout(&self) -> Option<redlock_core::Timeout> {
        self.mux.poll_timeout()
    }

    /// The clock every `now` handed in comes from.
    pub(crate) fn clock(&self) -> &Clock {
        &self.clock
    }

    /// What to sleep until, in `Instant::now()`'s timeline, for a deadline `at` of the clock:
    /// earlier by the suspend time counted so far, and, while any lock runs, at most
    /// [`SUSPEND_CHECK`] away — a timer of `Instant`'s clock stands still while the machine
    /// sleeps, so after a suspend the driver wakes within that, sees the time that passed, and
    /// reports a lock whose validity ran out.
    pub(crate) fn sleep_target(&self, at: Instant) -> Instant {
        let at = at.checked_sub(self.clock.suspended()).unwrap_or(at);
        if self.mux.is_empty() {
            return at;
        }
        at.min(Instant::now() + SUSPEND_CHECK)
    }

    /// Starts lock `id` in the engine. A lifecycle that drew a random id a running lock has
    /// (once in 2^64) is started again, with a fresh draw; three such draws in a row mean the
    /// generator is broken ([`Error::Entropy`]). The ids come from [`LockIds`], never reused:
    /// one in use would be this crate's bug, reported the same way rather than as the user's.
    fn start(
        &mut self,
        now: Instant,
        id: LockId,
        start: Start,
        request: &LockRequest,
    ) -> Result<(), Error> {
        Self::drawn_afresh(|| self.mux.start(now, id, start, request))
    }

    /// [`start`](Self::start) for a trust.
    fn start_trust(&mut self, now: Instant, id: LockId) -> Result<(), Error> {
        Self::drawn_afresh(|| self.mux.trust(now, id))
    }

    fn drawn_afresh(mut start: impl FnMut() -> Result<(), StartError>) -> Result<(), Error> {
        for _ in 0..3 {
            match start() {
                Ok(()) => return Ok(()),
                Err(StartError::DrawnTwice) => {}
                Err(StartError::Config(err)) => return Err(err.into()),
                Err(_) => return Err(Error::Entropy),
            }
        }
        Err(Error::Entropy)
    }

    /// When the driver wakes if no input comes first, in `Instant::now()`'s timeline: the next
    /// deadline's [`sleep_target`](Self::sleep_target); with no deadline, never — unless a lock
    /// runs, which is checked for a suspend every [`SUSPEND_CHECK`]. Both drivers' one rule.
    pub(crate) fn wake_at(&self) -> Option<Instant> {
        match self.mux.next_timeout_at() {
            Some(at) => Some(self.sleep_target(at)),
            None if !self.mux.is_empty() => Some(Instant::now() + SUSPEND_CHECK),
            None => None,
        }
    }

    /// Passes every event on to whoever waits for it.
    fn deliver(&mut self, now: Instant) {
        self.latest = self.latest.max(Some(now));
        while let Some((id, event)) = self.mux.poll_event() {
            self.on_event(now, id, event);
        }
        let listening = self.mux.listening();
        while self.listening != listening {
            telemetry::waiting(self.listening < listening);
            if self.listening < listening {
                self.listening += 1;
            } else {
                self.listening -= 1;
            }
        }
        if !self.mux.has_requests() {
            for flush in self.flushes.drain(..) {
                let _ = flush.send(());
            }
        }
    }

    fn on_event(&mut self, now: Instant, id: LockId, event: LockEvent) {
        if let Some(Waiting::Held {
            watch,
            since,
            extends,
            release,
        }) = self.waiting.get_mut(&id)
        {
            match event {
                LockEvent::Extended { outcome, trigger } => {
                    let extended = matches!(outcome, ExtendOutcome::Extended { .. });
                    telemetry::extension(trigger, extended);
                    watch.extended(&outcome);
                    if trigger == Trigger::Caller
                        && let Some(answer) = extends.pop_front()
                    {
                        let _ = answer.send(match outcome {
                            ExtendOutcome::Extended { .. } => Ok(()),
                            ExtendOutcome::NotExtended { reason, votes } => {
                                tracing::debug!(?reason, "not extended");
                                Err(Error::extend_failed(&self.labels, reason, &votes))
                            }
                        });
                    }
                }
                LockEvent::Lost { cause, votes } => {
                    telemetry::lost(cause);
                    tracing::warn!(?cause, "lock lost");
                    watch.set_lost(Error::lost(&self.labels, cause, &votes));
                }
                LockEvent::Released(report) => {
                    telemetry::release(Some(*since));
                    tracing::debug!(
                        released = report.released(),
                        held_by_other = report.held_by_other(),
                        unreachable = report.unreachable(),
                        "released"
                    );
                    watch.set_ended();
                    if let Some(answer) = release.take() {
                        let _ = answer.send(report);
                    }
                    self.waiting.remove(&id);
                }
                LockEvent::Acquired(_) | LockEvent::NotAcquired(_) | LockEvent::Trusted(_) => {}
            }
            return;
        }
        // Every other wait ends with its event.
        let Some(waiting) = self.waiting.remove(&id) else {
            return;
        };
        match (waiting, event) {
            (
                Waiting::Acquire {
                    resume,
                    answer,
                    started,
                },
                LockEvent::Acquired(lease),
            ) => {
                tracing::debug!(attempts = lease.attempts(), "acquired");
                telemetry::acquisition(started, lease.attempts(), None);
                self.hold(now, id, lease, resume, answer);
            }
            (
                Waiting::Acquire {
                    answer, started, ..
                },
                LockEvent::NotAcquired(failure),
            ) => {
                tracing::debug!(reason = ?failure.reason, attempts = failure.attempts, "not acquired");
                telemetry::acquisition(started, failure.attempts, Some(failure.reason));
                let _ = answer.send(Err(Error::acquire_failed(&self.labels, &failure)));
            }
            (Waiting::ReleaseByToken(answer), LockEvent::Released(report)) => {
                let _ = answer.send(Ok(report));
            }
            (Waiting::Trust(answer), LockEvent::Trusted(votes)) => {
                tracing::info!(?votes, "nodes trusted for restart-aware voting");
                let _ = answer.send(LockFailure::new(&self.labels, &votes, 1).nodes);
            }
            // Anything else (an abandoned acquisition's clean-up): nobody waits for it.
            (waiting, _) => {
                self.waiting.insert(id, waiting);
            }
        }
    }

    /// Lock `id` is held: its handle goes to the caller (or, if the caller is gone, is dropped
    /// at once, which releases an acquired lock and detaches a resumed one).
    fn hold(
        &mut self,
        now: Instant,
        id: LockId,
        lease: Lease,
        resume: bool,
        answer: Responder<Result<LockHandle, Error>>,
    ) {
        let watch = LeaseWatch::new(lease, self.clock.clone());
        self.waiting.insert(
            id,
            Waiting::Held {
                watch: watch.clone(),
                since: now,
                extends: std::collections::VecDeque::new(),
                release: None,
            },
        );
        // A caller that is gone gets nothing: the handle sent back is dropped here, which
        // releases an acquired lock and detaches a resumed one.
        let _ = answer.send(Ok(LockHandle::new(id, self.post.clone(), watch, resume)));
    }
}

impl Drop for DriverState {
    /// The driver is gone (its runtime shut down, or it ended): no held lock is kept any more,
    /// so every holder learns it lost its lock now rather than at the end of its validity.
    fn drop(&mut self) {
        for waiting in self.waiting.values() {
            if let Waiting::Held { watch, .. } = waiting {
                watch.set_lost(Error::Stopped);
            }
        }
    }
}
