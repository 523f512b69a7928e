//! The client: node workers, settings, and the acquire entry points.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use redlock_core::{Acquire, AcquireOutcome, Config, LockRequest, Release, RetryPolicy};
use redlock_redis::{Builder, Error, FromSettings, ReleaseReport, Settings, seeded_rng};

use crate::conn::Node;
use crate::driver::{Dispatch, drive};
use crate::lock::Lock;

/// A Redlock client over N independent Redis masters, for blocking code. Cheap to clone and
/// share between threads: clones use the same node workers (one thread and one connection per
/// node, made on first use; a node that is down at start is not an error).
#[derive(Clone)]
pub struct Redlock {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) config: Config,
    pub(crate) nodes: Arc<[Node]>,
    pub(crate) labels: Vec<Arc<str>>,
    /// Tokens and jitter: seeded once from the OS when the client is built.
    rng: Mutex<chacha20::ChaCha20Rng>,
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.inner.labels)
            .field("quorum", &self.inner.config.quorum())
            .finish()
    }
}

/// Configures a [`Redlock`]: `Redlock::builder(urls).quorum(3).retry(policy).build()`.
pub type RedlockBuilder = Builder<Redlock>;

impl FromSettings for Redlock {
    fn from_settings(settings: Settings) -> Result<Self, Error> {
        let labels = settings.nodes.iter().map(|a| a.label().clone()).collect();
        let nodes = settings
            .nodes
            .into_iter()
            .map(|a| Node::spawn(a, settings.io_timeout))
            .collect();
        Ok(Redlock {
            inner: Arc::new(Inner {
                config: settings.config,
                nodes,
                labels,
                rng: Mutex::new(seeded_rng()?),
            }),
        })
    }
}

impl Redlock {
    /// A client with default settings for the masters at `urls`.
    pub fn new<I, S>(urls: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::builder(urls).build()
    }

    /// Starts configuring a client for the masters at `urls`.
    pub fn builder<I, S>(urls: I) -> RedlockBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Builder::new(urls)
    }

    /// The checked settings.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The nodes, as `host:port` (never with credentials).
    pub fn nodes(&self) -> &[Arc<str>] {
        &self.inner.labels
    }

    /// Locks `resource` for `ttl`, retrying as the client's retry policy says.
    pub fn lock(&self, resource: impl Into<Vec<u8>>, ttl: Duration) -> Result<Lock, Error> {
        self.acquire(LockRequest::new(resource, ttl))
    }

    /// Locks `resource` for `ttl` in a single round: no retry.
    pub fn try_lock(&self, resource: impl Into<Vec<u8>>, ttl: Duration) -> Result<Lock, Error> {
        self.acquire(LockRequest::new(resource, ttl).retry(RetryPolicy::once()))
    }

    /// Locks as `request` says: several resources, a retry policy, a deadline or a token of its
    /// own. Blocks the calling thread until the outcome (at most the policy's bound).
    pub fn acquire(&self, request: LockRequest) -> Result<Lock, Error> {
        let _span = tracing::debug_span!("redlock.acquire", ttl = ?request.ttl()).entered();
        let mut acquire = {
            let mut rng = self
                .inner
                .rng
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            Acquire::new(Instant::now(), &self.inner.config, &request, &mut *rng)?
        };
        let mut dispatch = Dispatch::new(self.inner.nodes.clone());
        match drive(&mut dispatch, &mut acquire) {
            AcquireOutcome::Acquired(lease) => {
                tracing::debug!(attempts = lease.attempts(), "acquired");
                Ok(Lock::new(self.clone(), lease, dispatch))
            }
            AcquireOutcome::Failed(failure) => {
                tracing::debug!(reason = ?failure.reason, attempts = failure.attempts, "not acquired");
                Err(Error::acquire_failed(&self.inner.labels, &failure))
            }
            _ => unreachable!("AcquireOutcome has two variants"),
        }
    }

    /// Runs `release` to its report on the lock's dispatch.
    pub(crate) fn run_release(
        &self,
        dispatch: &mut Dispatch,
        mut release: Release,
    ) -> ReleaseReport {
        let _span = tracing::debug_span!("redlock.release").entered();
        let report = drive(dispatch, &mut release);
        ReleaseReport::new(&self.inner.labels, &report)
    }
}
