//! One lock from its first round to its last release: the machine every driver runs.
//!
//! A [`Lifecycle`] runs the operation machines in turn — [`Acquire`] (rounds, retries), then,
//! while the lock is held, [`Extend`] (on demand, and on the [`Renewal`] schedule when the request
//! asked for auto-extension), then [`Release`] — and is the one place that decides what happens
//! next. A driver executes its outputs and hands in what the network and the clock say; it keeps
//! no renewal loop, no validity check and no stale-reply filter of its own.
//!
//! # Request ids
//! Each lifecycle draws a lock id from the injected RNG, and numbers its operations (1 for the
//! acquisition, one more for each extension and for the release). Every request carries both
//! ([`RequestId::origin`]), so a late reply of an earlier operation — a straggler of the
//! acquisition arriving during an extension, say — or of another lock never counts, whatever
//! the driver hands in.
//!
//! # Where the features sit
//! - *Fencing* is a second round inside acquisition: the acquire machine commits the fence on
//!   the granting nodes before the lock is handed out ([`LockEvent::Acquired`]). Drivers see
//!   only more `Send`s.
//! - *Restart-aware voting* is read from the acquire reply ([`Vote::Ineligible`]) and counted by
//!   the round's tally like a failure; drivers see nothing new.
//! - *Push wake-ups*: a held lock's release announces itself ([`RELEASE_SCRIPT`] publishes on
//!   [`released_channel`]); a driver whose lock pauses between rounds listens on
//!   [`LockSpec::released_channels`] and calls [`Lifecycle::handle_wake`], which starts the next
//!   round within [`RetryPolicy::wake_jitter`] (doubled per lost woken round). A driver that
//!   releases keys another of its own locks waits for may hand them over instead
//!   ([`Lifecycle::handle_handover`]: that round starts at once).
//!
//! [`RELEASE_SCRIPT`]: crate::RELEASE_SCRIPT
//! [`released_channel`]: crate::released_channel
//! [`RetryPolicy::wake_jitter`]: crate::RetryPolicy::wake_jitter

use std::time::{Duration, Instant};

use rand_core::CryptoRng;

use crate::acquire::{Acquire, AcquireFailure, AcquireOutcome};
use crate::config::Config;
use crate::error::ConfigError;
use crate::event::{LockEvent, LockOutput, Operation, Trigger, WakeReason};
use crate::extend::{Extend, ExtendFailure, ExtendOutcome};
use crate::id::{Origin, RequestId};
use crate::lease::Lease;
use crate::output::Output;
use crate::quorum::FailureReason;
use crate::release::Release;
use crate::renewal::{LossCause, Renewal, RenewalStep};
use crate::reply::Reply;
use crate::request::LockRequest;
use crate::round::Vote;
use crate::spec::LockSpec;
use crate::token::Token;
use crate::trust::Trust;
use crate::validity::Ttl;

/// A held lock's state.
#[derive(Debug)]
struct Held {
    lease: Lease,
    renewal: Option<Renewal>,
    extending: Option<(Extend, Trigger)>,
    /// A caller's extension asked for while another was in flight: it starts next.
    queued: Option<Duration>,
    /// Each node's answer in the last extension that failed.
    failed_votes: Vec<Vote>,
    /// Whether [`LockEvent::Lost`] was handed out.
    lost: bool,
    /// The longest TTL (ms) this lifecycle's rounds have put on the keys, extensions still in
    /// flight included; `None` for a lock resumed by token, whose keys may carry any TTL the
    /// client that took it set. An extension to at least this TTL may set it exactly
    /// ([`Command::sets_exact_ttl`](crate::Command::sets_exact_ttl)).
    ttl_ceiling_ms: Option<u64>,
    /// The nodes that said our token does not hold the lock there (a refused acquisition or
    /// resumption, an extension answered "not held"). Nothing brings the token back to such a
    /// node, so no later extension asks it: it counts as refused at once. This also bounds the
    /// one extension form that touches a key before it knows whose it is (`MULTI; PEXPIRE … GT;
    /// GET …; EXEC`, on nodes that run no script): once a node answered "not held", never again
    /// (a node that keeps failing or timing out is asked again, and each such call may have
    /// raised another holder's key — by at most the TTL asked, which only makes others wait).
    not_held: Vec<bool>,
    /// The nodes that refused the winning round of a token this lifecycle drew: another token
    /// held the key there, and ours never reaches it, so the release does not ask them
    /// ([`Release::skip_refused`]). Empty for a caller's token, which may still be held where
    /// it was refused (an earlier round's key under it), and when no node refused. A node that
    /// later answered an extension "not held" is still asked: its answer tells the report
    /// whose key is there now.
    refused: Vec<bool>,
}

