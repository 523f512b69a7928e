//! The one engine API, [`Lifecycle`], seen as the operation the property checks read: an
//! acquisition, an extension of a lease, a release of a lease. Each property drives a lifecycle
//! through one of these views, so the checks hold for what every driver runs.

use std::time::{Duration, Instant};

use rand_core::CryptoRng;
use redlock_core::{
    AcquireOutcome, Config, ConfigError, ExtendOutcome, Lease, Lifecycle, LockEvent, LockOutput,
    LockRequest, LockSpec, Machine, Output, ReleaseReport, Reply, RequestId,
};

/// One lifecycle, read as the operation that ends with `O`.
pub(crate) struct Engine<O> {
    lifecycle: Lifecycle,
    read: fn(LockEvent) -> Option<O>,
}

impl<O> Engine<O> {
    /// The keys and token in play.
    pub(crate) fn spec(&self) -> &LockSpec {
        self.lifecycle
            .spec()
            .expect("a running lifecycle has a spec")
    }
}

impl<O> Machine for Engine<O> {
    type Outcome = O;

    fn handle_reply(&mut self, now: Instant, id: RequestId, reply: Reply) {
        self.lifecycle.handle_reply(now, id, reply);
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.lifecycle.handle_timeout(now);
    }

    fn poll_output(&mut self, now: Instant) -> Output<O> {
        loop {
            return match self.lifecycle.poll_output(now) {
                LockOutput::Send(transmit) => Output::Send(transmit),
                LockOutput::Wait { at, .. } => Output::Wait(at),
                LockOutput::Event(event) => match (self.read)(event) {
                    Some(outcome) => Output::Done(outcome),
                    // Not the event this view ends with: keep polling.
                    None => continue,
                },
                LockOutput::Idle => Output::Idle,
            };
        }
    }
}

/// An acquisition ([`Lifecycle::acquire`]), ending with its outcome.
pub(crate) fn acquire<R: CryptoRng + ?Sized>(
    now: Instant,
    config: &Config,
    request: &LockRequest,
    rng: &mut R,
) -> Result<Engine<AcquireOutcome>, ConfigError> {
    Ok(Engine {
        lifecycle: Lifecycle::acquire(now, config, request, rng)?,
        read: |event| match event {
            LockEvent::Acquired(lease) => Some(AcquireOutcome::Acquired(lease)),
            LockEvent::NotAcquired(failure) => Some(AcquireOutcome::Failed(failure)),
            _ => None,
        },
    })
}

/// An extension of `lease` to `ttl` ([`Lifecycle::extend`] on a lifecycle holding it), ending
/// with its outcome.
pub(crate) fn extend(
    now: Instant,
    config: &Config,
    lease: &Lease,
    ttl: Duration,
) -> Result<Engine<ExtendOutcome>, ConfigError> {
    let mut lifecycle = Lifecycle::holding(now, config, lease.clone());
    lifecycle.extend(now, ttl)?;
    Ok(Engine {
        lifecycle,
        read: |event| match event {
            LockEvent::Extended { outcome, .. } => Some(outcome),
            _ => None,
        },
    })
}

/// The release of `lease` ([`Lifecycle::release`] on a lifecycle holding it), ending with its
/// report.
pub(crate) fn release(now: Instant, config: &Config, lease: &Lease) -> Engine<ReleaseReport> {
    let mut lifecycle = Lifecycle::holding(now, config, lease.clone());
    lifecycle.release(now);
    Engine {
        lifecycle,
        read: |event| match event {
            LockEvent::Released(report) => Some(report),
            _ => None,
        },
    }
}
