//! What every adapter does with a lock the same way, whatever its transport: the client's
//! settings and RNG, starting a lifecycle, reading its events into results and errors, and the
//! held lock's accessors. An adapter adds only how requests reach the nodes and how it waits.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use redlock_core::{
    Config, ExtendOutcome, Lease, Lifecycle, LockEvent, LockRequest, ReleaseReport, Trigger, Vote,
};

use crate::entropy::seeded_rng;
use crate::error::{Error, LockFailure, NodeReport};
use crate::lease_watch::LeaseKeeper;
use crate::telemetry;

/// A client's settings, node labels and RNG (tokens, lock ids and jitter; seeded once from the
/// OS when the client is built).
pub struct ClientCore {
    config: Config,
    labels: Arc<[Arc<str>]>,
    rng: Mutex<chacha20::ChaCha20Rng>,
}

impl std::fmt::Debug for ClientCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.labels)
            .field("quorum", &self.config.quorum())
            .finish()
    }
}

/// Which way a lifecycle starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Acquire the lock.
    Acquire,
    /// Resume a lock by its token.
    Resume,
    /// Release a lock by its token.
    ReleaseByToken,
}

impl ClientCore {
    /// Settings for nodes named `labels` (`host:port`, never with credentials).
    pub fn new(config: Config, labels: Vec<Arc<str>>) -> Result<Self, Error> {
        Ok(Self {
            config,
            labels: labels.into(),
            rng: Mutex::new(seeded_rng()?),
        })
    }

    /// The client's core and its nodes from `settings`, each node made by `node` from its
    /// address and the I/O timeout (the adapter's transport).
    pub fn from_settings<N>(
        settings: crate::Settings,
        node: impl Fn(crate::NodeAddr, std::time::Duration) -> N,
    ) -> Result<(Self, Arc<[N]>), Error> {
        let labels = settings.nodes.iter().map(|a| a.label().clone()).collect();
        let io_timeout = settings.io_timeout;
        let nodes = settings
            .nodes
            .into_iter()
            .map(|addr| node(addr, io_timeout))
            .collect();
        Ok((Self::new(settings.config, labels)?, nodes))
    }

    /// The checked settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The nodes, as `host:port`.
    pub fn labels(&self) -> &[Arc<str>] {
        &self.labels
    }

    /// A lifecycle that marks every node trusted (restart-aware voting).
    pub fn trust(&self) -> Lifecycle {
        let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
        Lifecycle::trust(Instant::now(), &self.config, &mut *rng)
    }

    /// Reads an event of a trust command; `Some` with each node's answer once it is done.
    pub fn trusted(&self, event: Option<LockEvent>) -> Option<Vec<NodeReport<Vote>>> {
        let votes = match event {
            Some(LockEvent::Trusted(votes)) => votes,
            Some(_) => return None,
            None => Vec::new(),
        };
        tracing::info!(?votes, "nodes trusted for restart-aware voting");
        Some(LockFailure::new(&self.labels, &votes, 1).nodes)
    }

    /// A lifecycle for `request`, started as `start` says.
    pub fn start(&self, start: Start, request: &LockRequest) -> Result<Lifecycle, Error> {
        let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let lifecycle = match start {
            Start::Acquire => Lifecycle::acquire(now, &self.config, request, &mut *rng),
            Start::Resume => Lifecycle::resume(now, &self.config, request, &mut *rng),
            Start::ReleaseByToken => {
                Lifecycle::release_by_token(now, &self.config, request, &mut *rng)
            }
        }?;
        Ok(lifecycle)
    }

    /// Reads an event of an acquisition (or resumption); `None` from the driver means the
    /// lifecycle went idle. `Some` once it is settled: the lease, or why not.
    pub fn acquired(
        &self,
        lifecycle: &Lifecycle,
        event: Option<LockEvent>,
    ) -> Option<Result<Lease, Error>> {
        match event {
            Some(LockEvent::Acquired(lease)) => {
                tracing::debug!(attempts = lease.attempts(), "acquired");
                telemetry::acquisition(lifecycle.started_at(), lease.attempts(), None);
                Some(Ok(lease))
            }
            Some(LockEvent::NotAcquired(failure)) => {
                tracing::debug!(reason = ?failure.reason, attempts = failure.attempts, "not acquired");
                telemetry::acquisition(
                    lifecycle.started_at(),
                    failure.attempts,
                    Some(failure.reason),
                );
                Some(Err(Error::acquire_failed(&self.labels, &failure)))
            }
            Some(_) => None,
            // An acquisition is never idle before its outcome; say so rather than hang.
            None => Some(Err(Error::Unavailable(LockFailure::default()))),
        }
    }

    /// Reads an event of a release; `Some` with the report once it is done.
    pub fn released(
        &self,
        lifecycle: &Lifecycle,
        event: Option<LockEvent>,
    ) -> Option<ReleaseReport> {
        match event {
            Some(LockEvent::Released(report)) => {
                telemetry::release(lifecycle.held_since());
                tracing::debug!(
                    released = report.released(),
                    held_by_other = report.held_by_other(),
                    unreachable = report.unreachable(),
                    "released"
                );
                Some(report)
            }
            Some(_) => None,
            // Nothing was sent (an acquisition cancelled before its first request).
            None => Some(ReleaseReport { nodes: Vec::new() }),
        }
    }
}