/// How a held lock's keys came to be.
#[derive(Debug, Clone, Copy)]
enum Keys {
    /// This lifecycle set them itself, so it knows every TTL on them; `drew_token`: under a
    /// token it drew, rather than the caller's.
    Set { drew_token: bool },
    /// Resumed by token: set by whoever held the token before.
    Resumed,
}

#[derive(Debug)]
enum Stage {
    Acquiring {
        machine: Box<Acquire>,
        auto_extend: bool,
    },
    Resuming {
        machine: Extend,
        auto_extend: bool,
    },
    Held(Box<Held>),
    Releasing(Release),
    Trusting(Trust),
    Ended,
}

/// One lock, from its first round to its last release.
///
/// - Getters: [`lease`](Lifecycle::lease), [`spec`](Lifecycle::spec),
///   [`is_held`](Lifecycle::is_held), [`has_ended`](Lifecycle::has_ended).
/// - Inputs: [`handle_reply`](Lifecycle::handle_reply), [`handle_timeout`](Lifecycle::handle_timeout),
///   [`handle_wake`](Lifecycle::handle_wake), and the caller's [`extend`](Lifecycle::extend) and
///   [`release`](Lifecycle::release).
/// - Output: [`poll_output`](Lifecycle::poll_output). After creating the lifecycle and after
///   every input, drain it until it says [`LockOutput::Wait`] or [`LockOutput::Idle`].
///
/// ```
/// use std::time::{Duration, Instant};
/// use rand_core::SeedableRng;
/// use redlock_core::{Config, Lifecycle, LockEvent, LockOutput, LockRequest, Reply};
///
/// let config = Config::new(3)?;
/// let mut rng = chacha20::ChaCha8Rng::seed_from_u64(1);
/// let now = Instant::now();
/// let mut lock = Lifecycle::acquire(now, &config, &LockRequest::new("job", Duration::from_secs(5)), &mut rng)?;
/// let mut sent = Vec::new();
/// while let LockOutput::Send(transmit) = lock.poll_output(now) {
///     sent.push(transmit.id); // every node is asked before the first wait
/// }
/// for id in sent {
///     lock.handle_reply(now, id, Reply::Ok); // each node answers SET NX PX with OK
/// }
/// assert!(matches!(lock.poll_output(now), LockOutput::Event(LockEvent::Acquired(_))));
/// assert!(lock.is_held());
/// # Ok::<(), redlock_core::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct Lifecycle {
    config: Config,
    origin: Origin,
    stage: Stage,
    /// An event to hand out before anything else.
    ready: Option<LockEvent>,
    /// When the lifecycle was created (its first operation started).
    started: Instant,
    /// When the lock became held (the acquisition or resumption succeeded).
    held_since: Option<Instant>,
}

impl Lifecycle {
    /// Starts acquiring the lock `request` describes; nothing is sent until the first poll.
    /// `rng` makes the lock id, the token (unless the request brings one) and the retry jitter.
    pub fn acquire<R: CryptoRng + ?Sized>(
        now: Instant,
        config: &Config,
        request: &LockRequest,
        rng: &mut R,
    ) -> Result<Self, ConfigError> {
        let origin = Origin::new(rng.next_u64(), 1);
        let mut machine = Acquire::new(now, config, request, rng)?;
        machine.set_origin(origin);
        let auto_extend = request.auto_extend;
        Ok(Self::start(
            now,
            config,
            origin,
            Stage::Acquiring {
                machine: Box::new(machine),
                auto_extend,
            },
        ))
    }

