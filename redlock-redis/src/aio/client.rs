//! The client: nodes, settings, its driver, and the entry points that start a lock.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::{
    Builder, Clock, Deployment, Error, FromSettings, LockIds, NodeAddr, NodeReport, Post, Settings,
};
use redlock_core::{LockRequest, ReleaseReport, Vote};

use super::conn::Node;
use super::driver::{Mailbox, start};
use super::lock::Lock;
use super::runtime::Runtime;

/// A Redlock client over N independent Redis masters. Cheap to clone and share (`Send + Sync`):
/// clones use the same driver and connections (one multiplexed, reconnecting connection per
/// node, made on first use).
///
/// # The driver
/// A client's locks are driven by one task, started on the runtime of the first task that
/// starts a lock (`Redlock::new` is not async and may run outside a runtime). It extends the
/// locks that asked for it, finishes every operation whose future was dropped, and releases
/// dropped locks, whether or not anyone awaits anything. It ends once every clone of the client
/// is dropped and every lock is over.
///
/// Make that first call on the runtime that will use the client: the driver runs where it was
/// started. On a current-thread runtime it runs only while that runtime is driven (a
/// `block_on` on a throwaway runtime would leave it parked once `block_on` returns). If its
/// runtime shuts down, every lock it held reports its loss at once (`Error::Stopped`), their
/// keys expire by their TTL, and the next call starts a new driver on the caller's runtime.
pub struct Redlock<R: Runtime> {
    inner: Arc<Inner>,
    runtime: PhantomData<fn() -> R>,
}

struct Inner {
    deployment: Deployment,
    /// The nodes' addresses; each driver makes its own connections to them (a connection is
    /// bound to the runtime it was made on).
    nodes: Vec<NodeAddr>,
    io_timeout: Duration,
    /// How connections watch their nodes' memory ([`Settings::memory_watch`]).
    memory_watch: crate::MemoryWatchSettings,
    /// Counts machine suspends (Linux): shared by every driver and lock of the client.
    clock: Clock,
    ids: LockIds,
    driver: Mutex<Option<Arc<Mailbox>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let driver = self
            .driver
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(driver) = driver {
            driver.post(crate::Call::ClientGone);
        }
    }
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
        self.inner.deployment.fmt(f)
    }
}

impl<R: Runtime> Redlock<R> {
    entry_points!({async} Lock, awaited);

    /// A client with default settings for the masters at `urls`
    /// (`redis://[user:password@]host:port[/db]`; `rediss://` with the `tls` feature).
    /// Nothing connects yet, and a node that is down is not an error.
    pub fn new<I, S>(urls: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Builder::new(urls).build()
    }

