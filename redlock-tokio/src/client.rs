//! The client: nodes, settings, and the acquire entry points.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use redlock_core::{
    Acquire, AcquireOutcome, Config, ConfigBuilder, LockRequest, Release, RetryPolicy,
};
use redlock_redis::{Error, NodeAddr, seeded_rng};
use tracing::Instrument;

use crate::conn::Node;
use crate::driver::{Dispatch, drive};

use crate::lock::Lock;

/// The default bound on one request's I/O (connect, send, reply) to one node. The engine's own
/// per-node deadlines are usually much shorter and decide the vote; this only bounds how long a
/// background task may wait on a dead or stopped node.
pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(2);

/// A Redlock client over N independent Redis masters. Cheap to clone and share: clones use the
/// same connections (one multiplexed, reconnecting connection per node, made on first use).
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

impl Redlock {
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
    pub fn builder<I, S>(urls: I) -> RedlockBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let urls: Vec<String> = urls.into_iter().map(|u| u.as_ref().to_owned()).collect();
        RedlockBuilder {
            config: Config::builder(urls.len()),
            urls,
            io_timeout: DEFAULT_IO_TIMEOUT,
        }
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
    pub async fn lock(&self, resource: impl Into<Vec<u8>>, ttl: Duration) -> Result<Lock, Error> {
        self.acquire(LockRequest::new(resource, ttl)).await
    }

    /// Locks `resource` for `ttl` in a single round: no retry.
    pub async fn try_lock(
        &self,
        resource: impl Into<Vec<u8>>,
        ttl: Duration,
    ) -> Result<Lock, Error> {
        self.acquire(LockRequest::new(resource, ttl).retry(RetryPolicy::once()))
            .await
    }

    /// Locks as `request` says: several resources, a retry policy, a deadline or a token of its own.
    ///
    /// # Cancellation
    /// Dropping the returned future before it completes releases, in the background on the
    /// runtime, whatever keys its requests may have set; the release on each node runs after
    /// that node's outstanding request, so it cannot be overtaken by it.
    pub async fn acquire(&self, request: LockRequest) -> Result<Lock, Error> {
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
        mut dispatch: Dispatch,
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
struct Pending {
    client: Redlock,
    acquire: Acquire,
    dispatch: Option<Dispatch>,
}

impl Pending {
    async fn run(&mut self) -> AcquireOutcome {
        match &mut self.dispatch {
            Some(dispatch) => drive(dispatch, &mut self.acquire).await,
            None => unreachable!("the dispatch is taken only when the acquisition finishes"),
        }
    }

    /// The acquisition ended: hand over the dispatch (to the lock, or to let clean-up finish).
    fn finish(&mut self) -> Dispatch {
        match self.dispatch.take() {
            Some(dispatch) => dispatch,
            None => unreachable!("an acquisition finishes once"),
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let Some(mut dispatch) = self.dispatch.take() else {
            return;
        };
        let release = self
            .acquire
            .abandon(Instant::now(), &self.client.inner.config);
        let handle = dispatch.handle().clone();
        tracing::debug!(release = release.is_some(), "acquisition cancelled");
        handle.spawn(async move {
            if let Some(mut release) = release {
                drive(&mut dispatch, &mut release).await;
            }
            dispatch.finish();
        });
    }
}

/// Configures a [`Redlock`]. Every setting is checked by [`build`](RedlockBuilder::build).
#[must_use]
pub struct RedlockBuilder {
    urls: Vec<String>,
    config: ConfigBuilder,
    io_timeout: Duration,
}

impl std::fmt::Debug for RedlockBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // URLs may hold passwords: show only how many there are.
        f.debug_struct("RedlockBuilder")
            .field("nodes", &self.urls.len())
            .finish_non_exhaustive()
    }
}

impl RedlockBuilder {
    /// Adjusts any engine setting (quorum, drift, node timeout, minimum validity, key prefix,
    /// retry policy): see [`ConfigBuilder`].
    pub fn config(mut self, f: impl FnOnce(ConfigBuilder) -> ConfigBuilder) -> Self {
        self.config = f(self.config);
        self
    }

    /// How many nodes must grant a lock (default: a majority).
    pub fn quorum(self, quorum: usize) -> Self {
        self.config(|c| c.quorum(quorum))
    }

    /// The retry policy of [`Redlock::lock`].
    pub fn retry(self, retry: RetryPolicy) -> Self {
        self.config(|c| c.retry(retry))
    }

    /// Bytes put in front of every resource name to form the key.
    pub fn key_prefix(self, prefix: impl Into<Vec<u8>>) -> Self {
        self.config(|c| c.key_prefix(prefix))
    }

    /// The per-node timeout of the engine (default: derived from each lock's TTL).
    pub fn node_timeout(self, timeout: Duration) -> Self {
        self.config(|c| c.node_timeout(timeout))
    }

    /// Bounds one request's I/O on one node (default [`DEFAULT_IO_TIMEOUT`]); 1 ms to 1 hour.
    pub fn io_timeout(mut self, timeout: Duration) -> Self {
        self.io_timeout = timeout;
        self
    }

    /// Checks the settings and the URLs and makes the client; connects to nothing yet.
    pub fn build(self) -> Result<Redlock, Error> {
        let config = self.config.build()?;
        let io_min = Duration::from_millis(1);
        let io_max = Duration::from_secs(3600);
        if !(io_min..=io_max).contains(&self.io_timeout) {
            return Err(redlock_core::ConfigError::Duration {
                field: "io_timeout",
                got: self.io_timeout,
                min: io_min,
                max: io_max,
            }
            .into());
        }
        let addrs = NodeAddr::parse_all(&self.urls)?;
        let labels = addrs.iter().map(|a| a.label().clone()).collect();
        let nodes = addrs
            .into_iter()
            .map(|a| Node::new(a, self.io_timeout))
            .collect();
        Ok(Redlock {
            inner: Arc::new(Inner {
                config,
                nodes,
                labels,
                rng: Mutex::new(seeded_rng()?),
            }),
        })
    }
}