    /// Resumes a lock another client (or an earlier process) acquired, from its resources and
    /// token (`request` must carry the token; its retry policy is not used): one
    /// compare-and-extend round to the request's TTL proves that the token holds the lock on a
    /// quorum, and the lock is held from then on, valid from that round's start
    /// ([`LockEvent::Acquired`]). A wrong or stale token ends in [`LockEvent::NotAcquired`] with
    /// [`FailureReason::NotHeld`], and never touches a key it does not hold: the extend script
    /// changes only keys that hold the token.
    pub fn resume<R: CryptoRng + ?Sized>(
        now: Instant,
        config: &Config,
        request: &LockRequest,
        rng: &mut R,
    ) -> Result<Self, ConfigError> {
        let spec = spec_with_token(config, request)?;
        let origin = Origin::new(rng.next_u64(), 1);
        let mut machine = Extend::resume(now, config, spec, request.ttl)?;
        machine.set_origin(origin);
        let auto_extend = request.auto_extend;
        Ok(Self::start(
            now,
            config,
            origin,
            Stage::Resuming {
                machine,
                auto_extend,
            },
        ))
    }

    /// Releases a lock by its resources and token, without holding it here (`request` must carry
    /// the token; its TTL bounds the wait for answers like any release's): one
    /// compare-and-delete round on every node, reported as [`LockEvent::Released`]. A key that
    /// holds another token is never touched, so a wrong or stale token releases nothing (the
    /// report says `HeldByOther` or `Absent`).
    pub fn release_by_token<R: CryptoRng + ?Sized>(
        now: Instant,
        config: &Config,
        request: &LockRequest,
        rng: &mut R,
    ) -> Result<Self, ConfigError> {
        let spec = spec_with_token(config, request)?;
        let ttl = Ttl::new(now, request.ttl, config.drift(), config.min_validity())?;
        let origin = Origin::new(rng.next_u64(), 1);
        let mut release = Release::for_spec(now, config, spec, ttl.duration());
        release.set_origin(origin);
        Ok(Self::start(now, config, origin, Stage::Releasing(release)))
    }

    /// Marks every node trusted for restart-aware voting ([`TRUST_SCRIPT`](crate::TRUST_SCRIPT)):
    /// for an operator who knows that no lock is live on the nodes. Each node's answer comes
    /// out as [`LockEvent::Trusted`]. Never part of acquiring a lock.
    pub fn trust<R: CryptoRng + ?Sized>(now: Instant, config: &Config, rng: &mut R) -> Self {
        let origin = Origin::new(rng.next_u64(), 1);
        let mut trust = Trust::new(now, config);
        trust.set_origin(origin);
        Self::start(now, config, origin, Stage::Trusting(trust))
    }

    /// A lifecycle that holds `lease` as if it had just acquired it (no auto-extension): for
    /// tests of extensions and releases that start from a lease of their own.
    #[cfg(any(test, feature = "testing"))]
    pub fn holding(now: Instant, config: &Config, lease: Lease) -> Self {
        let mut lifecycle = Self::start(now, config, Origin::new(0, 1), Stage::Ended);
        lifecycle.hold(now, lease, false, Keys::Set { drew_token: false });
        lifecycle.ready = None;
        lifecycle
    }

    /// A lifecycle at its first operation (`origin`, already given to the stage's machine).
    fn start(now: Instant, config: &Config, origin: Origin, stage: Stage) -> Self {
        Self {
            config: config.clone(),
            origin,
            stage,
            ready: None,
            started: now,
            held_since: None,
        }
    }

    /// The lifecycle's own id, drawn from the RNG when it was made: every request id it sends
    /// carries it ([`RequestId::origin`]).
    pub fn id(&self) -> u64 {
        self.origin.lock()
    }

    /// When the lifecycle started (the `now` it was created with): the start of an
    /// acquisition, for its latency.
    pub fn started_at(&self) -> Instant {
        self.started
    }

    /// When the lock became held (the `now` of the input that completed the acquisition or
    /// resumption), for its hold time; `None` if it never was.
    pub fn held_since(&self) -> Option<Instant> {
        self.held_since
    }

    /// The lease while the lock is held (also after [`LockEvent::Lost`], until the release).
    pub fn lease(&self) -> Option<&Lease> {
        match &self.stage {
            Stage::Held(held) => Some(&held.lease),
            _ => None,
        }
    }

