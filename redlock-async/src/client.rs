//! The client: nodes, settings, and the acquire entry points.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use redlock_core::{Acquire, AcquireOutcome, Config, LockRequest, Release, RetryPolicy};
use redlock_redis::{Builder, Error, FromSettings, Settings, seeded_rng};
use tracing::Instrument;

use crate::conn::Node;
use crate::driver::{Dispatch, drive};
use crate::runtime::Runtime;

use crate::lock::Lock;

/// A Redlock client over N independent Redis masters. Cheap to clone and share: clones use the
/// same connections (one multiplexed, reconnecting connection per node, made on first use).
pub struct Redlock<R: Runtime> {
    pub(crate) inner: Arc<Inner>,
    runtime: PhantomData<fn() -> R>,
}

pub(crate) struct Inner {
    pub(crate) config: Config,
    pub(crate) nodes: Arc<[Node]>,
    pub(crate) labels: Vec<Arc<str>>,
    /// Tokens and jitter: seeded once from the OS when the client is built.
    rng: Mutex<chacha20::ChaCha20Rng>,
}

impl<R: Runtime> Clone for Redlock<R> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            runtime: PhantomData,
        }
    }
}

impl<R: Runtime> std::fmt::Debug for Redlock<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.inner.labels)
            .field("quorum", &self.inner.config.quorum())
            .finish()
    }
}

impl<R: Runtime> Redlock<R> {
    /// A client with default settings for the masters at `urls`
    /// (`redis://[user:password@]host:port[/db]`; `rediss://` with the `tls` feature). Nothing
    /// connects yet, and a node that is down is not an error.
    pub fn new<I, S>(urls: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::builder(urls).build()
    }

    /// Starts configuring a client for the masters at `urls`.
    pub fn builder<I, S>(urls: I) -> RedlockBuilder<R>
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
    pub async fn lock(
        &self,
        resource: impl Into<Vec<u8>>,
        ttl: Duration,
    ) -> Result<Lock<R>, Error> {
        self.acquire(LockRequest::new(resource, ttl)).await
    }

    /// Locks `resource` for `ttl` in a single round: no retry.
    pub async fn try_lock(
        &self,
        resource: impl Into<Vec<u8>>,
        ttl: Duration,
    ) -> Result<Lock<R>, Error> {
        self.acquire(LockRequest::new(resource, ttl).retry(RetryPolicy::once()))
            .await
    }

    /// Locks as `request` says: several resources, a retry policy, a deadline or a token of its own.
    ///
    /// # Cancellation
    /// Dropping the returned future before it completes releases, in the background on the
    /// runtime, whatever keys its requests may have set; the release on each node runs after
    /// that node's outstanding request, so it cannot be overtaken by it.
    pub async fn acquire(&self, request: LockRequest) -> Result<Lock<R>, Error> {
        let span = tracing::debug_span!("redlock.acquire", ttl = ?request.ttl());
        async move {
            let acquire = {
                let mut rng = self.inner.rng.lock().unwrap_or_else(PoisonError::into_inner);
                Acquire::new(Instant::now(), &self.inner.config, &request, &mut *rng)?
            };
            let mut pending = Pending {
                client: self.clone(),
                acquire,
                dispatch: Some(Dispatch::new(self.inner.nodes.clone())),
            };
            let outcome = pending.run().await;
            let dispatch = pending.finish();
            match outcome {
                AcquireOutcome::Acquired(lease) => {
                    tracing::debug!(attempts = lease.attempts(), "acquired");
                    Ok(Lock::new(self.clone(), lease, dispatch))
                }
                AcquireOutcome::Failed(failure) => {
                    dispatch.finish();
                    tracing::debug!(reason = ?failure.reason, attempts = failure.attempts, "not acquired");
                    Err(Error::acquire_failed(&self.inner.labels, &failure))
                }
                _ => unreachable!("AcquireOutcome has two variants"),
            }
        }
        .instrument(span)
        .await
    }

    /// Runs `release` to its report on the lock's dispatch.
    pub(crate) async fn run_release(
        &self,
        mut dispatch: Dispatch<R>,
        mut release: Release,
    ) -> redlock_redis::ReleaseReport {
        let span = tracing::debug_span!("redlock.release");
        let report = drive(&mut dispatch, &mut release).instrument(span).await;
        dispatch.finish();
        let report = redlock_redis::ReleaseReport::new(&self.inner.labels, &report);
        tracing::debug!(
            released = report.released(),
            held_by_other = report.held_by_other(),
            unreachable = report.unreachable(),
            "released"
        );
        report
    }
}

/// An acquisition in progress; releases in the background if dropped before it finishes.
struct Pending<R: Runtime> {
    client: Redlock<R>,
    acquire: Acquire,
    dispatch: Option<Dispatch<R>>,
}

impl<R: Runtime> Pending<R> {
    async fn run(&mut self) -> AcquireOutcome {
        match &mut self.dispatch {
            Some(dispatch) => drive(dispatch, &mut self.acquire).await,
            None => unreachable!("the dispatch is taken only when the acquisition finishes"),
        }
    }

    /// The acquisition ended: hand over the dispatch (to the lock, or to let clean-up finish).
    fn finish(&mut self) -> Dispatch<R> {
        match self.dispatch.take() {
            Some(dispatch) => dispatch,
            None => unreachable!("an acquisition finishes once"),
        }
    }
}

impl<R: Runtime> Drop for Pending<R> {
    fn drop(&mut self) {
        let Some(mut dispatch) = self.dispatch.take() else {
            return;
        };
        let release = self
            .acquire
            .abandon(Instant::now(), &self.client.inner.config);
        let runtime = dispatch.runtime().clone();
        tracing::debug!(release = release.is_some(), "acquisition cancelled");
        runtime.spawn(async move {
            if let Some(mut release) = release {
                drive(&mut dispatch, &mut release).await;
            }
            dispatch.finish();
        });
    }
}

/// Configures a [`Redlock`]: `Redlock::builder(urls).quorum(3).retry(policy).build()`.
pub type RedlockBuilder<R> = Builder<Redlock<R>>;

impl<R: Runtime> FromSettings for Redlock<R> {
    fn from_settings(settings: Settings) -> Result<Self, Error> {
        let labels = settings.nodes.iter().map(|a| a.label().clone()).collect();
        let nodes = settings
            .nodes
            .into_iter()
            .map(|a| Node::new(a, settings.io_timeout))
            .collect();
        Ok(Redlock {
            runtime: PhantomData,
            inner: Arc::new(Inner {
                config: settings.config,
                nodes,
                labels,
                rng: Mutex::new(seeded_rng()?),
            }),
        })
    }
}