/// Reads an event while the caller's extension of `lease` runs: keeps `lease` current, and
/// returns `Some` once the extension ended (`None` from the driver means it went idle).
pub fn extended(
    lease: &mut Lease,
    labels: &[Arc<str>],
    event: Option<LockEvent>,
) -> Option<Result<(), Error>> {
    match event {
        Some(LockEvent::Extended { outcome, trigger }) => {
            telemetry::extension(trigger, matches!(outcome, ExtendOutcome::Extended { .. }));
            lease.apply(&outcome);
            if trigger != Trigger::Caller {
                return None;
            }
            match outcome {
                ExtendOutcome::Extended { .. } => Some(Ok(())),
                ExtendOutcome::NotExtended { reason, votes } => {
                    tracing::debug!(?reason, "not extended");
                    Some(Err(Error::extend_failed(labels, reason, &votes)))
                }
            }
        }
        Some(_) => None,
        None => Some(Err(Error::Lost(LockFailure::default()))),
    }
}

/// Reads an event of an auto-extended `lease`: keeps it current, tells the work through
/// `keeper`, and returns the error once the lock is lost.
pub fn kept(
    lease: &mut Lease,
    labels: &[Arc<str>],
    keeper: &LeaseKeeper,
    event: LockEvent,
) -> Option<Error> {
    match event {
        LockEvent::Extended { outcome, trigger } => {
            telemetry::extension(trigger, matches!(outcome, ExtendOutcome::Extended { .. }));
            if let ExtendOutcome::NotExtended { reason, .. } = &outcome {
                tracing::debug!(?reason, "auto-extension failed");
            }
            lease.apply(&outcome);
            keeper.extended(lease.valid_until());
            None
        }
        LockEvent::Lost { cause, votes } => {
            telemetry::lost(cause);
            keeper.lost();
            tracing::warn!(?cause, "lock lost while work was running");
            Some(Error::lost(labels, cause, &votes))
        }
        LockEvent::Acquired(_)
        | LockEvent::NotAcquired(_)
        | LockEvent::Released(_)
        | LockEvent::Trusted(_) => None,
    }
}

/// The accessors of a held lock, the same in every adapter: expands inside `impl Lock` of a type
/// with a `lease: Lease` field kept current.
#[macro_export]
macro_rules! lock_accessors {
    () => {
        /// The token stored under the keys: with the resources, all another client needs to
        /// `resume` the lock or `release_by_token` it.
        pub fn token(&self) -> &$crate::api::Token {
            self.lease.token()
        }

        /// The locked resources, without the key prefix.
        pub fn resources(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
            self.lease.spec().resources()
        }

        /// The end of validity (monotonic clock). Never moves backwards.
        pub fn valid_until(&self) -> std::time::Instant {
            self.lease.valid_until()
        }

        /// Validity left now (zero once it has passed).
        pub fn remaining(&self) -> std::time::Duration {
            self.lease.remaining(std::time::Instant::now())
        }

        /// The engine's view of the lock (votes, attempts, TTL).
        pub fn lease(&self) -> &$crate::api::Lease {
            &self.lease
        }

        /// The fencing token of a lock acquired with `LockRequest::fenced()`: larger than every
        /// earlier holder's of these resources. Send it with each write to the protected
        /// resource, and have the resource reject a write whose fence is below the largest it
        /// accepted. `None` for a lock acquired without fencing.
        pub fn fence(&self) -> Option<u64> {
            self.lease.fence()
        }
    };
}

/// The constructors and getters of a client, the same in every adapter: expands inside
/// `impl Redlock` of a type with an `inner.core: ClientCore` field that implements
/// `FromSettings`.
#[macro_export]
macro_rules! client_constructors {
    () => {
        /// A client with default settings for the masters at `urls`
        /// (`redis://[user:password@]host:port[/db]`; `rediss://` with the `tls` feature).
        /// Nothing connects yet, and a node that is down is not an error.
        pub fn new<I, S>(urls: I) -> Result<Self, $crate::api::Error>
        where
            I: IntoIterator<Item = S>,
            S: AsRef<str>,
        {
            Self::builder(urls).build()
        }

        /// Starts configuring a client for the masters at `urls`:
        /// `Redlock::builder(urls).quorum(3).retry(policy).build()`.
        pub fn builder<I, S>(urls: I) -> $crate::Builder<Self>
        where
            I: IntoIterator<Item = S>,
            S: AsRef<str>,
        {
            $crate::Builder::new(urls)
        }

        /// The checked settings.
        pub fn config(&self) -> &$crate::api::Config {
            self.inner.core.config()
        }

        /// The nodes, as `host:port` (never with credentials).
        pub fn nodes(&self) -> &[std::sync::Arc<str>] {
            self.inner.core.labels()
        }
    };
}