    /// Whether the lock is held: acquired and neither released nor reported lost. Validity is a
    /// separate question: see [`Lease::is_valid`].
    pub fn is_held(&self) -> bool {
        matches!(&self.stage, Stage::Held(held) if !held.lost)
    }

    /// Whether the lock is auto-extended while held (the request asked for it).
    pub fn is_auto_extended(&self) -> bool {
        match &self.stage {
            Stage::Acquiring { auto_extend, .. } | Stage::Resuming { auto_extend, .. } => {
                *auto_extend
            }
            Stage::Held(held) => held.renewal.is_some(),
            Stage::Releasing(_) | Stage::Trusting(_) | Stage::Ended => false,
        }
    }

    /// Whether the lifecycle has ended (not acquired, or released): nothing will ever be sent.
    pub fn has_ended(&self) -> bool {
        matches!(self.stage, Stage::Ended) && self.ready.is_none()
    }

    /// The keys and token being acquired or held (`None` once ended).
    pub fn spec(&self) -> Option<&LockSpec> {
        match &self.stage {
            Stage::Acquiring { machine, .. } => Some(machine.spec()),
            Stage::Resuming { machine, .. } => Some(machine.spec()),
            Stage::Held(held) => Some(held.lease.spec()),
            Stage::Releasing(release) => Some(release.spec()),
            Stage::Trusting(_) | Stage::Ended => None,
        }
    }

    /// Marks a held lock lost (its validity ended without auto-extension, as the driver saw):
    /// it is not held any more, and is not extended; it can still be released.
    pub(crate) fn mark_lost(&mut self) {
        if let Stage::Held(held) = &mut self.stage {
            held.lost = true;
        }
    }

    /// Hands in the reply to request `id`. Replies of an earlier operation or round, of another
    /// lock, duplicates, late ones and unknown ids are ignored.
    pub fn handle_reply(&mut self, now: Instant, id: RequestId, reply: Reply) {
        match &mut self.stage {
            Stage::Acquiring { machine, .. } => machine.handle_reply(now, id, reply),
            Stage::Resuming { machine, .. } => machine.handle_reply(now, id, reply),
            Stage::Held(held) => {
                if let Some((machine, _)) = &mut held.extending {
                    machine.handle_reply(now, id, reply);
                }
            }
            Stage::Releasing(machine) => machine.handle_reply(now, id, reply),
            Stage::Trusting(machine) => machine.handle_reply(now, id, reply),
            Stage::Ended => {}
        }
    }

    /// Lets deadlines pass: call when the instant of the last [`LockOutput::Wait`] has come.
    /// Harmless at any other time.
    pub fn handle_timeout(&mut self, now: Instant) {
        match &mut self.stage {
            Stage::Acquiring { machine, .. } => machine.handle_timeout(now),
            Stage::Resuming { machine, .. } => machine.handle_timeout(now),
            Stage::Held(held) => {
                if let Some((machine, _)) = &mut held.extending {
                    machine.handle_timeout(now);
                }
            }
            Stage::Releasing(machine) => machine.handle_timeout(now),
            Stage::Trusting(machine) => machine.handle_timeout(now),
            Stage::Ended => {}
        }
    }

    /// Ends a pause between acquisition rounds now: the lock may have been released (a push
    /// notification said so). Heard while a round is out, it ends the pause after that round if
    /// the round is lost. The retry policy's attempts and deadline still hold; harmless at any
    /// other time.
    pub fn handle_wake(&mut self, now: Instant) {
        if let Stage::Acquiring { machine, .. } = &mut self.stage {
            machine.handle_wake(now);
        }
    }

    /// This client released the keys this acquisition waits for and hands them to it: a
    /// pause between rounds ends now, with no jitter (a round out, or a lock that is not
    /// acquiring, is left as it is: `false`). Whether it did.
    pub fn handle_handover(&mut self, now: Instant) -> bool {
        match &mut self.stage {
            Stage::Acquiring { machine, .. } => machine.handle_handover(now),
            _ => false,
        }
    }