    /// Starts configuring a client for the masters at `urls`:
    /// `Redlock::builder(urls).quorum(3).retry(policy).build()`.
    pub fn builder<I, S>(urls: I) -> RedlockBuilder<R>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Builder::new(urls)
    }

    /// Where the running driver's mailbox is kept (held while one is started, so that two
    /// callers never start two).
    fn driver_slot(&self) -> std::sync::MutexGuard<'_, Option<Arc<Mailbox>>> {
        self.inner
            .driver
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The driver's mailbox; starts the driver on the calling task's runtime if none runs.
    fn driver(&self) -> Result<Arc<Mailbox>, Error> {
        let mut slot = self.driver_slot();
        if let Some(driver) = running(&slot) {
            return Ok(driver);
        }
        let deployment = &self.inner.deployment;
        let runtime = R::current().map_err(crate::Error::NoRuntime)?;
        let clusters = crate::cluster::Clusters::default();
        let driver = start(
            runtime,
            deployment.config().clone(),
            deployment.labels(),
            self.inner
                .nodes
                .iter()
                .enumerate()
                .map(|(index, addr)| {
                    let watch = self.inner.memory_watch;
                    let io_timeout = self.inner.io_timeout;
                    Node::new(addr.clone(), io_timeout, watch, index, clusters.clone())
                })
                .collect(),
            self.inner.clock.clone(),
        )?;
        *slot = Some(driver.clone());
        Ok(driver)
    }

    /// Locks as `request` says: several resources, a retry policy, a deadline, a token of its
    /// own, auto-extension (the driver extends the lock until it is released or dropped, and
    /// [`LeaseWatch::lost`](crate::LeaseWatch::lost), on the lock, resolves if it
    /// cannot).
    ///
    /// # Cancellation
    /// Dropping the future before it completes abandons the acquisition at the driver, which
    /// releases whatever keys its requests may have set; on each node the release runs after
    /// that node's outstanding request, so it cannot be overtaken by it.
    pub async fn acquire(&self, request: LockRequest) -> Result<Lock, Error> {
        let pending = crate::acquire(self.driver()?, &self.inner.ids, request, false);
        Ok(Lock::new(pending.await?))
    }

    /// [`resume`](Redlock::resume) with a request of your own: several resources, or
    /// auto-extension once resumed. The request must carry the token.
    pub async fn resume_request(&self, request: LockRequest) -> Result<Lock, Error> {
        let pending = crate::acquire(self.driver()?, &self.inner.ids, request, true);
        Ok(Lock::new(pending.await?))
    }

    /// Releases a lock by its resource and token, without holding it here (a lock another
    /// process acquired): compare-and-delete on every node. Keys under another token are never
    /// touched, so a wrong or stale token releases nothing: the report says so per node.
    pub async fn release_by_token(
        &self,
        resource: impl Into<Vec<u8>>,
        token: impl Into<Vec<u8>>,
    ) -> Result<ReleaseReport, Error> {
        let driver = self.driver()?;
        let (resource, token) = (resource.into(), token.into());
        let answer = crate::release_by_token(&*driver, &self.inner.ids, resource, token);
        answer.await.unwrap_or(Err(Error::Stopped))
    }

    /// Waits until nothing this client sent is outstanding any more (every request answered by
    /// its node, or failed, each within the I/O timeout; requests sent meanwhile count too),
    /// for at most `timeout`; returns whether that happened. For a process about to exit while
    /// its lock lives on, handed over by token: a lock call returns once a quorum granted, and
    /// the requests to the other nodes would otherwise die with the process. A client whose
    /// driver is not running has nothing to wait for (`true`); one whose driver stops first, or
    /// a call from outside the runtime (which could not time the wait), returns `false`.
    /// Dropping the future stops the wait, never the requests.
    pub async fn flush(&self, timeout: Duration) -> bool {
        let Some(driver) = running(&self.driver_slot()) else {
            return true;
        };
        // The wait is timed by the runtime's timers: never polled outside it (a panic there).
        if R::current().is_err() {
            return false;
        }
        let answered = std::pin::pin!(crate::flush(&*driver));
        let Some(deadline) = Instant::now().checked_add(timeout) else {
            return answered.await.is_some();
        };
        let expired = std::pin::pin!(R::sleep_until(deadline));
        matches!(
            futures_util::future::select(answered, expired).await,
            futures_util::future::Either::Left((Some(()), _))
        )
    }

    /// Marks every node trusted for restart-aware voting: a node with no epoch (a fresh
    /// deployment, or one that lost its memory) then votes at once instead of refusing for the
    /// longest TTL in use. **Only for an operator who knows that no lock is live on these
    /// nodes** (nothing was ever locked, or every holder is stopped and its TTL has passed):
    /// trusting a node that restarted inside a holder's validity lets a second client take the
    /// lock. Returns each node's answer (`Granted` = trusted).
    pub async fn trust_nodes(&self) -> Result<Vec<NodeReport<Vote>>, Error> {
        let driver = self.driver()?;
        let answer = crate::trust(&*driver, &self.inner.ids);
        answer.await.ok_or(Error::Stopped)
    }
}

/// The driver in `slot`, if it still runs.
fn running(slot: &Option<Arc<Mailbox>>) -> Option<Arc<Mailbox>> {
    slot.as_ref().filter(|driver| !driver.is_closed()).cloned()
}

/// Configures a [`Redlock`]: `Redlock::builder(urls).quorum(3).retry(policy).build()`.
pub type RedlockBuilder<R> = Builder<Redlock<R>>;

impl<R: Runtime> FromSettings for Redlock<R> {
    fn from_settings(settings: Settings) -> Result<Self, Error> {
        let labels = settings.nodes.iter().map(|a| a.label().clone()).collect();
        Ok(Redlock {
            runtime: PhantomData,
            inner: Arc::new(Inner {
                deployment: Deployment::new(settings.config, labels),
                nodes: settings.nodes,
                io_timeout: settings.io_timeout,
                memory_watch: settings.memory_watch,
                clock: Clock::new(),
                ids: LockIds::default(),
                driver: Mutex::new(None),
            }),
        })
    }
}