    /// Extends the held lock to `ttl` from now; its outcome comes out as
    /// [`LockEvent::Extended`] with [`Trigger::Caller`]. If an extension is in flight, this one
    /// starts after it. A lock that is not held (still acquiring, lost past its validity,
    /// released) is not extended: the event says [`ExtendFailure::Expired`] and nothing is sent.
    /// A TTL the engine does not accept is an error, and nothing changes.
    pub fn extend(&mut self, now: Instant, ttl: Duration) -> Result<(), ConfigError> {
        Ttl::for_config(now, &self.config, ttl)?;
        match &mut self.stage {
            // Given up (lost): not extended any more, as for a lock no longer held.
            Stage::Held(held) if held.lost => {
                self.ready = Some(LockEvent::Extended {
                    outcome: ExtendOutcome::NotExtended {
                        reason: ExtendFailure::Expired,
                        votes: Vec::new(),
                    },
                    trigger: Trigger::Caller,
                });
            }
            Stage::Held(held) if held.extending.is_some() => held.queued = Some(ttl),
            Stage::Held(_) => self.start_extend(now, ttl, Trigger::Caller),
            _ => {
                self.ready = Some(LockEvent::Extended {
                    outcome: ExtendOutcome::NotExtended {
                        reason: ExtendFailure::Expired,
                        votes: Vec::new(),
                    },
                    trigger: Trigger::Caller,
                });
            }
        }
        Ok(())
    }

    /// Releases the lock on every node (compare-and-delete; keys under another token are never
    /// touched) but those that refused the winning round of a token this lifecycle drew (they
    /// hold another token's key, and report [`NodeRelease::HeldByOther`](crate::NodeRelease)
    /// unasked); the report comes out as [`LockEvent::Released`]. Also ends an acquisition in
    /// progress: whatever its requests may have set is released, and if nothing was sent yet the
    /// lifecycle just ends. An extension in flight is dropped: its requests go first on each
    /// node, so the release still runs after them there. A resumption in progress just ends (its
    /// extension never shortened anything, and the lock is not ours until it is proved).
    /// Harmless once releasing or ended.
    pub fn release(&mut self, now: Instant) {
        let release = match &mut self.stage {
            Stage::Acquiring { machine, .. } => machine.abandon(now, &self.config),
            Stage::Held(held) => {
                let mut release = Release::new(now, &self.config, &held.lease);
                release.skip_refused(&held.refused);
                Some(release)
            }
            Stage::Resuming { .. } => None,
            Stage::Releasing(_) | Stage::Trusting(_) | Stage::Ended => return,
        };
        self.stage = match release {
            Some(mut release) => {
                self.origin = self.origin.next();
                release.set_origin(self.origin);
                Stage::Releasing(release)
            }
            None => Stage::Ended,
        };
    }

    /// The next thing to do. Call after creating the lifecycle and after every input, until it
    /// says [`LockOutput::Wait`] or [`LockOutput::Idle`]; every [`LockOutput::Send`] goes out
    /// at once, and every [`LockOutput::Event`] is passed on (then keep polling).
    pub fn poll_output(&mut self, now: Instant) -> LockOutput {
        loop {
            if let Some(event) = self.ready.take() {
                return LockOutput::Event(event);
            }
            match &mut self.stage {
                Stage::Acquiring {
                    machine,
                    auto_extend,
                } => match machine.poll_output(now) {
                    Output::Send(transmit) => return LockOutput::Send(transmit),
                    Output::Wait(at) => {
                        let reason = if machine.is_pausing() {
                            WakeReason::RetryPause
                        } else {
                            WakeReason::Replies(Operation::Acquire)
                        };
                        return LockOutput::Wait { at, reason };
                    }
                    Output::Done(AcquireOutcome::Acquired(lease)) => {
                        let auto_extend = *auto_extend;
                        let drew_token = machine.draws_its_tokens();
                        self.hold(now, lease, auto_extend, Keys::Set { drew_token });
                    }
                    Output::Done(AcquireOutcome::Failed(failure)) => {
                        self.stage = Stage::Ended;
                        return LockOutput::Event(LockEvent::NotAcquired(failure));
                    }
                    Output::Idle => self.stage = Stage::Ended,
                },
                Stage::Resuming {
                    machine,
                    auto_extend,
                } => match machine.poll_output(now) {
                    Output::Send(transmit) => return LockOutput::Send(transmit),
                    Output::Wait(at) => {
                        return LockOutput::Wait {
                            at,
                            reason: WakeReason::Replies(Operation::Resume),
                        };
                    }
                    Output::Done(ExtendOutcome::Extended {
                        valid_until,
                        ttl,
                        votes,
                    }) => {
                        let lease = Lease {
                            spec: machine.spec().clone(),
                            ttl,
                            valid_until,
                            votes,
                            attempts: 1,
                            fence: None,
                        };
                        let auto_extend = *auto_extend;
                        self.hold(now, lease, auto_extend, Keys::Resumed);
                    }
                    Output::Done(ExtendOutcome::NotExtended { reason, votes }) => {
                        self.stage = Stage::Ended;
                        let reason = match reason {
                            ExtendFailure::Unavailable => FailureReason::Unavailable,
                            ExtendFailure::TooSlow => FailureReason::TooSlow,
                            ExtendFailure::NotHeld | ExtendFailure::Expired => {
                                FailureReason::NotHeld
                            }
                        };
                        return LockOutput::Event(LockEvent::NotAcquired(AcquireFailure {
                            reason,
                            votes,
                            attempts: 1,
                        }));
                    }
                    Output::Idle => self.stage = Stage::Ended,
                },
                Stage::Held(held) => {
                    if let Some(output) = Self::poll_held(held, now) {
                        return output;
                    }
                    // An extension is due: its first requests come out on the next pass.
                    let ttl = held.queued.take();
                    let (ttl, trigger) = match ttl {
                        Some(ttl) => (ttl, Trigger::Caller),
                        None => (held.lease.ttl(), Trigger::Renewal),
                    };
                    self.start_extend(now, ttl, trigger);
                }
                Stage::Releasing(machine) => match machine.poll_output(now) {
                    Output::Send(transmit) => return LockOutput::Send(transmit),
                    Output::Wait(at) => {
                        return LockOutput::Wait {
                            at,
                            reason: WakeReason::Replies(Operation::Release),
                        };
                    }
                    Output::Done(report) => {
                        self.stage = Stage::Ended;
                        return LockOutput::Event(LockEvent::Released(report));
                    }
                    Output::Idle => self.stage = Stage::Ended,
                },
                Stage::Trusting(machine) => match machine.poll_output(now) {
                    Output::Send(transmit) => return LockOutput::Send(transmit),
                    Output::Wait(at) => {
                        return LockOutput::Wait {
                            at,
                            reason: WakeReason::Replies(Operation::Trust),
                        };
                    }
                    Output::Done(votes) => {
                        self.stage = Stage::Ended;
                        return LockOutput::Event(LockEvent::Trusted(votes));
                    }
                    Output::Idle => self.stage = Stage::Ended,
                },
                Stage::Ended => return LockOutput::Idle,
            }
        }
    }

    /// One step of a held lock: an output, or `None` when an extension must start now (a queued
    /// caller's, else the renewal's).
    fn poll_held(held: &mut Held, now: Instant) -> Option<LockOutput> {
        if let Some((machine, trigger)) = &mut held.extending {
            let trigger = *trigger;
            match machine.poll_output(now) {
                Output::Send(transmit) => return Some(LockOutput::Send(transmit)),
                Output::Wait(at) => {
                    return Some(LockOutput::Wait {
                        at,
                        reason: WakeReason::Replies(Operation::Extend),
                    });
                }
                Output::Done(outcome) => {
                    held.extending = None;
                    let votes = match &outcome {
                        ExtendOutcome::Extended { votes, .. }
                        | ExtendOutcome::NotExtended { votes, .. } => votes,
                    };
                    mark_not_held(&mut held.not_held, votes);
                    held.lease.apply(&outcome);
                    if let Some(renewal) = &mut held.renewal {
                        renewal.handle_extended(now, &outcome);
                    }
                    if let ExtendOutcome::NotExtended { votes, .. } = &outcome {
                        held.failed_votes.clone_from(votes);
                    }
                    return Some(LockOutput::Event(LockEvent::Extended { outcome, trigger }));
                }
                Output::Idle => held.extending = None,
            }
        }
        if held.queued.is_some() {
            return None;
        }
        if held.lost {
            return Some(LockOutput::Idle);
        }
        let Some(renewal) = &mut held.renewal else {
            return Some(LockOutput::Idle);
        };
        match renewal.poll(now) {
            RenewalStep::Extend => None,
            RenewalStep::Wait(at) => Some(LockOutput::Wait {
                at,
                reason: WakeReason::AutoExtend,
            }),
            RenewalStep::Lost(cause) => {
                held.lost = true;
                Some(LockOutput::Event(LockEvent::Lost {
                    cause,
                    votes: held.failed_votes.clone(),
                }))
            }
        }
    }

    /// The lock is held: hand the lease out, and start the renewal schedule if asked.
    fn hold(&mut self, now: Instant, lease: Lease, auto_extend: bool, keys: Keys) {
        // The TTL as sent: whole milliseconds, rounded down (never above what the keys got).
        let ttl_ceiling_ms = matches!(keys, Keys::Set { .. })
            .then(|| u64::try_from(lease.ttl().as_millis()).unwrap_or(u64::MAX));
        let renewal =
            auto_extend.then(|| Renewal::new(now, &lease, self.config.node_timeout(lease.ttl())));
        let mut not_held = Vec::new();
        mark_not_held(&mut not_held, lease.votes());
        let refused = match keys {
            Keys::Set { drew_token: true } => not_held.clone(),
            Keys::Set { drew_token: false } | Keys::Resumed => Vec::new(),
        };
        self.ready = Some(LockEvent::Acquired(lease.clone()));
        self.held_since = Some(now);
        self.stage = Stage::Held(Box::new(Held {
            lease,
            renewal,
            extending: None,
            queued: None,
            failed_votes: Vec::new(),
            lost: false,
            ttl_ceiling_ms,
            not_held,
            refused,
        }));
    }

    /// Starts an extension of the held lock to `ttl` (checked by the caller).
    fn start_extend(&mut self, now: Instant, ttl: Duration, trigger: Trigger) {
        let Stage::Held(held) = &mut self.stage else {
            return;
        };
        match Extend::new(now, &self.config, &held.lease, ttl) {
            Ok(mut machine) => {
                self.origin = self.origin.next();
                machine.set_origin(self.origin);
                machine.skip_not_held(&held.not_held);
                let ttl_ms = machine.ttl_ms();
                if held.ttl_ceiling_ms.is_some_and(|ceiling| ttl_ms >= ceiling) {
                    machine.allow_exact_ttl();
                }
                held.ttl_ceiling_ms = held.ttl_ceiling_ms.map(|ceiling| ceiling.max(ttl_ms));
                held.extending = Some((machine, trigger));
            }
            // Only an `Instant` at the end of its range makes a TTL that passed once fail now;
            // keeping the lock is then impossible, which is what losing it means.
            Err(_) => {
                held.lost = true;
                self.ready = Some(LockEvent::Lost {
                    cause: LossCause::Expired,
                    votes: Vec::new(),
                });
            }
        }
    }
}

/// Marks the nodes whose vote says our token does not hold the lock there.
/// Empty until a node first refuses: the common lock never allocates for it.
fn mark_not_held(not_held: &mut Vec<bool>, votes: &[Vote]) {
    if not_held.is_empty() {
        if !votes.contains(&Vote::Refused) {
            return;
        }
        not_held.resize(votes.len(), false);
    }
    for (mark, vote) in not_held.iter_mut().zip(votes) {
        *mark |= *vote == Vote::Refused;
    }
}

/// The keys and the caller's token of `request`, for a lock this client did not acquire.
fn spec_with_token(config: &Config, request: &LockRequest) -> Result<LockSpec, ConfigError> {
    let token = request
        .token
        .clone()
        .ok_or(ConfigError::ResumeWithoutToken)?;
    LockSpec::new(config.key_prefix(), &request.resources, Token::new(token)?)
}

#[cfg(test)]
#[path = "lifecycle_tests.rs"]
mod tests;
